"""The thread scheduler of the numba compress step: validated layers, cut into tasks of
about CHUNK elements (a large layer split by block ranges), balanced over a thread pool
(the kernels release the GIL). `Job` runs separate layer arrays (compress_layers,
compress_step) one kernel call per task; `run_message` runs a flat message
(compress_message) one kernel call per group of tasks, from tables cached per plan."""
from __future__ import annotations

from dataclasses import dataclass

import concurrent.futures as cf
import functools
import operator
import threading

import numba as nb
import numpy as np

from gradblock.refmodel.plan import undo_log_size
from gradblock.refmodel.quantiser import NonFiniteError, QuantConfig, saturation_bits

from . import step_kernels as K


def nan_error(gbits: np.ndarray, where: str) -> NonFiniteError | None:
    """The NonFiniteError for float32 bits `gbits` (count and first index), or None."""
    count = int(K.nan_count(gbits))
    if count == 0:
        return None
    is_nan = (gbits & np.uint32(K.ABS_MASK)) > np.uint32(K.INF_BITS)
    return NonFiniteError(count, int(np.argmax(is_nan)), where)


@dataclass(frozen=True)
class StepInfo:
    """What one lean step reports; the frame is out_words[offset:offset + n_words]."""
    n_words: int
    k_eff: int
    n_blocks: int
    block_size: int
    sat_quant: int       # |g| > R (incl. +-Inf)
    sat_feedback: int    # |r + q| > QMAX


def thread_count(value, name: str) -> int:
    """True -> numba's thread count; False/None -> 1; else a positive integer."""
    if value is True:
        return nb.get_num_threads()
    if value is False or value is None:
        return 1
    threads = operator.index(value)
    if threads < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return threads


_pool_lock = threading.Lock()
_pools: dict[int, cf.ThreadPoolExecutor] = {}


def _thread_pool(workers: int) -> cf.ThreadPoolExecutor:
    """A pool of exactly `workers` threads, kept for the process (starting threads costs
    more than a small layer); one pool per size, so a call never runs on more threads
    than it asked for."""
    with _pool_lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = cf.ThreadPoolExecutor(max_workers=workers,
                                                           thread_name_prefix="gradblock")
        return pool


def _balanced_groups(tasks: list, cost, groups: int) -> list[list]:
    """Longest-processing-time-first: each task (costliest first) to the lightest group."""
    load = [0] * groups
    out: list[list] = [[] for _ in range(groups)]
    for t in sorted(tasks, key=lambda t: -cost(t)):
        g = load.index(min(load))
        out[g].append(t)
        load[g] += cost(t) + 2048          # a per-task overhead, so tiny tasks spread too
    return [g for g in out if g]


