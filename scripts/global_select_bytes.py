"""Bytes per worker per step, LeNet-5 on Fashion-MNIST, coarse k=1: global block selection
(--exchange allreduce, docs/spec.md §8) against the framed all_gather path, N = 2, 4, 8.

    python scripts/global_select_bytes.py [--steps 20] [--json OUT.json] [--timing]

Each configuration trains `--steps` steps in the single-process simulation (the bits a DDP run
gives) and reads what every worker put into the collectives (`bytes_sent`). The wire bytes per
worker are then computed for the collectives gloo runs on CPU: a ring allreduce sends (and
receives) 2 (N - 1) / N of the vector per worker; a ring all_gather sends and receives N - 1
messages of the padded width (here the mean message, a lower bound: every message is padded to
the step's largest). The all_gather path's size round trip (8 bytes per rank) is left out.

`--timing` also measures the CPU milliseconds (1 torch thread, median of 30) of one worker's
side of a LeNet-5 step with random gradients, N = 4: encode (framed) or prepare (global), and
the receive side: decode and sum N frames, or check / finish N workers and average. The
minimum over the repeats is reported (the machine is shared; medians move with its load).
"""
from __future__ import annotations

import argparse
import json
import sys

from gradblock.shim.params import EXCHANGES
from gradblock.shim.training.train import TrainConfig, run_training


def measure(n: int, exchange: str, steps: int) -> dict:
    r = run_training(TrainConfig(data="fashion-mnist", compressor="coarse", k=1, workers=n,
                                 epochs=1, batch_size=32, local_momentum=0.9, momentum=0.0,
                                 threads=1, max_steps=steps, progress=False, exchange=exchange,
                                 train_subset=32 * n * steps, test_subset=100))
    per_worker = r["bytes_sent"] / (r["steps"] * n)
    if exchange == "allreduce":
        wire = 2 * (n - 1) / n * per_worker
    else:
        wire = (n - 1) * per_worker
    return {"workers": n, "exchange": exchange, "steps": r["steps"],
            "put_per_worker": per_worker, "wire_sent_per_worker": wire,
            "dense_bytes_per_worker": 4 * r["params"]}


def timing(n: int = 4, repeats: int = 30) -> dict:
    import time

    import numpy as np
    import torch

    from gradblock.shim.exchange import global_exchange as ge
    from gradblock.shim.compress.compressors import StepStats, WorkerState, build_compressor, layers_of
    from gradblock.shim.setup.models import build_model
    torch.set_num_threads(1)
    layers = layers_of(build_model("lenet5"))
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(lay.shape, generator=gen) * 0.01 for lay in layers]
    out = {}
    for ex in EXCHANGES:
        comp = build_compressor("coarse", layers, n, k=1, local_momentum=0.9, exchange=ex)
        states = {w: WorkerState() for w in range(n)}

        def step():
            t0 = time.perf_counter()
            msgs = [ge.encode_for(comp, layers, grads, states[w])[0] for w in range(n)]
            t1 = time.perf_counter()
            ge.decode_for(comp, layers, msgs, list(range(n)), states,
                          [StepStats() for _ in range(n)])
            return (t1 - t0) / n * 1e3, (time.perf_counter() - t1) * 1e3

        for _ in range(3):
            step()
        t = np.min(np.array([step() for _ in range(repeats)]), axis=0)
        out[ex] = {"send_side_ms": float(t[0]), "receive_side_ms": float(t[1])}
        print(f"{ex}: one worker's encode/prepare {t[0]:.2f} ms; decode+sum of {n} frames / "
              f"finish of {n} workers + average {t[1]:.2f} ms")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--json", default=None)
    p.add_argument("--timing", action="store_true")
    args = p.parse_args(argv)
    if args.timing:
        timing()
        return 0
    rows = [measure(n, ex, args.steps) for n in (2, 4, 8) for ex in EXCHANGES]
    print("| N | exchange | bytes a worker puts in (per step) | wire bytes sent per worker (per step) |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['workers']} | {row['exchange']} | {row['put_per_worker']:,.0f} | "
              f"{row['wire_sent_per_worker']:,.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
