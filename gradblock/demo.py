"""`gradblock demo`: the main job on the embedded default.

1. golden vectors from real gradients (a small CNN trained a few steps on scikit-learn's digits),
   generated with the numba path and checked case by case against the numpy reference;
2. the RTL on Icarus Verilog and Verilator against the quick golden set (every synthetic edge case and
   small real layers; `gradblock verify --vectors runs/demo/golden` runs the full set, ~10 min a simulator);
3. a short training validation on real Fashion-MNIST: dense vs coarse k=1 with momentum
   correction, long enough for k = 1 to send each of fc1's 120 rows about three times
   (VALIDATION_ARGS), judged by `--require` against a bar this configuration meets on every
   seed measured (DEMO_BAR), followed by a line on what the bar and the run can and cannot show;
4. a summary table of what ran, how long it took, whether it passed and what each step verified.

Steps 1 and 2 run at the same time, each in its own process (after the quick golden set the
RTL needs), and the simulator builds are cached by content hash (sim/harness.py) with
Verilator's runtime library compiled once (sim/objcache.py); docs/hw.md, "Demo time", has the
measured times.

`--out` is never emptied or deleted: a directory the demo created carries a marker file and is
reused (the golden sets regenerate in place, replacing only their own files); an existing
directory without the marker gets a fresh `gradblock-demo-N` subdirectory instead, so
`--out .` or `--out ~` cannot lose anything.
"""
from __future__ import annotations

import importlib
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gradblock.codec.errors import UsageParser
from gradblock.codec import fileio
from gradblock.codec.fileio import OutputError
from gradblock.sim.harness import SIMULATORS


def _step(name: str, module: str, func: str, argv: list[str]) -> dict:
    print(f"\n=== {name}: gradblock {' '.join(argv)}", flush=True)
    t0 = time.perf_counter()
    try:
        rc = int(getattr(importlib.import_module(module), func)(argv[1:]) or 0)
        note = "" if rc == 0 else f"exit status {rc}"
    except Exception as exc:  # a failed step must not hide the later ones
        rc, note = 1, f"{type(exc).__name__}: {exc}"
    return {"step": name, "ok": rc == 0, "seconds": time.perf_counter() - t0, "note": note}


def _verified(argv: list[str], output: str) -> str:
    """What a step checked, from its own output (the summary's "what it verified" column)."""
    if argv[0] == "verify":
        mods = re.findall(r"^(\w+): (\d+) cases on (\w+)", output, re.M)
        m = re.search(r"(\d+) pass, (\d+) fail, (\d+) skip, (\d+) error", output)
        counts = f"{m.group(1)} pass / {m.group(2)} fail / {m.group(4)} error" if m else "no table"
        return (f"{len(mods)} RTL blocks ({', '.join(n for n, _, _ in mods)}) bit-exact against "
                f"the golden outputs, every case under idle and back-pressure traffic: {counts}")
    if argv[0] == "golden":
        wrote = re.search(r"wrote (\d+) cases", output)
        check = re.search(r"check against the numpy reference: (\d+) of (\d+)", output)
        text = f"{wrote.group(1) if wrote else '?'} cases written"
        if check:
            text += (f"; the fast backend's arrays equal the numpy reference's in {check.group(1)}"
                     f" of {check.group(2)} cases")
        return text
    return ""


def _run_one(name: str, argv: list[str]) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gradblock.cli", *argv], capture_output=True,
                          text=True)
    out = proc.stdout + (("\n" + proc.stderr) if proc.stderr.strip() else "")
    note = "" if proc.returncode == 0 else f"exit status {proc.returncode}"
    return {"step": name, "ok": proc.returncode == 0, "seconds": time.perf_counter() - t0,
            "note": note, "output": out, "argv": argv, "verified": _verified(argv, proc.stdout)}


def _run_jobs(jobs: list[tuple[str, list[str]]]) -> list[dict]:
    """Run each (name, gradblock argv) in its own process at the same time; print each one's
    output when it ends, in order. A failed job does not stop the others."""
    if not jobs:
        return []
    for name, argv in jobs:
        print(f"\n=== started: {name}: gradblock {' '.join(argv)}", flush=True)
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = list(pool.map(lambda j: _run_one(*j), jobs))
    for r in results:
        print(f"\n=== {r['step']} ({r['seconds']:.0f} s): gradblock {' '.join(r['argv'])}")
        print(r["output"].rstrip(), flush=True)
    return results


# 12800 samples / (4 workers x 32) = 100 steps an epoch, 4 epochs = 400 steps: k = 1 cycles
# fc1's 120 blocks ~3 times. R = 100 because the velocity is ~1/(1 - m) = 10x the gradient.
# The bar: this configuration measured over seeds 0 1 2 (2-core AMD EPYC, --threads 1): dense
# 0.8540 / 0.8560 / 0.8725, coarse k=1 0.7705 / 0.7905 / 0.7770 at 69.6x / 71.6x / 70.5x, a drop
# of 8.35 / 6.55 / 9.55 points; the bar leaves 2.4 points and 9x of margin over the worst seed.
DEMO_BAR = "coarse1:max_drop=12,min_compression=60"
# Since issue 32 validate's defaults are the best measured recipe (shim/setup/recipe.py):
# momentum correction 0.9, range 100 and the L2 block norm (the bar above was measured with L1;
# with L2, seed 0, --threads 1, on the project's 2-core Intel Xeon: dense 0.8395, coarse k=1
# 0.7905 at 68.6x, a drop of 4.90 points).
VALIDATION_ARGS = ["--compressors", "dense", "coarse1", "--epochs", "4", "--train-subset", "12800",
                   "--test-subset", "2000", "--seeds", "0", "--no-progress", "--require", DEMO_BAR]
