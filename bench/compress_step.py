"""Table 2: the full compress step of one training step (quantise + error feedback + block
norms + selection + ZRLE encode, every layer), in GB/s of fp32 gradient, against the memory
bandwidth measured on the same bytes in the same run (a read-sum and a copy).

Every implementation runs step 2 of the same workload (the residual from step 1 on the same
gradient, so it is nonzero) and is checked to produce the reference's frames before it is
timed. In-place implementations get their residual restored before every repetition, untimed.
"""
from __future__ import annotations

import numba
import numpy as np

from gradblock.codec.zrle import DEFAULT_LMAX_LOG2
from gradblock.refmodel.compress import compress_layer

from . import membw
from .context import BenchContext, Prepared, Unavailable, optional_module, require
from .tables import Table
from .timing import measure, threads

READ_SUM, COPY = "memory: read-sum", "memory: copy"
REFERENCE = "numpy reference compress_layer"


def check_frames(prep: Prepared, frames) -> None:
    for i, (got, ref) in enumerate(zip(frames, prep.steps)):
        got = got.numpy().view(np.uint32) if hasattr(got, "numpy") else np.asarray(got)
        if not np.array_equal(got, ref.frame):
            raise AssertionError(f"layer {i}: frame differs from the reference")
    if len(frames) != len(prep.steps):
        raise AssertionError(f"{len(frames)} frames for {len(prep.steps)} layers")


class Impl:
    """One implementation of a whole training step: `fn()` runs it, `frames()` returns the
    frames of its last run, `setup` (optional) restores its state before a repetition."""
    setup = None

    def frames(self):
        return self.last


class Reference(Impl):
    label = REFERENCE

    def __init__(self, prep: Prepared):
        self.work = [(g, r, i) for i, (g, r) in enumerate(zip(prep.workload.grads, prep.residuals))]
        self.cfg, self.k = prep.cfg, prep.k

    def fn(self):
        self.last = [compress_layer(g, r, R=self.cfg, k=self.k, layer_id=i).frame
                     for g, r, i in self.work]


class NumbaLayer(Impl):
    label = "numba compress_layer"

    def __init__(self, prep: Prepared):
        fast = optional_module("gradblock.fastpath.fast")
        self.compress = require(fast, "compress_layer")
        self.work = [(g, r, i) for i, (g, r) in enumerate(zip(prep.workload.grads, prep.residuals))]
        self.cfg, self.k = prep.cfg, prep.k

    def fn(self):
        self.last = [self.compress(g, r, R=self.cfg, k=self.k, layer_id=i).frame
                     for g, r, i in self.work]


class _NumbaInPlace(Impl):
    """Shared by the lean numba rows: they update residual copies in place, restored from
    the step's input residuals before every run (untimed)."""

    def __init__(self, prep: Prepared):
        self.fast = optional_module("gradblock.fastpath.fast")
        self.grads = prep.workload.grads
        self.initial = prep.residuals
        self.residuals = [r.copy() for r in prep.residuals]
        self.expected_residuals = [s.residual_out for s in prep.steps]
        self.cfg, self.k = prep.cfg, prep.k

    def setup(self):
        for r, r0 in zip(self.residuals, self.initial):
            np.copyto(r, r0)

    def check_state(self):
        for i, (r, ref) in enumerate(zip(self.residuals, self.expected_residuals)):
            if not np.array_equal(r, ref):
                raise AssertionError(f"layer {i}: residual differs from the reference")


class NumbaStep(_NumbaInPlace):
    """compress_step layer by layer; with several threads, pass 1 of a large layer runs in
    parallel (parallel=True), smaller layers stay serial (thread start-up would dominate)."""
    label = "numba compress_step (in place, per layer)"
    PARALLEL_MIN = 1 << 18

    def __init__(self, prep: Prepared):
        super().__init__(prep)
        step, max_words = require(self.fast, "compress_step", "max_step_words")
        self.step = step
        self.offsets, total = [], 0
        for s in prep.steps:
            self.offsets.append(total)
            total += max_words(s.layout.n, s.layout.block_size, s.k_eff)
        self.out = np.empty(total, dtype=np.uint32)

    def fn(self):
        par = numba.get_num_threads() > 1
        used = []
        for i, (g, r, off) in enumerate(zip(self.grads, self.residuals, self.offsets)):
            info = self.step(g, r, self.cfg, self.k, None, i, DEFAULT_LMAX_LOG2, self.out, off,
                             parallel=par and g.size >= self.PARALLEL_MIN)
            used.append(info.n_words)
        self.used = used

    def frames(self):
        self.check_state()
        return [self.out[o:o + n] for o, n in zip(self.offsets, self.used)]


