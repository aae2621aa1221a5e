"""§4 of docs/spec.md in torch: one layer's compress step (quantise -> error feedback -> block
norms -> top-k -> mask -> ZRLE frame), bit-exact with refmodel/compress.py.

Errors: the same classes as the reference, and for inputs with several faults the one the
reference reports first. The reference validates as it computes (range, residual dtype, gradient
dtype, NaN, residual shape, block size, k, then the frame's lmax and layer id); here the NaN count
needs a device->host sync, so the host-only checks that the reference runs after it are done
early but raised only after the NaN check (one sync per step, same error)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from gradblock.codec import zrle
from gradblock.codec.zrle_torch import encode_frame
from gradblock.refmodel.quantiser import DEFAULT_RANGE, QuantConfig
from gradblock.refmodel.selection import BlockLayout, block_layout, resolve_k

from .quantiser import NAN_BITS, check_float32, quant_config, quantise_lazy, raise_nan
from .selection import apply_selection, block_norms, error_feedback_lazy, select_blocks

__all__ = ["TorchLayerStep", "compress_layer"]


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
    """The residual as given, or zeros when None; its dtype and device checked (not its shape:
    the reference reports a shape mismatch only after the NaN check)."""
    if residual is None:
        return torch.zeros(grad.shape, dtype=torch.int32, device=grad.device)
    if not isinstance(residual, torch.Tensor) or residual.dtype != torch.int32:
        raise TypeError(f"residual must be int32, got "
                        f"{getattr(residual, 'dtype', type(residual).__name__)}")
    if residual.device != grad.device:
        raise ValueError(f"residual on {residual.device}, gradient on {grad.device}")
    return residual


def compress_layer(grad: torch.Tensor, residual: torch.Tensor | None = None, *,
                   R: float | QuantConfig = DEFAULT_RANGE, k: int | float = 1,
                   block_size: int | None = None, layer_id: int = 0,
                   lmax_log2: int = zrle.DEFAULT_LMAX_LOG2, where: str = "",
                   crc: str = "auto") -> TorchLayerStep:
    """The inputs are not modified; the caller stores `residual_out` as the next residual."""
    cfg = quant_config(R)
    if not isinstance(grad, torch.Tensor):
        raise TypeError(f"gradient must be a torch.Tensor, got {type(grad).__name__}")
    residual = check_residual(residual, grad)
    check_float32(grad, "gradient")
    grad = grad.detach()
    q, absbits = quantise_lazy(grad, cfg)
    is_nan = absbits > NAN_BITS
    if residual.shape != grad.shape:
        nan_n = int(is_nan.sum().item())
        if nan_n:
            raise_nan(is_nan, nan_n, where)
        raise ValueError(f"residual shape {tuple(residual.shape)} != gradient shape "
                         f"{tuple(grad.shape)}")
    try:
        layout = block_layout(tuple(grad.shape), block_size)
        k_eff = resolve_k(k, layout.n_blocks)
        deferred = None
    except ValueError as e:                       # raised after the NaN check, as the reference
        deferred = e
    acc, sat_fb = error_feedback_lazy(residual, q)
    nan_n, sat_q, sat_fb = torch.stack([is_nan.sum(), (absbits > cfg.range_bits).sum(),
                                        sat_fb]).tolist()
    if nan_n:
        raise_nan(is_nan, nan_n, where)
    if deferred is not None:
        raise deferred
    norms = block_norms(acc, layout)
    selected = select_blocks(norms, k_eff)
    payload, residual_out = apply_selection(acc, selected, layout)
    frame = encode_frame(payload, layer_id, cfg.range, lmax_log2, crc=crc)
    return TorchLayerStep(layout, k_eff, selected, payload, residual_out, frame, sat_q, sat_fb)
