"""Shared-device interference (source paper 002): two training jobs alone and together on one
device, the degradation coefficients r_AB and r_BA, and the paper's co-location criterion.

r_AB = (A's time per iteration while B runs beside it) / (A's time per iteration alone).
Run alone, A then B takes t_A + t_B. Started together, the job that ends first (say A, at
r_AB * t_A) has moved B a fraction r_AB * t_A / (r_BA * t_B) of the way; B then runs alone:

    t_together = r_AB * t_A + t_B - r_AB * t_A / r_BA

which is below t_A + t_B exactly when r_AB * r_BA < r_AB + r_BA (the paper's rule; the same
as 1/r_AB + 1/r_BA > 1: the two shared throughputs add up to more than one device).

Each job is a real gradblock worker loop in its own process: forward and backward of the model,
then (coarse jobs) the numba compress step and decode of every layer (R = 10, k = 1, error
feedback kept), then an SGD step on the decoded values; dense jobs take the SGD step on the
float gradient. Here the device is this machine's CPU cores (each job gets --threads torch
threads); on a lent GPU the same loop would run with device="cuda".
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gradblock.codec import fileio
from gradblock.codec.errors import GradblockError, UsageError, UsageParser



class JobFailedError(GradblockError, RuntimeError):
    """A measured job's process failed; the message is its last line on stderr (exit 2, as
    before: most often a job that cannot run here, e.g. out of memory)."""


JOBS = {"lenet5-dense": ("lenet5", False), "lenet5-coarse": ("lenet5", True),
        "resnet20-coarse": ("resnet20", True)}
IN_SHAPES = {"lenet5": (1, 28, 28), "resnet20": (3, 32, 32)}


def colocated_time(t_a: float, t_b: float, r_ab: float, r_ba: float) -> float:
    """Total time when A and B start together and each then runs to completion (see above)."""
    if r_ab * t_a <= r_ba * t_b:
        return r_ab * t_a + t_b - r_ab * t_a / r_ba
    return r_ba * t_b + t_a - r_ba * t_b / r_ab


def colocation_pays(r_ab: float, r_ba: float) -> bool:
    """The paper's criterion: sharing beats running one after the other."""
    return r_ab * r_ba < r_ab + r_ba


# ------------------------------------------------------------------------------ one job