class NumbaLayers(_NumbaInPlace):
    """compress_layers: every layer on a thread pool of the row's thread count (one thread for
    a message below fastpath.fast.PARALLEL_MIN_ELEMENTS, as the library chooses)."""
    label = "numba compress_layers (thread pool over layers)"

    def __init__(self, prep: Prepared):
        super().__init__(prep)
        self.layers = require(self.fast, "compress_layers")

    def fn(self):
        self.message, self.infos = self.layers(self.grads, self.residuals, R=self.cfg, k=self.k,
                                               n_threads=numba.get_num_threads())

    def frames(self):
        self.check_state()
        bounds = np.cumsum([0] + [i.n_words for i in self.infos])
        return [self.message[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


class NumbaMessage(Impl):
    """compress_message: the model's gradient and residual each in one flat buffer (as a DDP
    bucket holds them), the whole step in one jitted call (with several threads and a message
    of at least fastpath.fast.PARALLEL_MIN_ELEMENTS, one call per thread's group of tasks and
    phase: step_schedule.run_message). The flat gradient is built once, untimed."""
    label = "numba compress_message (one call per message)"

    def __init__(self, prep: Prepared):
        fast = optional_module("gradblock.fastpath.fast")
        plan_of, self.compress = require(fast, "message_plan", "compress_message")
        grads = prep.workload.grads
        self.plan = plan_of([g.shape for g in grads], k=prep.k)
        self.grad = np.concatenate([g.reshape(-1) for g in grads])
        self.initial = np.concatenate([r.reshape(-1) for r in prep.residuals])
        self.residual = self.initial.copy()
        self.expected = np.concatenate([s.residual_out.reshape(-1) for s in prep.steps])
        self.out = np.empty(self.plan.max_words, dtype=np.uint32)
        self.cfg = prep.cfg

    def setup(self):
        np.copyto(self.residual, self.initial)

    def fn(self):
        self.message, self.info = self.compress(self.grad, self.residual, self.plan, self.cfg,
                                                self.out, n_threads=numba.get_num_threads())

    def frames(self):
        if not np.array_equal(self.residual, self.expected):
            raise AssertionError("compress_message: residual differs from the reference")
        bounds = np.concatenate([[0], np.cumsum(self.info.n_words)])
        return [self.message[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


class TorchLayer(Impl):
    label = "torch compress_layer"

    def __init__(self, prep: Prepared):
        import torch
        tc = optional_module("gradblock.torchstep")
        self.compress = require(tc, "compress_layer")
        self.work = [(torch.from_numpy(g), torch.from_numpy(r), i)
                     for i, (g, r) in enumerate(zip(prep.workload.grads, prep.residuals))]
        self.cfg, self.k = prep.cfg, prep.k

    def fn(self):
        self.last = [self.compress(g, r, R=self.cfg, k=self.k, layer_id=i).frame
                     for g, r, i in self.work]


IMPLEMENTATIONS = [Reference, NumbaLayer, NumbaStep, NumbaLayers, NumbaMessage, TorchLayer]


def _bandwidth_rows(words: np.ndarray, ctx: BenchContext):
    """Seconds for a read-sum and for a copy of `words` (compiled and warmed first)."""
    dst = np.empty_like(words)
    if membw.read_sum(words) != words.sum(dtype=np.uint64):
        raise AssertionError("read_sum kernel is wrong")
    membw.copy_into(dst, words)
    t_read = measure(lambda: membw.read_sum(words), ctx.reps, ctx.warmup).median
    t_copy = measure(lambda: membw.copy_into(dst, words), ctx.reps, ctx.warmup).median
    return t_read, t_copy


def numba_call_overhead(ctx: BenchContext) -> float | None:
    """Seconds one compress_step call costs on a 1-element layer: the fixed per-layer price
    (argument checks, dispatch) that a model with many small layers pays once per layer."""
    try:
        fast = optional_module("gradblock.fastpath.fast")
        step = require(fast, "compress_step")
    except Unavailable:
        return None
    g = np.ones(1, dtype=np.float32)
    r = np.zeros(1, dtype=np.int32)
    out = np.empty(64, dtype=np.uint32)
    return measure(lambda: step(g, r, ctx.cfg, 1, None, 0, DEFAULT_LMAX_LOG2, out, 0),
                   max(ctx.reps, 20), ctx.warmup).median


def _time_impl(impl: Impl, prep: Prepared, ctx: BenchContext) -> float:
    """Run once and check against the reference, then the median of ctx.reps runs."""
    if impl.setup:
        impl.setup()
    impl.fn()
    check_frames(prep, impl.frames())
    return measure(impl.fn, ctx.reps, ctx.warmup, setup=impl.setup).median


def run(ctx: BenchContext) -> Table:
    table = Table("compress", "2. Full compress step per training step",
                  ["workload", "threads", "implementation", "time (ms)", "GB/s", "of read-sum",
                   "of copy", "speed-up vs numpy"])
    for w in ctx.workloads:
        prep = ctx.prepared(w)
        words = membw.flat_words(w.grads)
        gbytes = w.nbytes / 1e9
        for n_threads in ctx.thread_counts:
            with threads(n_threads):
                t_read, t_copy = _bandwidth_rows(words, ctx)
                rows = [(READ_SUM, t_read, None), (COPY, t_copy, None)]
                for cls in IMPLEMENTATIONS:
                    t, cell = ctx.attempt(f"compress {w.name} x{n_threads} {cls.label}",
                                          lambda cls=cls: _time_impl(cls(prep), prep, ctx))
                    rows.append((cls.label, t, cell))
                    if t is not None:
                        ctx.log(f"compress {w.name} x{n_threads} {cls.label}: {t * 1e3:.3f} ms")
                overhead, _ = ctx.attempt("numba compress_step call overhead",
                                          lambda: numba_call_overhead(ctx))
            t_step = next((t for label, t, _ in rows if label == NumbaStep.label and t), None)
            if overhead is not None and t_step:
                fixed = overhead * len(w.grads)
                table.notes.append(
                    f"{w.name} ×{n_threads}: one numba compress_step call on a 1-element layer "
                    f"takes {overhead * 1e6:.1f} µs; × {len(w.grads)} layers = {fixed * 1e3:.3f} ms, "
                    f"{fixed / t_step:.0%} of the in-place step's {t_step * 1e3:.3f} ms")
            t_ref = next((t for label, t, _ in rows if label == REFERENCE and t), None)
            for label, t, cell in rows:
                labels = [w.name, str(n_threads), label]
                if t is None:
                    table.unmeasured(labels, cell)
                    continue
                gbs = gbytes / t
                table.add(*labels, t * 1e3, gbs, gbs / (gbytes / t_read), gbs / (gbytes / t_copy),
                          t_ref / t if t_ref else "no reference")
        table.notes.append(f"{w.name}: {w.n_params:,} fp32 gradients = {w.nbytes / 2**20:.1f} MiB "
                           f"per step, {len(w.grads)} layers; gradients {w.source}")
    table.notes.append("GB/s = fp32 gradient bytes (4 per parameter, 1e9 B/GB) per second. The "
                       "memory rows read-sum and copy one contiguous buffer of those bytes with "
                       "numba (parallel over 256 KiB chunks); 'of read-sum' / 'of copy' divide a "
                       "row's GB/s by theirs. An in-place step reads g and r and writes r' (the "
                       "same traffic as a copy, which also reads its destination)")
    table.notes.append("every implementation's frames are checked against the reference before "
                       "it is timed; per-layer Python loop included")
    return table
