"""Global block selection: the allreduce exchange of coarse blocks, numpy reference
(docs/spec.md §8).

Every worker computes a = clamp(r + Q(g)) (§2.1; with momentum correction a = clamp(r + u'),
§7) and its exact block norms (§2.3). The norms, shifted right so that N of them fit an int32,
are summed over the workers (collective 1, an int32 allreduce), every worker selects the same
k_eff blocks per layer by that sum (§2.4–2.5 rule), and the workers' values on those blocks,
shifted right by ceil(log2 N) bits (the remainder stays in the residual), are summed
(collective 2, an int32 allreduce) and averaged (§1.3). Unlike §5 the traffic per worker does
not grow with N.

    layers = plan_layers([(6, 1, 5, 5), (6,)], k=1)
    step = global_step(grads, residuals, None, layers, R=10.0)     # grads[w][j], residuals[w][j]
    step.averaged[j], step.residuals[w][j]

The per-worker pieces (`prepare_worker`, `norm_vector`, `check_sums`, `select_global`,
`finish_worker`, `average_values`) are what a real worker runs around its two collectives; the
torch implementation (torchstep/global_select.py) and the DDP hook (shim/exchange/global_exchange.py)
follow them and are tested against `global_step` bit for bit.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from .momentum import MomentumConfig, mask_velocity, velocity_update
from .quantiser import DEFAULT_RANGE, QMAX, QuantConfig, average, quantise
from .selection import BlockLayout, block_layout, block_norms, error_feedback, resolve_k
from .validation import ParameterError, ShapeError

__all__ = ["CHECK_BITS", "value_shift", "norm_shift", "GlobalSelectError", "NormBoundError", "RankMismatchError",
           "PeerNonFiniteError", "GlobalLayer", "plan_layers", "check_bound", "check_word",
           "WorkerPrep", "prepare_worker", "norm_vector", "check_sums", "select_global",
           "payload_vector", "finish_worker", "average_values", "GlobalStep", "global_step",
           "value_count", "vector_words"]

CHECK_BITS = 24                  # a layer's check word: three 8-bit digits d, N * d**2 < 2**31
MAX_WORKERS = 2**15 - 1
INT64_LIMIT = 2**63
INT32_LIMIT = 2**31


def value_shift(n_workers: int) -> int:
    """s_v = ceil(log2 N): N values of |a >> s_v| <= 2**(31 - s_v) fit an int32 sum."""
    return (int(n_workers) - 1).bit_length()


def norm_shift(width: int, n_workers: int) -> int:
    """s_n = max(0, bitlen(N * W * QMAX) - 31): N norms >> s_n (each <= W * QMAX >> s_n) sum
    below 2**31."""
    return max(0, (int(n_workers) * int(width) * QMAX).bit_length() - 31)


class GlobalSelectError(ParameterError):
    """The allreduce exchange (docs/spec.md §8) cannot run as configured or the ranks disagree."""


class NormBoundError(GlobalSelectError):
    """N * W * QMAX >= 2**63 (a block norm summed over the workers could overflow int64) or
    N > 2**15 - 1 (the check words' int32 sums)."""


class RankMismatchError(GlobalSelectError):
    """The ranks' layer descriptors (check words) differ: they would sum unrelated blocks."""


class PeerNonFiniteError(GlobalSelectError):
    """Another rank's gradient held NaN in this bucket: no rank exchanges values this step."""


@dataclass(frozen=True)
class GlobalLayer:
    """One layer's static layout under global selection."""
    layer_id: int
    shape: tuple[int, ...]
    layout: BlockLayout
    k_eff: int
    name: str = ""

    @property
    def width(self) -> int:
        """W = min(B, n): the words one selected block takes in collective 2."""
        return min(self.layout.block_size, self.layout.n)

    @property
    def values(self) -> int:
        """Words this layer puts into collective 2: k_eff blocks of W (a short last block
        padded with zeros)."""
        return self.k_eff * self.width

    @property
    def sparsified(self) -> bool:
        return self.k_eff < self.layout.n_blocks


def plan_layers(shapes, *, k: int | float | list = 1, block_size: int | None = None,
                layer_ids: list[int] | None = None, names: list[str] | None = None
                ) -> list[GlobalLayer]:
    """The layers' block layouts and k_eff (§2.2, §2.4); `k` one value or one per layer."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    ks = list(k) if isinstance(k, (list, tuple)) else [k] * len(shapes)
    ids = list(range(len(shapes))) if layer_ids is None else list(layer_ids)
    names = [""] * len(shapes) if names is None else list(names)
    out = []
    for s, kk, i, nm in zip(shapes, ks, ids, names, strict=True):
        lay = block_layout(s, block_size)
        out.append(GlobalLayer(int(i), s, lay, resolve_k(kk, lay.n_blocks), nm))
    return out


def _label(layer: GlobalLayer) -> str:
    return f"layer {layer.layer_id}" + (f" {layer.name!r}" if layer.name else "")


def check_bound(layers: list[GlobalLayer], n_workers: int) -> None:
    """Refuse what the int64 collectives cannot carry exactly: N * W * QMAX < 2**63 for every
    layer (a summed block norm; W = min(B, n), the most elements a block holds), N <= 2**15 - 1
    (the check words). NormBoundError names the layer."""
    if not 1 <= int(n_workers) <= MAX_WORKERS:
        raise NormBoundError(f"global selection needs 1 <= N <= {MAX_WORKERS} workers, got "
                             f"{n_workers}")
    for lay in layers:
        if n_workers * lay.width * QMAX >= INT64_LIMIT:
            raise NormBoundError(f"{_label(lay)}: N * W * QMAX = {n_workers} * "
                                 f"{lay.width} * {QMAX} >= 2**63: its summed block "
                                 "norm could overflow int64 (use a smaller --block-size)")


def check_word(layer: GlobalLayer, cfg: QuantConfig, m_fix: int, mask: bool,
               n_workers: int) -> int:
    """c = CRC-32 of the little-endian uint32 words [layer id, n, B, k_eff, R bits, m_fix,
    mask, N], low 24 bits (m_fix = 0 and mask = 0 without momentum correction)."""
    words = np.array([layer.layer_id, layer.layout.n, layer.layout.block_size, layer.k_eff,
                      cfg.range_bits, int(m_fix), int(bool(mask)), int(n_workers)],
                     dtype="<u4")
    return zlib.crc32(words.tobytes()) & ((1 << CHECK_BITS) - 1)


def check_digits(c: int) -> list[int]:
    """The check word's three bytes, low first, each followed by its square: [d0, d0^2, d1,
    d1^2, d2, d2^2]."""
    out = []
    for i in range(CHECK_BITS // 8):
        d = (c >> (8 * i)) & 0xFF
        out += [d, d * d]
    return out


HEAD_WORDS = 2 * (CHECK_BITS // 8)       # check words per layer in collective 1


def vector_words(layers: list[GlobalLayer]) -> int:
    """Words of collective 1 (the norm vector) for these layers."""
    return 1 + HEAD_WORDS * len(layers) + sum(lay.layout.n_blocks for lay in layers)


def value_count(layers: list[GlobalLayer]) -> int:
    """Words of collective 2 (the value vector) for these layers."""
    return sum(lay.values for lay in layers)


@dataclass
class WorkerPrep:
    """One worker's layers before the exchange."""
    acc: list[np.ndarray]              # int32 a per layer (layer shape)
    velocity: list[np.ndarray] | None  # int32 u' per layer (before masking), momentum only
    norms: list[np.ndarray]            # uint64 block norms per layer
    sat_quant: list[int]
    sat_momentum: list[int]
    sat_feedback: list[int]


