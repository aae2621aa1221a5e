"""Mutation score of the golden set on the datapath RTL: does a one-token bug get caught?

Each mutant is a copy of hw/ with one change to one datapath file: an operator flipped
(`+`<->`-`, `<`<->`<=`, `>`<->`>=`, `==`<->`!=`, `&&`<->`||`, `&`<->`|`, `^`->`|`), a constant
changed (a decimal literal n -> n+1, `1'b0`<->`1'b1`) or a term dropped (`a + b` -> `a`).
Only expressions are mutated: the right-hand side of an assignment and the condition of an
`if`, outside comments. The mutant's block then runs its golden cases through `gradblock
verify`'s registry entry (the same testbench, traffic with idle cycles and back-pressure,
assertions where the build has them), on Icarus by default (a build takes a second). A mutant
is *killed* when a case fails or errors (a mismatch, a timeout, an assertion), *survived* when
every case passes, *stillborn* when it does not compile (not counted).

    python -m gradblock.sim.mutation --vectors GOLDEN [--modules quantiser ...]
        [--per-module N] [--seed S] [--sim icarus] [--json FILE]

Mutants are drawn at random (seeded) from every site of the file, N per file (all with N=0).
"""
from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .harness import HW_DIR, hw_sources, simulator_available

# datapath file -> registry entry whose golden cases exercise it
TARGETS = {
    "quantiser": "quantiser",
    "ef_add": "ef_add",
    "momentum": "momentum",
    "block_l1": "block_l1",
    "topk_select": "topk_select",
    "zrle_run_encoder": "zrle_encoder",
    "crc32_word": "zrle_encoder",
}

_SWAPS = [("<=", "<"), (">=", ">"), ("==", "!="), ("!=", "=="), ("&&", "||"), ("||", "&&"),
          ("<", "<="), (">", ">="), ("+", "-"), ("-", "+"), ("&", "|"), ("|", "&"), ("^", "|")]
_TOKEN = re.compile(r"<<<|>>>|<<|>>|<=|>=|==|!=|&&|\|\||[<>+\-&|^]|1'b[01]|\b\d+\b")


@dataclass
class Mutant:
    file: str
    line: int
    column: int
    kind: str           # operator / constant / drop-term
    before: str
    after: str
    status: str = ""    # killed / survived / stillborn
    detail: str = ""
    seconds: float = 0.0

    def label(self) -> str:
        return f"{self.file}.sv:{self.line} {self.kind} `{self.before}` -> `{self.after}`"


def _code_spans(line: str) -> list[tuple[int, int]]:
    """The mutable spans of one source line: the right-hand side of `=` / `<=` assignments
    and the condition of an `if (...)`, with // comments cut off."""
    code = line.split("//", 1)[0]
    stripped = code.strip()
    if (not stripped or stripped.startswith(("module", "input", "output", "parameter",
                                             "localparam", "logic", "wire", "reg", "`", "import",
                                             "typedef", "function", "endfunction", "genvar",
                                             "for ", "for(", "assert", "assume", "cover"))
            or "#(" in code or "'{" in code):
        return []
    spans = []
    m = re.search(r"\bif\s*\(", code)
    if m:
        depth, start = 0, m.end() - 1
        for i in range(start, len(code)):
            depth += (code[i] == "(") - (code[i] == ")")
            if depth == 0:
                spans.append((start + 1, i))
                break
    a = re.search(r"(?<![<>=!])(<=|=)(?!=)", code)
    if a and not m:
        end = code.rfind(";")
        if end > a.end():
            spans.append((a.end(), end))
    return spans


def sites(text: str, file: str) -> list[Mutant]:
    """Every mutant of one file's text (see the module docstring)."""
    out = []
    in_block_comment = False
    for ln, line in enumerate(text.splitlines(), 1):
        if in_block_comment:
            if "*/" in line:
                in_block_comment = False
            continue
        if "/*" in line and "*/" not in line:
            in_block_comment = True
            continue
        for lo, hi in _code_spans(line):
            for t in _TOKEN.finditer(line, lo, hi):
                tok, col = t.group(), t.start()
                if tok.isdigit():
                    out.append(Mutant(file, ln, col, "constant", tok, str(int(tok) + 1)))
                elif tok.startswith("1'b"):
                    out.append(Mutant(file, ln, col, "constant", tok,
                                      "1'b1" if tok.endswith("0") else "1'b0"))
                elif tok in ("<<<", ">>>", "<<", ">>"):
                    continue
                else:
                    swap = dict(_SWAPS).get(tok)
                    if swap:
                        out.append(Mutant(file, ln, col, "operator", tok, swap))
                    if tok in ("+", "-", "^", "|", "&"):
                        rest = re.match(r"\s*[\w.\[\]:']+", line[t.end():hi])
                        if rest:
                            out.append(Mutant(file, ln, col, "drop-term",
                                              line[col:t.end() + rest.end()], ""))
    return out


def apply(text: str, m: Mutant) -> str:
    lines = text.splitlines(keepends=True)
    line = lines[m.line - 1]
    assert line[m.column:m.column + len(m.before)] == m.before, (m, line)
    lines[m.line - 1] = line[:m.column] + m.after + line[m.column + len(m.before):]
    return "".join(lines)


