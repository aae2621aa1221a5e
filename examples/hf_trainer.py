"""gradblock with Hugging Face's Trainer (optional: pip install "gradblock[hf]"; docs/ddp.md):

    torchrun --nproc-per-node 2 examples/hf_trainer.py --steps 20

Trainer wraps the model in DDP inside `train()` (through Accelerate) and gives its callbacks
the unwrapped model, so the callback below keeps a handle on the trainer and registers the hook
at train begin on `trainer.model_wrapped`, the DDP module. The optimiser is plain SGD
(`optim="sgd"`, no momentum): the recipe's momentum correction is in the hook."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import Trainer, TrainerCallback, TrainingArguments

from gradblock import ddp as gb

from _report import write_report


class GradblockHFCallback(TrainerCallback):
    """Registers gradblock's hook on the trainer's DDP model when training begins."""

    def __init__(self, trainer: Trainer, state: gb.GradblockState | None = None):
        self.trainer = trainer
        self.state = state if state is not None else gb.GradblockState()

    def on_train_begin(self, args, state, control, **kwargs):
        model = self.trainer.model_wrapped
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model.register_comm_hook(self.state, gb.gradblock_hook)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                 nn.Linear(8 * 13 * 13, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


class Data(torch.utils.data.Dataset):
    def __init__(self, n: int):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 1, 28, 28, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--report", default=None, help="directory for the per-rank check (tests)")
    p.add_argument("--out", default="hf_trainer_out", help="Trainer's output_dir")
    a = p.parse_args()
    torch.manual_seed(0)
    model = Net()
    args = TrainingArguments(output_dir=a.out, max_steps=a.steps, per_device_train_batch_size=16,
                             learning_rate=0.05, optim="sgd", report_to=[], save_strategy="no",
                             logging_strategy="no", use_cpu=not torch.cuda.is_available(),
                             ddp_backend=None if torch.cuda.is_available() else "gloo",
                             ddp_find_unused_parameters=False, dataloader_num_workers=0,
                             disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Data(64 * a.steps))
    callback = GradblockHFCallback(trainer)
    trainer.add_callback(callback)
    trainer.train()
    write_report(a.report, model, callback.state, trainer.state.global_step)


if __name__ == "__main__":
    main()
    gb.end_process_group()   # the model gone: the group's threads end before Python does
