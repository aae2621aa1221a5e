"""Global-momentum SGD exactly as docs/spec.md §5.

    V = float32(m * V) ; V = float32(V + U) ; w = float32(w - float32(lr * V))

U is the averaged gradient every worker decoded (identical on all workers), so V and w stay
bit-identical across workers. Each line is its own tensor op (no `alpha=`, no addcmul), so
no fused multiply-add can merge two roundings. `lr` and `m` are rounded to float32 once, and
every product is float32 x float32 rounded to float32, the same as numpy float32 arithmetic.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import ConfigError
from ..params import check_values


def as_float32(value: float, what: str) -> float:
    v = np.float32(value)
    if not np.isfinite(v):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return float(v)


class GlobalMomentumSGD(torch.optim.Optimizer):
    """SGD with global momentum on the decoded average (spec §5); state 'momentum_buffer'."""

    def __init__(self, params, lr: float, momentum: float = 0.9):
        check_values({"lr": lr, "momentum": momentum})   # shim/params.py: ConfigError by name
        lr = as_float32(lr, "lr")                        # spec §5 computes in float32
        momentum = as_float32(momentum, "momentum")
        if momentum >= 1.0:                              # 0.99999999 rounds up to 1.0
            raise ConfigError(f"momentum must be in [0, 1) as a float32, got {momentum!r}")
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr_f = as_float32(group["lr"], "lr")
            m_f = as_float32(group["momentum"], "momentum")
            consts: dict = {}        # device -> (m, lr) as float32 0-d tensors, made once per group
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype != torch.float32 or p.grad.dtype != torch.float32:
                    raise TypeError(f"GlobalMomentumSGD works in float32, got parameter "
                                    f"{p.dtype} / gradient {p.grad.dtype}")
                state = self.state[p]
                V = state.get("momentum_buffer")
                if V is None:
                    V = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["momentum_buffer"] = V
                if V.device not in consts:
                    consts[V.device] = (torch.tensor(m_f, dtype=torch.float32, device=V.device),
                                        torch.tensor(lr_f, dtype=torch.float32, device=V.device))
                m, lr = consts[V.device]
                V.mul_(m)                               # V = float32(m * V)
                V.add_(p.grad)                          # V = float32(V + U)
                step = V * lr                           # float32(lr * V)
                p.sub_(step)                            # w = float32(w - step)
        return loss