def run_mutant(m: Mutant | None, golden: Path, sim: str, work: Path,
               cases: list[str] | None = None, traffic: str = "0:0,0.4:0.4",
               hw_dir: Path = HW_DIR, target: str | None = None) -> Mutant:
    """Build and run one mutant in a copy of `hw_dir` under `work`; fills status and detail.
    m=None runs the unmutated copy of `target` (the baseline every run starts with)."""
    from .verify import REGISTRY, run_module
    t0 = time.monotonic()
    hw = work / "hw"
    if hw.exists():
        shutil.rmtree(hw)
    shutil.copytree(hw_dir, hw, ignore=shutil.ignore_patterns("*.py", "__pycache__", "formal"))
    if m is None:
        m = Mutant(target, 0, 0, "baseline", "", "")
    else:
        src = hw / f"{m.file}.sv"
        src.write_text(apply(src.read_text(), m))
    entry = REGISTRY[TARGETS[m.file]]
    sources = [hw / p.name for p in hw_sources(entry.toplevel)]
    rows, report = run_module(entry, sim, golden, traffic, False, cases, work,
                              build_root=work / "build", sources=sources,
                              waves_on_failure=False)
    bad = [r for r in rows if r.status in ("fail", "error")]
    if bad and "build failed" in report:
        m.status, m.detail = "stillborn", "does not compile"
    elif bad:
        m.status, m.detail = "killed", f"{bad[0].case}: {bad[0].detail[:120]}"
    else:
        m.status = "survived"
        m.detail = f"{sum(r.status == 'pass' for r in rows)} cases pass"
    m.seconds = time.monotonic() - t0
    return m


def choose(files, per_module: int, seed: int, hw_dir: Path = HW_DIR) -> list[Mutant]:
    """`per_module` random sites of each file (all with 0), taken round-robin over the files
    so that a run stopped early has measured every file."""
    rng = random.Random(seed)
    per_file = []
    for f in files:
        all_sites = sites((hw_dir / f"{f}.sv").read_text(), f)
        rng.shuffle(all_sites)
        per_file.append(all_sites if per_module <= 0 else all_sites[:per_module])
    chosen = []
    for i in range(max((len(x) for x in per_file), default=0)):
        chosen += [x[i] for x in per_file if i < len(x)]
    return chosen


def score(mutants: list[Mutant]) -> dict:
    counted = [m for m in mutants if m.status in ("killed", "survived")]
    killed = sum(m.status == "killed" for m in counted)
    per_file: dict[str, dict] = {}
    for m in counted:
        d = per_file.setdefault(m.file, {"killed": 0, "survived": 0})
        d[m.status] += 1
    return {"mutants": len(mutants), "counted": len(counted), "killed": killed,
            "stillborn": sum(m.status == "stillborn" for m in mutants),
            "score": None if not counted else round(100.0 * killed / len(counted), 1),
            "per_file": per_file,
            "survivors": [m.label() for m in counted if m.status == "survived"]}


def mutation_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gradblock mutate", description=__doc__.splitlines()[0])
    p.add_argument("--vectors", required=True, metavar="DIR", help="golden directory")
    p.add_argument("--modules", nargs="+", choices=sorted(TARGETS), default=sorted(TARGETS))
    p.add_argument("--per-module", type=int, default=10, help="mutants per file (0: all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sim", default="icarus", choices=("icarus", "verilator"))
    p.add_argument("--cases", nargs="+", metavar="CASE", help="only these golden cases")
    p.add_argument("--json", metavar="FILE", help="write every mutant and the score here")
    p.add_argument("--hw", metavar="DIR", default=str(HW_DIR),
                   help="the RTL to mutate (default: the installed hw/; e.g. a `git archive` of "
                        "a commit)")
    args = p.parse_args(argv)
    reason = simulator_available(args.sim)
    if reason:
        print(f"gradblock mutate: {args.sim} unavailable: {reason}", file=sys.stderr)
        return 2
    hw_dir = Path(args.hw).resolve()
    mutants = choose(args.modules, args.per_module, args.seed, hw_dir)
    print(f"{len(mutants)} mutants of {', '.join(args.modules)} on {args.sim} ({hw_dir})",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="gradblock-mutate-") as tmp:
        # the unmutated RTL must pass first: otherwise every mutant would look killed
        for target in sorted({TARGETS[f] for f in args.modules}):
            base = run_mutant(None, Path(args.vectors).resolve(), args.sim, Path(tmp),
                              args.cases, hw_dir=hw_dir,
                              target=next(f for f in args.modules if TARGETS[f] == target))
            if base.status != "survived":
                print(f"gradblock mutate: the unmutated {target} does not pass its golden cases "
                      f"({base.detail}); nothing to measure", file=sys.stderr)
                return 1
            print(f"baseline {target}: {base.detail} ({base.seconds:.0f} s)", flush=True)
        for i, m in enumerate(mutants, 1):
            run_mutant(m, Path(args.vectors).resolve(), args.sim, Path(tmp), args.cases,
                       hw_dir=hw_dir)
            print(f"[{i}/{len(mutants)}] {m.status:<9} {m.label()}  ({m.detail}; "
                  f"{m.seconds:.0f} s)", flush=True)
            if args.json:       # after every mutant: a long run stopped early keeps its results
                _write_json(args.json, mutants[:i])
    s = score(mutants)
    print(f"\nmutation score {s['score']}% ({s['killed']} killed of {s['counted']}, "
          f"{s['stillborn']} stillborn)")
    for f, d in sorted(s["per_file"].items()):
        print(f"  {f}: {d['killed']} killed, {d['survived']} survived")
    for label in s["survivors"]:
        print(f"  survived: {label}")
    return 0


def _write_json(path: str, mutants: list[Mutant]) -> None:
    from gradblock.fileio import write_text
    write_text(path, json.dumps({**score(mutants), "all": [asdict(m) for m in mutants]},
                                indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(mutation_main(sys.argv[1:]))