def run_job(job: str, seconds: float, threads: int, batch: int, out: str | None, start_at: float) -> dict:
    import numpy as np
    import torch

    from gradblock.codec import zrle_numba
    from gradblock.fastpath import fast
    from gradblock.refmodel.quantiser import QuantConfig, dequantise
    from gradblock.shim.setup.models import build_model

    torch.set_num_threads(threads)
    model_name, coarse = JOBS[job]
    shape = IN_SHAPES[model_name]
    model = build_model(model_name, 10, shape, seed=0)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn((batch, *shape), generator=gen), torch.randint(0, 10, (batch,), generator=gen)
    params = list(model.parameters())
    cfg = QuantConfig.from_range(10.0)
    residuals = [np.zeros(p.numel(), np.int32) for p in params]
    decoded = [np.zeros(p.numel(), np.int32) for p in params]
    words = [np.zeros(fast.max_step_words(p.numel(), p.numel() // p.shape[0] if p.dim() > 1 else 1, 1) + 64,
                      np.uint32) for p in params]

    def step() -> None:
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p, r, w, d in zip(params, residuals, words, decoded):
                g = p.grad
                if coarse:
                    info = fast.compress_step(g.numpy(), r, cfg, 1, None, 0, 8, w)
                    codes = zrle_numba.decode_into(w[:info.n_words], d, p.numel()).values
                    g = torch.from_numpy(dequantise(codes, cfg)).reshape(p.shape)
                p.sub_(0.01 * g)

    step()                                   # compile and warm up before the clock starts
    while time.time() < start_at:
        time.sleep(0.005)
    times, t_end = [], time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    res = {"job": job, "iterations": len(times), "iter_ms": 1e3 * statistics.median(times)}
    if out:
        Path(out).write_text(json.dumps(res))
    return res


def _spawn(job, seconds, threads, batch, out, start_at):
    cmd = [sys.executable, "-m", "gradblock.bench.interference", "--job", job, "--seconds", str(seconds),
           "--threads", str(threads), "--batch", str(batch), "--out", out, "--start-at", repr(start_at)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait(procs) -> None:
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise JobFailedError(f"job process failed: {err.strip().splitlines()[-1] if err.strip() else p.returncode}")


@dataclass
class PairResult:
    a: str
    b: str
    iter_ms_a_alone: float
    iter_ms_b_alone: float
    iter_ms_a_shared: float
    iter_ms_b_shared: float
    r_ab: float
    r_ba: float
    colocation_pays: bool
    speedup_for_equal_work: float     # (t_A + t_B) / t_together for jobs of equal alone-time


def measure_pair(a: str, b: str, seconds: float, threads: int, batch: int, alone: dict) -> PairResult:
    with tempfile.TemporaryDirectory(prefix="gradblock-interference-") as tmp:
        for job in (a, b):
            if job not in alone:
                out = os.path.join(tmp, f"{job}-alone.json")
                _wait([_spawn(job, seconds, threads, batch, out, time.time() + 4)])
                alone[job] = json.loads(Path(out).read_text())["iter_ms"]
        outs = [os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")]
        start = time.time() + 6                      # both warm up, then start on the same clock
        _wait([_spawn(a, seconds, threads, batch, outs[0], start),
               _spawn(b, seconds, threads, batch, outs[1], start)])
        sa, sb = (json.loads(Path(o).read_text())["iter_ms"] for o in outs)
    r_ab, r_ba = sa / alone[a], sb / alone[b]
    return PairResult(a, b, alone[a], alone[b], sa, sb, r_ab, r_ba, colocation_pays(r_ab, r_ba),
                      2.0 / colocated_time(1.0, 1.0, r_ab, r_ba))


def interfere_main(argv: list[str]) -> int:
    p = UsageParser(prog="gradblock interfere",
                                description="two training jobs alone and together: r_AB, r_BA (paper 002)")
    p.add_argument("--pairs", nargs="+", default=["lenet5-dense:lenet5-coarse", "lenet5-dense:resnet20-coarse",
                                                 "lenet5-coarse:resnet20-coarse"],
                   help="A:B pairs of " + ", ".join(JOBS))
    p.add_argument("--seconds", type=float, default=8.0, help="measured time per run")
    p.add_argument("--threads", type=int, default=2, help="torch threads per job (the device's cores)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--json", dest="json_out")
    args = p.parse_args(argv)
    pairs = []
    for spec in args.pairs:
        a, _, b = spec.partition(":")
        if a not in JOBS or b not in JOBS:
            raise UsageError(f"pair {spec!r}: jobs are {', '.join(JOBS)}")
        pairs.append((a, b))
    if not (0 < args.seconds <= 600) or args.threads < 1 or args.batch < 1:
        raise UsageError("--seconds in (0, 600], --threads and --batch >= 1")
    alone: dict = {}
    rows = [measure_pair(a, b, args.seconds, args.threads, args.batch, alone) for a, b in pairs]
    print(f"{'A':<16} {'B':<16} {'r_AB':>6} {'r_BA':>6}  co-location pays")
    for r in rows:
        print(f"{r.a:<16} {r.b:<16} {r.r_ab:6.2f} {r.r_ba:6.2f}  {r.colocation_pays} "
              f"({r.speedup_for_equal_work:.2f}x for equal work)")
    if args.json_out:
        fileio.write_text(args.json_out, json.dumps(
            {"cpu_count": os.cpu_count(), "threads_per_job": args.threads,
             "rows": [r.__dict__ for r in rows]}, indent=2))
    return 0


def _job_main(argv: list[str]) -> int:
    p = UsageParser(prog="python -m gradblock.bench.interference")
    p.add_argument("--job", choices=sorted(JOBS), required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--start-at", type=float, required=True)
    a = p.parse_args(argv)
    run_job(a.job, a.seconds, a.threads, a.batch, a.out, a.start_at)
    return 0


if __name__ == "__main__":
    sys.exit(_job_main(sys.argv[1:]))
