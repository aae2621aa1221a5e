"""Training-step timing of the DDP communication hooks at world size 1 (issue 29 item 8):

    python -m gradblock.bench.gpu_step --device cuda --json F      # ResNet-50 and LeNet-5
    python -m gradblock.bench.gpu_step --device cpu --tiny         # the same code, tiny config

Per model and method: 5 warm-up and 20 timed steps (CUDA events on a GPU, perf_counter on the
CPU), median ms per step; then one profiled step with its counts of kernel launches and host
syncs (CUDA: the runtime's launch and synchronize calls, `aten::_local_scalar_dense`, device
to host copies; CPU: aten operators, `.item()` reads and `nonzero`). Methods: `allreduce`
(DDP's own, no hook), `fp16` (torch's fp16_compress_hook), `powersgd1` / `powersgd4`
(torch's PowerSGD, error feedback and warm start), `coarse1` (gradblock k = 1, all_gather
exchange; `coarse1g` the same with each bucket's encode and decode captured as one CUDA graph),
`global1` (gradblock k = 1, global block selection over allreduce). Each row's
`overhead_pct` is its step's excess over `allreduce`'s in percent of its own step: at world
size 1 the collective is a local copy, so for gradblock's rows it is the codec's share of the
step. bf16 autocast and channels_last are on unless --no-bf16 / --no-channels-last. Every
method runs the same torch SGD (momentum 0.9) so only the hook differs.

The process group is a one-process group over a HashStore (NCCL on a GPU, gloo on the CPU):
nothing is launched, no port is opened. What one GPU cannot show, cross-GPU traffic, is in
docs/gpu.md.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

METHODS = ("allreduce", "fp16", "powersgd1", "powersgd4", "coarse1", "coarse1g", "global1")
GRADBLOCK = ("coarse1", "coarse1g", "global1")
# model -> (input shape, batch) on a GPU, and the tiny CPU configuration
FULL = {"resnet50": ((3, 224, 224), 32), "lenet5": ((1, 28, 28), 64)}
TINY = {"resnet50": ((3, 32, 32), 2), "lenet5": ((1, 28, 28), 8)}

LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
          "cudaGraphLaunch")
SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
ITEM = ("aten::_local_scalar_dense",)


def _hook_state(method: str, ddp, model, device):
    """Register `method`'s hook on `ddp`; returns what keeps its per-step state (or None)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    if method == "allreduce":
        return None
    if method == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return None
    if method.startswith("powersgd"):
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=int(method[-1]),
                                            start_powerSGD_iter=2, use_error_feedback=True,
                                            warm_start=True)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return None
    # the shim's register: what gradblock.ddp's state runs (bench/ may not import the
    # gradblock package); k = 1, L1, range 10, no momentum correction (torch SGD keeps it)
    from gradblock.shim.compress.compressors import build_compressor, layers_of
    from gradblock.shim.exchange.hook import register
    exchange = "allreduce" if method == "global1" else "allgather"
    comp = build_compressor("coarse", layers_of(model), 1, k=1, exchange=exchange)
    comp.graphs = method == "coarse1g"        # each bucket's encode and decode one CUDA graph
    return register(ddp, comp)


def _counts(prof, device: torch.device) -> dict:
    names: dict[str, int] = {}
    for ev in prof.events():
        names[ev.name] = names.get(ev.name, 0) + 1
    got = lambda keys: sum(names.get(k, 0) for k in keys)  # noqa: E731
    out = {"item_reads": got(ITEM) + names.get("aten::item", 0),
           "nonzero": names.get("aten::nonzero", 0),
           "aten_ops": sum(v for k, v in names.items() if k.startswith("aten::"))}
    if device.type == "cuda":
        out |= {"launches": got(LAUNCH), "syncs": got(SYNC),
                "d2h_copies": sum(v for k, v in names.items() if "DtoH" in k)}
    return out


