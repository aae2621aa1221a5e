"""gradblock in a plain DDP training script (docs/ddp.md):

    torchrun --nproc-per-node 2 examples/ddp_torchrun.py --steps 20

The five gradblock lines are marked; the rest is an ordinary DDP loop (gloo on the CPU, NCCL
on GPUs) on synthetic data."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from gradblock import ddp as gb                                        # gradblock 1/5

from _report import write_report


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--report", default=None, help="directory for the per-rank check (tests)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="the parameters' dtype: bf16 / fp16 gradients are widened exactly to "
                        "float32 by the codec, the average rounded back (docs/spec.md §1.2)")
    a = p.parse_args()
    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(0)                       # the same initial weights on every rank
    model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(8 * 13 * 13, 64), nn.ReLU(), nn.Linear(64, 10))
    dtype = getattr(torch, a.dtype)
    model = model.to(device=device, dtype=dtype)
    model = DistributedDataParallel(model, device_ids=[local] if cuda else None)
    state = gb.GradblockState()                # the recipe: coarse k=1, L2, R 100, m 0.9  2/5
    model.register_comm_hook(state, gb.gradblock_hook)                 # gradblock 3/5
    # momentum correction keeps the momentum in the hook: the optimiser has none    4/5
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.0)
    g = torch.Generator().manual_seed(dist.get_rank())   # each rank its own batches
    for _ in range(a.steps):
        x = torch.randn(16, 1, 28, 28, generator=g).to(device=device, dtype=dtype)
        y = torch.randint(0, 10, (16,), generator=g).to(device)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()    # or state.backward(loss): peers' errors by name  5/5
        opt.step()
    write_report(a.report, model, state, a.steps)


if __name__ == "__main__":
    main()
    gb.end_process_group()   # the model gone: the group's threads end before Python does
