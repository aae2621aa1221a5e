"""The best measured recipe (docs/training.md, "Which settings give which figure"): the
defaults of `gradblock train` / `validate` / the demo and of gradblock.ddp's state.

Coarse k = 1 with momentum correction (DGC's local momentum m = 0.9 with factor masking, the
optimiser without momentum), the L2 block norm, and a quantiser range that follows the
momentum: the corrected velocity is about 1/(1 - m) = 10x the gradient, so R = 100 with
correction and 10 without. Each default applies only where the user set nothing: an explicit
global `--momentum M > 0` (or a torch peer method) turns correction off, `--exchange allreduce`
(global selection sums L1 norms) takes L1.
"""
from __future__ import annotations

LOCAL_MOMENTUM = 0.9
PLAIN_MOMENTUM = 0.9            # the optimiser's momentum when correction is off


def recipe_range(local_momentum: float) -> float:
    return 100.0 if local_momentum > 0 else 10.0


def recipe_norm(exchange: str) -> str:
    return "l1" if exchange == "allreduce" else "l2"


def resolve(local_momentum: float | None, momentum: float | None, range_: float | None,
            norm: str | None, exchange: str = "allgather", peer: bool = False
            ) -> tuple[float, float, float, str]:
    """(local momentum, global momentum, range, norm) with every None given the recipe's value."""
    if local_momentum is None:
        local_momentum = 0.0 if (momentum or peer) else LOCAL_MOMENTUM
    if momentum is None:
        momentum = 0.0 if local_momentum > 0 else PLAIN_MOMENTUM
    if range_ is None:
        range_ = recipe_range(local_momentum)
    if norm is None:
        norm = recipe_norm(exchange)
    return local_momentum, momentum, range_, norm
