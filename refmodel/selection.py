"""Error feedback and coarse block selection: the numpy reference (docs/spec.md §2)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .quantiser import QMAX
from .validation import ShapeError, check_block_size, check_k, check_norm


@dataclass(frozen=True)
class BlockLayout:
    n: int            # elements in the layer (flattened row-major)
    block_size: int   # B: elements per block; the last block may be shorter
    n_blocks: int     # ceil(n / B)

    def bounds(self, b: int) -> tuple[int, int]:
        start = b * self.block_size
        return start, min(start + self.block_size, self.n)


def block_layout(shape: tuple[int, ...], block_size: int | None = None) -> BlockLayout:
    """Shape (d0, d1, ...) -> d0 blocks of prod(d1, ...) elements (a conv filter C*K*K,
    an FC row); 1-D tensors and scalars -> blocks of one element. `block_size` overrides.
    Called once per layer per step, so it sticks to Python ints (math.prod)."""
    n = math.prod(shape)
    block_size = check_block_size(block_size)        # BlockSizeError outside 1..2**32-1
    if block_size is None:
        # a shape with a zero dimension is an empty layer; its block size is moot
        block_size = max(1, math.prod(shape[1:])) if len(shape) >= 2 else 1
    n_blocks = -(-n // block_size) if n else 0
    return BlockLayout(n, block_size, n_blocks)


def resolve_k(k: int | float, n_blocks: int) -> int:
    """Blocks to send: an integer k >= 1 -> min(k, n_blocks); a fraction 0 < f < 1 ->
    min(n_blocks, max(1, ceil(f * n_blocks))) with f * n_blocks one float64 product.
    k is checked by refmodel.validation.check_k (KError)."""
    k = check_k(k)
    if isinstance(k, int):
        return min(k, n_blocks)
    f = k
    if n_blocks == 0:
        return 0
    return min(n_blocks, max(1, math.ceil(f * float(n_blocks))))


def error_feedback(residual: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, int]:
    """a = clamp(r + q, -QMAX, QMAX) in int64; returns (a as int32, saturation count)."""
    if residual.shape != q.shape:
        raise ShapeError(f"residual shape {residual.shape} != gradient shape {q.shape}")
    s = residual.astype(np.int64) + q.astype(np.int64)
    saturated = int(np.count_nonzero(np.abs(s) > QMAX))
    return np.clip(s, -QMAX, QMAX).astype(np.int32), saturated


def norm_shift(norm: str, block_size: int) -> int:
    """The L2 norm's per-element right shift s = bit_length(B) >> 1 (docs/spec.md §2.3), so that
    a block's sum of (|a| >> s)**2 stays below 2**63; -1 stands for the L1 norm."""
    if check_norm(norm) == "l1":
        return -1
    return int(block_size).bit_length() >> 1


def block_norms(acc: np.ndarray, layout: BlockLayout, norm: str = "l1") -> np.ndarray:
    """Exact norm of every block, uint64 (docs/spec.md §2.3). L1: sum |a| (|a| <= QMAX, so no
    overflow below 2**33 elements). L2: sum (|a| >> s)**2 with s = norm_shift('l2', B):
    B < 2**L and (|a| >> s)**2 < 2**(62 - 2s) give a sum < 2**(62 + L - 2s) <= 2**63."""
    flat = np.abs(acc.reshape(-1).astype(np.int64)).astype(np.uint64)
    s = norm_shift(norm, layout.block_size)
    if s >= 0:
        flat >>= np.uint64(s)
        flat *= flat
    if layout.n_blocks == 0:
        return np.zeros(0, dtype=np.uint64)
    starts = np.arange(layout.n_blocks, dtype=np.int64) * layout.block_size
    return np.add.reduceat(flat, starts).astype(np.uint64)


def select_blocks(norms: np.ndarray, k_eff: int) -> np.ndarray:
    """Indices of the k_eff largest norms in rank order: norm descending, ties to the lower
    index first. Returned as int64 in that rank order."""
    if k_eff == 0:
        return np.zeros(0, dtype=np.int64)
    # norms < 2**63, so negating as int64 is exact; a stable sort keeps lower indices first.
    order = np.argsort(-norms.astype(np.int64), kind="stable")
    return order[:k_eff].astype(np.int64)


def apply_selection(acc: np.ndarray, selected: np.ndarray, layout: BlockLayout):
    """payload = a on selected blocks, 0 elsewhere; new residual = 0 there, a elsewhere."""
    flat = acc.reshape(-1)
    mask = np.zeros(layout.n, dtype=bool)
    for b in selected:
        s, e = layout.bounds(int(b))
        mask[s:e] = True
    payload = np.where(mask, flat, 0).astype(np.int32)
    residual = np.where(mask, 0, flat).astype(np.int32)
    return payload.reshape(acc.shape), residual.reshape(acc.shape)
