"""The compress step in numba: bit-exact with `refmodel.compress.compress_layer` (spec §1–§4).

The public API; the kernels are in `fastpath.step_kernels`, the thread scheduler in
`fastpath.step_schedule`, argument checks in `refmodel.validation` (shared with the
reference, so both raise the same class in the same order) and the cached per-layer plan in
`refmodel.plan`. Entry points, from most to least complete:

* `compress_layer(grad, residual=None, *, R, k, block_size, layer_id, lmax_log2, where)`
  returns the same `LayerStep` as the numpy reference, every intermediate included.
* `compress_step(grad, residual, cfg, k, block_size, layer_id, lmax_log2, out_words, ...)`
  is the lean per-layer step: it updates `residual` in place, writes the frame into
  `out_words` and returns a `StepInfo`; nothing of size n is allocated.
* `compress_layers(grads, residuals, ...)` runs the lean step over many layers (on a thread
  pool with n_threads > 1) and returns the concatenated message.
* `MessagePlan` + `compress_message(grad_flat, residual_flat, plan, out)`: every layer of a
  message kept in one flat buffer (as a DDP bucket is), the whole step in one jitted call.

Plus `quantise(x, R)`, `block_norms(acc, layout)` and `select_blocks(norms, k_eff)`, as
their namesakes in `refmodel.quantiser` / `.selection`.

Everything, NaN included, is checked before a residual is modified. Every entry point takes
float32 gradients, and float16 / bfloat16 (ml_dtypes) ones, widened exactly to float32 by the
shared validator before any kernel runs (docs/spec.md §1.2): the results are those of the
widened array, bit for bit.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Sequence

import numba as nb
import numpy as np

from gradblock.codec.zrle import DEFAULT_LMAX_LOG2
from gradblock.refmodel.compress import LayerStep
from gradblock.refmodel.plan import (MessagePlan, StepPlan, max_step_words, message_plan,
                                     step_plan, undo_log_size)
from gradblock.refmodel.precision import dtype_error, is_gradient_dtype, widen
from gradblock.refmodel.quantiser import DEFAULT_RANGE, QuantConfig, QuantResult, saturation_bits
from gradblock.refmodel.selection import BlockLayout, norm_shift
from gradblock.refmodel.validation import (ShapeError, check_gradient, check_range,
                                           check_residual, check_step)

from . import step_kernels as K
from .step_schedule import Job, StepInfo, nan_error, run_message, thread_count

__all__ = ["compress_layer", "compress_step", "compress_layers", "quantise", "block_norms",
           "select_blocks", "StepInfo", "max_step_words", "LayerStep", "QuantResult",
           "MessagePlan", "message_plan", "compress_message", "MessageInfo"]


def block_norms(acc: np.ndarray, layout: BlockLayout, norm: str = "l1") -> np.ndarray:
    """Exact L1 or L2 norm of every block (uint64), as refmodel.selection.block_norms."""
    nsh = norm_shift(norm, layout.block_size)
    acc = np.asarray(acc)
    if acc.dtype != np.int32 or acc.size != layout.n:
        raise ValueError(f"acc must be int32 with {layout.n} elements, got {acc.dtype} "
                         f"with {acc.size}")
    norms = np.empty(layout.n_blocks, dtype=np.uint64)
    K.block_norms_kernel(np.ascontiguousarray(acc).reshape(-1), layout.block_size,
                         norms.view(np.int64), nsh)
    return norms


def select_blocks(norms: np.ndarray, k_eff: int) -> np.ndarray:
    """The k_eff largest norms' indices in rank order (norm descending, lower index first
    among equals), as refmodel.selection.select_blocks, in O(n_blocks log k_eff)."""
    norms = np.asarray(norms)
    if norms.dtype != np.uint64 or norms.ndim != 1:
        raise ValueError(f"norms must be a 1-D uint64 array, got {norms.dtype} {norms.shape}")
    k_eff = operator.index(k_eff)
    if not 0 <= k_eff <= norms.size:
        raise ValueError(f"k_eff must be in 0..{norms.size}, got {k_eff}")
    if norms.size and int(norms.max()) >= 2**63:
        raise ValueError("norms must be below 2**63 (a block norm is at most n * QMAX)")
    selected = np.empty(k_eff, dtype=np.int64)
    K.select_top_k(np.ascontiguousarray(norms).view(np.int64), k_eff, selected)
    return selected


def _bits(grad: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(grad).reshape(-1).view(np.uint32)


def _nan_of(where: str):
    return lambda g: nan_error(_bits(g), where)


def quantise(x, R: float | QuantConfig = DEFAULT_RANGE, where: str = "") -> QuantResult:
    """float32 -> int32 codes (spec §1), as refmodel.quantiser.quantise. NaN raises
    NonFiniteError naming the count and the first flat index. float16 / bfloat16 are widened
    exactly to float32 first (§1.2), other dtypes refused, as the reference does."""
    cfg = check_range(R)
    x = np.asarray(x)
    if not is_gradient_dtype(x.dtype):
        raise dtype_error("quantise's input", x.dtype)
    x = widen(x)
    gbits = _bits(x)
    q = np.empty(gbits.size, dtype=np.int32)
    satq, nan = K.quantise_kernel(gbits, q, cfg.M, cfg.k, cfg.range_bits,
                                  saturation_bits(cfg))
    if nan:
        raise nan_error(gbits, where)
    return QuantResult(q.reshape(x.shape), int(satq))


def compress_layer(grad, residual: np.ndarray | None = None, *,
                   R: float | QuantConfig = DEFAULT_RANGE, k: int | float = 1,
                   block_size: int | None = None, layer_id: int = 0,
                   lmax_log2: int = DEFAULT_LMAX_LOG2, where: str = "",
                   norm: str = "l1") -> LayerStep:
    """quantise -> error feedback -> block norms -> top-k -> mask -> ZRLE frame, every
    intermediate kept; the same bits (and errors) as refmodel.compress.compress_layer."""
    grad = np.asarray(grad)
    if residual is None:
        residual = np.zeros(grad.shape, dtype=np.int32)
    cfg, grad, residual, plan = check_step(
        grad, residual, R, nan_error=_nan_of(where),
        late_checks=lambda: step_plan(grad.shape, k, block_size, layer_id, lmax_log2, norm))
    gbits = _bits(grad)
    layout = plan.layout
    n = layout.n
    r = np.ascontiguousarray(residual).reshape(-1)
    q = np.empty(n, dtype=np.int32)
    acc = np.empty(n, dtype=np.int32)
    norms = np.empty(layout.n_blocks, dtype=np.uint64)
    satq, satfb, nan = K.pass1_keep(gbits, r, q, acc, layout.block_size, norms.view(np.int64),
                                    cfg.M, cfg.k, cfg.range_bits, saturation_bits(cfg),
                                    plan.norm_shift)
    if nan:
        raise nan_error(gbits, where)
    selected = np.empty(plan.k_eff, dtype=np.int64)
    K.select_top_k(norms.view(np.int64), plan.k_eff, selected)
    payload = np.empty(n, dtype=np.int32)
    res_out = np.empty(n, dtype=np.int32)
    frame = np.empty(max_step_words(n, layout.block_size, plan.k_eff), dtype=np.uint32)
    mask = np.zeros(layout.n_blocks, dtype=np.uint8)
    mask[selected] = 1
    used = K.pass2_keep(acc, layout.block_size, mask, payload, res_out, frame, 0, plan.layer_id,
                        cfg.range_bits, plan.lmax_log2)
    shape = grad.shape
    return LayerStep(layout, plan.k_eff, q.reshape(shape), acc.reshape(shape), norms, selected,
                     payload.reshape(shape), res_out.reshape(shape), frame[:used].copy(),
                     int(satq), int(satfb))


def _validate_layer(grad, residual, cfg, k, block_size, layer_id, lmax_log2, where, norm="l1"):
    """The in-place step's checks (all but NaN and the output size), in the contract's order.
    Returns (cfg, float bits, flat residual view, plan)."""
    cfg, grad, residual, plan = check_step(
        grad, residual, cfg, contiguous=True, writeable=True, same_shape=False,
        nan_error=_nan_of(where),
        late_checks=lambda: step_plan(np.shape(grad), k, block_size, layer_id, lmax_log2, norm))
    return cfg, _bits(grad), residual.reshape(-1), plan


def compress_step(grad: np.ndarray, residual: np.ndarray, cfg: QuantConfig | float,
                  k: int | float, block_size: int | None, layer_id: int, lmax_log2: int,
                  out_words: np.ndarray, offset: int = 0, *, parallel: bool | int = False,
                  where: str = "", norm: str = "l1") -> StepInfo:
    """One layer's compress step, lean and in place.

    grad: float32 (or float16 / bfloat16, widened: §1.2), C-contiguous, the layer's shape
        (it decides the blocks).
    residual: int32, C-contiguous, writeable, grad.size elements (any shape); replaced by
        the new residual (0 on the selected blocks, clamp(r + Q(g)) elsewhere).
    out_words: uint32 1-D; the frame is written at out_words[offset:offset + n_words] and
        needs max_step_words(n, B, k_eff) words from offset (checked first).
    parallel: False, True (numba.get_num_threads() threads) or a thread count: split pass 1
        of this layer (and its NaN check) across a thread pool; worth it from about a
        million elements on. Selection and encoding stay on one thread.

    Everything, NaN included, is checked before the residual is touched."""
    cfg, gbits, r, plan = _validate_layer(grad, residual, cfg, k, block_size, layer_id,
                                          lmax_log2, where, norm)
    offset = _check_out_words(out_words, offset, [plan])
    lay = plan.layout
    threads = thread_count(parallel, "parallel")
    if threads > 1 and lay.n_blocks > 1:
        job = Job(cfg, [(gbits, r, plan)], out_words, [offset])
        return job.run(threads, where_of=lambda i: where)[0]
    n_words, satq, satfb = K.layer_kernel(gbits, r, lay.block_size, lay.n_blocks, plan.k_eff,
                                          cfg.M, cfg.k, cfg.range_bits, saturation_bits(cfg),
                                          out_words, offset, plan.layer_id, plan.lmax_log2,
                                          np.empty(lay.n, dtype=np.int32),
                                          np.empty(undo_log_size(lay.n, lay.n_blocks,
                                                                 lay.block_size), dtype=np.int64),
                                          plan.norm_shift)
    if n_words < 0:                   # a NaN: the kernel has restored the residual
        raise nan_error(gbits, where)
    return StepInfo(int(n_words), plan.k_eff, lay.n_blocks, lay.block_size, int(satq), int(satfb))


def _check_out_words(out_words, offset, plans: Sequence[StepPlan] = (),
                     need: int | None = None) -> int:
    """out_words is a writeable 1-D uint32 array with room for every plan's frame from offset
    (or for `need` words, when the caller has summed them already)."""
    if not isinstance(out_words, np.ndarray) or out_words.dtype != np.uint32:
        raise TypeError(f"out_words must be a numpy uint32 array, got "
                        f"{getattr(out_words, 'dtype', type(out_words).__name__)}")
    if out_words.ndim != 1:
        raise ShapeError("out_words must be 1-D")
    if not out_words.flags.c_contiguous:
        raise ShapeError("out_words must be C-contiguous")
    if not out_words.flags.writeable:
        raise ShapeError("out_words must be writeable")
    offset = operator.index(offset)
    if need is None:
        need = sum(max_step_words(p.layout.n, p.layout.block_size, p.k_eff) for p in plans)
    if offset < 0 or out_words.size - offset < need:
        raise ShapeError(f"out_words has {out_words.size - offset} words from offset {offset}; "
                         f"this step may need {need} (see max_step_words)")
    return offset


# Below this many elements a message runs on one thread whatever n_threads asks: measured on
# a 2-core machine, the pool's hand-offs cost more than a second thread gives there (ResNet-20,
# 0.27 M elements: 3x slower on 2 threads), while ResNet-50 (25.6 M) gains (docs/benchmarks.md).
PARALLEL_MIN_ELEMENTS = 1 << 21


def message_threads(plan: MessagePlan, n_threads: int,
                    min_parallel: int = PARALLEL_MIN_ELEMENTS) -> int:
    """The threads compress_message uses: n_threads, or 1 for a message below min_parallel
    elements."""
    threads = thread_count(n_threads, "n_threads")
    return threads if plan.n >= min_parallel else 1


def compress_layers(grads: Sequence[np.ndarray], residuals: Sequence[np.ndarray], *,
                    R: float | QuantConfig = DEFAULT_RANGE, k: int | float = 1,
                    block_size: int | None | Sequence[int | None] = None,
                    layer_ids: Sequence[int] | None = None, lmax_log2: int = DEFAULT_LMAX_LOG2,
                    n_threads: int | None = None,
                    min_parallel: int = PARALLEL_MIN_ELEMENTS,
                    norm: str = "l1") -> tuple[np.ndarray, list[StepInfo]]:
    """compress_step over every layer (residuals updated in place) -> (message, infos).

    The message is the layers' frames concatenated in the order given. `k` and
    `block_size` may be one value or a list with one entry per layer; `layer_ids`
    defaults to 0, 1, 2, ... With n_threads > 1 (default: numba's thread count) the work
    is cut into chunks of about 256K elements, large layers included, and balanced over a
    thread pool (the kernels release the GIL), for messages of at least min_parallel
    elements (smaller ones run on one thread: message_threads).

    Everything is validated before any residual is modified, in the single-layer order
    generalised: R; every layer's arrays (dtype, layout); a NaN (the first layer holding
    one); every layer's residual size, then its parameters (refmodel.plan.message_plan)."""
    grads, residuals = list(grads), list(residuals)
    count = len(grads)
    if len(residuals) != count:
        raise ShapeError(f"{count} gradients but {len(residuals)} residuals")
    cfg = check_range(R)
    threads = nb.get_num_threads() if n_threads is None else thread_count(n_threads, "n_threads")
    for i, (g, r) in enumerate(zip(grads, residuals)):
        check_residual(r, contiguous=True, writeable=True)
        grads[i] = check_gradient(g, contiguous=True)     # float16 / bfloat16: widened (§1.2)
    bits = [_bits(g) for g in grads]

    def first_nan():
        for i, b in enumerate(bits):
            nan = nan_error(b, f"layer {i}")
            if nan is not None:
                return nan
        return None

    try:
        for i, (g, r) in enumerate(zip(grads, residuals)):
            if r.size != g.size:
                raise ShapeError(f"layer {i}: residual has {r.size} elements, gradient {g.size}")
        plan = message_plan([g.shape for g in grads], k, block_size, layer_ids, lmax_log2, norm)
    except (ValueError, TypeError):
        nan = first_nan()
        if nan is not None:
            raise nan from None
        raise
    threads = message_threads(plan, threads, min_parallel)
    layers = [(b, r.reshape(-1), p) for b, r, p in zip(bits, residuals, plan.layers)]
    offsets = [int(o) for o in plan.word_offsets[:-1]]
    scratch = np.empty(plan.max_words, dtype=np.uint32)   # pages never written cost nothing
    if threads > 1 or plan.n >= min_parallel:
        infos = Job(cfg, layers, scratch, offsets).run(threads, where_of=lambda i: f"layer {i}")
    else:
        infos = _small_layers(cfg, layers, scratch, offsets, first_nan)
    n_words = np.array([i.n_words for i in infos], dtype=np.int64)
    message = np.empty(int(n_words.sum()), dtype=np.uint32)
    K.compact_frames(scratch, plan.word_offsets[:-1], n_words, message)
    return message, infos


