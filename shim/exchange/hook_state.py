"""What every gradblock DDP hook keeps across calls (shim/exchange/hook.py's all_gather hook,
shim/exchange/global_exchange.py's allreduce hook): the compressor and this rank's state of it, the
parameter -> layer map, the per-step statistics, the step's outstanding work, and PowerSGD's
`state_dict()` / `load_state_dict()` pattern. Each hook's state adds only what its exchange
needs."""
from __future__ import annotations

import threading
import time

import torch
import torch.distributed as dist

from ..compress.compressors import Compressor, LayerInfo, StepStats, WorkerState, layers_of
from .device import sync_device
from .workers import StepTimes


class HookState:
    """The shared part of a hook's state; `reset_step()` before each step's backward."""

    def __init__(self, compressor: Compressor, model: torch.nn.Module, process_group=None,
                 worker_state: WorkerState | None = None, timed: bool = False):
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        self.compressor = compressor
        self.group = process_group
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        if self.world_size != compressor.n_workers:
            raise ValueError(f"compressor built for {compressor.n_workers} workers, "
                             f"process group has {self.world_size}")
        self.layers = layers_of(model)
        trainable = [p for p in model.parameters() if p.requires_grad]
        self._layer_by_param = {id(p): info for p, info in zip(trainable, self.layers)}
        self._params = trainable          # keeps the ids above valid
        self.worker_state = worker_state if worker_state is not None else \
            compressor.new_worker_state()
        self.timed = bool(timed)
        self._lock = threading.Lock()     # callbacks of different buckets may run concurrently
        self._pending: list[torch.futures.Future] = []   # this step's collectives and decodes

    def reset_step(self) -> None:
        self.stats = StepStats()
        self.times = StepTimes()
        self.padded_bytes = 0          # what the collectives moved for this rank, padding included
        self.error: BaseException | None = None   # the first error of this step

    def keep_error(self, err: BaseException) -> None:
        """Keep the step's first error: `backward()` re-raises it under its own class."""
        with self._lock:
            if self.error is None:
                self.error = err

    def exchange_done(self, buffer: torch.Tensor, t_sent: float) -> None:
        """A bucket's exchange ended: with timing on, its seconds since `t_sent` (the device's
        work on `buffer` included)."""
        if self.timed:
            sync_device(buffer)
            with self._lock:
                self.times.exchange_s += time.perf_counter() - t_sent

    def layer_of(self, param: torch.Tensor) -> LayerInfo:
        info = self._layer_by_param.get(id(param))
        if info is None:
            raise KeyError(f"bucket holds a parameter of shape {tuple(param.shape)} that is not a "
                           f"trainable parameter of the model this hook state was built for")
        return info

    def backward(self, loss: torch.Tensor) -> None:
        """`loss.backward()`, re-raising the hook's error under its own class (DDP wraps an
        error raised in a hook or its callback in a RuntimeError). Before the error leaves,
        the step's other work is drained (see `drain`)."""
        try:
            loss.backward()
        except RuntimeError as wrapped:
            self.drain()
            if self.error is not None:
                raise self.error from wrapped
            raise

    def track(self, fut: torch.futures.Future) -> torch.futures.Future:
        """Remember a collective or decode future of this step (finished ones are dropped)."""
        with self._lock:
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(fut)
        return fut

    def drain(self, timeout_s: float = 60.0) -> bool:
        """Wait, at most `timeout_s`, until every collective and decode this step started has
        finished. A failed bucket ends DDP's backward while other collectives can still be on
        gloo's worker threads, holding their tensors; a process that then exits with them in
        flight can abort in Python's finalisation instead of returning its status. Errors of
        the drained futures are the step's error, already kept; True when all finished."""
        with self._lock:
            pending, self._pending = self._pending, []
        deadline = time.monotonic() + timeout_s
        for fut in pending:
            while not fut.done():
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.001)
        return True

    def state_dict(self) -> dict:
        from .state import compressor_state
        return compressor_state(self.compressor, {self.rank: self.worker_state})

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore this rank's compressor state; `CheckpointError` if it was written by a
        differently configured compressor, lacks this rank or is malformed."""
        from .state import restore_compressor_state
        device = self._params[0].device if self._params else "cpu"
        restored = restore_compressor_state(self.compressor, state_dict, [self.rank], device,
                                            layers=self.layers)
        self.worker_state = restored[self.rank]
