"""A validated compress step's parameters: block layout, k_eff, layer id, lmax (spec §2–§3).

`step_plan` runs the parameter checks of refmodel.validation that follow the NaN position,
in the contract's order (block size, k, lmax_log2, layer id, layer size), and is cached:
a training loop asks for the same plans every step, and validating costs more than a
small layer's kernels. Failures are not cached, so an error is raised every time.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from gradblock.codec.zrle import DEFAULT_LMAX_LOG2, HEADER_WORDS, TRAILER_WORDS, max_frame_words

from .selection import BlockLayout, block_layout, norm_shift, resolve_k
from .validation import ParameterError, check_layer_id, check_layer_size, check_lmax_log2, check_norm


@dataclass(frozen=True)
class StepPlan:
    """Everything a compress kernel needs besides the arrays."""
    layout: BlockLayout
    k_eff: int
    layer_id: int
    lmax_log2: int
    norm: str = "l1"             # block norm kind, docs/spec.md §2.3
    norm_shift: int = -1         # -1: L1; else the L2 norm's shift s (refmodel.selection.norm_shift)


def _make_plan(shape: tuple, k, block_size, layer_id, lmax_log2, norm="l1") -> StepPlan:
    layout = block_layout(shape, block_size)         # BlockSizeError
    k_eff = resolve_k(k, layout.n_blocks)            # KError
    lmax_log2 = check_lmax_log2(lmax_log2)           # LmaxError
    layer_id = check_layer_id(layer_id)              # LayerIdError
    check_layer_size(layout.n)                       # SizeLimitError
    norm = check_norm(norm)                          # NormError
    return StepPlan(layout, k_eff, layer_id, lmax_log2, norm, norm_shift(norm, layout.block_size))


# typed: True and 1, or 2 and 2.0, are different arguments (a bool k must still be refused)
_cached_plan = functools.lru_cache(maxsize=4096, typed=True)(_make_plan)


def step_plan(shape, k=1, block_size=None, layer_id=0, lmax_log2=DEFAULT_LMAX_LOG2,
              norm="l1") -> StepPlan:
    """The validated plan of one layer's step (cached on hashable arguments)."""
    shape = tuple(int(d) for d in shape)
    try:
        return _cached_plan(shape, k, block_size, layer_id, lmax_log2, norm)
    except TypeError as unhashable:                  # e.g. a numpy array as k: check uncached
        if "unhashable" not in str(unhashable):
            raise
        return _make_plan(shape, k, block_size, layer_id, lmax_log2, norm)


def max_step_words(n: int, block_size: int, k_eff: int) -> int:
    """Most words a step's frame can take when k_eff blocks of block_size are selected:
    at most s = min(n, k_eff*B) literals, at most s tokens carrying them plus one zero token."""
    sel = min(n, k_eff * block_size)
    return min(max_frame_words(n), HEADER_WORDS + 3 * sel + 2 + TRAILER_WORDS)


# Guarded pass 1 (fastpath.step_kernels.pass1_guarded) works in units of at most this many
# elements and logs each unit whose feedback saturated as two int64 entries.
UNDO_UNIT = 4096


