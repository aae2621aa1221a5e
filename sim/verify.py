"""`gradblock verify`: run the RTL against a golden vector directory and print a pass/fail table
per (module, case).

Each RTL block is an entry of the DUT table, sim/duts.py (REGISTRY: the entries that check a
golden stage). A testbench taking part reads the golden directory from
TB_GOLDEN_DIR, runs every case that has its stage, and writes one record per case to the JSON
file named by TB_CASE_RESULTS (sim.benches.tb_util.write_case_results); a testbench with one cocotb test
per traffic profile writes one record per case and profile, merged here (worst wins). Sources
come from hw/deps.py and HDL parameters reach the testbench through the runner. Entries whose sources or
testbench do not exist yet are left out (and said so), so blocks join as they are written.
To add a block, append a Dut to sim/duts.py's DUTS (see docs/hw.md, "Adding a block to verify").
"""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from gradblock.codec import fileio
from gradblock.codec.errors import UsageError, UsageParser
from gradblock.golden.compute import generate_golden
from gradblock.golden.format import load_exchange, load_golden

from gradblock.hw.lanes import LANES, lane_parametric, with_lanes

from .duts import DUTS, Dut, Run, verified
from .harness import HW_DIR, SIMULATORS, hw_sources, run_rtl, simulator_available


# `gradblock verify`'s entries: the DUT table's blocks that check a golden stage (sim/duts.py)
REGISTRY: dict[str, Dut] = verified()

DEFAULT_TRAFFIC = "0:0,0.4:0.4"
# every profile the testbenches define by default (sim/benches/tb_util.traffic_profiles) plus the
# verify default: idle input, back-pressure, both
COVERAGE_TRAFFIC = "0:0,0.3:0,0:0.5,0.4:0.4,0.6:0.7"

_SEVERITY = {"pass": 0, "skip": 1, "fail": 2, "error": 3}


# One run of a block's dedicated cocotb tests (the non-golden ones tests/test_rtl_*.py run),
# which `verify --coverage` makes under the same coverage build after the golden cases: the DUT
# table's `dedicated` runs (sim/duts.py, Run: vectors "golden" is the golden directory, "edge"
# golden/datapath.py's edge cases only, None the testbench's own cases). sim/functional_bins.py's
# testbench bins (decoder errors, every engine error code, a reset in every FSM state) are
# reached there; throughput tests are left out (their traffic profile, none, is one of the
# golden runs').
DEDICATED_TESTS: dict[str, tuple[Run, ...]] = {n: d.dedicated for n, d in DUTS.items()
                                              if d.dedicated}


def merge_case_records(records: list[dict]) -> dict[str, dict]:
    """One verdict per case from the records of several cocotb tests (one per traffic
    profile): the worst status wins (error > fail > skip > pass), its detail kept."""
    out: dict[str, dict] = {}
    for r in records:
        have = out.get(r["case"])
        if have is None or _SEVERITY[r["status"]] > _SEVERITY[have["status"]]:
            out[r["case"]] = dict(r)
    return out


@dataclass
class Row:
    module: str
    case: str
    status: str                   # pass / fail / skip / error
    detail: str = ""


def lane_builds(modules: list[str] | None, lanes: int | None) -> dict[str, Dut]:
    """The registry entries a run covers, each with W = lanes when lanes is given (every named
    block must then have a W parameter; unnamed, the lane-parametric ones)."""
    names = modules or [n for n, d in REGISTRY.items()
                        if lanes is None or lane_parametric(d.toplevel)]
    out = {}
    for name in names:
        mod = REGISTRY[name]
        if lanes is not None:
            mod = replace(mod, parameters=with_lanes(mod.toplevel, mod.parameters, lanes))
        out[name] = mod
    return out