def _small_layers(cfg, layers, out, offsets, first_nan) -> list[StepInfo]:
    """compress_layers on one thread for a small message: a NaN scan first (the message is
    cache-sized, so a second read costs little), then one kernel call per layer, with one
    undo buffer for all (never read back: no NaN is left to find). Fewer Python steps per
    layer than the Job's tasks, which matters for many small layers."""
    nan = first_nan()
    if nan is not None:
        raise nan
    tsat = saturation_bits(cfg)
    undo = np.empty(max((p.layout.n for _, _, p in layers), default=0), dtype=np.int32)
    log = np.empty(max((undo_log_size(p.layout.n, p.layout.n_blocks, p.layout.block_size)
                        for _, _, p in layers), default=0), dtype=np.int64)
    infos = []
    for (gbits, r, p), off in zip(layers, offsets):
        lay = p.layout
        n_words, satq, satfb = K.layer_kernel(gbits, r, lay.block_size, lay.n_blocks, p.k_eff,
                                              cfg.M, cfg.k, cfg.range_bits, tsat, out, off,
                                              p.layer_id, p.lmax_log2, undo, log, p.norm_shift)
        infos.append(StepInfo(int(n_words), p.k_eff, lay.n_blocks, lay.block_size, int(satq),
                              int(satfb)))
    return infos


