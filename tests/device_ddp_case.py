"""torchrun entry for tests/test_device_exchange.py: the exchange paths of issue 29 on a real
gloo group (CPU, 2 ranks).

    torchrun --nproc-per-node 2 -m device_ddp_case OUT_DIR

Each rank writes OUT_DIR/rank{r}.json with:
* "device": per configuration and check mode (and with the CUDA graphs' plumbing), whether DDP
  with the device codec
  (compressor.codec = "device", the code a GPU runs) equals the single-process simulation
  (the reference's host decode) and every rank's parameters -- a channels_last model among them;
* "allreduce_channels_last": the allreduce exchange with --dense-below on a channels_last model
  against the simulation;
* "nan": a NaN gradient on the last rank under each codec: the class each rank raised and the
  seconds until it did (the group's timeout is short: a rank left waiting fails the case);
* "corrupt": a CRC flipped by rank 1 under the device codec, in each check mode;
* "amp": an overflow under torch's GradScaler on rank 1, plain DDP and the hook's "skip"
  policy under each codec: whether the step was skipped and the scaler's next scale.
"""
from __future__ import annotations

import datetime
import json
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gradblock.shim.compress.compressors import build_compressor, layers_of
from gradblock.shim.exchange.ddp_check import batches, same_on_all_ranks, snapshot
from gradblock.shim.exchange.hook import register
from gradblock.shim.exchange.optim import GlobalMomentumSGD
from gradblock.shim.exchange.workers import SimulatedCluster


class ChannelsNet(torch.nn.Module):
    """Two convolutions with several input channels, so channels_last strides are a real
    permutation of the row-major order, and small biases for --dense-below."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 3)
        self.conv2 = torch.nn.Conv2d(4, 6, 3)
        self.fc = torch.nn.Linear(6 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc(x.flatten(1))


def make(channels_last: bool) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = ChannelsNet()
    return m.to(memory_format=torch.channels_last) if channels_last else m


DEVICE_CONFIGS = {
    "k2_dense_below": (False, dict(k=2, dense_below=12)),
    "fraction": (False, dict(k=0.5, block_size=8)),
    "momentum": (False, dict(k=1, local_momentum=0.9)),
    "channels_last_dense_below": (True, dict(k=1, dense_below=12)),
}


def optimiser(model, kw):
    return GlobalMomentumSGD(model.parameters(), lr=0.1,
                             momentum=0.0 if kw.get("local_momentum") else 0.9)


def run_ddp(channels_last, kw, rank, world, data, *, codec=None, check=None, exchange="allgather",
            groups=None, graphs=False):
    model = make(channels_last)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
    comp = build_compressor("coarse", layers_of(model), world, exchange=exchange, **kw)
    if codec is not None:
        comp.codec = codec
    comp.graphs = graphs
    if groups is not None:
        from gradblock.shim.systems.merge_hook import register_merged
        hook = register_merged(ddp, comp, groups)
    else:
        hook = register(ddp, comp)
    if check is not None:
        hook.check = check
    opt = optimiser(model, kw)
    for step in data:
        x, y = step[rank]
        hook.reset_step()
        opt.zero_grad(set_to_none=True)
        hook.backward(F.cross_entropy(ddp(x), y))
        opt.step()
    return snapshot(model)


def run_simulation(channels_last, kw, world, data, exchange="allgather", groups=None):
    model = make(channels_last)
    comp = build_compressor("coarse", layers_of(model), world, exchange=exchange, **kw)
    cluster = SimulatedCluster(model, comp, layers_of(model), F.cross_entropy, "cpu",
                               groups=groups)
    opt = optimiser(model, kw)
    for step in data:
        cluster.step(step, opt)
    return snapshot(model)


def compare(rank, ddp_state, sim_state) -> dict:
    (params, buffers), (sim_params, sim_buffers) = ddp_state, sim_state
    equal = all(torch.equal(params[k], sim_params[k]) for k in sim_params)
    return {"equal_to_simulation": bool(equal), "equal_on_all_ranks": same_on_all_ranks(params)}


def error_case(rank, world, data, *, codec, check="auto", nan_rank=None, corrupt_rank=None,
               graphs=False):
    model = make(False)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    comp = build_compressor("coarse", layers_of(model), world, k=2)
    comp.codec, comp.graphs = codec, graphs

    def flip_last_crc(message, layers, sender):
        if sender != corrupt_rank:
            return message
        out = message.clone()
        out[-1] ^= 1                     # the CRC word of the bucket's last frame
        return out

    hook = register(ddp, comp, outgoing_filter=flip_last_crc if corrupt_rank is not None else None)
    hook.check = check
    x, y = data[0][rank]
    if nan_rank == rank:
        x = x.clone()
        x[0, 0, 0, 0] = float("nan")
    t0 = time.perf_counter()
    try:
        hook.backward(F.cross_entropy(ddp(x), y))
    except Exception as e:  # noqa: BLE001 - reported, the test decides
        return {"raised": type(e).__name__, "message": str(e),
                "seconds": time.perf_counter() - t0}
    return {"raised": None, "message": "", "seconds": time.perf_counter() - t0}


def amp_case(rank, world, data, codec):
    """One step under torch's GradScaler where rank 1's scaled loss overflows (its gradients
    are Inf / NaN, rank 0's finite): plain DDP (codec None) spreads the Inf and every rank's
    scaler skips the step; the hook's "skip" policy must do the same."""
    model = make(False)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    backward = None
    if codec is not None:
        comp = build_compressor("coarse", layers_of(model), world, k=2, dense_below=12)
        comp.codec, comp.nonfinite = codec, "skip"
        backward = register(ddp, comp).backward
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 100)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = data[0][rank]
    loss = F.cross_entropy(ddp(x), y) * (1e10 if rank == 1 else 1.0)
    (backward or (lambda t: t.backward()))(scaler.scale(loss))
    scaler.step(opt)
    scaler.update()
    return {"unchanged": all(torch.equal(v, before[k]) for k, v in model.named_parameters()),
            "scale": scaler.get_scale()}