class Job:
    """Validated layers run on a thread pool, the work cut into tasks of about CHUNK
    elements (a layer larger than that is split by block ranges) and balanced over the
    threads, in two phases:

    1. pass 1 of every task (step_kernels.pass1_guarded: residual <- a, block norms,
       saturation counts, NaNs counted in the same read). If any task met a NaN, every task
       is undone (step_kernels.restore) and the first layer's NaN raised: nothing modified;
    2. per layer: selection, then pass 2 (encode the selected blocks, zero their residual).
    """
    CHUNK = 1 << 18
    GROUPS_PER_THREAD = 4

    def __init__(self, cfg: QuantConfig, layers, out: np.ndarray, offsets: list[int]):
        self.cfg, self.layers, self.out, self.offsets = cfg, layers, out, offsets
        self.lays = [p.layout for _, _, p in layers]

    def _block_ranges(self, i):
        lay = self.lays[i]
        per = max(1, self.CHUNK // lay.block_size)
        return [(i, j, min(j + per, lay.n_blocks)) for j in range(0, lay.n_blocks, per)]

    def _elems(self, task):
        i, jlo, jhi = task
        lay = self.lays[i]
        return min(jhi * lay.block_size, lay.n) - jlo * lay.block_size

    def run(self, threads: int, where_of) -> list[StepInfo]:
        cfg, layers, lays = self.cfg, self.layers, self.lays
        count = len(layers)
        tasks = [t for i in range(count) for t in self._block_ranges(i)]
        pool = _thread_pool(threads) if threads > 1 else None

        def spread(fn, tasks, cost, inline_below):
            # A phase whose work is below `inline_below` runs on this thread: a round trip
            # through the pool costs about as much. Otherwise make more groups than threads:
            # the pool hands them out as threads come free, so a thread that the OS runs
            # slowly takes fewer of them.
            if threads == 1 or sum(cost(t) for t in tasks) < inline_below:
                return [fn(t) for t in tasks]
            groups = _balanced_groups(tasks, cost, self.GROUPS_PER_THREAD * threads)
            return [x for part in pool.map(lambda g: [fn(t) for t in g], groups) for x in part]

        norms = [np.empty(lay.n_blocks, dtype=np.int64) for lay in lays]
        tsat = saturation_bits(cfg)

        def pass1_task(t):
            # the task's own slice (it starts on a block boundary) and its own undo buffers
            i, jlo, jhi = t
            gbits, r, plan = layers[i]
            B = plan.layout.block_size
            lo = jlo * B
            hi = lo + self._elems(t)
            g_t, r_t = gbits[lo:hi], r[lo:hi]
            undo = np.empty(hi - lo, dtype=np.int32)
            log = np.empty(undo_log_size(hi - lo, jhi - jlo, B), dtype=np.int64)
            sq, sf, nan, nlog = K.pass1_guarded(g_t, r_t, B, norms[i][jlo:jhi], cfg.M, cfg.k,
                                                cfg.range_bits, tsat, 0, jhi - jlo, undo, log,
                                                0, 0, plan.norm_shift)
            return i, int(sq), int(sf), int(nan), (g_t, r_t, undo, log, int(nlog))

        done = spread(pass1_task, tasks, self._elems, self.CHUNK)
        bad = sorted(i for i, _, _, nan, _ in done if nan)
        if bad:
            for _, _, _, _, (g_t, r_t, undo, log, nlog) in done:
                K.restore(g_t, r_t, undo, log, nlog, 0, cfg.M, cfg.k, tsat)
            raise nan_error(layers[bad[0]][0], where_of(bad[0]))
        satq, satfb = [0] * count, [0] * count
        for i, sq, sf, _, _ in done:
            satq[i] += sq
            satfb[i] += sf

        def finish_task(i):
            _, r, plan = layers[i]
            return i, int(K.step_tail(r, plan.layout.block_size, norms[i], plan.k_eff,
                                      self.out, self.offsets[i], plan.layer_id, cfg.range_bits,
                                      plan.lmax_log2))

        def finish_cost(i):          # the mask scan plus the selected elements
            return lays[i].n_blocks + min(lays[i].n, layers[i][2].k_eff * lays[i].block_size)

        n_words = [0] * count
        for i, nw in spread(finish_task, list(range(count)), finish_cost, self.CHUNK):
            n_words[i] = nw
        return [StepInfo(n_words[i], layers[i][2].k_eff, lays[i].n_blocks, lays[i].block_size,
                         satq[i], satfb[i]) for i in range(count)]


@dataclass(frozen=True)
class MessageTasks:
    """A message plan cut into pass-1 tasks of about `chunk` elements (a large layer split
    by block ranges, starting on block boundaries) and balanced into groups, as int64 tables
    for the group kernels; built once per (plan, group count)."""
    elo: np.ndarray          # per task: first message element
    ehi: np.ndarray          # per task: end element
    B: np.ndarray            # per task: block size
    nblk: np.ndarray         # per task: blocks
    noff: np.ndarray         # per task: first norm in the message's norms
    nsh: np.ndarray          # per task: its layer's norm shift (-1: L1; docs/spec.md §2.3)
    logoff: np.ndarray       # per task: first entry of its undo log
    log_size: int
    b_off: np.ndarray        # per layer: first norm (count + 1 entries)
    pass1_groups: list       # int64 arrays of task indices
    tail_groups: list        # int64 arrays of layer indices


@functools.lru_cache(maxsize=32)
def message_tasks(plan, groups: int, chunk: int) -> MessageTasks:
    rows = []                # (elo, ehi, B, nblk, noff, nsh)
    b_off = [0]
    for i, p in enumerate(plan.layers):
        lay = p.layout
        base = int(plan.elem_offsets[i])
        per = max(1, chunk // lay.block_size)
        for j in range(0, lay.n_blocks, per):
            jhi = min(j + per, lay.n_blocks)
            rows.append((base + j * lay.block_size, base + min(jhi * lay.block_size, lay.n),
                         lay.block_size, jhi - j, b_off[-1] + j, p.norm_shift))
        b_off.append(b_off[-1] + lay.n_blocks)
    logs = [undo_log_size(hi - lo, nblk, B) for lo, hi, B, nblk, _, _ in rows]
    logoff = np.concatenate([[0], np.cumsum(logs, dtype=np.int64)])
    cols = [np.array(c, dtype=np.int64).reshape(-1) for c in zip(*rows)] if rows else \
        [np.zeros(0, np.int64)] * 6

    def grouped(items, cost):
        return [np.array(g, dtype=np.int64)
                for g in _balanced_groups(items, cost, groups)]

    tail_cost = [p.layout.n_blocks + min(p.layout.n, p.k_eff * p.layout.block_size)
                 for p in plan.layers]
    return MessageTasks(*cols, logoff[:-1], int(logoff[-1]), np.array(b_off, dtype=np.int64),
                        grouped(list(range(len(rows))), lambda t: rows[t][1] - rows[t][0]),
                        grouped(list(range(plan.count)), lambda i: tail_cost[i]))


def run_message(cfg: QuantConfig, gbits: np.ndarray, r: np.ndarray, plan, out: np.ndarray,
                threads: int, n_words: np.ndarray, satq: np.ndarray, satfb: np.ndarray) -> int:
    """compress_message on `threads` threads: pass 1 of every task (one kernel call per group
    of tasks, Job.GROUPS_PER_THREAD groups per thread), then selection + pass 2 (one call per
    group of layers) into per-layer slots of a scratch buffer, compacted into out. A NaN
    anywhere: every residual restored, NonFiniteError for the first layer holding one.
    Fills n_words/satq/satfb per layer and returns the message length."""
    mt = message_tasks(plan, Job.GROUPS_PER_THREAD * threads, Job.CHUNK)
    n_tasks = mt.elo.size
    tsat = saturation_bits(cfg)
    undo = np.empty(r.size, dtype=np.int32)            # pages written only where saturated
    log = np.empty(mt.log_size, dtype=np.int64)
    norms = np.empty(int(mt.b_off[-1]), dtype=np.int64)
    t_satq, t_satfb, t_nan, t_nlog = (np.zeros(n_tasks, dtype=np.int64) for _ in range(4))
    pool = _thread_pool(threads)

    def pass1(tasks):
        K.pass1_group(gbits, r, undo, log, tasks, mt.elo, mt.ehi, mt.B, mt.nblk, mt.noff,
                      mt.logoff, norms, cfg.M, cfg.k, cfg.range_bits, tsat, t_satq, t_satfb,
                      t_nan, t_nlog, mt.nsh)

    list(pool.map(pass1, mt.pass1_groups))
    if t_nan.any():
        K.restore_tasks(gbits, r, undo, log, mt.elo, mt.ehi, mt.logoff, t_nlog, cfg.M, cfg.k,
                        tsat)
        bad = int(np.searchsorted(plan.elem_offsets, mt.elo[np.argmax(t_nan > 0)], "right")) - 1
        lo, hi = plan.elem_offsets[bad], plan.elem_offsets[bad + 1]
        raise nan_error(gbits[lo:hi], f"layer {bad}")
    layer_of = np.searchsorted(plan.elem_offsets, mt.elo, "right") - 1
    satq[:] = 0
    satfb[:] = 0
    np.add.at(satq, layer_of, t_satq)
    np.add.at(satfb, layer_of, t_satfb)
    scratch = np.empty(plan.max_words, dtype=np.uint32)
    w_off = plan.word_offsets

    def tail(layers):
        K.tail_group(r, layers, plan.elem_offsets, plan.block_size, norms, mt.b_off, plan.k_eff,
                     scratch, w_off, plan.layer_id, cfg.range_bits, plan.lmax_log2, n_words)

    list(pool.map(tail, mt.tail_groups))
    return int(K.compact_frames(scratch, w_off[:-1], n_words, out))
