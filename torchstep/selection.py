"""§2 of docs/spec.md in torch: error feedback, exact block L1 / L2 norms, tie-stable top-k blocks.

Bit-exact with refmodel/selection.py; int64 arithmetic on the tensors' device."""
from __future__ import annotations

import torch

from gradblock.refmodel.quantiser import QMAX
from gradblock.refmodel.selection import BlockLayout, norm_shift

__all__ = ["error_feedback", "error_feedback_lazy", "block_norms", "select_blocks",
           "apply_selection"]


def error_feedback(residual: torch.Tensor, q: torch.Tensor):
    """a = clamp(r + q, -QMAX, QMAX) in int64 -> (a as int32, saturation count)."""
    a, sat = error_feedback_lazy(residual, q)
    return a, int(sat.item())


def error_feedback_lazy(residual: torch.Tensor, q: torch.Tensor):
    if residual.shape != q.shape:
        raise ValueError(f"residual shape {tuple(residual.shape)} != gradient shape {tuple(q.shape)}")
    s = residual.to(torch.int64) + q.to(torch.int64)
    saturated = (s.abs() > QMAX).sum()
    return s.clamp(-QMAX, QMAX).to(torch.int32), saturated


def norm_terms(mag: torch.Tensor, nsh) -> torch.Tensor:
    """Each element's share of its block norm (spec §2.3) from |a| (int64): |a| itself for L1
    (nsh < 0), (|a| >> nsh)**2 for L2; nsh an int or a per-element int64 tensor."""
    if isinstance(nsh, int):
        if nsh < 0:
            return mag
        m = mag >> nsh
        return m * m
    m = mag >> nsh.clamp(min=0)
    return torch.where(nsh < 0, mag, m * m)


def block_norms(acc: torch.Tensor, layout: BlockLayout, norm: str = "l1") -> torch.Tensor:
    """Exact L1 or L2 norm per block as int64 (spec §2.3: every sum stays below 2**63)."""
    flat = norm_terms(acc.reshape(-1).to(torch.int64).abs(), norm_shift(norm, layout.block_size))
    if layout.n_blocks == 0:
        return torch.zeros(0, dtype=torch.int64, device=acc.device)
    padded_len = layout.n_blocks * layout.block_size
    if padded_len != layout.n:                  # short last block: pad with zeros (norm unchanged)
        flat = torch.cat([flat, flat.new_zeros(padded_len - layout.n)])
    return flat.view(layout.n_blocks, layout.block_size).sum(dim=1)


def select_blocks(norms: torch.Tensor, k_eff: int) -> torch.Tensor:
    """The k_eff largest norms in rank order: norm descending, lower index first among ties.

    torch.topk is not tie-stable, so this is a stable ascending sort of -norm (exact: the
    norms are < 2**63)."""
    if k_eff == 0:
        return torch.zeros(0, dtype=torch.int64, device=norms.device)
    order = torch.sort(-norms, stable=True).indices
    return order[:k_eff]


def apply_selection(acc: torch.Tensor, selected: torch.Tensor, layout: BlockLayout):
    """payload = a on the selected blocks, 0 elsewhere; new residual = 0 there, a elsewhere."""
    flat = acc.reshape(-1)
    block_mask = torch.zeros(layout.n_blocks, dtype=torch.bool, device=acc.device)
    block_mask[selected] = True
    mask = block_mask.repeat_interleave(layout.block_size)[:layout.n]
    zero = torch.zeros((), dtype=acc.dtype, device=acc.device)
    payload = torch.where(mask, flat, zero)
    residual = torch.where(mask, zero, flat)
    return payload.reshape(acc.shape), residual.reshape(acc.shape)
