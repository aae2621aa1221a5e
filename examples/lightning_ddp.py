"""gradblock under Lightning (optional extra: pip install "gradblock[lightning]"; docs/ddp.md):

    torchrun --nproc-per-node 2 examples/lightning_ddp.py --steps 20

GradblockCallback registers the hook at fit start on the DDP model Lightning built, on the CPU
too (Lightning's own `DDPStrategy(ddp_comm_hook=...)` is used on CUDA only). The optimiser
runs without momentum: the recipe's momentum correction is in the hook."""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import lightning.pytorch as pl
from lightning.pytorch.strategies import DDPStrategy

from gradblock import ddp as gb
from gradblock.lightning import GradblockCallback

from _report import write_report


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                 nn.Linear(8 * 13 * 13, 64), nn.ReLU(), nn.Linear(64, 10))

    def training_step(self, batch, _):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--report", default=None, help="directory for the per-rank check (tests)")
    a = p.parse_args()
    torch.manual_seed(0)
    model = Net()
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(64 * a.steps, 1, 28, 28, generator=g),
                         torch.randint(0, 10, (64 * a.steps,), generator=g))
    cuda = torch.cuda.is_available()
    callback = GradblockCallback()         # the recipe's settings; or GradblockCallback(k=2, ...)
    trainer = pl.Trainer(
        accelerator="gpu" if cuda else "cpu", devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        num_nodes=int(os.environ.get("WORLD_SIZE", "1")) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        strategy=DDPStrategy(process_group_backend="nccl" if cuda else "gloo"),
        max_steps=a.steps, callbacks=[callback], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=16))
    write_report(a.report, model, callback.state, trainer.global_step)


if __name__ == "__main__":
    main()
    gb.end_process_group()   # the model gone: the group's threads end before Python does