def prepare_worker(grads, residuals, velocities, layers: list[GlobalLayer], cfg: QuantConfig,
                   m_fix: int | None = None, where: str = "") -> WorkerPrep:
    """a (§2.1 / §7.2) and the block norms (§2.3) of every layer; NaN -> NonFiniteError."""
    acc, vel, norms, sq, sm, sf = [], [], [], [], [], []
    for j, (lay, g) in enumerate(zip(layers, grads, strict=True)):
        g = np.asarray(g)
        if tuple(g.shape) != lay.shape:
            raise ShapeError(f"{_label(lay)}: gradient shape {tuple(g.shape)}, expected {lay.shape}")
        r = residuals[j] if residuals is not None and residuals[j] is not None \
            else np.zeros(lay.shape, np.int32)
        qr = quantise(g, cfg, where=f"{where}{_label(lay)}")
        q = qr.q
        if m_fix is not None:
            u = velocities[j] if velocities is not None and velocities[j] is not None \
                else np.zeros(lay.shape, np.int32)
            q, s_m = velocity_update(u, q, m_fix)
            vel.append(q)
            sm.append(s_m)
        else:
            sm.append(0)
        a, s_f = error_feedback(r, q)
        acc.append(a)
        norms.append(block_norms(a, lay.layout))
        sq.append(qr.saturated)
        sf.append(s_f)
    return WorkerPrep(acc, vel if m_fix is not None else None, norms, sq, sm, sf)


