"""The one device barrier of the training shim: timings and host reads after it see finished
work, not queued kernels."""
from __future__ import annotations

import torch


def sync_device(where: torch.Tensor | torch.device) -> None:
    """Wait for the work queued on a tensor's device, or on a device (CUDA); nothing on the
    CPU, where every op has finished when it returns."""
    device = where.device if isinstance(where, torch.Tensor) else torch.device(where)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