def time_method(model_name: str, method: str, device: torch.device, shape, batch: int,
                warmup: int, steps: int, bf16: bool, channels_last: bool, base,
                top: int = 0, log=print, trace: str | None = None) -> dict:
    model = copy.deepcopy(base).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None)
    state = _hook_state(method, ddp, model, device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, *shape, generator=g).to(device)
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,), generator=g).to(device)
    cuda = device.type == "cuda"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()

    times = []
    for i in range(warmup + steps):
        if cuda:
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            step()
            t1.record()
            t1.synchronize()
            ms = t0.elapsed_time(t1)
        else:
            s = time.perf_counter()
            step()
            ms = 1e3 * (time.perf_counter() - s)
        if i >= warmup:
            times.append(ms)
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts, with_stack=trace is not None) as prof:
        step()
        if cuda:
            torch.cuda.synchronize(device)
    if trace:               # the step's timeline with Python stacks (chrome://tracing, Perfetto)
        import os
        os.makedirs(trace, exist_ok=True)
        prof.export_chrome_trace(os.path.join(trace, f"{model_name}_{method}.json"))
    if top:     # where the profiled step's time goes: device kernels, then host operators
        for key in (("self_cuda_time_total",) if cuda else ()) + ("self_cpu_time_total",):
            log(f"-- {model_name} {method}: top {top} by {key}")
            log(prof.key_averages().table(sort_by=key, row_limit=top, max_name_column_width=60))
    row = {"model": model_name, "method": method, "median_ms": statistics.median(times),
           "min_ms": min(times), "max_ms": max(times), "steps": len(times)}
    row |= _counts(prof, device)
    if state is not None and hasattr(state, "stats"):
        row["bytes_sent"] = int(state.stats.bytes_sent)       # the profiled step's
    return row


def run(device: torch.device, models, methods, warmup: int, steps: int, tiny: bool,
        bf16: bool, channels_last: bool, log=print, top: int = 0,
        trace: str | None = None) -> dict:
    from gradblock.shim.setup.models import build_model
    shapes = TINY if tiny else FULL
    own_group = not dist.is_initialized()
    if own_group:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                store=dist.HashStore(), rank=0, world_size=1)
    rows = []
    try:
        for name in models:
            shape, batch = shapes[name]
            base = build_model(name, num_classes=10, in_shape=shape, seed=0)
            for method in methods:
                row = time_method(name, method, device, shape, batch, warmup, steps, bf16,
                                  channels_last, base, top=top, log=log, trace=trace)
                rows.append(row)
                log(f"  {name:9s} {method:10s} {row['median_ms']:9.2f} ms", flush=True)
    finally:
        if own_group:
            dist.destroy_process_group()
    for r in rows:
        ref = next((b for b in rows if b["model"] == r["model"] and b["method"] == "allreduce"),
                   None)
        r["overhead_pct"] = None if ref is None else \
            100.0 * (r["median_ms"] - ref["median_ms"]) / r["median_ms"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"device": str(device), "device_name": name, "torch": torch.__version__,
            "tiny": tiny, "bf16_autocast": bf16, "channels_last": channels_last,
            "warmup": warmup, "steps": steps, "rows": rows}


def format_table(rep: dict) -> str:
    cuda = rep["device"].startswith("cuda")
    head = "| model | method | median ms | gradblock / overhead % | " + (
        "launches | syncs | item | D2H |" if cuda else "aten ops | item | nonzero |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rep["rows"]:
        oh = "" if r["overhead_pct"] is None else f"{r['overhead_pct']:+.1f}"
        tail = (f"{r['launches']} | {r['syncs']} | {r['item_reads']} | {r['d2h_copies']} |"
                if cuda else f"{r['aten_ops']} | {r['item_reads']} | {r['nonzero']} |")
        lines.append(f"| {r['model']} | {r['method']} | {r['median_ms']:.2f} | {oh} | {tail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gradblock.bench.gpu_step",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true",
                   help="small inputs and batches (the CPU test of this module)")
    p.add_argument("--models", nargs="+", default=list(FULL), choices=list(FULL))
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--no-bf16", dest="bf16", action="store_false")
    p.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    p.add_argument("--json", default=None)
    p.add_argument("--top", type=int, default=0,
                   help="print the profiled step's N costliest operators per method")
    p.add_argument("--trace", default=None, metavar="DIR",
                   help="write each profiled step's timeline, Python stacks included, here")
    a = p.parse_args(argv)
    if a.warmup < 0 or a.steps < 1:
        p.error("--warmup must be >= 0 and --steps >= 1")
    device = torch.device(a.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("RESULT FAIL torch sees no CUDA device")
            return 1
        device = torch.device("cuda", device.index or 0)
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    rep = run(device, a.models, a.methods, a.warmup, a.steps, a.tiny, a.bf16, a.channels_last,
              top=a.top, trace=a.trace)
    table = format_table(rep)
    print(table)
    if a.json:
        from gradblock.codec.fileio import write_text
        write_text(a.json, json.dumps(rep | {"table": table}, indent=2) + "\n")
    worst = [r for r in rep["rows"] if r["method"] in GRADBLOCK and r["overhead_pct"] is not None]
    share = ", ".join(f"{r['model']} {r['method']} {r['overhead_pct']:+.1f}%" for r in worst)
    print(f"RESULT pass {len(rep['rows'])} rows on {rep['device_name']}; gradblock's share: "
          f"{share or 'n/a'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