def undo_log_size(n: int, n_blocks: int, block_size: int) -> int:
    """Log entries pass1_guarded may fill over n elements (starting on a block boundary) in
    n_blocks blocks of block_size: two per unit. A unit is a run of UNDO_UNIT // block_size
    whole blocks, or for larger blocks one of m = ceil(block_size / UNDO_UNIT) equal slices
    of ceil(block_size / m) elements (a short last block: as many as it needs)."""
    if block_size <= UNDO_UNIT:
        return 2 * (-(-n_blocks // (UNDO_UNIT // block_size)))
    m = -(-block_size // UNDO_UNIT)
    step = -(-block_size // m)
    return 2 * ((n // block_size) * m + -(-(n % block_size) // step))


def _frozen(values, dtype=np.int64) -> np.ndarray:
    a = np.array(values, dtype=dtype)
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class MessagePlan:
    """The layout of a whole message: every layer's plan, and the same as flat arrays for
    the one-call kernel. Layer i holds elements [elem_offsets[i], elem_offsets[i + 1]) of
    the flat gradient; its frame may take word_offsets[i + 1] - word_offsets[i] words."""
    shapes: tuple
    layers: tuple                # StepPlan per layer
    elem_offsets: np.ndarray     # int64, count + 1
    word_offsets: np.ndarray     # int64, count + 1 (max_step_words, cumulative)
    block_size: np.ndarray       # int64 per layer
    n_blocks: np.ndarray
    k_eff: np.ndarray
    layer_id: np.ndarray
    lmax_log2: np.ndarray
    norm_shift: np.ndarray       # int64 per layer: -1 (L1) or the L2 shift (docs/spec.md §2.3)
    undo_log_size: int           # entries of the guarded pass 1's undo log for the message

    @property
    def count(self) -> int:
        return len(self.layers)

    @property
    def n(self) -> int:
        """Elements in the message (all layers)."""
        return int(self.elem_offsets[-1])

    @property
    def max_words(self) -> int:
        """Words the message can take at most (size the output buffer with this)."""
        return int(self.word_offsets[-1])


def _per_layer(value, count: int, name: str) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ParameterError(f"{name} has {len(value)} entries for {count} layers")
        return list(value)
    return [value] * count


def _make_message_plan(shapes, k, block_size, layer_ids, lmax_log2, norm="l1") -> MessagePlan:
    count = len(shapes)
    ks = _per_layer(k, count, "k")
    bss = _per_layer(block_size, count, "block_size")
    ids = list(range(count)) if layer_ids is None else _per_layer(layer_ids, count, "layer_ids")
    plans = tuple(step_plan(s, ks[i], bss[i], ids[i], lmax_log2, norm)
                  for i, s in enumerate(shapes))
    check_norm(norm)                                 # an empty message checks it too
    sizes = [p.layout.n for p in plans]
    words = [max_step_words(p.layout.n, p.layout.block_size, p.k_eff) for p in plans]
    return MessagePlan(
        shapes=tuple(shapes), layers=plans,
        elem_offsets=_frozen(np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])),
        word_offsets=_frozen(np.concatenate([[0], np.cumsum(words, dtype=np.int64)])),
        block_size=_frozen([p.layout.block_size for p in plans]),
        n_blocks=_frozen([p.layout.n_blocks for p in plans]),
        k_eff=_frozen([p.k_eff for p in plans]),
        layer_id=_frozen([p.layer_id for p in plans]),
        lmax_log2=_frozen([p.lmax_log2 for p in plans]),
        norm_shift=_frozen([p.norm_shift for p in plans]),
        undo_log_size=sum(undo_log_size(p.layout.n, p.layout.n_blocks, p.layout.block_size)
                          for p in plans))


_cached_message_plan = functools.lru_cache(maxsize=64, typed=True)(_make_message_plan)


def message_plan(shapes, k=1, block_size=None, layer_ids=None,
                 lmax_log2=DEFAULT_LMAX_LOG2, norm="l1") -> MessagePlan:
    """The validated, cached plan of a message of layers with these shapes (in order).
    `k`, `block_size` and `layer_ids` may be one value or one entry per layer; layer ids
    default to 0, 1, 2, ..."""
    shapes = tuple(tuple(int(d) for d in s) for s in shapes)
    args = tuple(tuple(a) if isinstance(a, list) else a for a in (k, block_size, layer_ids))
    try:
        return _cached_message_plan(shapes, *args, lmax_log2, norm)
    except TypeError as unhashable:
        if "unhashable" not in str(unhashable):
            raise
        return _make_message_plan(shapes, k, block_size, layer_ids, lmax_log2, norm)
