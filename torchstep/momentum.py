"""Momentum correction with factor masking in torch (docs/spec.md §7), CPU or CUDA: bit-exact
with refmodel/momentum.py, the same errors first.

int64 arithmetic on the tensors' device; one device->host sync per step (the NaN and
saturation counts together), as torchstep/layer.py."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from gradblock.codec import zrle
from gradblock.codec.zrle_torch import encode_frame
from gradblock.refmodel.momentum import M_FRAC_BITS, ROUND_BIAS, MomentumConfig, plan_layer
from gradblock.refmodel.quantiser import DEFAULT_RANGE, QMAX, QuantConfig
from gradblock.refmodel.selection import BlockLayout
from gradblock.refmodel.validation import ShapeError

from .quantiser import NAN_BITS, check_float32, quant_config, quantise_lazy, raise_nan
from .selection import block_norms, error_feedback_lazy, select_blocks

__all__ = ["TorchMomentumStep", "scale_velocity", "velocity_update_lazy", "momentum_layer"]


@dataclass
class TorchMomentumStep:
    layout: BlockLayout
    k_eff: int
    selected: torch.Tensor      # int64 block indices, rank order
    payload: torch.Tensor       # int32, nonzero only on selected blocks
    residual_out: torch.Tensor  # int32
    velocity_out: torch.Tensor  # int32, masked on the selected blocks unless the layer went whole
    frame: torch.Tensor         # int32 words (uint32 bit patterns)
    sat_quant: int
    sat_momentum: int
    sat_feedback: int
    masked: bool


def scale_velocity(u: torch.Tensor, m_fix: int) -> torch.Tensor:
    """mul(m, u) = sign(u) * ((|u| * m_fix + 2**15) >> 16) in int64."""
    u64 = u.to(torch.int64)
    mag = (u64.abs() * m_fix + ROUND_BIAS) >> M_FRAC_BITS
    return torch.where(u64 < 0, -mag, mag)


def velocity_update_lazy(u: torch.Tensor, q: torch.Tensor, m_fix: int):
    """u' = clamp(mul(m, u) + q, -QMAX, QMAX) -> (u' int32, saturation count as a tensor)."""
    v = scale_velocity(u, m_fix) + q.to(torch.int64)
    return v.clamp(-QMAX, QMAX).to(torch.int32), (v.abs() > QMAX).sum()


def _check_int32(t, grad: torch.Tensor, name: str) -> torch.Tensor:
    if t is None:
        return torch.zeros(grad.shape, dtype=torch.int32, device=grad.device)
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32:
        raise TypeError(f"{name} must be int32, got {getattr(t, 'dtype', type(t).__name__)}")
    if t.device != grad.device:
        raise ValueError(f"{name} on {t.device}, gradient on {grad.device}")
    return t


def momentum_layer(grad: torch.Tensor, residual: torch.Tensor | None,
                   velocity: torch.Tensor | None, momentum: MomentumConfig | float, *,
                   R: float | QuantConfig = DEFAULT_RANGE, k: int | float = 1,
                   block_size: int | None = None, layer_id: int = 0,
                   lmax_log2: int = zrle.DEFAULT_LMAX_LOG2, mask: bool = True, where: str = "",
                   crc: str = "auto", norm: str = "l1") -> TorchMomentumStep:
    """As refmodel.momentum.momentum_layer; the inputs are not modified."""
    mcfg = MomentumConfig.from_float(momentum)
    if not isinstance(grad, torch.Tensor):
        raise TypeError(f"gradient must be a torch.Tensor, got {type(grad).__name__}")
    velocity = _check_int32(velocity, grad, "velocity")
    if tuple(velocity.shape) != tuple(grad.shape):
        raise ShapeError(f"velocity shape {tuple(velocity.shape)} != gradient shape "
                         f"{tuple(grad.shape)}")
    residual = _check_int32(residual, grad, "residual")
    cfg = quant_config(R)
    grad = check_float32(grad, "gradient").detach()      # float16 / bfloat16 widened (§1.2)
    q, absbits = quantise_lazy(grad, cfg)
    is_nan = absbits > NAN_BITS
    try:                              # raised after the NaN check, as the reference does
        layout, k_eff = plan_layer(tuple(grad.shape), tuple(residual.shape), block_size, k, norm)
        deferred = None
    except ValueError as e:
        deferred = e
    if deferred is None:
        u_new, sat_m = velocity_update_lazy(velocity, q, mcfg.m_fix)
        acc, sat_fb = error_feedback_lazy(residual, u_new)
    else:
        sat_m = sat_fb = torch.zeros((), dtype=torch.int64, device=grad.device)
    nan_n, sat_q, sat_m, sat_fb = torch.stack([is_nan.sum(), (absbits > cfg.range_bits).sum(),
                                               sat_m, sat_fb]).tolist()
    if nan_n:
        raise_nan(is_nan, nan_n, where)
    if deferred is not None:
        raise deferred
    norms = block_norms(acc, layout, norm)
    selected = select_blocks(norms, k_eff)
    block_sent = torch.zeros(layout.n_blocks, dtype=torch.bool, device=grad.device)
    block_sent[selected] = True
    sent = block_sent.repeat_interleave(layout.block_size)[:layout.n].reshape(grad.shape)
    zero = torch.zeros((), dtype=torch.int32, device=grad.device)
    payload = torch.where(sent, acc, zero)
    residual_out = torch.where(sent, zero, acc)
    masked = bool(mask and k_eff < layout.n_blocks)
    velocity_out = torch.where(sent, zero, u_new) if masked else u_new
    frame = encode_frame(payload, layer_id, cfg.range, lmax_log2, crc=crc)
    return TorchMomentumStep(layout, k_eff, selected, payload, residual_out, velocity_out, frame,
                             sat_q, sat_m, sat_fb, masked)
