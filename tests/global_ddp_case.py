"""torchrun entry for tests/test_global_exchange.py: the allreduce exchange (global block
selection, shim/exchange/global_exchange.py) on a real gloo group.

    torchrun --nproc-per-node N -m global_ddp_case OUT_DIR

Each rank writes OUT_DIR/rank{r}.json with, per configuration, whether DDP's parameters equal
the single-process simulation's and every rank's; then the error cases: ranks configured with
different k (RankMismatchError on every rank), and a NaN gradient on the last rank
(NonFiniteError there, PeerNonFiniteError on the others; nobody left waiting).
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gradblock.shim.compress.compressors import build_compressor, layers_of
from gradblock.shim.exchange.ddp_check import batches, make_model, same_on_all_ranks, snapshot
from gradblock.shim.exchange.hook import register
from gradblock.shim.exchange.optim import GlobalMomentumSGD
from gradblock.shim.exchange.workers import SimulatedCluster

CONFIGS = {
    "k2_dense_below": dict(k=2, dense_below=12),
    "momentum_k1": dict(k=1, local_momentum=0.9),
    "fraction_block5": dict(k=0.25, block_size=5, local_momentum=0.5, momentum_mask=False),
}


def compressor(model, world, **kw):
    return build_compressor("coarse", layers_of(model), world, exchange="allreduce", **kw)


def optimiser(model, kw):
    return GlobalMomentumSGD(model.parameters(), lr=0.1,
                             momentum=0.0 if kw.get("local_momentum") else 0.9)


def run_ddp(kw, rank, world, data):
    model = make_model("cpu")
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
    hook = register(ddp, compressor(model, world, **kw), timed=True)
    opt = optimiser(model, kw)
    sent = 0
    timed = True
    for step in data:
        x, y = step[rank]
        hook.reset_step()
        opt.zero_grad(set_to_none=True)
        hook.backward(F.cross_entropy(ddp(x), y))
        opt.step()
        sent += hook.stats.bytes_sent
        timed &= hook.times.compress_s > 0 and hook.times.exchange_s > 0
    return snapshot(model), sent, type(hook).__name__, timed


def run_simulation(kw, world, data):
    model = make_model("cpu")
    cluster = SimulatedCluster(model, compressor(model, world, **kw), layers_of(model),
                               F.cross_entropy, "cpu")
    opt = optimiser(model, kw)
    sent = 0
    for step in data:
        sent += sum(s.bytes_sent for s in cluster.step(step, opt).stats)
    return snapshot(model), sent


def error_case(rank, world, data, *, nan=False, **kw) -> dict:
    model = make_model("cpu")
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    hook = register(ddp, compressor(model, world, **kw))
    x, y = data[0][rank]
    if nan:
        x = x.clone()
        x[0, 0, 0, 0] = float("nan")
    try:
        hook.backward(F.cross_entropy(ddp(x), y))
    except Exception as e:  # noqa: BLE001 - reported, the test decides
        return {"raised": type(e).__name__, "message": str(e)}
    return {"raised": None, "message": ""}


def main(out: str) -> int:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    report: dict = {"rank": rank, "world": world, "configs": {}}
    try:
        data = batches(world, torch.device("cpu"))
        for name, kw in CONFIGS.items():
            (params, buffers), sent, hook_type, timed = run_ddp(kw, rank, world, data)
            (sim_params, sim_buffers), sim_sent = run_simulation(kw, world, data)
            equal = all(torch.equal(params[k], sim_params[k]) for k in sim_params)
            if rank == 0:
                equal &= all(torch.equal(buffers[k], sim_buffers[k]) for k in sim_buffers)
            report["configs"][name] = {"equal_to_simulation": bool(equal),
                                       "equal_on_all_ranks": same_on_all_ranks(params),
                                       "hook": hook_type, "bytes": sent, "timed": timed,
                                       "sim_bytes_per_worker": sim_sent / world}
        report["mismatch"] = error_case(rank, world, data, k=1 + rank)
        report["length_mismatch"] = error_case(rank, world, data, k=1, block_size=4 + rank)
        report["nan"] = error_case(rank, world, data, k=1, nan=rank == world - 1)
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
