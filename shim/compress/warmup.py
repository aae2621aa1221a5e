"""Sparsity warm-up (Deep Gradient Compression's exponential schedule): how many blocks
(coarse) or elements (topk / dlgs) a layer sends at a given compressed step.

The count starts at `start_fraction` of the layer and decays geometrically to the target over
`steps` compressed steps, then stays at the target:

    start = max(target, ceil(start_fraction * total))
    count(s) = clamp(ceil(start * (target / start) ** (s / steps)), target, total)   for s < steps

A function of the step alone (the per-layer compressed-step counter that checkpoints keep), so
a resumed run sends exactly what an uninterrupted one sends. The extra bytes are counted like
any others (the frames simply carry more blocks).
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Warmup:
    steps: int = 0                 # 0: no warm-up
    start_fraction: float = 0.25

    def __post_init__(self):
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 0:
            raise ValueError(f"warm-up steps must be an integer >= 0, got {self.steps!r}")
        f = self.start_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not (0.0 < f <= 1.0):
            raise ValueError(f"warm-up start fraction must be in (0, 1], got {f!r}")

    @property
    def active(self) -> bool:
        return self.steps > 0

    def count(self, step: int, total: int, target: int) -> int:
        """Blocks / elements to send at compressed step `step` (0-based) of a layer with
        `total` of them whose steady-state count is `target`."""
        if not self.active or step >= self.steps or target >= total:
            return target
        start = max(target, math.ceil(self.start_fraction * total))
        c = math.ceil(start * (target / start) ** (step / self.steps))
        return min(total, max(target, c))