VALIDATION_SCOPE = (
    "what the bar shows (coarse k=1 at most 12 points below dense at >= 60x fewer bytes, "
    "measured -6.6 / -8.4 / -9.6 on seeds 1 / 0 / 2 at ~70x): coarse k=1 with momentum "
    "correction learns on real data through the bit-exact codec, far above chance (10%), at "
    "~70x fewer bytes. What it cannot: 400 steps send each of fc1's 120 rows only ~3 times, "
    "so this short run is not the method's accuracy; on the full data set it trails dense by "
    "2.4 points at 2 epochs and by 0.7 at 4 (docs/training.md, 3 seeds).")

def output_dir(requested: str | Path) -> Path:
    """Where the demo writes: `requested` if it does not exist (created) or was created by
    gradblock (codec/fileio.py's `claimed`: an earlier demo), else a fresh `gradblock-demo-N`
    inside it. Nothing is deleted; a path that cannot be used is an OutputError."""
    out = Path(requested).expanduser()
    try:
        if out.is_symlink() or (out.exists() and not out.is_dir()):
            raise OutputError(f"{out}: exists and is not a directory")
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            return fileio.claim_directory(out)
        if fileio.claimed(out):
            return out
        for i in range(1, 10_000):
            try:
                return fileio.claim_directory(out / f"gradblock-demo-{i}")
            except FileExistsError:
                continue
        raise OutputError(f"{out}: no free gradblock-demo-N subdirectory")
    except OSError as e:
        raise OutputError(f"{out}: cannot create the output directory "
                              f"({e.strerror or e})") from None


def demo_main(argv: list[str]) -> int:
    p = UsageParser(prog="gradblock demo", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    p.add_argument("--sims", nargs="*", default=list(SIMULATORS),
                   help="simulators for the RTL check (none: skip it)")
    p.add_argument("--rtl-full", action="store_true",
                   help="run the RTL on the full golden set instead of the quick one")
    p.add_argument("--skip-training", action="store_true", help="leave out the training validation")
    args = p.parse_args(argv)
    t_start = time.perf_counter()
    out = output_dir(args.out)                   # OutputError: one line, exit 2 (gradblock.cli)
    if out != Path(args.out).expanduser():
        print(f"{args.out} exists and was not created by gradblock demo: writing into {out}")
    golden = out / "golden"
    rtl_golden = golden if args.rtl_full else out / "golden-quick"

    # The quick golden set first (seconds); then the full golden set and the RTL on each
    # simulator at once, each in its own process (the two cores are otherwise idle while one
    # simulator runs single-threaded); then the training validation, which uses both cores.
    # Simulator builds are cached by content hash (sim/harness.py), so a second demo reuses them.
    steps = []
    if args.sims and not args.rtl_full:
        steps.append(_step("quick golden set for the RTL", "gradblock.golden_cli", "golden_main",
                           ["golden", str(rtl_golden), "--quick"]))
        steps[-1]["verified"] = ("the RTL's inputs: every synthetic edge case and small real "
                                 "layers, each checked against the numpy reference")
    jobs = [("golden vectors (real gradients) + reference check", ["golden", str(golden)])]
    jobs += [(f"RTL vs golden on {sim}", ["verify", "--sim", sim, "--vectors", str(rtl_golden)])
             for sim in args.sims]
    if args.rtl_full:       # the RTL reads the set the first job writes
        steps += [_run_jobs(jobs[:1])[0]] + _run_jobs(jobs[1:])
    else:
        steps += _run_jobs(jobs)
    if not args.skip_training:
        steps.append(_step("training validation (Fashion-MNIST, dense vs coarse k=1 + correction)",
                           "gradblock.shim.training.validate", "validate_main",
                           ["validate", *VALIDATION_ARGS, "--out", str(out / "validate")]))
        steps[-1]["verified"] = ("coarse k=1 with momentum correction trains on real data "
                                 "through the bit-exact codec and meets validate's requirements "
                                 "against dense (docs/training.md)")
        print(VALIDATION_SCOPE)

    print("\n## gradblock demo summary\n")
    print("| step | result | seconds | what it verified | note |\n|---|---|---:|---|---|")
    for s in steps:
        print(f"| {s['step']} | {'PASS' if s['ok'] else 'FAIL'} | {s['seconds']:.1f} | "
              f"{s.get('verified', '')} | {s['note']} |")
    print(f"\n{sum(s['seconds'] for s in steps):.0f} s of steps; wall clock "
          f"{time.perf_counter() - t_start:.0f} s (steps in parallel overlap)")
    print(f"\noutputs under {out}/")
    return 0 if all(s["ok"] for s in steps) else 1
