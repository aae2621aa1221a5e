"""§4 of docs/spec.md in torch for a group of layers at once (a DDP bucket, a whole model).

Small layers make the per-layer path pay torch's per-op overhead dozens of times per layer.
The group path runs every step once over the concatenation of the layers' elements, with
segment bookkeeping (block ids, layer ids) precomputed in a GroupPlan; its frames are
bit-identical to compress_layer's, layer by layer (tested)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gradblock.codec import zrle
from gradblock.codec.zrle_torch import encode_frames, u32_to_i32
from gradblock.refmodel.quantiser import DEFAULT_RANGE, QMAX, NonFiniteError, QuantConfig
from gradblock.refmodel.plan import step_plan
from gradblock.refmodel.selection import BlockLayout
from gradblock.refmodel.validation import ParameterError, ShapeError, check_lmax_log2, check_norm

from .momentum import scale_velocity as scale_velocity_flat
from .quantiser import NAN_BITS, check_float32, quant_config, quantise_lazy

__all__ = ["GroupPlan", "GroupStep", "plan_group", "compress_group"]



@dataclass
class GroupPlan:
    """Static layout of a group: element / block / layer index maps on one device."""
    shapes: tuple[tuple[int, ...], ...]
    layouts: tuple[BlockLayout, ...]
    k_effs: tuple[int, ...]
    layer_ids: tuple[int, ...]
    sizes: tuple[int, ...]                 # elements per layer
    elem_start: torch.Tensor               # (L,) int64 first element of each layer
    elem_end: torch.Tensor                 # (L,) int64 one past the last
    layer_of_elem: torch.Tensor            # (n,) int64
    block_of_elem: torch.Tensor            # (n,) int64 group-wide block index
    layer_of_block: torch.Tensor           # (n_blocks,) int64
    block_start: torch.Tensor              # (L,) int64 first group-wide block of each layer
    k_eff: torch.Tensor                    # (L,) int64
    is_layer_start: torch.Tensor           # (n,) bool
    headers: torch.Tensor                  # (L, 5) int32 frame headers
    total: int
    n_blocks: int
    norm: str = "l1"                       # block norm kind (docs/spec.md §2.3)
    norm_shift_of_elem: torch.Tensor | None = None   # (n,) int64 L2 shift per element; None: L1
    sparsified_of_elem: torch.Tensor | None = None   # (n,) bool: the layer has k_eff < n_blocks

    @property
    def n_layers(self) -> int:
        return len(self.sizes)


def plan_group(shapes, *, k: int | float | list = 1, block_size: int | None | list = None,
               layer_ids: list[int] | None = None, R: float | QuantConfig = DEFAULT_RANGE,
               lmax_log2: int = zrle.DEFAULT_LMAX_LOG2,
               device: torch.device | str = "cpu", norm: str = "l1") -> GroupPlan:
    """Precompute the index maps for compressing `shapes` together. `k` and `block_size` may be
    one value for all layers or a list with one per layer."""
    shapes = tuple(tuple(int(d) for d in s) for s in shapes)
    L = len(shapes)
    ks = list(k) if isinstance(k, (list, tuple)) else [k] * L
    bss = list(block_size) if isinstance(block_size, (list, tuple)) else [block_size] * L
    ids = list(range(L)) if layer_ids is None else list(layer_ids)
    if not (len(ks) == len(bss) == len(ids) == L):
        raise ShapeError(f"{L} shapes but {len(ks)} k values, {len(bss)} block sizes, "
                         f"{len(ids)} layer ids")
    rbits = quant_config(R).range_bits
    # each layer's parameters through the reference's validator, in its order
    plans = [step_plan(s, kk, b, i, lmax_log2, norm) for s, kk, b, i in zip(shapes, ks, bss, ids)]
    norm = check_norm(norm)
    ids = [p.layer_id for p in plans]
    lmax_log2 = check_lmax_log2(lmax_log2)
    layouts = tuple(p.layout for p in plans)
    k_effs = tuple(p.k_eff for p in plans)
    sizes = tuple(lay.n for lay in layouts)
    nbs = [lay.n_blocks for lay in layouts]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if L else np.zeros(0, np.int64)
    bstarts = np.concatenate([[0], np.cumsum(nbs)[:-1]]).astype(np.int64) if L else np.zeros(0, np.int64)
    total, n_blocks = int(sum(sizes)), int(sum(nbs))
    layer_of_elem = np.repeat(np.arange(L, dtype=np.int64), sizes)
    block_of_elem = np.empty(total, dtype=np.int64)
    for j, lay in enumerate(layouts):
        block_of_elem[starts[j]:starts[j] + lay.n] = bstarts[j] + np.arange(lay.n) // lay.block_size
    is_start = np.zeros(total, dtype=bool)
    is_start[starts[np.asarray(sizes, dtype=np.int64) > 0]] = True
    headers = np.array([[u32_to_i32(h) for h in (zrle.MAGIC, zrle.VERSION | (lmax_log2 << 8), i, n,
                                                  rbits)] for i, n in zip(ids, sizes)],
                       dtype=np.int32).reshape(L, zrle.HEADER_WORDS)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    return GroupPlan(shapes, layouts, k_effs, tuple(ids), sizes,
                     t(starts), t(starts + np.asarray(sizes, dtype=np.int64)), t(layer_of_elem),
                     t(block_of_elem), t(np.repeat(np.arange(L, dtype=np.int64), nbs)), t(bstarts),
                     t(np.asarray(k_effs, dtype=np.int64)), t(is_start), t(headers), total, n_blocks,
                     norm, None if norm == "l1" else t(np.repeat(
                         np.array([p.norm_shift for p in plans], dtype=np.int64), sizes)),
                     t(np.repeat(np.array([ke < lay.n_blocks for ke, lay in zip(k_effs, layouts)],
                                          dtype=bool), sizes)))


@dataclass
class GroupStep:
    message: torch.Tensor          # int32: the layers' frames back to back, in plan order
    frame_words: list[int]         # words of each layer's frame
    residuals: list[torch.Tensor]  # int32, one per layer in its shape (views of one buffer)
    nonzeros: list[int]            # payload elements sent per layer
    sat_quant: list[int]
    sat_feedback: list[int]
    # momentum correction (docs/spec.md §7) only: the next step's velocity per layer (masked
    # on the sent blocks of sparsified layers) and the velocity saturations; None / zeros without
    velocities: list[torch.Tensor] | None = None
    sat_momentum: list[int] | None = None


def _segment_counts_rows(flags: torch.Tensor, plan: GroupPlan) -> torch.Tensor:
    """Per-layer sums of each row of a (rows, n) int32 0/1 tensor: prefix sums read at the
    layer bounds -> (rows, L) int64."""
    cs = torch.cumsum(flags, dim=1, dtype=torch.int64)
    cs = torch.cat([cs.new_zeros(cs.shape[0], 1), cs], dim=1)
    return cs[:, plan.elem_end] - cs[:, plan.elem_start]


@dataclass
class FlatStep:
    """compress_group's arithmetic on the flat concatenation, as device tensors (no host
    sync): the payload to encode, the new residual and velocity, and the per-element flags
    (NaN, |g| > R, feedback saturation[, momentum saturation]) for the caller to count."""
    payload: torch.Tensor
    residual: torch.Tensor
    velocity: torch.Tensor | None
    flags: tuple


def step_flat(plan: GroupPlan, flat_g: torch.Tensor, flat_r: torch.Tensor, cfg: QuantConfig,
              flat_u: torch.Tensor | None = None, m_fix: int | None = None,
              mask: bool = True) -> FlatStep:
    """§1, §2 (and §7 with `m_fix`) over a group's flat float32 gradient and int32 residual
    (and velocity) in plan order, without a host sync and in a number of ops that does not
    depend on the number of layers. Inputs are the caller's to check."""
    dev = flat_g.device
    momentum = m_fix is not None
    q, absbits = quantise_lazy(flat_g, cfg)
    u64 = u_new64 = None
    if momentum:                      # u' = sat(mul(m, u) + Q(g)) replaces Q(g) below
        u64 = scale_velocity_flat(flat_u, m_fix) + q.to(torch.int64)
        u_new64 = u64.clamp(-QMAX, QMAX)
        q = u_new64.to(torch.int32)
    s = flat_r.to(torch.int64) + q.to(torch.int64)
    acc = s.clamp(-QMAX, QMAX)
    flags = (absbits > NAN_BITS, absbits > cfg.range_bits, s != acc) + \
        ((u64 != u_new64,) if momentum else ())

    # block norms and per-layer selection: blocks grouped by layer, norm descending, index
    # ascending (two stable sorts), then the first k_eff of each layer
    norms = torch.zeros(plan.n_blocks, dtype=torch.int64, device=dev)
    terms = acc.abs()
    if plan.norm_shift_of_elem is not None:          # L2: (|a| >> s)**2, s per layer
        terms = terms >> plan.norm_shift_of_elem
        terms = terms * terms
    norms.index_add_(0, plan.block_of_elem, terms)
    by_norm = torch.sort(-norms, stable=True).indices
    order = by_norm[torch.sort(plan.layer_of_block[by_norm], stable=True).indices]
    layer_of_ranked = plan.layer_of_block[order]
    rank = torch.arange(plan.n_blocks, device=dev) - plan.block_start[layer_of_ranked]
    block_mask = torch.zeros(plan.n_blocks, dtype=torch.bool, device=dev)
    block_mask.scatter_(0, order, rank < plan.k_eff[layer_of_ranked])   # no boolean indexing
    elem_mask = block_mask[plan.block_of_elem]
    acc32 = acc.to(torch.int32)
    payload = acc32 * elem_mask                       # a on selected blocks, 0 elsewhere
    residual_out = acc32 - payload                    # so payload + residual = a exactly
    u_new = None
    if momentum:
        u_new = q
        if mask:                      # factor masking on sparsified layers only
            masked = elem_mask & plan.sparsified_of_elem
            u_new = torch.where(masked, torch.zeros((), dtype=torch.int32, device=dev), u_new)
    return FlatStep(payload, residual_out, u_new, flags)


