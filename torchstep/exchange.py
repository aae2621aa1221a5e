"""§5 of docs/spec.md in torch: the exact sum of the workers' payloads (the mean is
torchstep.quantiser.average)."""
from __future__ import annotations

import torch

__all__ = ["sum_payloads"]


def sum_payloads(payloads: list[torch.Tensor]) -> torch.Tensor:
    """Exact int64 element-wise sum of int32 payloads (order-independent: N*QMAX < 2**63)."""
    if not payloads:
        raise ValueError("sum_payloads needs at least one payload")
    total = payloads[0].to(torch.int64)
    for p in payloads[1:]:
        if p.shape != total.shape:
            raise ValueError(f"payload shapes differ: {tuple(p.shape)} vs {tuple(total.shape)}")
        total = total + p.to(torch.int64)
    return total
