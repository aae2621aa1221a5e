"""Table 5: where a training step's time goes in the torch shim.

ResNet-20 (shim.setup.models) on Fashion-MNIST batches (resized to 32x32, 3 channels), N workers
simulated in one process by shim.exchange.workers.SimulatedCluster with each compressor of
shim.compress.compressors. The cluster reports per step: compute (forward + backward, per worker),
compress (encode, per worker) and exchange (decode every worker's message and reduce: what each
real worker does after its all-gather). The optimizer update is the rest of the step. In one
process there is no network, so the all-gather itself costs nothing here; the last column
models it at a nominal link speed from the bytes actually sent, for scale only.
"""
from __future__ import annotations

import statistics
import time

from .context import BenchContext, optional_module, require
from .gradients import fashion_mnist_available, fashion_mnist_batch
from .tables import Table
from .timing import threads

MODEL = "resnet20"
COMPRESSORS = ("dense", "topk", "coarse")
LINK_GBIT = 10.0          # modelled all-gather link speed


def _batches(n_workers: int, batch: int, device: str):
    x, y = fashion_mnist_batch(n_workers * batch, 32)
    x, y = x.to(device), y.to(device)
    return [(x[w * batch:(w + 1) * batch], y[w * batch:(w + 1) * batch]) for w in range(n_workers)]


def _measure_cluster(name: str, device: str, n_workers: int, batch: int, k, R: float,
                     steps: int, warmup: int):
    """Median per-step seconds of (compute, compress, exchange, update) and bytes per worker."""
    import torch
    import torch.nn.functional as F
    models = optional_module("gradblock.shim.setup.models")
    comp = optional_module("gradblock.shim.compress.compressors")
    workers = optional_module("gradblock.shim.exchange.workers")
    optim = optional_module("gradblock.shim.exchange.optim")
    build_model = require(models, "build_model")
    layers_of, build_compressor = require(comp, "layers_of", "build_compressor")
    Cluster = require(workers, "SimulatedCluster")
    SGD = require(optim, "GlobalMomentumSGD")

    model = build_model(MODEL, num_classes=10, in_shape=(3, 32, 32), seed=0).to(device)
    layers = layers_of(model)
    compressor = build_compressor(name, layers, n_workers, k=k, R=R)
    cluster = Cluster(model, compressor, layers, F.cross_entropy, device=device)
    opt = SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = _batches(n_workers, batch, device)
    parts, sent = [], []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        res = cluster.step(batches, opt)
        if device == "cuda":
            torch.cuda.synchronize()
        total = time.perf_counter() - t0
        t = res.times
        # per worker: its compute and compress, the exchange every worker does, the update
        update = total - n_workers * (t.compute_s + t.compress_s) - t.exchange_s
        if i >= warmup:
            parts.append((t.compute_s, t.compress_s, t.exchange_s, max(0.0, update)))
            sent.append(statistics.mean(s.bytes_sent for s in res.stats))
    med = [statistics.median(p[j] for p in parts) for j in range(4)]
    return med, statistics.median(sent)


def _devices() -> list[tuple[str, str]]:
    """(device, reason it is unavailable or '')."""
    try:
        import torch
    except ImportError:
        return [("cpu", "torch not installed"), ("cuda", "torch not installed")]
    cuda = "" if torch.cuda.is_available() else "no CUDA device (torch.cuda.is_available() is False)"
    return [("cpu", ""), ("cuda", cuda)]


def run(ctx: BenchContext) -> Table:
    table = Table("training", "5. Training step: where the time goes (torch shim)",
                  ["model", "device", "threads", "workers", "compressor", "step (ms)", "compute",
                   "compress", "exchange (decode + reduce)", "update", "sent per worker (KiB)",
                   f"all-gather at {LINK_GBIT:g} Gb/s (ms, modelled)"])
    n_workers = 2 if ctx.quick else 4
    batch = 8 if ctx.quick else 32
    steps = 2 if ctx.quick else max(2, ctx.reps)
    no_data = fashion_mnist_available()
    n_threads = ctx.thread_counts[-1]
    for device, why in _devices():
        for name in COMPRESSORS:
            labels = ["ResNet-20", device, str(n_threads), str(n_workers), name]
            if why or no_data:
                table.skip(labels, why or no_data)
                continue
            def timed(name=name, device=device):
                with threads(n_threads):
                    return _measure_cluster(name, device, n_workers, batch, ctx.k, ctx.R, steps,
                                            ctx.warmup)
            result, cell = ctx.attempt(f"training {device} {name}", timed)
            if result is None:
                table.unmeasured(labels, cell)
                continue
            med, sent = result
            step = sum(med)
            ctx.log(f"training {device} {name}: step {step * 1e3:.1f} ms")
            gather_s = sent * (n_workers - 1) * 8 / (LINK_GBIT * 1e9)
            table.add(*labels, step * 1e3, *(f"{p / step:.1%}" for p in med), sent / 1024,
                      gather_s * 1e3)
    table.notes.append(
        f"{n_workers} simulated workers, batch {batch} per worker, k = {ctx.k} of each layer's "
        f"blocks (topk keeps the same element count per layer), R = {ctx.R:g}; median of "
        f"{steps} steps after {ctx.warmup} warm-up; shares are of one worker's step = compute + "
        f"compress + exchange + update (the simulation runs the workers one after another)")
    table.notes.append("coarse runs torchstep/ (torch ops); its decode validates each "
                       "frame on the host with the reference decoder")
    return table