def norm_vector(prep: WorkerPrep, checks: list[int], layers: list[GlobalLayer], n_workers: int,
                nan: bool = False) -> np.ndarray:
    """Collective 1's int32 vector: [status, check digits of layer 0 (check_digits), ..., of
    layer L-1, the block norms of layer 0 >> s_n(0), ..., of layer L-1 >> s_n(L-1)]; status is
    1 when this worker's gradient held NaN."""
    head = [1 if nan else 0]
    for c in checks:
        head += check_digits(c)
    parts = [np.array(head, dtype=np.int32)]
    for nm, lay in zip(prep.norms, layers):
        parts.append((nm >> np.uint64(norm_shift(lay.width, n_workers))).astype(np.int32))
    return np.concatenate(parts)


def check_sums(summed: np.ndarray, layers: list[GlobalLayer], n_workers: int) -> list[np.ndarray]:
    """Read collective 1's sum: PeerNonFiniteError if any worker flagged NaN, RankMismatchError
    naming the first layer whose check digits differ ((sum d)^2 != N * sum d^2, Cauchy-Schwarz:
    equal only when every worker sent the same d); else the summed norms per layer."""
    summed = np.asarray(summed).astype(np.int64)
    if int(summed[0]):
        raise PeerNonFiniteError(f"{int(summed[0])} worker(s) had NaN gradients in this exchange")
    for j, lay in enumerate(layers):
        for i in range(0, HEAD_WORDS, 2):
            s1, s2 = int(summed[1 + HEAD_WORDS * j + i]), int(summed[2 + HEAD_WORDS * j + i])
            if s1 * s1 != n_workers * s2:
                raise RankMismatchError(f"{_label(lay)}: the ranks disagree on its layout (n, "
                                        "block size, k, range R, local momentum, mask or "
                                        "worker count)")
    out, at = [], 1 + HEAD_WORDS * len(layers)
    for lay in layers:
        out.append(summed[at:at + lay.layout.n_blocks])
        at += lay.layout.n_blocks
    return out


def select_global(summed_norms: np.ndarray, k_eff: int) -> np.ndarray:
    """The k_eff blocks with the largest summed norms, ties to the lower index (§2.5), listed
    in ascending block index (the order their values travel in)."""
    if k_eff == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(-np.asarray(summed_norms, dtype=np.int64), kind="stable")
    return np.sort(order[:k_eff]).astype(np.int64)


def payload_vector(acc: np.ndarray, selected: np.ndarray, layout: BlockLayout,
                   shift: int) -> np.ndarray:
    """a >> shift (arithmetic: floor) on the selected blocks, block after block in `selected`'s
    order, W = min(B, n) words each (a short last block padded with zeros) -> int32."""
    flat = acc.reshape(-1).astype(np.int64) >> np.int64(shift)
    W = min(layout.block_size, layout.n)
    out = np.zeros(len(selected) * W, dtype=np.int32)
    for i, b in enumerate(selected):
        s, e = layout.bounds(int(b))
        out[i * W:i * W + (e - s)] = flat[s:e]
    return out


def finish_worker(prep: WorkerPrep, selected: list[np.ndarray], layers: list[GlobalLayer],
                  n_workers: int, mask: bool = True):
    """-> (value vector int32 for collective 2, new residuals, new velocities or None):
    r' = a - ((a >> s_v) << s_v) (the remainder, in [0, 2**s_v)) on the selected blocks, a
    elsewhere; u'' = u' masked there as §7.3.4."""
    sv = value_shift(n_workers)
    vals, res, vel = [], [], []
    for j, (lay, sel) in enumerate(zip(layers, selected)):
        a = prep.acc[j]
        vals.append(payload_vector(a, sel, lay.layout, sv))
        blockmask = np.zeros(lay.layout.n, dtype=bool)
        for b in sel:
            s, e = lay.layout.bounds(int(b))
            blockmask[s:e] = True
        a64 = a.reshape(-1).astype(np.int64)
        rem = a64 - ((a64 >> np.int64(sv)) << np.int64(sv))
        res.append(np.where(blockmask, rem, a64).astype(np.int32).reshape(lay.shape))
        if prep.velocity is not None:
            vel.append(mask_velocity(prep.velocity[j], sel, lay.layout, lay.k_eff, mask))
    vec = np.concatenate(vals) if vals else np.zeros(0, np.int32)
    return vec, res, (vel if prep.velocity is not None else None)


