"""The thread scheduler of the numba compress step: validated layers, cut into tasks of
about CHUNK elements (a large layer split by block ranges), balanced over a thread pool
(the kernels release the GIL)."""
from __future__ import annotations

from dataclasses import dataclass

import concurrent.futures as cf
import operator
import threading

import numba as nb
import numpy as np

from . import step_kernels as K
from .quantiser import NonFiniteError, QuantConfig, saturation_bits


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
    threads, in phases:

    1. count NaNs (nothing has been modified yet, so a NaN can still be reported cleanly);
    2. a layer that fits one chunk runs its whole step (step_kernel) as one task; a split
       layer runs pass 1 per block range: residual <- a, block norms, saturation counts;
    3. per split layer: selection, then pass 2 (encode the selected blocks, zero their
       residual).
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
        ranges = [self._block_ranges(i) for i in range(count)]
        split = [i for i in range(count) if len(ranges[i]) > 1]
        whole = [i for i in range(count) if len(ranges[i]) <= 1]
        chunks = [t for i in split for t in ranges[i]]
        pool = _thread_pool(threads)

        def spread(fn, tasks, cost, inline_below):
            # A phase whose work is below `inline_below` runs on this thread: a round trip
            # through the pool costs about as much. Otherwise make more groups than threads:
            # the pool hands them out as threads come free, so a thread that the OS runs
            # slowly takes fewer of them.
            if sum(cost(t) for t in tasks) < inline_below:
                return [fn(t) for t in tasks]
            groups = _balanced_groups(tasks, cost, self.GROUPS_PER_THREAD * threads)
            return [x for part in pool.map(lambda g: [fn(t) for t in g], groups) for x in part]

        def nan_task(t):
            i, jlo, _ = t
            lo = jlo * lays[i].block_size
            return i, int(K.nan_count(layers[i][0][lo:lo + self._elems(t)]))

        whole_tasks = [(i, 0, lays[i].n_blocks) for i in whole]
        # the NaN scan only reads (about 4x cheaper per element than pass 1)
        bad = sorted(i for i, c in spread(nan_task, chunks + whole_tasks, self._elems,
                                          4 * self.CHUNK * threads) if c)
        if bad:
            raise nan_error(layers[bad[0]][0], where_of(bad[0]))

        norms = {i: np.empty(lays[i].n_blocks, dtype=np.int64) for i in split}
        tsat = saturation_bits(cfg)
        n_words, satq, satfb = [0] * count, [0] * count, [0] * count

        def pass1_task(t):
            i, jlo, jhi = t
            gbits, r, plan = layers[i]
            if i in norms:
                sq, sf = K.pass1_range(gbits, r, plan.layout.block_size, norms[i], cfg.M, cfg.k,
                                       cfg.range_bits, tsat, jlo, jhi)
                return i, 0, int(sq), int(sf)
            nw, sq, sf = K.step_kernel(gbits, r, plan.layout.block_size, plan.layout.n_blocks,
                                       plan.k_eff, cfg.M, cfg.k, cfg.range_bits, tsat, self.out,
                                       self.offsets[i], plan.layer_id, plan.lmax_log2)
            return i, int(nw), int(sq), int(sf)

        for i, nw, sq, sf in spread(pass1_task, chunks + whole_tasks, self._elems, self.CHUNK):
            n_words[i] = nw
            satq[i] += sq
            satfb[i] += sf

        def finish_task(i):
            _, r, plan = layers[i]
            return i, int(K.step_tail(r, plan.layout.block_size, norms[i], plan.k_eff, self.out,
                                     self.offsets[i], plan.layer_id, cfg.range_bits,
                                     plan.lmax_log2))

        def finish_cost(i):          # the mask scan plus the selected elements
            return lays[i].n_blocks + min(lays[i].n, layers[i][2].k_eff * lays[i].block_size)

        for i, nw in spread(finish_task, split, finish_cost, self.CHUNK):
            n_words[i] = nw
        return [StepInfo(n_words[i], layers[i][2].k_eff, lays[i].n_blocks, lays[i].block_size,
                         satq[i], satfb[i]) for i in range(count)]