def main(out: str) -> int:
    torch.set_num_threads(1)
    # a short timeout: a rank left waiting in a collective fails its case instead of the run
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    report: dict = {"rank": rank, "world": world, "device": {}}
    try:
        data = batches(world, torch.device("cpu"))
        for name, (cl, kw) in DEVICE_CONFIGS.items():
            sim = run_simulation(cl, kw, world, data)
            for check in ("bucket", "step"):
                got = run_ddp(cl, kw, rank, world, data, codec="device", check=check)
                report["device"][f"{name}/{check}"] = compare(rank, got, sim)
            if name in ("momentum", "channels_last_dense_below"):   # the CUDA graphs' plumbing
                got = run_ddp(cl, kw, rank, world, data, codec="device", check="step",
                              graphs=True)
                report["device"][f"{name}/graphs"] = compare(rank, got, sim)
        groups = [[0, 1], [2, 3, 4, 5]]      # groups spanning DDP's one-layer buckets
        kw = dict(k=1, dense_below=12)
        sim = run_simulation(True, kw, world, data, groups=groups)
        for check in ("bucket", "step"):
            got = run_ddp(True, kw, rank, world, data, codec="device", check=check, groups=groups)
            report["device"][f"merged_channels_last/{check}"] = compare(rank, got, sim)
        got = run_ddp(True, kw, rank, world, data, exchange="allreduce")
        report["allreduce_channels_last"] = compare(
            rank, got, run_simulation(True, kw, world, data, exchange="allreduce"))
        report["nan"] = {codec: error_case(rank, world, data, codec=codec, nan_rank=world - 1)
                         for codec in ("host", "device")}
        report["nan"]["device_graphs"] = error_case(rank, world, data, codec="device",
                                                    nan_rank=world - 1, graphs=True)
        report["corrupt"] = {check: error_case(rank, world, data, codec="device", check=check,
                                               corrupt_rank=1) for check in ("bucket", "step")}
        report["corrupt"]["host"] = error_case(rank, world, data, codec="host", corrupt_rank=1)
        report["amp"] = {str(codec): amp_case(rank, world, data, codec)
                         for codec in (None, "host", "device")}
    except Exception:  # noqa: BLE001 - the report carries the traceback
        report["error"] = traceback.format_exc()
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"rank{rank}.json").write_text(json.dumps(report, indent=2) + "\n")
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))


