"""Does backward go on while a bucket's exchange is in flight? (issue 29 item 4; CPU, gloo)

    python -m gradblock.bench.overlap [--ranks 2] [--steps 12] [--layers 8] [--width 768]

Two ranks (torch.multiprocessing, gloo on a file store) train a stack of `layers` Linear
layers in DDP buckets of about one layer each, the coarse all_gather hook on the device codec
(the code a GPU runs). Per bucket the trace records when the hook was called and returned and
when its decode (chained on the collective's future) started and ended, relative to the step.
Printed per step, median over the timed steps: how many buckets' decodes ended after backward
had already called the next bucket's hook (backward went on meanwhile), and the step time of
this hook against the same hook made blocking (it waits for its own decode before returning:
no overlap). A figure for docs/network.md, not a test: timings on a shared machine vary.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def _rank(rank: int, world: int, store: str, a, out_q) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from gradblock.shim.compress.compressors import build_compressor, layers_of
    from gradblock.shim.exchange import hook as H

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    results = {}
    for mode in ("async", "blocking"):
        torch.manual_seed(0)
        layers = [torch.nn.Linear(a.width, a.width) for _ in range(a.layers)]
        model = torch.nn.Sequential(*[m for lay in layers for m in (lay, torch.nn.ReLU())])
        mb = 4 * (a.width * a.width + a.width) / 2**20
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=mb * 1.01)
        comp = build_compressor("coarse", layers_of(model), world, k=0.25)
        comp.codec = "device"
        state = H.GradblockHookState(comp, ddp, ddp.process_group)
        trace: list = []
        t0 = [0.0]

        def hook(st, bucket, _trace=trace, _mode=mode):
            n = len(_trace)
            rec = {"called": time.perf_counter() - t0[0]}
            _trace.append(rec)
            fut = H.gradblock_hook(st, bucket)

            def mark(f, _rec=rec):
                _rec["decoded"] = time.perf_counter() - t0[0]
                return f.value()
            fut = fut.then(mark)
            if _mode == "blocking":
                fut.wait()
            rec["returned"] = time.perf_counter() - t0[0]
            rec["bucket"] = n
            return fut
        ddp.register_comm_hook(state, hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(rank)
        steps, overlapped = [], []
        for step in range(a.steps):
            x = torch.randn(a.batch, a.width, generator=g)
            y = torch.randint(0, a.width, (a.batch,), generator=g)
            trace.clear()
            state.reset_step()
            opt.zero_grad(set_to_none=True)
            t0[0] = time.perf_counter()
            state.backward(F.cross_entropy(ddp(x), y))
            dt = time.perf_counter() - t0[0]
            opt.step()
            if step >= 2:
                steps.append(dt * 1e3)
                overlapped.append(sum(1 for i in range(len(trace) - 1)
                                      if trace[i]["decoded"] > trace[i + 1]["called"]))
        results[mode] = {"ms": statistics.median(steps), "overlapped": statistics.median(overlapped),
                         "buckets": len(trace),
                         "trace": [{k: round(v * 1e3, 2) if k != "bucket" else v
                                    for k, v in r.items()} for r in trace]}
    if rank == 0:
        out_q.put(results)
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    import torch.multiprocessing as mp
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args(argv)
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="gradblock-overlap-") as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_rank, args=(r, a.ranks, store, a, q)) for r in range(a.ranks)]
        for p in procs:
            p.start()
        res = q.get()
        for p in procs:
            p.join()
    for mode, r in res.items():
        print(f"{mode:>9}: backward {r['ms']:.1f} ms median, {r['overlapped']:.0f} of "
              f"{r['buckets'] - 1} buckets still decoding when backward called the next hook")
    print("last step's trace (ms since backward began), async hook:")
    for rec in res["async"]["trace"]:
        print(f"  bucket {rec['bucket']}: hook called {rec['called']:.2f}, returned "
              f"{rec['returned']:.2f}, decoded {rec['decoded']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
