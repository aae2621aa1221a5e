"""Momentum correction with factor masking, numba path (docs/spec.md §7): bit-exact with
refmodel/momentum.py, same checks and errors in the same order.

Two passes over the layer after the quantiser: one computes the velocity u', the feedback sum
a and the block norms together; the other writes payload, residual and masked velocity once
the blocks are chosen. The kernels are plain functions of arrays, so a fused compress step
(fastpath/fast.py) can call `velocity_feedback_kernel` / `split_kernel` directly.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from gradblock.codec.zrle import DEFAULT_LMAX_LOG2
from gradblock.codec.zrle_numba import encode_frame
from gradblock.refmodel.momentum import (M_FRAC_BITS, ROUND_BIAS, MomentumConfig, MomentumStep,
                                         check_inputs, plan_layer)
from gradblock.refmodel.quantiser import DEFAULT_RANGE, QMAX, QuantConfig
from gradblock.refmodel.selection import norm_shift

from . import fast
from .step_kernels import norm_term

__all__ = ["velocity_feedback_kernel", "split_kernel", "momentum_layer"]


@nb.njit(nogil=True, cache=True)
def velocity_feedback_kernel(q, u, r, m_fix, B, u_out, acc_out, norms, nsh):
    """u' = clamp(mul(m, u) + q), a = clamp(r + u'), norms[j] = sum |a| over block j.
    All arrays flat; returns (sat_momentum, sat_feedback)."""
    sat_m = 0
    sat_fb = 0
    for j in range(norms.size):
        norms[j] = 0
    for i in range(q.size):
        ui = np.int64(u[i])
        mag = ((ui if ui >= 0 else -ui) * np.int64(m_fix) + ROUND_BIAS) >> M_FRAC_BITS
        v = (mag if ui >= 0 else -mag) + np.int64(q[i])
        if v > QMAX:
            v = QMAX
            sat_m += 1
        elif v < -QMAX:
            v = -QMAX
            sat_m += 1
        u_out[i] = v
        s = np.int64(r[i]) + v
        if s > QMAX:
            s = QMAX
            sat_fb += 1
        elif s < -QMAX:
            s = -QMAX
            sat_fb += 1
        acc_out[i] = s
        norms[i // B] += np.uint64(norm_term(s if s >= 0 else -s, nsh))
    return sat_m, sat_fb


@nb.njit(nogil=True, cache=True)
def split_kernel(acc, u_new, B, block_sent, do_mask, payload, r_out, v_out):
    """payload = a on sent blocks, r' = a elsewhere; u'' = 0 on sent blocks when do_mask."""
    for i in range(acc.size):
        if block_sent[i // B]:
            payload[i] = acc[i]
            r_out[i] = 0
            v_out[i] = 0 if do_mask else u_new[i]
        else:
            payload[i] = 0
            r_out[i] = acc[i]
            v_out[i] = u_new[i]


def momentum_layer(grad: np.ndarray, residual: np.ndarray | None, velocity: np.ndarray | None,
                   momentum: MomentumConfig | float, *, R: float | QuantConfig = DEFAULT_RANGE,
                   k: int | float = 1, block_size: int | None = None, layer_id: int = 0,
                   lmax_log2: int = DEFAULT_LMAX_LOG2, mask: bool = True,
                   where: str = "", norm: str = "l1") -> MomentumStep:
    """As refmodel.momentum.momentum_layer (same result, same errors)."""
    mcfg, residual, velocity = check_inputs(grad, residual, velocity, momentum)
    cfg = R if isinstance(R, QuantConfig) else QuantConfig.from_range(R)
    grad = np.asarray(grad)
    qr = fast.quantise(grad, cfg, where=where)
    layout, k_eff = plan_layer(grad.shape, residual.shape, block_size, k, norm)
    n, B = layout.n, layout.block_size
    q = qr.q.reshape(-1)
    u_new = np.empty(n, dtype=np.int32)
    acc = np.empty(n, dtype=np.int32)
    norms = np.empty(layout.n_blocks, dtype=np.uint64)
    sat_m, sat_fb = velocity_feedback_kernel(q, np.ascontiguousarray(velocity).reshape(-1),
                                             np.ascontiguousarray(residual).reshape(-1),
                                             mcfg.m_fix, B, u_new, acc, norms,
                                             norm_shift(norm, B))
    selected = fast.select_blocks(norms, k_eff)
    block_sent = np.zeros(layout.n_blocks, dtype=np.bool_)
    block_sent[selected] = True
    masked = bool(mask and k_eff < layout.n_blocks)
    payload, r_out, v_out = (np.empty(n, dtype=np.int32) for _ in range(3))
    split_kernel(acc, u_new, B, block_sent, masked, payload, r_out, v_out)
    frame = encode_frame(payload, layer_id, cfg.range, lmax_log2)
    shape = grad.shape
    return MomentumStep(layout, k_eff, qr.q, u_new.reshape(shape), acc.reshape(shape), norms,
                        selected, payload.reshape(shape), r_out.reshape(shape),
                        v_out.reshape(shape), frame, qr.saturated, int(sat_m), int(sat_fb), masked)