def compress_group(plan: GroupPlan, grads: list[torch.Tensor], residuals: list[torch.Tensor | None],
                   *, R: float | QuantConfig = DEFAULT_RANGE, lmax_log2: int = zrle.DEFAULT_LMAX_LOG2,
                   names: list[str] | None = None, crc: str = "auto",
                   velocities: list[torch.Tensor | None] | None = None, m_fix: int | None = None,
                   mask: bool = True) -> GroupStep:
    """compress_layer for every layer of `plan` in one pass; the message is the frames of
    compress_layer(grads[j], residuals[j], k, block_size, layer_id) concatenated.

    With `m_fix` (momentum correction, docs/spec.md §7; Q0.16, see
    refmodel.momentum.MomentumConfig) every layer is refmodel.momentum.momentum_layer instead:
    `velocities[j]` (None: zeros) is updated, fed to the error feedback in place of Q(g), and
    masked on the sent blocks of layers with k_eff < n_blocks unless `mask` is False."""
    cfg = quant_config(R)
    lmax = 1 << check_lmax_log2(lmax_log2)
    L = plan.n_layers
    if len(grads) != L or len(residuals) != L:
        raise ShapeError(f"plan has {L} layers, got {len(grads)} gradients and "
                         f"{len(residuals)} residuals")
    dev = plan.layer_of_elem.device
    grads = list(grads)
    for j, (g, r) in enumerate(zip(grads, residuals)):
        what = f"layer {names[j] if names else j}"
        grads[j] = check_float32(g, f"{what} gradient")      # float16 / bfloat16 widened (§1.2)
        if tuple(g.shape) != plan.shapes[j]:
            raise ShapeError(f"{what}: gradient shape {tuple(g.shape)}, plan has {plan.shapes[j]}")
        if g.device != dev:
            raise ShapeError(f"{what}: gradient on {g.device}, plan on {dev}")
        if r is not None and (r.dtype != torch.int32 or tuple(r.shape) != plan.shapes[j]
                              or r.device != dev):
            raise TypeError(f"{what}: residual must be int32 {plan.shapes[j]} on {dev}, got "
                            f"{r.dtype} {tuple(r.shape)} on {r.device}")
    momentum = m_fix is not None
    if momentum:
        velocities = [None] * L if velocities is None else list(velocities)
        if len(velocities) != L:
            raise ShapeError(f"plan has {L} layers, got {len(velocities)} velocities")
        for j, u in enumerate(velocities):
            if u is not None and (u.dtype != torch.int32 or tuple(u.shape) != plan.shapes[j]
                                  or u.device != dev):
                raise TypeError(f"layer {names[j] if names else j}: velocity must be int32 "
                                f"{plan.shapes[j]} on {dev}, got {u.dtype} {tuple(u.shape)} "
                                f"on {u.device}")
    elif velocities is not None:
        raise ParameterError("velocities given without m_fix")
    flat_g = torch.cat([g.detach().reshape(-1) for g in grads]) if L else \
        torch.zeros(0, dtype=torch.float32, device=dev)
    flat_r = torch.cat([torch.zeros(plan.sizes[j], dtype=torch.int32, device=dev) if r is None
                        else r.reshape(-1) for j, r in enumerate(residuals)]) if L else \
        torch.zeros(0, dtype=torch.int32, device=dev)
    flat_u = None
    if momentum:
        flat_u = torch.cat([torch.zeros(plan.sizes[j], dtype=torch.int32, device=dev) if u is None
                            else u.reshape(-1) for j, u in enumerate(velocities)]) if L else \
            torch.zeros(0, dtype=torch.int32, device=dev)
    fs = step_flat(plan, flat_g, flat_r, cfg, flat_u, m_fix, mask)
    # NaN, |g| > R, |r + q| > QMAX (and |mul(m, u) + Q(g)| > QMAX): totals in one host sync,
    # per layer only when any is nonzero
    flags = fs.flags
    if any(torch.stack([f.sum() for f in flags]).tolist()):
        counts = _segment_counts_rows(torch.stack(flags).to(torch.int32), plan).tolist()
    else:
        counts = [[0] * L for _ in flags]
    nan_c, sat_q, sat_fb = counts[:3]
    sat_m = counts[3] if momentum else None
    is_nan = flags[0]
    for j, c in enumerate(nan_c):
        if c:
            start = int(plan.elem_start[j])
            first = int(torch.argmax(is_nan[start:start + plan.sizes[j]].to(torch.uint8)).item())
            raise NonFiniteError(int(c), first, names[j] if names else f"layer {plan.layer_ids[j]}")
    payload, residual_out = fs.payload, fs.residual
    velocity_list = None
    if momentum:
        velocity_list = [t.view(shape) for t, shape in
                         zip(torch.split(fs.velocity, list(plan.sizes)), plan.shapes)]

    message, frame_words, nonzeros = encode_frames(payload, plan.headers, plan.elem_start,
                                                   plan.elem_end, plan.layer_of_elem,
                                                   plan.is_layer_start, lmax, crc)
    residual_list = [t.view(shape) for t, shape in
                     zip(torch.split(residual_out, list(plan.sizes)), plan.shapes)]
    return GroupStep(message, frame_words, residual_list, nonzeros, [int(v) for v in sat_q],
                     [int(v) for v in sat_fb], velocity_list,
                     None if sat_m is None else [int(v) for v in sat_m])