@dataclass(frozen=True)
class MessageInfo:
    """What compress_message reports per layer (int64 arrays, in the plan's layer order)."""
    plan: MessagePlan
    n_words: np.ndarray
    sat_quant: np.ndarray
    sat_feedback: np.ndarray

    def step_infos(self) -> list[StepInfo]:
        return [StepInfo(int(self.n_words[i]), p.k_eff, p.layout.n_blocks, p.layout.block_size,
                         int(self.sat_quant[i]), int(self.sat_feedback[i]))
                for i, p in enumerate(self.plan.layers)]


def compress_message(grad: np.ndarray, residual: np.ndarray, plan: MessagePlan,
                     R: float | QuantConfig = DEFAULT_RANGE, out: np.ndarray | None = None, *,
                     n_threads: int = 1,
                     min_parallel: int = PARALLEL_MIN_ELEMENTS) -> tuple[np.ndarray, MessageInfo]:
    """The compress step of every layer of a message kept in one flat buffer (a DDP bucket),
    in ONE jitted call: no per-layer Python. Same frames and residuals as compress_layers.

    grad: float32 1-D C-contiguous, plan.n elements (layer i at plan.elem_offsets[i:i+2]).
    residual: int32 1-D C-contiguous writeable, plan.n elements; updated in place.
    out: optional uint32 1-D buffer of at least plan.max_words words (allocated if None).
    Returns (message, info): the message is a view out[:total], frames back to back.
    n_threads > 1 runs the message on the thread pool (step_schedule.run_message: large
    layers split, each thread's share in one kernel call per phase), for a message of at
    least min_parallel elements (message_threads).
    NaN anywhere raises NonFiniteError naming the first layer, with nothing modified: it is
    found during the step's own read of the gradient, and the residuals are then restored
    (step_kernels.pass1_guarded / restore)."""
    if not isinstance(plan, MessagePlan):
        raise TypeError(f"plan must be a MessagePlan (see message_plan), got {type(plan).__name__}")
    cfg = check_range(R)
    residual = check_residual(residual, contiguous=True, writeable=True)
    grad = check_gradient(grad, contiguous=True)
    for name, a in (("residual", residual), ("grad", grad)):
        if a.ndim != 1 or a.size != plan.n:
            raise ShapeError(f"{name} must be 1-D with the plan's {plan.n} elements, got shape "
                             f"{a.shape}")
    if out is None:
        out = np.empty(plan.max_words, dtype=np.uint32)
    else:               # plan.max_words is the per-layer sum, without a Python loop per call
        _check_out_words(out, 0, need=plan.max_words)
    threads = message_threads(plan, n_threads, min_parallel)
    gbits = grad.view(np.uint32)
    count = plan.count
    n_words = np.zeros(count, dtype=np.int64)
    satq = np.zeros(count, dtype=np.int64)
    satfb = np.zeros(count, dtype=np.int64)
    if threads > 1 and count:
        total = run_message(cfg, gbits, residual, plan, out, threads, n_words, satq, satfb)
    else:
        bad, total = K.message_kernel(gbits, residual, plan.elem_offsets, plan.block_size,
                                      plan.n_blocks, plan.k_eff, plan.layer_id, plan.lmax_log2,
                                      cfg.M, cfg.k, cfg.range_bits, saturation_bits(cfg),
                                      out, 0, n_words, satq, satfb,
                                      np.empty(plan.n, dtype=np.int32),   # undo: pages written
                                      np.empty(plan.undo_log_size, dtype=np.int64),  # on demand
                                      plan.norm_shift)
        if total < 0:
            lo, hi = plan.elem_offsets[bad], plan.elem_offsets[bad + 1]
            raise nan_error(gbits[lo:hi], f"layer {bad}")
    return out[:int(total)], MessageInfo(plan, n_words, satq, satfb)
