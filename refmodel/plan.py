"""A validated compress step's parameters: block layout, k_eff, layer id, lmax (spec §2–§3).

`step_plan` runs the parameter checks of refmodel.validation that follow the NaN position,
in the contract's order (block size, k, lmax_log2, layer id, layer size), and is cached:
a training loop asks for the same plans every step, and validating costs more than a
small layer's kernels. Failures are not cached, so an error is raised every time.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from gradblock.codec.zrle import DEFAULT_LMAX_LOG2

from .selection import BlockLayout, block_layout, resolve_k
from .validation import check_layer_id, check_layer_size, check_lmax_log2


@dataclass(frozen=True)
class StepPlan:
    """Everything a compress kernel needs besides the arrays."""
    layout: BlockLayout
    k_eff: int
    layer_id: int
    lmax_log2: int


def _make_plan(shape: tuple, k, block_size, layer_id, lmax_log2) -> StepPlan:
    layout = block_layout(shape, block_size)         # BlockSizeError
    k_eff = resolve_k(k, layout.n_blocks)            # KError
    lmax_log2 = check_lmax_log2(lmax_log2)           # LmaxError
    layer_id = check_layer_id(layer_id)              # LayerIdError
    check_layer_size(layout.n)                       # SizeLimitError
    return StepPlan(layout, k_eff, layer_id, lmax_log2)


# typed: True and 1, or 2 and 2.0, are different arguments (a bool k must still be refused)
_cached_plan = functools.lru_cache(maxsize=4096, typed=True)(_make_plan)


def step_plan(shape, k=1, block_size=None, layer_id=0, lmax_log2=DEFAULT_LMAX_LOG2) -> StepPlan:
    """The validated plan of one layer's step (cached on hashable arguments)."""
    shape = tuple(int(d) for d in shape)
    try:
        return _cached_plan(shape, k, block_size, layer_id, lmax_log2)
    except TypeError as unhashable:                  # e.g. a numpy array as k: check uncached
        if "unhashable" not in str(unhashable):
            raise
        return _make_plan(shape, k, block_size, layer_id, lmax_log2)