def run_module(mod: Dut, sim: str, golden: Path, traffic: str, waves: bool,
               cases: list[str] | None, work: Path, build_root: Path | None = None,
               coverage_dir: Path | None = None, sources=None,
               waves_on_failure: bool = True) -> tuple[list[Row], str]:
    """Run one registry entry over the golden directory: its rows and the run's report.
    build_root: where the simulator builds go (default: harness.sim_build_root()).
    coverage_dir: Verilator only: build with coverage and copy the run's coverage.dat there
    as <name>.dat (sim/coverage.py merges them).
    sources: HDL files (default: hw/deps.py's for the top level); sim/mutation.py passes a
    mutated copy."""
    results = work / f"{mod.name}-{sim}-cases.json"
    results.unlink(missing_ok=True)
    env = {**mod.env, mod.golden_env: golden, "TB_TRAFFIC": traffic, "TB_CASE_RESULTS": results}
    if coverage_dir is not None:      # the testbench bins it observed (sim/functional_bins.py)
        env["TB_BINS"] = coverage_dir / f"{mod.name}.bins"
    if cases:
        env["TB_CASES"] = ",".join(cases)
    res = run_rtl(mod.toplevel, sources, mod.test_module, sim,
                  parameters=mod.parameters, env=env, waves=waves, testcase=mod.testcase,
                  run_name=f"verify-{mod.testcase}", build_root=build_root,
                  coverage=coverage_dir is not None, waves_on_failure=waves_on_failure)
    if coverage_dir is not None:
        dat = res.run_dir / "coverage.dat"
        if dat.is_file():
            coverage_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(dat, coverage_dir / f"{mod.name}.dat")
    rows = []
    if results.is_file():
        for r in merge_case_records(json.loads(results.read_text())).values():
            rows.append(Row(mod.name, r["case"], r["status"], r["detail"]))
    if not res.passed and not any(r.status == "fail" for r in rows):
        # the testbench stopped before it could judge the cases (build error, hang, crash)
        first = res.error or next((t.message for t in res.tests if not t.passed), "failed")
        rows.append(Row(mod.name, "(all)", "error", first.splitlines()[0] if first else "failed"))
    elif res.passed and not rows:
        rows.append(Row(mod.name, "(all)", "pass", "testbench gives no per-case results"))
    return rows, res.report()


def run_dedicated(mod: Dut, ded: Run, tag: str, golden: Path, edge: Path | None,
                  work: Path, coverage_dir: Path, build_root: Path | None = None,
                  sources=None) -> tuple[list[Row], str]:
    """One run of `mod`'s DEDICATED_TESTS on Verilator under the coverage build of its golden
    run; its coverage.dat goes to coverage_dir/<name>-<tag>.dat and the bins its testbench
    observed to coverage_dir/<name>-<tag>.bins. One row per cocotb test, case "[test]"."""
    results = work / f"{mod.name}-{tag}-cases.json"
    results.unlink(missing_ok=True)
    coverage_dir.mkdir(parents=True, exist_ok=True)
    env = {**mod.env, "TB_TRAFFIC": COVERAGE_TRAFFIC, **dict(ded.env),
           "TB_CASE_RESULTS": results, "TB_BINS": coverage_dir / f"{mod.name}-{tag}.bins"}
    if ded.vectors is not None:
        env["TB_GOLDEN_DIRS"] = str(edge if ded.vectors == "edge" else golden)
    res = run_rtl(mod.toplevel, sources, mod.test_module, "verilator", parameters=mod.parameters,
                  env=env, testcase=ded.tests, run_name=f"verify-{tag}-{mod.name}",
                  build_root=build_root, coverage=True)
    dat = res.run_dir / "coverage.dat"
    if dat.is_file():
        shutil.copyfile(dat, coverage_dir / f"{mod.name}-{tag}.dat")
    label = "edge " if ded.vectors == "edge" else ""
    rows = [Row(mod.name, f"[{label}{t.name}]", "pass" if t.passed else "fail",
                "" if t.passed else (t.message.splitlines() or ["failed"])[0])
            for t in res.tests]
    wanted = {t.strip() for t in ded.tests.split(",")}
    ran = {t.name.split("/")[0] for t in res.tests}
    for name in sorted(wanted - ran):
        rows.append(Row(mod.name, f"[{label}{name}]", "error",
                        (res.error.splitlines() or ["did not run"])[0] if res.error
                        else "did not run"))
    return rows, res.report()


def format_table(rows: list[Row]) -> str:
    w_mod = max([len("module")] + [len(r.module) for r in rows])
    w_case = max([len("case")] + [len(r.case) for r in rows])
    lines = [f"{'module':<{w_mod}}  {'case':<{w_case}}  result  detail",
             f"{'-' * w_mod}  {'-' * w_case}  ------  ------"]
    for r in rows:
        detail = r.detail if len(r.detail) <= 100 else r.detail[:97] + "..."
        lines.append(f"{r.module:<{w_mod}}  {r.case:<{w_case}}  {r.status.upper():<6}  {detail}")
    return "\n".join(lines)


