"""One layer's compress step, every intermediate kept: the numpy reference (docs/spec.md §4)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradblock.codec.zrle import DEFAULT_LMAX_LOG2, encode_frame

from .quantiser import DEFAULT_RANGE, QuantConfig, quantise
from .selection import (BlockLayout, apply_selection, block_layout, block_norms, error_feedback,
                        resolve_k, select_blocks)


@dataclass
class LayerStep:
    layout: BlockLayout
    k_eff: int
    q: np.ndarray            # int32 quantised gradient
    acc: np.ndarray          # int32 residual + q, saturated
    norms: np.ndarray        # uint64 per block
    selected: np.ndarray     # int64 block indices, rank order
    payload: np.ndarray      # int32, nonzero only on selected blocks
    residual_out: np.ndarray # int32
    frame: np.ndarray        # uint32 words
    sat_quant: int           # |g| > R (incl. ±Inf)
    sat_feedback: int        # |r + q| > QMAX


def compress_layer(grad: np.ndarray, residual: np.ndarray | None = None, *,
                   R: float | QuantConfig = DEFAULT_RANGE, k: int | float = 1,
                   block_size: int | None = None, layer_id: int = 0,
                   lmax_log2: int = DEFAULT_LMAX_LOG2, where: str = "") -> LayerStep:
    """quantise -> error feedback -> block norms -> top-k -> mask -> ZRLE frame."""
    cfg = R if isinstance(R, QuantConfig) else QuantConfig.from_range(R)
    grad = np.asarray(grad)
    if residual is None:
        residual = np.zeros(grad.shape, dtype=np.int32)
    if residual.dtype != np.int32:
        raise TypeError(f"residual must be int32, got {residual.dtype}")
    qr = quantise(grad, cfg, where=where)
    acc, sat_fb = error_feedback(residual, qr.q)
    layout = block_layout(grad.shape, block_size)
    norms = block_norms(acc, layout)
    k_eff = resolve_k(k, layout.n_blocks)
    selected = select_blocks(norms, k_eff)
    payload, residual_out = apply_selection(acc, selected, layout)
    frame = encode_frame(payload, layer_id, cfg.range, lmax_log2)
    return LayerStep(layout, k_eff, qr.q, acc, norms, selected, payload, residual_out, frame,
                     qr.saturated, sat_fb)
