"""Median ms per training step of LeNet-5 under DDP (gloo, one process per rank, 1 torch thread),
torch's default allreduce vs the gradblock hook (docs/training.md "The hook in your own training
loop"), on synthetic Fashion-MNIST-shaped batches (the step's work does not depend on the data).

    torchrun --nproc-per-node 4 scripts/hook_bench.py --method coarse --steps 60

Rank 0 prints one JSON line: method, world, median / p10 / p90 ms per step, first-step ms.
Used for docs/network.md "The all_gather path"."""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--method", default="coarse", choices=["allreduce", "dense", "topk", "dlgs", "coarse"])
    p.add_argument("--k", type=float, default=1)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--profile", default=None, help="cProfile rank 0's timed steps into this file")
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    from gradblock.shim.setup.models import build_model
    from gradblock.shim.compress.compressors import build_compressor, layers_of
    from gradblock.shim.exchange.hook import register
    from gradblock.shim.exchange.optim import GlobalMomentumSGD
    model = build_model("lenet5", seed=0)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = None
    if a.method != "allreduce":
        k = int(a.k) if a.k >= 1 else a.k
        comp = build_compressor(a.method, layers_of(model), world, k=k)
        state = register(ddp, comp)
    opt = GlobalMomentumSGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(rank)
    xs = torch.randn(8, a.batch, 1, 28, 28, generator=gen)
    ys = torch.randint(0, 10, (8, a.batch), generator=gen)
    times = []
    prof = None
    for i in range(a.warmup + a.steps):
        if i == a.warmup and a.profile and rank == 0:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(xs[i % 8]), ys[i % 8])
        if state is not None:
            state.reset_step()
            state.backward(loss)
        else:
            loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    if prof is not None:
        prof.disable()
        prof.dump_stats(a.profile)
    t = sorted(times[a.warmup:])
    if rank == 0:
        print(json.dumps({"method": a.method, "k": a.k, "world": world,
                          "median_ms": round(statistics.median(t), 2),
                          "p10_ms": round(t[len(t) // 10], 2), "p90_ms": round(t[9 * len(t) // 10], 2),
                          "first_step_ms": round(times[0], 1)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
