"""The RTL under slang (PyPI `pyslang`), a strict IEEE 1800-2017 front end.

Icarus, Verilator and yosys accept things the standard forbids (an identifier used before its
declaration, an implicit `.name` port joining a signed port to an unsigned net); the simulators a
hardware team signs off with do not. tests/test_rtl_lint.py runs every view below and wants
zero errors and zero warnings at slang's default warning level:

  top:<module>      each hw/ module alone, with its files from hw/deps.py (`--top <module>`)
  design            every hw/*.sv together (plain, `-DSYNTHESIS`, `-D__ICARUS__`: the code under
                    each `ifdef the RTL has)
  formal:<set>:<task>  each SymbiYosys task of hw/formal/*.sby: the RTL and harness files that
                    task reads, with `-DFORMAL` (yosys's `-formal`) and the task's own `-D` flags
  formal            every harness and the RTL together, `-DFORMAL`

Usage: python -m gradblock.hw.slang_lint [VIEW ...]   (prints each view's diagnostics and counts;
exit status 1 when any view has an error or a warning)
"""
from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from gradblock.hw import deps, formal


@dataclass(frozen=True)
class View:
    name: str
    files: tuple[Path, ...]
    top: str | None = None
    defines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    view: View
    errors: int
    warnings: int
    text: str          # slang's diagnostics as it prints them (empty when clean)


def _formal_views() -> list[View]:
    """One view per task of every .sby: the files its `read_verilog` lines read, its -D flags."""
    views = []
    for name, sby in formal.property_sets().items():
        text = formal.sby_text(sby)
        tasks = [t.split()[0] for t in formal._section(text, "tasks")]
        script = formal._section(text, "script")
        top = next(m.group(1) for s in script if (m := re.match(r"prep\s+-top\s+(\w+)", s)))
        for task in tasks or ["default"]:
            files, defines = [], ["FORMAL"]
            for line in script:
                m = re.match(r"^(?:([\w ]+):\s*)?read_verilog\s+(.*)$", line)
                if not m or (m.group(1) and task not in m.group(1).split()):
                    continue
                for word in shlex.split(m.group(2)):
                    if word.startswith("-D"):
                        defines.append(word[2:])
                    elif not word.startswith("-"):
                        here = sby.parent / word
                        files.append(here if here.is_file() else deps.HW_DIR / word)
            views.append(View(f"formal:{name}:{task}", tuple(dict.fromkeys(files)), top,
                              tuple(dict.fromkeys(defines))))
    return views


def views() -> list[View]:
    """Every view the lint test checks (see the module docstring)."""
    rtl = tuple(sorted(deps.HW_DIR.glob("*.sv")))
    harnesses = tuple(sorted(formal.FORMAL_DIR.glob("*.sv")))
    out = [View(f"top:{m}", tuple(deps.sources(m)), m) for m in deps.tops()]
    out += [View("design", rtl), View("design:SYNTHESIS", rtl, defines=("SYNTHESIS",)),
            View("design:__ICARUS__", rtl, defines=("__ICARUS__",))]
    out += _formal_views()
    out.append(View("formal", rtl + harnesses, defines=("FORMAL",)))
    return out


def _driver(view: View, parameters: dict | None = None):
    from pyslang import driver

    d = driver.Driver()
    d.addStandardArgs()
    args = ["slang"] + [f"-D{x}" for x in view.defines]
    args += [f"-G{k}={v}" for k, v in (parameters or {}).items()]
    if view.top:
        args += ["--top", view.top]
    args += [str(p) for p in view.files]
    if not d.parseCommandLine(" ".join(shlex.quote(a) for a in args),
                              driver.CommandLineOptions()):
        raise RuntimeError(f"slang refused its command line: {args}")
    if not d.processOptions():
        raise RuntimeError(f"slang refused its options: {args}")
    return d


def ports(top: str, parameters: dict | None = None) -> list[tuple[str, str, int]]:
    """(name, "in" / "out" / "inout", width in bits) of every port of hw/ module `top` built
    with `parameters` (the rest at their defaults), in declaration order."""
    d = _driver(View(f"top:{top}", tuple(deps.sources(top)), top), parameters)
    d.parseAllSources()
    compilation = d.createCompilation()
    inst = next(i for i in compilation.getRoot().topInstances if i.name == top)
    kinds = {"In": "in", "Out": "out", "InOut": "inout"}
    return [(p.name, kinds[p.direction.name], p.type.bitWidth) for p in inst.body.portList]


def check(view: View) -> Report:
    """Parse and elaborate one view as the `slang` command would (its default warnings)."""
    import pyslang

    d = _driver(view)
    client = pyslang.TextDiagnosticClient()
    d.diagEngine.addClient(client)
    d.parseAllSources()
    d.reportParseDiags()
    compilation = d.createCompilation()
    d.reportCompilation(compilation, True)
    d.runAnalysis(compilation)
    engine = d.diagEngine
    return Report(view, engine.numErrors, engine.numWarnings, client.getString())


def main(argv: list[str]) -> int:
    wanted = set(argv)
    bad = 0
    for view in views():
        if wanted and view.name not in wanted:
            continue
        r = check(view)
        print(f"{view.name}: {r.errors} errors, {r.warnings} warnings")
        if r.text:
            print(r.text, end="")
        bad += r.errors + r.warnings
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
