"""`gradblock bench`: measure every table, print them as markdown, write docs/benchmarks.md.

    gradblock bench                 # full run: ResNet-20 and ResNet-50, RTL included (many minutes)
    gradblock bench --quick         # ResNet-20, 1 thread, 3 repetitions, no RTL; prints only
    gradblock bench --tables 2,3 --workloads resnet50 --threads 1 --json run.json
    gradblock bench --compare old.json new.json --threshold 0.1   # flag rows >10 % slower

Only a full run writes docs/benchmarks.md by default; a partial or --quick run prints, or
writes where --out says.

Each table's rows are measured in one process, back to back with the rows they are compared
with; each row is the median of several repetitions after warm-up (numba compilation excluded).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from gradblock.codec.errors import UsageError, UsageParser
from gradblock.refmodel.validation import parse_k

from . import codec, compress_step, report, results, rtl, selection, targets, timing, training
from .context import BenchContext
from .gradients import make_workload
from .machine import header_lines, usable_cores
from .workloads import ARCHITECTURES

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "docs" / "benchmarks.md"

# number -> (key, module with run(ctx) -> Table); the order of the report
TABLES = {1: ("selection", selection), 2: ("compress", compress_step), 3: ("codec", codec),
          4: ("rtl", rtl), 5: ("training", training)}


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="gradblock bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="ResNet-20 only, 1 thread, 3 repetitions, no RTL: a smoke run in under a minute")
    p.add_argument("--out", type=Path, default=None,
                   help="markdown file to write; its generated block is replaced, the rest kept "
                        "(default: docs/benchmarks.md for a full run of every table; a --quick "
                        "or partial run only prints unless --out is given)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE",
                   help="also write every measured row of every table run as JSON")
    p.add_argument("--compare", type=Path, nargs=2, metavar=("OLD", "NEW"), default=None,
                   help="compare two --json files and list rows slower by more than "
                        "--threshold (exit 1 if any); measures nothing")
    p.add_argument("--threshold", type=float, default=0.1,
                   help="relative slow-down --compare flags (default 0.1 = 10%%)")
    p.add_argument("--no-write", action="store_true", help="print only, write no file")
    p.add_argument("--tables", type=_int_list, default=None,
                   help="comma-separated table numbers 1-5 (default: all)")
    p.add_argument("--workloads", default=None,
                   help=f"comma-separated, from {','.join(ARCHITECTURES)} "
                        "(default: resnet20,resnet50; --quick: resnet20)")
    p.add_argument("--threads", type=_int_list, default=None,
                   help="thread counts to measure (default: 1 and all usable cores; --quick: 1)")
    p.add_argument("--reps", type=int, default=None,
                   help="timed repetitions per row, median reported (default 7; --quick 3)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed runs before timing (default 2; --quick 1)")
    p.add_argument("--k", type=parse_k, default=0.01,
                   help="blocks kept per layer: a fraction of its blocks or a count (default 0.01)")
    p.add_argument("--range", dest="R", type=float, default=10.0, help="quantiser range R")
    p.add_argument("--gradients", choices=("auto", "real", "synthetic"), default="auto",
                   help="real: one backward pass on Fashion-MNIST; synthetic: scaled normal "
                        "(default auto: real when torch and the data set are present)")
    rtl_group = p.add_mutually_exclusive_group()
    rtl_group.add_argument("--rtl", dest="rtl", action="store_true", default=None,
                           help="run the RTL table (default in the full run; builds take minutes)")
    rtl_group.add_argument("--no-rtl", dest="rtl", action="store_false",
                           help="skip the RTL simulations (default with --quick)")
    p.add_argument("--clock", choices=tuple(timing.CLOCKS), default="wall",
                   help="wall: elapsed time (default); cpu: the timing thread's CPU time, which "
                        "leaves out time other jobs took on a loaded machine (needs --threads 1)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def make_context(args) -> BenchContext:
    quick = args.quick
    names = (args.workloads.split(",") if args.workloads
             else ["resnet20"] if quick else ["resnet20", "resnet50"])
    for n in names:
        if n not in ARCHITECTURES:
            raise UsageError(f"unknown workload {n!r}; choose from "
                             f"{', '.join(ARCHITECTURES)}")
    cores = usable_cores()
    # --quick: one thread (a smoke run; several threads on a shared 2-core box can stall for
    # whole scheduler slices in OpenMP barriers); the full run: 1 and every usable core
    thread_counts = args.threads or ([1] if quick else sorted({1, cores}))
    reps = args.reps if args.reps is not None else (3 if quick else 7)
    warmup = args.warmup if args.warmup is not None else (1 if quick else 2)
    if args.clock == "cpu" and thread_counts != [1]:
        raise UsageError("--clock cpu times one thread only: add --threads 1")
    timing.set_clock(args.clock)
    if reps < 1 or warmup < 0:
        raise UsageError("--reps must be >= 1 and --warmup >= 0")
    rtl_on = (not quick) if args.rtl is None else args.rtl
    ctx = BenchContext(quick=quick, reps=reps, warmup=warmup, thread_counts=thread_counts,
                       workloads=[], k=args.k, R=args.R, rtl=rtl_on, verbose=not args.quiet)
    for n in names:
        t0 = time.perf_counter()
        w = make_workload(n, args.gradients)
        ctx.workloads.append(w)
        ctx.log(f"workload {w.name}: {w.n_params:,} parameters, {w.source} "
                f"({time.perf_counter() - t0:.1f} s)")
    return ctx


def report_path(args, quick: bool) -> Path | None:
    """Where the markdown goes: --out if given; else docs/benchmarks.md for a full run of
    every table and workload only (a smoke or partial run never replaces the committed
    report); None with --no-write."""
    if args.no_write:
        return None
    if args.out is not None:
        return args.out
    full = not quick and args.tables is None and args.workloads is None
    return DEFAULT_OUT if full else None


def bench_main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.compare:
        return results.compare_main(*args.compare, args.threshold)
    load_start = os.getloadavg()
    ctx = make_context(args)
    numbers = args.tables or sorted(TABLES)
    for n in numbers:
        if n not in TABLES:
            raise UsageError(f"no table {n} (tables are 1-5)")
    t_start = time.perf_counter()
    tables, by_number = {}, {}
    for n in numbers:
        key, module = TABLES[n]
        t0 = time.perf_counter()
        produced = module.run(ctx)
        by_number[n] = produced if isinstance(produced, list) else [produced]
        for table in by_number[n]:
            tables[table.key] = table
        ctx.log(f"table {n} ({key}) done in {time.perf_counter() - t0:.1f} s")
    mode = "quick" if ctx.quick else "full"
    header = header_lines(mode, ctx.thread_counts, REPO_ROOT)
    header.append("- workloads: " + "; ".join(
        f"{w.name} ({w.n_params:,} parameters in {len(w.grads)} tensors; gradients {w.source})"
        for w in ctx.workloads))
    load_end = os.getloadavg()[0]
    busy = max(load_start[0], load_end) > (os.cpu_count() or 1)
    if timing.clock_name() == "cpu":
        header.append("- clock: CPU time of the timing thread (--clock cpu), not elapsed time: "
                      "time the OS gave other jobs is left out, memory contention is not")
    header.append(f"- repetitions: median of {ctx.reps} after {ctx.warmup} warm-up; k = {ctx.k}; "
                  f"R = {ctx.R:g}; measured in {time.perf_counter() - t_start:.0f} s; 1-minute "
                  f"load average {load_start[0]:.2f} at the start, {load_end:.2f} at the end"
                  + (" (above the core count: other work shared the machine)" if busy else ""))
    shown = [a for a in argv if a not in ("--quiet", "--no-write")]
    command = " ".join(["gradblock bench", *shown])
    text = report.render(header, [t.to_markdown() for t in tables.values()],
                         targets.evaluate(tables), command)
    print(text)
    if args.json is not None:
        results.write_json(args.json, by_number, header)
        ctx.log(f"wrote {args.json}")
    out = report_path(args, ctx.quick)
    if out is not None:
        report.write(out, text)
        ctx.log(f"wrote {out}")
    if ctx.failures:
        print(f"gradblock bench: {len(ctx.failures)} row(s) failed:", file=sys.stderr)
        for f in ctx.failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(bench_main())
