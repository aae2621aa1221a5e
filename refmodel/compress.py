"""One layer's compress step, every intermediate kept: the numpy reference (docs/spec.md §4)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradblock.codec.zrle import DEFAULT_LMAX_LOG2, encode_frame

from .quantiser import DEFAULT_RANGE, QuantConfig, quantise
from .plan import step_plan
from .selection import BlockLayout, apply_selection, block_norms, error_feedback, select_blocks
from .validation import check_step, first_nan


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
                   lmax_log2: int = DEFAULT_LMAX_LOG2, where: str = "",
                   norm: str = "l1") -> LayerStep:
    """quantise -> error feedback -> block norms (L1 or L2, §2.3) -> top-k -> mask -> ZRLE frame.
    Arguments are checked by refmodel.validation (its order: a NaN is reported before a bad
    block size, k, lmax, layer id or size), as every backend does. A float16 / bfloat16
    gradient is widened exactly to float32 by that validator (§1.2): the step of the widened
    array, bit for bit."""
    grad = np.asarray(grad)
    if residual is None:
        residual = np.zeros(grad.shape, dtype=np.int32)
    cfg, grad, residual, plan = check_step(
        grad, residual, R, nan_error=lambda g: first_nan(g, where),
        late_checks=lambda: step_plan(grad.shape, k, block_size, layer_id, lmax_log2, norm))
    layout, k_eff = plan.layout, plan.k_eff
    qr = quantise(grad, cfg, where=where)
    acc, sat_fb = error_feedback(residual, qr.q)
    norms = block_norms(acc, layout, plan.norm)
    selected = select_blocks(norms, k_eff)
    payload, residual_out = apply_selection(acc, selected, layout)
    frame = encode_frame(payload, plan.layer_id, cfg.range, plan.lmax_log2)
    return LayerStep(layout, k_eff, qr.q, acc, norms, selected, payload, residual_out, frame,
                     qr.saturated, sat_fb)
