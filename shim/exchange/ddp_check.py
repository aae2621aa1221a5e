"""Self-check of the DDP hook on a real process group (a torchrun entry module).

    torchrun --nproc-per-node 2 -m gradblock.shim.exchange.ddp_check --out DIR [--device cuda]

For every compressor, a few steps of a small conv net with BatchNorm are trained through
DistributedDataParallel with the gradblock hook, with tiny buckets so every step spans
several buckets and DDP's bucket rebuild after the first iteration is exercised. Each rank
then checks that:
* the parameters are bit-identical on every rank, and equal to the single-process simulation
  of the same run (every rank runs that simulation itself, it is deterministic); so are rank
  0's buffers (BatchNorm statistics: DDP broadcasts rank 0's at every forward, so the other
  ranks hold their own until the next one);
* all_gather of messages of different lengths, one of them empty, completes;
* a frame corrupted on its way out of one rank (`--corrupt-rank`) makes every rank raise the
  frame's codec.errors class, naming that rank and the layer.
Each rank writes DIR/rank{r}.json; the exit status is 0 only if every check passed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..compress.compressors import COMPRESSORS, build_compressor, layers_of
from .hook import all_gather_varlen, register
from .optim import GlobalMomentumSGD
from .workers import SimulatedCluster
from .process_group import end_process_group

STEPS = 4
BATCH = 8


class CheckNet(torch.nn.Module):
    """Conv + BatchNorm + two FC layers (biases small enough to test --dense-below)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 6, 3)
        self.bn = torch.nn.BatchNorm2d(6)
        self.fc1 = torch.nn.Linear(6 * 6 * 6, 16)
        self.fc2 = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def make_model(device) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return CheckNet().to(device)


def batches(world: int, device):
    """Each step's batch for every rank, the same on every process."""
    g = torch.Generator().manual_seed(123)
    out = []
    for _ in range(STEPS):
        out.append([(torch.randn(BATCH, 1, 8, 8, generator=g).to(device),
                     torch.randint(0, 10, (BATCH,), generator=g).to(device)) for _ in range(world)])
    return out


def compressor_for(name: str, model, world: int):
    return build_compressor(name, layers_of(model), world, k=2, density="match", interval=2,
                            dense_below=12)


def snapshot(model: torch.nn.Module):
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    buffers = {k: v.detach().clone() for k, v in model.named_buffers()}
    return params, buffers


def run_ddp(name: str, rank: int, world: int, device, data):
    model = make_model(device)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=0.001)
    register(ddp, compressor_for(name, model, world))
    opt = GlobalMomentumSGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in data:
        x, y = step[rank]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    return snapshot(model)


def run_simulation(name: str, world: int, device, data):
    model = make_model(device)
    layers = layers_of(model)
    cluster = SimulatedCluster(model, compressor_for(name, model, world), layers, F.cross_entropy,
                               device)
    opt = GlobalMomentumSGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in data:
        cluster.step(step, opt)
    return snapshot(model)


def same_on_all_ranks(state: dict[str, torch.Tensor]) -> bool:
    flat = torch.cat([v.reshape(-1).to(torch.float32).view(torch.int32) for v in state.values()])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return all(torch.equal(g, gathered[0]) for g in gathered)


def check_varlen(rank: int, device) -> bool:
    mine = torch.arange(3 * rank, dtype=torch.int32, device=device)     # rank 0 sends nothing
    got, width = all_gather_varlen(mine)
    return width == max(1, 3 * (dist.get_world_size() - 1)) and all(
        torch.equal(g.cpu(), torch.arange(3 * r, dtype=torch.int32)) for r, g in enumerate(got))


def check_corruption(bad_rank: int, rank: int, world: int, device, data) -> dict:
    model = make_model(device)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None)

    def flip_last_crc(message, layers, sender):
        if sender != bad_rank:
            return message
        out = message.clone()
        out[-1] ^= 1                     # the CRC word of the bucket's last frame
        return out

    # every layer framed (no dense layers), so the message ends with a frame's CRC
    coarse = build_compressor("coarse", layers_of(model), world, k=2)
    hook = register(ddp, coarse, outgoing_filter=flip_last_crc)
    x, y = data[0][rank]
    try:
        hook.backward(F.cross_entropy(ddp(x), y))      # re-raises the decode error's own class
    except Exception as e:  # noqa: BLE001 - reported, the check decides
        return {"raised": type(e).__name__, "message": str(e)}
    return {"raised": None, "message": ""}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gradblock.shim.exchange.ddp_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for rank{r}.json")
    p.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (NCCL)")
    p.add_argument("--compressors", nargs="+", default=list(COMPRESSORS), choices=COMPRESSORS)
    p.add_argument("--corrupt-rank", type=int, default=None,
                   help="also check that a corrupted frame from this rank is reported")
    args = p.parse_args(argv)
    if "RANK" not in os.environ:
        print("gradblock.shim.exchange.ddp_check must be started by torchrun", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if args.device.startswith("cuda") else torch.device("cpu")
    if device.type == "cuda":
        from ..setup.problem import deterministic_cuda
        torch.cuda.set_device(device)
        deterministic_cuda()
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    report: dict = {"rank": rank, "world": world, "device": str(device), "compressors": {}}
    ok = True
    try:
        data = batches(world, device)
        for name in args.compressors:
            ddp_params, ddp_buffers = run_ddp(name, rank, world, device, data)
            sim_params, sim_buffers = run_simulation(name, world, device, data)
            equal_sim = all(torch.equal(ddp_params[k], sim_params[k]) for k in sim_params)
            if rank == 0:
                equal_sim &= all(torch.equal(ddp_buffers[k], sim_buffers[k]) for k in sim_buffers)
            equal_ranks = same_on_all_ranks(ddp_params)
            report["compressors"][name] = {"equal_to_simulation": equal_sim,
                                           "equal_on_all_ranks": equal_ranks}
            ok &= equal_sim and equal_ranks
        report["varlen_with_empty_message"] = check_varlen(rank, device)
        ok &= report["varlen_with_empty_message"]
        if args.corrupt_rank is not None:
            report["corruption"] = check_corruption(args.corrupt_rank, rank, world, device, data)
            ok &= report["corruption"]["raised"] == "CrcMismatchError"
    except Exception:  # noqa: BLE001 - the report carries the traceback
        report["error"] = traceback.format_exc()
        ok = False
    report["ok"] = bool(ok)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(report, indent=2) + "\n")
    end_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