def verify_main(argv: list[str], make_golden: Callable[[Path], object] | None = None) -> int:
    """`make_golden(out)` writes the default vectors when no --vectors is given: the CLI passes
    the whole quick set (real gradients need the trained models, above sim/); standalone, the
    golden package's own cases (synthetic, momentum, L2, exchange) are generated here."""
    p = UsageParser(
        prog="gradblock verify",
        description="run the RTL against a golden vector directory (gradblock golden) and print "
                    "a pass/fail table per (module, case)")
    p.add_argument("--sim", choices=SIMULATORS, default="icarus", help="simulator (default icarus)")
    p.add_argument("--vectors", metavar="DIR",
                   help="golden directory; default: generate the quick set into a temporary one")
    p.add_argument("--modules", nargs="+", metavar="NAME",
                   help=f"registry entries to run (default: all available: {', '.join(REGISTRY)})")
    p.add_argument("--cases", nargs="+", metavar="CASE", help="only these golden cases")
    p.add_argument("--traffic", default=None,
                   help="idle:backpressure probabilities, comma-separated (default 0:0,0.4:0.4; "
                        f"with --coverage every profile, {COVERAGE_TRAFFIC})")
    p.add_argument("--build-dir", metavar="DIR",
                   help="simulator build cache (default $GRADBLOCK_SIM_BUILD, else "
                        "$XDG_CACHE_HOME/gradblock/sim_build or ~/.cache/gradblock/sim_build)")
    p.add_argument("--coverage", metavar="DIR",
                   help="Verilator only: build with line/branch/toggle coverage, run, and write "
                        "DIR/coverage.json, DIR/coverage.info (lcov) and an annotated source tree "
                        "DIR/annotated/ (sim/coverage.py)")
    p.add_argument("--waves", action="store_true", help="record waveforms of every run")
    p.add_argument("--lanes", metavar="W", type=int, choices=LANES,
                   help="build each block with W elements a cycle (1, 2, 4, 8, 16; its W "
                        "parameter); default: each block's reference build. Without --modules, "
                        "the lane-parametric blocks")
    args = p.parse_args(argv)
    # argument errors raise UsageError: gradblock/cli.py prints the one line and exits 2
    if args.coverage and args.sim != "verilator":
        raise UsageError("--coverage needs --sim verilator")
    traffic = args.traffic or (COVERAGE_TRAFFIC if args.coverage else DEFAULT_TRAFFIC)
    build_root = Path(args.build_dir).expanduser() if args.build_dir else None
    cov_dir = Path(args.coverage).expanduser() if args.coverage else None
    unknown = sorted(set(args.modules or []) - set(REGISTRY))
    if unknown:
        raise UsageError(f"unknown module(s) {', '.join(unknown)}; registered: "
                         f"{', '.join(REGISTRY)}")
    selected = lane_builds(args.modules, args.lanes)       # UsageError: a block without W
    if not selected:
        raise UsageError("no registered block has a lane parameter W")
    reason = simulator_available(args.sim)
    if reason:
        raise UsageError(f"{args.sim} unavailable: {reason}")

    with tempfile.TemporaryDirectory(prefix="gradblock-verify-") as tmp:
        work = Path(tmp)
        if args.vectors:
            golden = Path(args.vectors).resolve()
        else:
            golden = work / "golden-quick"
            print(f"no --vectors: generating the quick golden set in {golden}")
            if make_golden is None:
                generate_golden(golden, quick=True, progress=False)
            else:
                make_golden(golden)
        cases = load_golden(golden) + load_exchange(golden)     # GoldenError: one line, exit 2
        if args.cases:
            missing = sorted(set(args.cases) - {c.name for c in cases})
            if missing:
                raise UsageError(f"no such case(s) in {golden}: {', '.join(missing)}")

        rows: list[Row] = []
        failures: list[str] = []
        edge: Path | None = None        # golden/datapath.py's edge cases, for dedicated runs
        snapshot = snapshot_sources(cov_dir / "sources") if cov_dir is not None else None
        for name, mod in selected.items():
            missing = mod.missing()
            if missing:
                print(f"{name}: not available yet (missing {', '.join(missing)})")
                continue
            stages = mod.stages
            applicable = [c.name for c in cases
                          if any(s in c.meta.get("stages", ()) for s in stages)
                          and (not args.cases or c.name in args.cases)]
            if not applicable:
                print(f"{name}: no case in {golden} has stage {' or '.join(map(repr, stages))}")
                continue
            print(f"{name}: {len(applicable)} cases on {args.sim} ...", flush=True)
            sources = ([snapshot / p.name for p in hw_sources(mod.toplevel)]
                       if snapshot is not None else None)
            mod_rows, report = run_module(mod, args.sim, golden, traffic, args.waves,
                                          applicable if args.cases else None, work,
                                          build_root=build_root,
                                          coverage_dir=work / "coverage" if cov_dir else None,
                                          sources=sources)
            rows += mod_rows
            if any(r.status in ("fail", "error") for r in mod_rows):
                failures.append(report)
            # the block's dedicated tests, under the same coverage build (not with --cases:
            # that asks for named golden cases only)
            for i, ded in enumerate(DEDICATED_TESTS.get(name, ()) if cov_dir and not args.cases
                                    else ()):
                print(f"{name}: dedicated tests {ded.tests}"
                      + (" on the datapath edge cases" if ded.vectors == "edge" else "") + " ...",
                      flush=True)
                if ded.vectors == "edge" and edge is None:
                    from gradblock.golden.datapath import write_cases
                    edge = work / "edge"
                    write_cases(edge, "edge")
                ded_rows, report = run_dedicated(mod, ded, f"dedicated{i}", golden, edge, work,
                                                 work / "coverage", build_root=build_root,
                                                 sources=sources)
                rows += ded_rows
                if any(r.status in ("fail", "error") for r in ded_rows):
                    failures.append(report)
        if cov_dir is not None and rows:
            coverage_report = write_coverage(work / "coverage", cov_dir, golden, rows, snapshot)

    if not rows:
        print("nothing was run")
        return 1
    print()
    print(format_table(rows))
    counts = {s: sum(r.status == s for r in rows) for s in ("pass", "fail", "skip", "error")}
    print(f"\n{counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skip, "
          f"{counts['error']} error ({args.sim})")
    for rep in failures:
        print("\n" + rep)
    if cov_dir is not None:
        from .coverage import format_summary
        print("\n" + format_summary(coverage_report))
        print(f"coverage report: {cov_dir / 'coverage.json'} (lcov: coverage.info, sources: "
              f"annotated/)")
    return 1 if counts["fail"] or counts["error"] else 0


