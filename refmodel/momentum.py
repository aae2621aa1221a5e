"""Momentum correction with factor masking: the numpy reference (docs/spec.md §7).

Deep Gradient Compression's local momentum, in the quantised domain: each worker keeps an
int32 velocity u per layer, u <- sat(mul(m, u) + Q(g)), and feeds u (not Q(g)) into the
error feedback of §2. The blocks that were sent have their velocity zeroed (factor masking),
as the residual already is; a layer sent whole keeps its velocity (ordinary momentum).

`m` is an unsigned Q0.16 fixed-point multiplier, so every step is integer arithmetic and
the numba, torch and RTL implementations agree with this one bit for bit.

API for the callers (training shim, golden vectors, CLI):

    cfg = MomentumConfig.from_float(0.9)                 # or MomentumConfig(m_fix)
    st = momentum_layer(g, r, u, cfg, R=10.0, k=1)       # -> MomentumStep
    r, u = st.residual_out, st.velocity_out              # keep for the next step; send st.frame
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from gradblock.codec.zrle import DEFAULT_LMAX_LOG2, encode_frame

from .quantiser import DEFAULT_RANGE, QMAX, QuantConfig, quantise
from .selection import (BlockLayout, apply_selection, block_layout, block_norms, error_feedback,
                        resolve_k, select_blocks)
from .validation import ParameterError, ShapeError, check_norm

M_FRAC_BITS = 16                    # m = m_fix / 2**16
M_FIX_MAX = 2**M_FRAC_BITS - 1      # m < 1: a velocity that never decays is refused
ROUND_BIAS = 1 << (M_FRAC_BITS - 1)

__all__ = ["M_FRAC_BITS", "M_FIX_MAX", "MomentumError", "MomentumConflictError",
           "MomentumConfig", "MomentumStep", "check_momentum_pair", "check_velocity",
           "check_inputs", "plan_layer", "scale_velocity", "velocity_update", "mask_velocity",
           "momentum_layer"]


class MomentumError(ParameterError):
    """The local momentum factor m is not a number in [0, 1) (after rounding to Q0.16)."""


class MomentumConflictError(ParameterError):
    """Local momentum (correction) and global momentum were both asked for: the velocity
    would be applied twice."""


@dataclass(frozen=True)
class MomentumConfig:
    """Local momentum factor as the hardware receives it: m = m_fix / 2**16, 0 <= m_fix < 2**16."""

    m_fix: int

    def __post_init__(self):
        m = self.m_fix
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or not 0 <= m <= M_FIX_MAX:
            raise MomentumError(f"m_fix must be an integer in [0, {M_FIX_MAX}], got {m!r}")
        object.__setattr__(self, "m_fix", int(m))

    @classmethod
    def from_float(cls, m) -> "MomentumConfig":
        """m_fix = round-half-even(float64(m) * 2**16); the product is exact (a power of two)."""
        if isinstance(m, MomentumConfig):
            return m
        if isinstance(m, bool) or not isinstance(m, numbers.Real):
            raise MomentumError(f"momentum m must be a real number in [0, 1), got {m!r}")
        f = float(m)
        if not (0.0 <= f < 1.0):          # NaN fails this too
            raise MomentumError(f"momentum m must be in [0, 1), got {m!r}")
        m_fix = round(f * 2.0**M_FRAC_BITS)     # Python's round is half-to-even
        if m_fix > M_FIX_MAX:
            raise MomentumError(f"momentum m = {m!r} rounds to 1.0 in Q0.16 (m_fix = {m_fix}); "
                                f"the largest is {M_FIX_MAX / 2**M_FRAC_BITS!r}")
        return cls(m_fix)

    @property
    def value(self) -> float:
        """The multiplier actually applied, m_fix / 2**16 (exact as a float64)."""
        return self.m_fix / 2.0**M_FRAC_BITS


def check_momentum_pair(local_m, global_m) -> None:
    """Local momentum (correction) and global momentum exclude each other: refuse both > 0."""
    if float(local_m or 0.0) > 0.0 and float(global_m or 0.0) > 0.0:
        raise MomentumConflictError(
            f"local momentum {local_m} and global momentum {global_m} together would apply the "
            "velocity twice: set one of them to 0 (with momentum correction use --momentum 0)")


def check_velocity(velocity, grad_shape: tuple, name: str = "velocity") -> np.ndarray:
    """An int32 numpy array of the gradient's shape (TypeError, then ShapeError)."""
    if not isinstance(velocity, np.ndarray) or velocity.dtype != np.int32:
        got = getattr(velocity, "dtype", type(velocity).__name__)
        raise TypeError(f"{name} must be a numpy int32 array, got {got}")
    if tuple(velocity.shape) != tuple(grad_shape):
        raise ShapeError(f"{name} shape {tuple(velocity.shape)} != gradient shape "
                         f"{tuple(grad_shape)}")
    return velocity


def scale_velocity(u: np.ndarray, m_fix: int) -> np.ndarray:
    """mul(m, u) = sign(u) * ((|u| * m_fix + 2**15) >> 16): round half away from zero, exact
    in int64 (|u| <= 2**31, m_fix < 2**16). |mul(m, u)| <= |u|, and < 2**31 even for u = -2**31."""
    u64 = u.astype(np.int64)
    mag = (np.abs(u64) * np.int64(m_fix) + np.int64(ROUND_BIAS)) >> np.int64(M_FRAC_BITS)
    return np.where(u64 < 0, -mag, mag)


