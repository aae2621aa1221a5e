"""gradblock with Hugging Face Accelerate (optional extra: pip install "gradblock[accelerate]";
docs/ddp.md):

    torchrun --nproc-per-node 2 examples/accelerate_ddp.py --steps 20
    accelerate launch --num_processes 2 examples/accelerate_ddp.py --steps 20

Accelerate's own `comm_hook` setting takes only its fixed list of hooks; register gradblock's
on the DDP model that `accelerator.prepare` returns. The optimiser runs without momentum: the
recipe's momentum correction is in the hook."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator

from gradblock import ddp as gb

from _report import write_report


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--report", default=None, help="directory for the per-rank check (tests)")
    a = p.parse_args()
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(8 * 13 * 13, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.0)
    g = torch.Generator().manual_seed(1)
    n = 16 * a.steps * accelerator.num_processes
    data = TensorDataset(torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g))
    model, opt, loader = accelerator.prepare(model, opt, DataLoader(data, batch_size=16))
    state = gb.GradblockState()
    model.register_comm_hook(state, gb.gradblock_hook)     # on the prepared (DDP) model
    steps = 0
    for x, y in loader:
        opt.zero_grad(set_to_none=True)
        accelerator.backward(F.cross_entropy(model(x), y))
        opt.step()
        steps += 1
    write_report(a.report, accelerator.unwrap_model(model), state, steps)


if __name__ == "__main__":
    main()
    gb.end_process_group()   # the model gone: the group's threads end before Python does
