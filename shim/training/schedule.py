"""What a worker does to its gradient before compression, and the learning rate of a step.

Deep Gradient Compression's training recipe beside momentum correction (Lin et al., ICLR 2018):

* **Weight decay on the worker** (`--weight-decay WD`): each worker adds `WD * w` to its own
  gradient before compression, so the decay travels through the compressor (and its error
  feedback) with the gradient, as DGC does, instead of being applied by the optimiser after the
  exchange.
* **Local gradient clipping** (`--clip-norm C`): each worker scales each layer's gradient to an
  L2 norm of at most `C / sqrt(N)` before momentum correction / error feedback. DGC clips on the
  worker because the residual accumulates the gradients of many steps, and scales the global
  threshold by N^-1/2 (each worker's share if all N gradients were alike). The paper clips by
  the norm over all layers; here each layer is clipped by its own norm, because under DDP the
  communication hook sees a bucket at a time during backward, and the simulation must give
  the same bits.

Both run in a tensor hook on each parameter (`register_worker_grad_hooks`): autograd calls it
with the parameter's gradient before it is accumulated into `.grad`, so before DDP's reducer
or the simulated cluster hands the gradient to any compressor (every compressor, dense and
the peers included, sees the processed gradient). Per layer, in this order, each a single
float32 rounding unless said otherwise:

    1. weight decay (WD > 0):  d = float32(wd32 * w);  g = float32(g + d)
       wd32 = float32(WD) rounded once; w the parameter before this step's update.
    2. clipping (C > 0):       s = sum over the layer of float64(g)^2   (torch's float64 sum;
                                   the squares are exact, the summation order is torch's)
                               norm = sqrt(s) (float64);  t = C / sqrt(N) (float64)
                               if norm > t:  g = float32(g * float32(t / norm))

The learning rate (`lr_at`) is a function of the global step alone, so a resumed run uses
the same rates; Python float64 arithmetic, rounded to float32 once by the optimiser (spec §5):

    constant: lr
    step:     lr * gamma ** m,  m = number of milestones E with step >= round(E * S)
    cosine:   lr * (1 + cos(pi * min(step, T - 1) / T)) / 2,  T = max(1, round(H * S))
    then the linear warm-up (--lr-warmup-epochs W, R = round(W * S) steps):
              for step < R: that value * (step + 1) / R

S is the steps per epoch and H the cosine horizon in epochs (`--lr-schedule-epochs`, by
default the `--epochs` of the run that starts it; the checkpoint's settings keep it, so a
resume with more epochs continues the same curve, and the last rate is held after T steps).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..setup.config import TrainConfig


def clip_threshold(clip_norm: float, n_workers: int) -> float:
    """DGC's local threshold: the global one scaled by N^-1/2 (float64)."""
    return float(clip_norm) / math.sqrt(int(n_workers))


def worker_grad(g: torch.Tensor, w: torch.Tensor, weight_decay: float, threshold: float
                ) -> torch.Tensor:
    """One layer's gradient after weight decay and clipping (module docstring, steps 1-2).
    `weight_decay` 0 and `threshold` 0 (or inf) leave the step out."""
    if weight_decay:
        wd32 = float(np.float32(weight_decay))          # exact as a float32 scalar
        d = w.detach() * wd32                           # float32(wd32 * w)
        g = g + d                                       # float32(g + d)
    if threshold and math.isfinite(threshold):
        norm = math.sqrt(float(torch.sum(g.detach().to(torch.float64) ** 2)))
        if norm > threshold:
            scale = float(np.float32(threshold / norm))
            g = g * scale                               # float32(g * scale)
    return g


def register_worker_grad_hooks(params: Sequence[torch.nn.Parameter], cfg: TrainConfig,
                               n_workers: int) -> list:
    """A tensor hook on each parameter applying `worker_grad`; nothing when both are off.
    Returns the hook handles (`.remove()` them to undo)."""
    if not cfg.weight_decay and not cfg.clip_norm:
        return []
    threshold = clip_threshold(cfg.clip_norm, n_workers) if cfg.clip_norm else 0.0
    handles = []
    for p in params:
        def hook(g, p=p):
            return worker_grad(g, p, cfg.weight_decay, threshold)
        handles.append(p.register_hook(hook))
    return handles


def lr_at(cfg: TrainConfig, steps_per_epoch: int, step: int) -> float:
    """The learning rate of global step `step` (0-based); see the module docstring."""
    lr = cfg.lr
    if cfg.lr_schedule == "step":
        passed = sum(1 for e in cfg.lr_milestones if step >= round(e * steps_per_epoch))
        lr = cfg.lr * cfg.lr_gamma ** passed
    elif cfg.lr_schedule == "cosine":
        horizon = cfg.lr_schedule_epochs if cfg.lr_schedule_epochs is not None else cfg.epochs
        T = max(1, round(horizon * steps_per_epoch))
        lr = cfg.lr * (1.0 + math.cos(math.pi * min(step, T - 1) / T)) / 2
    ramp = round(cfg.lr_warmup_epochs * steps_per_epoch)
    if ramp <= 0 or step >= ramp:
        return lr
    return lr * (step + 1) / ramp


def resolve_horizon(cfg: TrainConfig, checkpoint_file: Path | None) -> None:
    """Fix the cosine horizon before the run's settings are compared with a checkpoint: the
    checkpoint's own (it started the curve), else this run's --epochs."""
    if cfg.lr_schedule != "cosine" or cfg.lr_schedule_epochs is not None:
        return
    if checkpoint_file is not None:
        from ..errors import CheckpointError
        from ..exchange.state import load_checkpoint
        try:
            saved = load_checkpoint(checkpoint_file).get("run_config")
        except CheckpointError:
            saved = None                 # refused with its message by the real load
        if isinstance(saved, dict) and isinstance(saved.get("lr_schedule_epochs"), (int, float)):
            cfg.lr_schedule_epochs = float(saved["lr_schedule_epochs"])
            return
    cfg.lr_schedule_epochs = float(cfg.epochs)