def velocity_update(u: np.ndarray, q: np.ndarray, m_fix: int) -> tuple[np.ndarray, int]:
    """u' = clamp(mul(m, u) + q, -QMAX, QMAX) in int64 -> (u' as int32, saturation count)."""
    if u.shape != q.shape:
        raise ShapeError(f"velocity shape {u.shape} != gradient shape {q.shape}")
    v = scale_velocity(u, m_fix) + q.astype(np.int64)
    saturated = int(np.count_nonzero(np.abs(v) > QMAX))
    return np.clip(v, -QMAX, QMAX).astype(np.int32), saturated


def mask_velocity(u: np.ndarray, selected: np.ndarray, layout: BlockLayout, k_eff: int,
                  mask: bool = True) -> np.ndarray:
    """Factor masking: 0 on the selected blocks, unless masking is off or the whole layer was
    sent (k_eff = n_blocks), where the velocity is kept as ordinary momentum."""
    if not mask or k_eff >= layout.n_blocks:
        return u.copy()
    _, kept = apply_selection(u, selected, layout)     # kept = u off the selected blocks, else 0
    return kept


def check_inputs(grad, residual, velocity, momentum):
    """The checks before the NaN scan, in order: m (MomentumError), velocity dtype (TypeError)
    and shape (ShapeError), residual dtype (TypeError). None means zeros (the first step).
    Returns (MomentumConfig, residual, velocity)."""
    mcfg = MomentumConfig.from_float(momentum)
    shape = tuple(np.shape(grad))
    if velocity is None:
        velocity = np.zeros(shape, dtype=np.int32)
    check_velocity(velocity, shape)
    if residual is None:
        residual = np.zeros(shape, dtype=np.int32)
    if not isinstance(residual, np.ndarray) or residual.dtype != np.int32:
        raise TypeError(f"residual must be int32, got "
                        f"{getattr(residual, 'dtype', type(residual).__name__)}")
    return mcfg, residual, velocity


def plan_layer(grad_shape, residual_shape, block_size, k, norm="l1") -> tuple[BlockLayout, int]:
    """The checks after the NaN scan, in order: residual shape (ShapeError), block size, k
    (the ValueErrors of block_layout and resolve_k), norm kind (NormError). Returns
    (layout, k_eff)."""
    if tuple(residual_shape) != tuple(grad_shape):
        raise ShapeError(f"residual shape {tuple(residual_shape)} != gradient shape "
                         f"{tuple(grad_shape)}")
    layout = block_layout(tuple(grad_shape), block_size)
    k_eff = resolve_k(k, layout.n_blocks)
    check_norm(norm)
    return layout, k_eff


@dataclass
class MomentumStep:
    layout: BlockLayout
    k_eff: int
    q: np.ndarray             # int32 Q(g)
    velocity: np.ndarray      # int32 u' = sat(mul(m, u) + Q(g)), before masking
    acc: np.ndarray           # int32 sat(r + u')
    norms: np.ndarray         # uint64 per block
    selected: np.ndarray      # int64 block indices, rank order
    payload: np.ndarray       # int32, nonzero only on selected blocks
    residual_out: np.ndarray  # int32
    velocity_out: np.ndarray  # int32 u' masked on the selected blocks (the next step's u)
    frame: np.ndarray         # uint32 words
    sat_quant: int            # |g| > R (incl. ±Inf)
    sat_momentum: int         # |mul(m, u) + Q(g)| > QMAX
    sat_feedback: int         # |r + u'| > QMAX
    masked: bool              # whether factor masking zeroed the selected blocks' velocity


def momentum_layer(grad: np.ndarray, residual: np.ndarray | None, velocity: np.ndarray | None,
                   momentum: MomentumConfig | float, *, R: float | QuantConfig = DEFAULT_RANGE,
                   k: int | float = 1, block_size: int | None = None, layer_id: int = 0,
                   lmax_log2: int = DEFAULT_LMAX_LOG2, mask: bool = True,
                   where: str = "", norm: str = "l1") -> MomentumStep:
    """quantise -> velocity -> error feedback -> block norms -> top-k -> payload, residual and
    masked velocity -> ZRLE frame. `residual`/`velocity` None mean zeros (the first step).

    Checks, in order: `check_inputs`, range R, gradient dtype, NaN, `plan_layer`, then the
    frame's lmax_log2 and layer id. The inputs are not modified."""
    mcfg, residual, velocity = check_inputs(grad, residual, velocity, momentum)
    cfg = R if isinstance(R, QuantConfig) else QuantConfig.from_range(R)
    grad = np.asarray(grad)
    qr = quantise(grad, cfg, where=where)
    layout, k_eff = plan_layer(grad.shape, residual.shape, block_size, k, norm)
    u_new, sat_m = velocity_update(velocity, qr.q, mcfg.m_fix)
    acc, sat_fb = error_feedback(residual, u_new)
    norms = block_norms(acc, layout, norm)
    selected = select_blocks(norms, k_eff)
    payload, residual_out = apply_selection(acc, selected, layout)
    masked = bool(mask and k_eff < layout.n_blocks)
    velocity_out = mask_velocity(u_new, selected, layout, k_eff, mask)
    frame = encode_frame(payload, layer_id, cfg.range, lmax_log2)
    return MomentumStep(layout, k_eff, qr.q, u_new, acc, norms, selected, payload, residual_out,
                        velocity_out, frame, qr.saturated, sat_m, sat_fb, masked)