def snapshot_sources(dest: Path) -> Path:
    """Copy hw/*.sv to `dest` (what `verify --coverage` builds from): the line numbers in the
    coverage files, the annotated tree and the waivers' source text then all refer to the same
    bytes, even if hw/ is edited while the run goes on. Returns `dest`.

    Only files an earlier snapshot wrote and that still hold those bytes are replaced or removed
    (codec/fileio.py's output policy): a `dest` holding anything else is the user's, and the run
    stops (ForeignFileError) before touching it."""
    dest.mkdir(parents=True, exist_ok=True)
    foreign = sorted(p.name for p in dest.iterdir()
                     if p.name != fileio.LEDGER and not fileio.written_by_gradblock(p))
    if foreign:
        raise fileio.ForeignFileError(f"{dest} holds files gradblock did not write "
                                      f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}"
                                      f"); name another --coverage DIR")
    sources = sorted(HW_DIR.glob("*.sv"))
    for old in dest.iterdir():                  # copies of files since removed from hw/
        if old.name != fileio.LEDGER and old.name not in {s.name for s in sources}:
            fileio.remove_own(old)
    for src in sources:
        fileio.write_own(dest / src.name, lambda tmp, src=src: shutil.copyfile(src, tmp))
    return dest


def write_coverage(dat_dir: Path, out: Path, golden: Path, rows: list[Row],
                   hw_dir: Path | None = None) -> dict:
    """Merge the runs' coverage.dat files, decide the functional bins from the cases that
    passed and the bins the testbenches recorded (*.bins), write out/coverage.json,
    coverage.info and annotated/ (sim/coverage.py). hw_dir: the sources the runs were built
    from (default hw/)."""
    from . import coverage, functional_bins
    dats = sorted(dat_dir.glob("*.dat"))
    points = coverage.merge(dats)
    if hw_dir is not None:
        # a build reused from the cache (same bytes: the build key hashes them) names the
        # files it was first compiled from; the snapshot holds those very bytes
        points = coverage.relocate(points, hw_dir)
    passed: dict[str, set[str]] = {}
    for r in rows:
        if r.status == "pass":
            passed.setdefault(r.module, set()).add(r.case)
    recorded = functional_bins.read_recorded(sorted(dat_dir.glob("*.bins")))
    bins = functional_bins.bins(golden, passed, points, recorded,
                                **({"hw_dir": hw_dir} if hw_dir is not None else {}))
    return coverage.write_report(dats, out, bins, runs=[d.stem for d in dats], points=points)
