"""Wall-clock measurement: warm-up runs (which absorb numba compilation and caches), then
`reps` timed runs with time.perf_counter; the median is what the tables report."""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Sample:
    times: tuple[float, ...]   # seconds, one per timed repetition

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def spread(self) -> float:
        """(max - min) / median: how noisy the repetitions were."""
        return (max(self.times) - min(self.times)) / self.median if self.median > 0 else 0.0


# "wall": time.perf_counter, the default. "cpu": time.thread_time, the CPU time of the
# calling thread: on a machine other jobs load it leaves out the time the OS gave them, so
# single-threaded rows stay comparable (it cannot see other threads: one-thread runs only).
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
_clock = {"name": "wall"}


def set_clock(name: str) -> None:
    if name not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {name!r}")
    _clock["name"] = name


def clock_name() -> str:
    return _clock["name"]


def measure(fn: Callable[[], object], reps: int, warmup: int = 1,
            setup: Callable[[], object] | None = None,
            sync: Callable[[], object] | None = None) -> Sample:
    """Time fn() `reps` times after `warmup` untimed calls. `setup` runs before every call,
    untimed (e.g. to restore a residual an in-place step mutates); `sync` runs after every
    call inside the timed region (e.g. torch.cuda.synchronize)."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
        if sync is not None:
            sync()
    now = CLOCKS[_clock["name"]]
    times = []
    for _ in range(reps):
        if setup is not None:
            setup()
        t0 = now()
        fn()
        if sync is not None:
            sync()
        times.append(now() - t0)
    return Sample(tuple(times))


def numba_threads_available() -> int:
    try:
        import numba
    except ImportError:
        return 1
    return int(numba.config.NUMBA_NUM_THREADS)


@contextmanager
def threads(n: int):
    """Run the block with n threads in numba, torch and blosc2 (whichever are installed),
    restoring the previous settings afterwards. numpy's own kernels are single-threaded."""
    restore = []
    try:
        import numba
        prev = numba.get_num_threads()
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
        restore.append(lambda: numba.set_num_threads(prev))
    except ImportError:
        pass
    try:
        import torch
        prev_t = torch.get_num_threads()
        torch.set_num_threads(n)
        restore.append(lambda: torch.set_num_threads(prev_t))
    except ImportError:
        pass
    try:
        import blosc2
        prev_b = blosc2.set_nthreads(n)     # returns the previous value
        restore.append(lambda: blosc2.set_nthreads(prev_b))
    except ImportError:
        pass
    try:
        yield n
    finally:
        for undo in reversed(restore):
            undo()