def combined_future_case() -> None:
    """The allreduce exchange with --dense-below issues two collectives per bucket; the
    callback that averages them must wait on EACH collective's own future (on CUDA that wait
    is what puts the callback's stream behind NCCL's), not only on a combined one. Run in a
    one-rank gloo group with the collectives' futures wrapped to log their wait() calls."""
    from own_process import one_rank_gloo_group

    waited: list = []

    class Watched(torch.futures.Future):
        def __init__(self, inner):
            super().__init__()
            inner.then(lambda f: self.set_result(f.value()))

        def wait(self):
            waited.append(id(self))
            return super().wait()

    issued: list = []

    class Work:
        def __init__(self, work):
            self.work = work

        def get_future(self):
            fut = Watched(self.work.get_future())
            issued.append(id(fut))
            return fut

        def wait(self):
            return self.work.wait()

    real_reduce, real_gather = dist.all_reduce, dist.all_gather

    def all_reduce(*a, async_op=False, **kw):
        w = real_reduce(*a, async_op=async_op, **kw)
        return Work(w) if async_op else w

    def all_gather(*a, async_op=False, **kw):
        w = real_gather(*a, async_op=async_op, **kw)
        return Work(w) if async_op else w

    with one_rank_gloo_group():
        dist.all_reduce, dist.all_gather = all_reduce, all_gather
        try:
            model = make(False)
            ddp = torch.nn.parallel.DistributedDataParallel(model)
            comp = build_compressor("coarse", layers_of(model), 1, k=1, dense_below=12,
                                    exchange="allreduce")
            hook = register(ddp, comp)
            x = torch.randn(4, 1, 8, 8)
            hook.backward(F.cross_entropy(ddp(x), torch.tensor([1, 2, 3, 4])))
        finally:
            dist.all_reduce, dist.all_gather = real_reduce, real_gather
    assert len(issued) >= 2, f"expected both collectives' futures, got {len(issued)}"
    missing = [f for f in issued if f not in waited]
    assert not missing, f"{len(missing)} of {len(issued)} collective futures never waited on"


class _FakeBucket:
    """What global_hook reads of a DDP GradBucket, with gradient views of our choosing."""

    def __init__(self, flat, views, params):
        self._flat, self._views, self._params = flat, views, params

    def buffer(self):
        return self._flat

    def gradients(self):
        return self._views

    def parameters(self):
        return self._params


def strided_bucket_case() -> None:
    """The allreduce exchange writes through the bucket's gradient views: a bucket whose views
    follow a channels_last parameter's strides (DDP's layout contract where it applies) must
    end with the same values as one with row-major views. Torch 2.13's CPU DDP hands
    row-major views, so this calls the hook with a bucket made here, in a one-rank group."""
    from own_process import one_rank_gloo_group

    from gradblock.shim.exchange.global_exchange import GlobalHookState, global_hook
    with one_rank_gloo_group():
        model = make(True)
        params = list(model.parameters())
        g = torch.Generator().manual_seed(0)
        grads = [torch.randn(p.shape, generator=g) for p in params]
        results = {}
        for strided in (False, True):
            comp = build_compressor("coarse", layers_of(model), 1, k=1, dense_below=12,
                                    exchange="allreduce")
            state = GlobalHookState(comp, model)
            flat = torch.zeros(sum(p.numel() for p in params))
            views, at = [], 0
            for p, gr in zip(params, grads):
                v = flat[at:at + p.numel()]
                v = v.as_strided(p.shape, p.stride()) if strided else v.view(p.shape)
                v.copy_(gr)
                views.append(v)
                at += p.numel()
            assert strided is False or views[2].stride() != views[2].contiguous().stride()
            global_hook(state, _FakeBucket(flat, views, params)).wait()
            results[strided] = [v.clone() for v in views]
    for a, b in zip(results[False], results[True]):
        assert torch.equal(a, b), "the averages came out permuted in the strided views"