def average_values(summed: np.ndarray, selected: list[np.ndarray], layers: list[GlobalLayer],
                   n_workers: int, cfg: QuantConfig) -> list[np.ndarray]:
    """Collective 2's sum s -> each layer's averaged float32 gradient:
    float32(float64(s * 2**s_v) * cN) (§1.3 on the int64 s * 2**s_v) on the selected blocks'
    elements, 0 elsewhere."""
    summed = np.asarray(summed).astype(np.int64) << np.int64(value_shift(n_workers))
    out, at = [], 0
    for lay, sel in zip(layers, selected):
        W = lay.width
        flat = np.zeros(lay.layout.n, dtype=np.float32)
        for i, b in enumerate(sel):
            s, e = lay.layout.bounds(int(b))
            flat[s:e] = average(summed[at + i * W:at + i * W + (e - s)], n_workers, cfg)
        at += lay.values
        out.append(flat.reshape(lay.shape))
    return out


def _sum32(vectors: list[np.ndarray]) -> np.ndarray:
    """The int32 allreduce SUM: exact, and asserted to fit (the shifts guarantee it)."""
    total = np.sum(np.stack(vectors).astype(np.int64), axis=0)
    assert np.all((total >= -INT32_LIMIT) & (total < INT32_LIMIT))
    return total.astype(np.int32)


@dataclass
class GlobalStep:
    averaged: list[np.ndarray]               # float32 per layer, every worker's result
    residuals: list[list[np.ndarray]]        # [w][j] int32
    velocities: list[list[np.ndarray]] | None
    selected: list[np.ndarray]               # per layer, ascending block indices
    summed_norms: list[np.ndarray]           # per layer, the shifted norms' sums
    value_sum: np.ndarray                    # collective 2's int32 sum
    norm_vectors: list[np.ndarray]           # per worker, collective 1's input
    value_vectors: list[np.ndarray]          # per worker, collective 2's input
    sat_quant: list[int]                     # per worker, summed over layers
    sat_momentum: list[int]
    sat_feedback: list[int]


def global_step(grads, residuals, velocities, layers: list[GlobalLayer], *,
                R: float | QuantConfig = DEFAULT_RANGE, momentum: MomentumConfig | float | None = None,
                mask: bool = True) -> GlobalStep:
    """N workers' gradients (grads[w][j]) and residuals (None: zeros) -> the averaged gradients
    and new residuals (and velocities, with `momentum`), docs/spec.md §8. The collectives are
    plain sums here."""
    cfg = R if isinstance(R, QuantConfig) else QuantConfig.from_range(R)
    n = len(grads)
    check_bound(layers, n)
    m_fix = None
    if momentum is not None:
        m_fix = MomentumConfig.from_float(momentum).m_fix
    checks = [check_word(lay, cfg, m_fix or 0, mask if m_fix else False, n) for lay in layers]
    preps = [prepare_worker(grads[w], None if residuals is None else residuals[w],
                            None if velocities is None else velocities[w], layers, cfg, m_fix,
                            where=f"worker {w} ")
             for w in range(n)]
    nvecs = [norm_vector(p, checks, layers, n) for p in preps]
    summed = _sum32(nvecs)
    sums = check_sums(summed, layers, n)
    selected = [select_global(s, lay.k_eff) for s, lay in zip(sums, layers)]
    fins = [finish_worker(p, selected, layers, n, mask) for p in preps]
    vvecs = [f[0] for f in fins]
    vsum = _sum32(vvecs)
    avg = average_values(vsum, selected, layers, n, cfg)
    return GlobalStep(avg, [f[1] for f in fins], None if m_fix is None else [f[2] for f in fins],
                      selected, sums, vsum, nvecs, vvecs, [sum(p.sat_quant) for p in preps],
                      [sum(p.sat_momentum) for p in preps], [sum(p.sat_feedback) for p in preps])
