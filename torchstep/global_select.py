"""Global block selection in torch (docs/spec.md §8), CPU or CUDA: bit-exact with
refmodel/global_select.py.

A worker runs `prepare` (a and its shifted block norms, §2.1–2.3 / §7), puts `prep.vector`
into collective 1 (an int32 allreduce SUM), hands the sum to `finish` (the summed-norm
selection, its value vector for collective 2, its new residuals and velocities) and the sum of
collective 2 (int32) to `average`. Every shape is static (k_eff blocks of W words per layer), so nothing waits on
the host except `check`, which reads collective 1's few header words, the local NaN and
saturation counts together (one device -> host copy per exchange).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gradblock.refmodel.global_select import (HEAD_WORDS, GlobalLayer, NormBoundError,
                                              PeerNonFiniteError, RankMismatchError, check_bound,
                                              check_digits, check_word, norm_shift, plan_layers,
                                              value_shift)
from gradblock.refmodel.quantiser import DEFAULT_RANGE, QMAX, NonFiniteError, QuantConfig

from .momentum import scale_velocity
from .quantiser import NAN_BITS, check_float32, quant_config, quantise_lazy

__all__ = ["GlobalPlan", "GlobalPrep", "GlobalFinish", "plan_global", "prepare", "own_nan", "check",
           "finish", "average", "NormBoundError", "RankMismatchError", "PeerNonFiniteError"]


@dataclass
class GlobalPlan:
    layers: tuple[GlobalLayer, ...]
    cfg: QuantConfig
    m_fix: int | None
    mask: bool
    n_workers: int
    checks: tuple[int, ...]
    head: torch.Tensor          # (1 + 6L,) int32 [0, check digits of every layer]
    value_shift: int            # s_v
    sizes: tuple[int, ...]
    total: int
    n_blocks: int
    n_values: int               # collective 2's words
    elem_start: torch.Tensor    # (L,) int64
    elem_end: torch.Tensor      # (L,)
    block_of_elem: torch.Tensor  # (total,)
    layer_of_elem: torch.Tensor  # (total,)
    layer_of_block: torch.Tensor  # (n_blocks,)
    block_first: torch.Tensor    # (n_blocks,) group-wide element index of each block's start
    block_len: torch.Tensor      # (n_blocks,)
    pick: torch.Tensor           # (sum k_eff,) positions of the chosen blocks in the ranked list
    slot_sel: torch.Tensor       # (n_values,) which chosen block each value word belongs to
    slot_off: torch.Tensor       # (n_values,) offset inside that block
    slot_sparsified: torch.Tensor  # (n_values,) bool: the word's layer has k_eff < n_blocks
    shift_of_block: torch.Tensor   # (n_blocks,) int64 s_n of the block's layer
    host: tuple                    # numpy (elem_start, elem_end, B, block_start) per layer

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def vector_words(self) -> int:
        return 1 + HEAD_WORDS * self.n_layers + self.n_blocks


def plan_global(shapes, *, k: int | float | list = 1, block_size: int | None = None,
                layer_ids: list[int] | None = None, names: list[str] | None = None,
                R: float | QuantConfig = DEFAULT_RANGE, m_fix: int | None = None,
                mask: bool = True, n_workers: int = 1,
                device: torch.device | str = "cpu") -> GlobalPlan:
    """The static index maps of a group of layers; NormBoundError if N * B * QMAX >= 2**63."""
    cfg = quant_config(R)
    layers = tuple(plan_layers(shapes, k=k, block_size=block_size, layer_ids=layer_ids,
                               names=names))
    check_bound(list(layers), n_workers)
    checks = tuple(check_word(lay, cfg, m_fix or 0, bool(mask) if m_fix else False, n_workers)
                   for lay in layers)
    head = [0] + [v for c in checks for v in check_digits(c)]
    L = len(layers)
    sizes = [lay.layout.n for lay in layers]
    nbs = [lay.layout.n_blocks for lay in layers]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    bstarts = np.concatenate([[0], np.cumsum(nbs)]).astype(np.int64)
    total, n_blocks = int(starts[-1]), int(bstarts[-1])
    block_of_elem = np.empty(total, np.int64)
    block_first = np.empty(n_blocks, np.int64)
    block_len = np.empty(n_blocks, np.int64)
    pick, slot_sel, slot_off = [], [], []
    chosen = 0
    for j, lay in enumerate(layers):
        B, n, W = lay.layout.block_size, lay.layout.n, lay.width
        block_of_elem[starts[j]:starts[j + 1]] = bstarts[j] + np.arange(n) // B
        b = np.arange(lay.layout.n_blocks, dtype=np.int64)
        block_first[bstarts[j]:bstarts[j + 1]] = starts[j] + b * B
        block_len[bstarts[j]:bstarts[j + 1]] = np.minimum(B, n - b * B)
        pick.append(bstarts[j] + np.arange(lay.k_eff, dtype=np.int64))
        slot_sel.append(np.repeat(chosen + np.arange(lay.k_eff, dtype=np.int64), W))
        slot_off.append(np.tile(np.arange(W, dtype=np.int64), lay.k_eff))
        chosen += lay.k_eff
    cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64)  # noqa: E731
    sparsified = np.repeat(np.array([lay.sparsified for lay in layers], dtype=bool),
                           [lay.values for lay in layers])
    shifts = np.repeat(np.array([norm_shift(lay.width, n_workers) for lay in layers],
                                dtype=np.int64), nbs)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    return GlobalPlan(layers, cfg, m_fix, bool(mask), int(n_workers), checks,
                      t(np.array(head, np.int32)), value_shift(n_workers), tuple(sizes), total,
                      n_blocks,
                      sum(lay.values for lay in layers), t(starts[:-1]), t(starts[1:]),
                      t(block_of_elem), t(np.repeat(np.arange(L, dtype=np.int64), sizes)),
                      t(np.repeat(np.arange(L, dtype=np.int64), nbs)), t(block_first),
                      t(block_len), t(cat(pick)), t(cat(slot_sel)), t(cat(slot_off)),
                      t(sparsified), t(shifts),
                      (starts[:-1].copy(), starts[1:].copy(),
                       np.array([lay.layout.block_size for lay in layers], np.int64),
                       bstarts[:-1].copy()))


@dataclass
class GlobalPrep:
    acc: torch.Tensor              # (total,) int32 a
    velocity: torch.Tensor | None  # (total,) int32 u' (momentum correction only)
    vector: torch.Tensor           # (vector_words,) int32: collective 1's input
    nan: torch.Tensor | None       # (total,) bool: NaN in the gradient (None: from `grad`)
    counts: torch.Tensor           # (4,) int64: NaN, |g| > R, |r + u| > QMAX, |v| > QMAX totals
    grad: torch.Tensor | None = None  # the flat gradient (numba pass: NaN found on demand)


def _flat(plan: GlobalPlan, tensors, dtype, dev, what: str, names) -> torch.Tensor:
    parts = []
    for j, t in enumerate(tensors if tensors is not None else [None] * plan.n_layers):
        if t is None:
            parts.append(torch.zeros(plan.sizes[j], dtype=dtype, device=dev))
            continue
        if t.dtype != dtype or tuple(t.shape) != plan.layers[j].shape or t.device != dev:
            raise TypeError(f"layer {names[j]}: {what} must be {dtype} {plan.layers[j].shape} on "
                            f"{dev}, got {t.dtype} {tuple(t.shape)} on {t.device}")
        parts.append(t.detach().reshape(-1))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=dtype, device=dev)


def prepare(plan: GlobalPlan, grads, residuals=None, velocities=None,
            method: str = "auto") -> GlobalPrep:
    """a = clamp(r + Q(g)) (or clamp(r + u'), u' = sat(mul(m, u) + Q(g)) with momentum) and the
    block norms, packed into collective 1's vector. No host sync: a NaN is only flagged (the
    vector's status word) and reported by `check`. `method`: "torch" (any device), "numba"
    (CPU tensors: refmodel.global_numba on their memory, one jitted pass), "auto" (numba on the
    CPU)."""
    if method not in ("auto", "torch", "numba"):
        raise ValueError(f"method must be auto, torch or numba, got {method!r}")
    dev = plan.head.device
    if method == "numba" and dev.type != "cpu":
        raise ValueError(f"the numba pass needs CPU tensors, the plan is on {dev}")
    names = [lay.name or str(lay.layer_id) for lay in plan.layers]
    if len(grads) != plan.n_layers:
        raise ValueError(f"plan has {plan.n_layers} layers, got {len(grads)} gradients")
    grads = list(grads)
    for j, g in enumerate(grads):
        grads[j] = check_float32(g, f"layer {names[j]} gradient")   # half widened (§1.2)
        if tuple(g.shape) != plan.layers[j].shape or g.device != dev:
            raise ValueError(f"layer {names[j]}: gradient {tuple(g.shape)} on {g.device}, plan "
                             f"{plan.layers[j].shape} on {dev}")
    flat_g = _flat(plan, grads, torch.float32, dev, "gradient", names)
    flat_r = _flat(plan, residuals, torch.int32, dev, "residual", names)
    if dev.type == "cpu" and method != "torch":
        return _prepare_host(plan, flat_g, flat_r,
                             _flat(plan, velocities, torch.int32, dev, "velocity", names)
                             if plan.m_fix is not None else None)
    q, absbits = quantise_lazy(flat_g, plan.cfg)
    rows = [absbits > NAN_BITS, absbits > plan.cfg.range_bits]
    u_new = None
    if plan.m_fix is not None:
        flat_u = _flat(plan, velocities, torch.int32, dev, "velocity", names)
        v = scale_velocity(flat_u, plan.m_fix) + q.to(torch.int64)
        v_c = v.clamp(-QMAX, QMAX)
        q = u_new = v_c.to(torch.int32)
        mom_flag = v != v_c
    s = flat_r.to(torch.int64) + q.to(torch.int64)
    acc = s.clamp(-QMAX, QMAX)
    rows.append(s != acc)
    if plan.m_fix is not None:
        rows.append(mom_flag)
    norms = torch.zeros(plan.n_blocks, dtype=torch.int64, device=dev)
    norms.index_add_(0, plan.block_of_elem, acc.abs())
    counts = torch.stack([r.sum() for r in rows] + ([] if plan.m_fix is not None else
                                                    [torch.zeros((), dtype=torch.int64,
                                                                 device=dev)]))
    status = (counts[:1] > 0).to(torch.int32)
    vector = torch.cat([status, plan.head[1:], (norms >> plan.shift_of_block).to(torch.int32)])
    return GlobalPrep(acc.to(torch.int32), u_new, vector, rows[0], counts)


def _prepare_host(plan: GlobalPlan, flat_g, flat_r, flat_u) -> GlobalPrep:
    """`prepare` on CPU tensors: one numba pass over their memory (zero copy)."""
    from gradblock.fastpath.global_numba import prepare_group_kernel
    from gradblock.refmodel.quantiser import saturation_bits
    cfg = plan.cfg
    acc = torch.empty(plan.total, dtype=torch.int32)
    u_new = torch.empty(plan.total, dtype=torch.int32) if flat_u is not None else None
    norms = torch.empty(plan.n_blocks, dtype=torch.int64)
    counts = torch.zeros(4, dtype=torch.int64)
    momentum = flat_u is not None
    dummy = np.zeros(1, np.int32)
    prepare_group_kernel(flat_g.view(torch.int32).numpy(), flat_r.numpy(),
                         flat_u.numpy() if momentum else dummy, momentum,
                         int(plan.m_fix or 0), *plan.host, cfg.M, cfg.k, cfg.range_bits,
                         saturation_bits(cfg), acc.numpy(),
                         u_new.numpy() if momentum else dummy, norms.numpy(), counts.numpy())
    status = (counts[:1] > 0).to(torch.int32)
    vector = torch.cat([status, plan.head[1:], (norms >> plan.shift_of_block).to(torch.int32)])
    return GlobalPrep(acc, u_new, vector, None, counts, flat_g)


def own_nan(plan: GlobalPlan, prep: GlobalPrep, where: str = "") -> None:
    """This worker's NonFiniteError (the reference's: count and first index in the first layer
    with NaN), if its gradient held NaN; one host sync."""
    if not int(prep.counts[0]):
        return
    nan_all = prep.nan if prep.nan is not None else torch.isnan(prep.grad)
    for j in range(plan.n_layers):
        start = int(plan.elem_start[j])
        nan = nan_all[start:start + plan.sizes[j]]
        c = int(nan.sum())
        if c:
            lay = plan.layers[j]
            raise NonFiniteError(c, int(torch.argmax(nan.to(torch.uint8)).item()),
                                 f"{where}layer {lay.layer_id}"
                                 + (f" {lay.name!r}" if lay.name else ""))


@dataclass
class Counts:
    """This worker's saturation counts over the group's layers."""
    sat_quant: int
    sat_feedback: int
    sat_momentum: int


def check(plan: GlobalPlan, prep: GlobalPrep, summed: torch.Tensor, where: str = "") -> Counts:
    """Read collective 1's header and this worker's counts (one host copy): this worker's
    NonFiniteError (naming the first layer with NaN), else PeerNonFiniteError when another
    worker flagged NaN, else RankMismatchError naming the first layer whose check words differ
    (refmodel.global_select.check_sums). Returns the saturation counts."""
    H = 1 + HEAD_WORDS * plan.n_layers
    host = torch.cat([summed[:H].to(torch.int64), prep.counts]).tolist()
    head, counts = host[:H], host[H:]
    if counts[0]:
        own_nan(plan, prep, where)
    # the reference's check_sums on the header (the norms stay on the device)
    from gradblock.refmodel.global_select import check_sums
    check_sums(np.array(head + [0] * plan.n_blocks, dtype=np.int64), list(plan.layers),
               plan.n_workers)
    return Counts(counts[1], counts[2], counts[3])


@dataclass
class GlobalFinish:
    values: torch.Tensor             # (n_values,) int32: collective 2's input
    selected: torch.Tensor           # (sum k_eff,) int64 group-wide block ids, ascending
    elem: torch.Tensor               # (n_values,) int64 element of each value word (total: pad)
    residuals: list[torch.Tensor]    # int32 per layer, layer shape
    velocities: list[torch.Tensor] | None


def finish(plan: GlobalPlan, prep: GlobalPrep, summed: torch.Tensor) -> GlobalFinish:
    """Selection by the summed norms (the same on every worker), this worker's values on the
    selected blocks, its new residual (0 there, a elsewhere) and velocity (masked there on
    sparsified layers unless masking is off)."""
    dev = plan.head.device
    norms = summed[1 + HEAD_WORDS * plan.n_layers:].to(torch.int64)
    # rank blocks within each layer: norm descending, index ascending (two stable sorts);
    # the first k_eff of each layer sit at static positions (`pick`)
    by_norm = torch.sort(-norms, stable=True).indices
    order = by_norm[torch.sort(plan.layer_of_block[by_norm], stable=True).indices]
    selected = torch.sort(order[plan.pick]).values
    blk = selected[plan.slot_sel]
    valid = plan.slot_off < plan.block_len[blk]
    elem = torch.where(valid, plan.block_first[blk] + plan.slot_off,
                       torch.full((), plan.total, dtype=torch.int64, device=dev))
    # only the selected elements are touched (the padding words all point at one spare
    # element past the end, whose a is 0)
    sv = plan.value_shift
    acc_pad = torch.cat([prep.acc, prep.acc.new_zeros(1)])
    a_sel = acc_pad[elem]
    values = (a_sel >> sv) if sv else a_sel                    # int32 arithmetic shift: floor
    acc_pad[elem] = a_sel - ((a_sel >> sv) << sv) if sv else torch.zeros_like(a_sel)
    residual = acc_pad[:plan.total]                            # the remainder there, a elsewhere
    velocities = None
    if prep.velocity is not None:
        u = prep.velocity
        if plan.mask:                 # factor masking on the sparsified layers' selected blocks
            u_pad = torch.cat([u, u.new_zeros(1)])
            spare = torch.full((), plan.total, dtype=torch.int64, device=dev)
            u_pad[torch.where(plan.slot_sparsified, elem, spare)] = 0
            u = u_pad[:plan.total]
        velocities = [t.view(lay.shape) for t, lay in zip(torch.split(u, list(plan.sizes)),
                                                           plan.layers)]
    residuals = [t.view(lay.shape) for t, lay in zip(torch.split(residual, list(plan.sizes)),
                                                      plan.layers)]
    return GlobalFinish(values, selected, elem, residuals, velocities)


def average(plan: GlobalPlan, fin: GlobalFinish, value_sum: torch.Tensor) -> list[torch.Tensor]:
    """Collective 2's sum s -> the averaged float32 gradient of each layer:
    float32(float64(s * 2**s_v) * cN) on the selected elements, 0 elsewhere."""
    if value_sum.dtype != torch.int32 or value_sum.shape != (plan.n_values,):
        raise ValueError(f"value sum must be int32 ({plan.n_values},), got {value_sum.dtype} "
                         f"{tuple(value_sum.shape)}")
    c = float(np.float64(plan.cfg.range) / (np.float64(QMAX) * np.float64(plan.n_workers)))
    vals = ((value_sum.to(torch.int64) << plan.value_shift).to(torch.float64) * c
            ).to(torch.float32)
    out = torch.zeros(plan.total + 1, dtype=torch.float32, device=value_sum.device)
    out[fin.elem] = vals          # padding words all land on the spare last element
    return [t.view(lay.shape) for t, lay in zip(torch.split(out[:plan.total], list(plan.sizes)),
                                                 plan.layers)]
