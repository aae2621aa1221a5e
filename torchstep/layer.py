"""§4 of docs/spec.md in torch: one layer's compress step (quantise -> error feedback -> block
norms -> top-k -> mask -> ZRLE frame), bit-exact with refmodel/compress.py.

Errors: the same classes as the reference, in the contract's order (refmodel/validation.py:
range, residual dtype, gradient dtype, NaN, residual shape, block size, k, lmax, layer id, size).
The NaN count needs a device->host sync, so the checks that follow it run on the host first and,
should one fail, the NaN scan decides which error is reported (one sync per step either way)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from gradblock.codec import zrle
from gradblock.codec.zrle_torch import encode_frame
from gradblock.refmodel.plan import step_plan
from gradblock.refmodel.quantiser import DEFAULT_RANGE, NonFiniteError, QuantConfig
from gradblock.refmodel.selection import BlockLayout
from gradblock.refmodel.validation import check_range, check_residual_size

from .quantiser import NAN_BITS, check_float32, quantise_lazy
from .selection import apply_selection, block_norms, error_feedback_lazy, select_blocks

__all__ = ["TorchLayerStep", "compress_layer", "check_residual", "nan_error"]


@dataclass
class TorchLayerStep:
    layout: BlockLayout
    k_eff: int
    selected: torch.Tensor      # int64 block indices, rank order
    payload: torch.Tensor       # int32, nonzero only on selected blocks
    residual_out: torch.Tensor  # int32
    frame: torch.Tensor         # int32 words (uint32 bit patterns)
    sat_quant: int
    sat_feedback: int


def check_residual(residual, grad: torch.Tensor) -> torch.Tensor:
    """The residual as given, or zeros when None; its dtype and device checked (its shape is
    checked after the NaN scan, as the reference does)."""
    if residual is None:
        return torch.zeros(grad.shape, dtype=torch.int32, device=grad.device)
    if not isinstance(residual, torch.Tensor) or residual.dtype != torch.int32:
        got = getattr(residual, "dtype", type(residual).__name__)
        raise TypeError(f"residual must be an int32 tensor, got {got}")
    if residual.device != grad.device:
        raise ValueError(f"residual on {residual.device}, gradient on {grad.device}")
    return residual


def nan_error(is_nan: torch.Tensor, where: str) -> NonFiniteError | None:
    """The NonFiniteError the reference raises for this NaN mask, or None (one host sync)."""
    count = int(is_nan.sum().item())
    if not count:
        return None
    first = int(torch.argmax(is_nan.to(torch.uint8)).item())
    return NonFiniteError(count, first, where)


def compress_layer(grad: torch.Tensor, residual: torch.Tensor | None = None, *,
                   R: float | QuantConfig = DEFAULT_RANGE, k: int | float = 1,
                   block_size: int | None = None, layer_id: int = 0,
                   lmax_log2: int = zrle.DEFAULT_LMAX_LOG2, where: str = "",
                   crc: str = "auto", norm: str = "l1") -> TorchLayerStep:
    """The inputs are not modified; the caller stores `residual_out` as the next residual."""
    cfg = check_range(R)
    if not isinstance(grad, torch.Tensor):
        raise TypeError(f"gradient must be a torch.Tensor, got {type(grad).__name__}")
    residual = check_residual(residual, grad)
    grad = check_float32(grad, "gradient").detach()      # float16 / bfloat16 widened (§1.2)
    q, absbits = quantise_lazy(grad, cfg)
    is_nan = absbits > NAN_BITS
    try:
        check_residual_size(tuple(grad.shape), tuple(residual.shape), same_shape=True)
        plan = step_plan(grad.shape, k, block_size, layer_id, lmax_log2, norm)
    except (ValueError, TypeError):
        nan = nan_error(is_nan, where)
        if nan is not None:
            raise nan from None
        raise
    acc, sat_fb = error_feedback_lazy(residual, q)
    nan_n, sat_q, sat_fb = torch.stack([is_nan.sum(), (absbits > cfg.range_bits).sum(),
                                        sat_fb]).tolist()
    if nan_n:
        raise nan_error(is_nan, where)
    norms = block_norms(acc, plan.layout, plan.norm)
    selected = select_blocks(norms, plan.k_eff)
    payload, residual_out = apply_selection(acc, selected, plan.layout)
    frame = encode_frame(payload, plan.layer_id, cfg.range, plan.lmax_log2, crc=crc)
    return TorchLayerStep(plan.layout, plan.k_eff, selected, payload, residual_out, frame,
                          sat_q, sat_fb)
