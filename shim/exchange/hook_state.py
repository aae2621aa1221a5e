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

    def __init__(self, compressor: Compressor, model: torch.nn.Module | None, process_group=None,
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
        # model None (gradblock.ddp's state built from settings alone): the parameters are
        # numbered as the buckets show them (`layer_of`), the same order on every rank
        self._numbering = model is None
        self.layers = [] if model is None else layers_of(model)
        trainable = [] if model is None else [p for p in model.parameters() if p.requires_grad]
        self._layer_by_param = {id(p): info for p, info in zip(trainable, self.layers)}
        self._params = trainable          # keeps the ids above valid
        self.worker_state = worker_state if worker_state is not None else \
            compressor.new_worker_state()
        self.timed = bool(timed)
        self._lock = threading.Lock()     # callbacks of different buckets may run concurrently
        self._pending: list[torch.futures.Future] = []   # this step's collectives and decodes
        # device codec (shim/exchange/device_codec.py): when its validity flags are read.
        # "bucket": in each bucket's callback (one host read per bucket; free on the CPU);
        # "step": once per step at the end of backward (autograd's final callback), so no
        # callback blocks the host while the device works; "auto": "step" off the CPU
        self.check = "auto"
        self._stats_lock = threading.Lock()
        self._device_stats: list[torch.Tensor] = []
        self._deferred: list = []
        self._final_queued = False

    def reset_step(self) -> None:
        self.stats = StepStats()
        self._deferred = []
        self.times = StepTimes()
        self.padded_bytes = 0          # what the collectives moved for this rank, padding included
        self.error: BaseException | None = None   # the first error of this step

    @property
    def stats(self) -> StepStats:
        """What this rank sent this step; the device path's counts are device tensors until
        read here (one host read for all of them)."""
        with self._stats_lock:
            pending, self._device_stats = self._device_stats, []
        if pending:
            self._stats.add(StepStats(*[int(v) for v in torch.stack(pending).sum(0).tolist()]))
        return self._stats

    @stats.setter
    def stats(self, value: StepStats) -> None:
        with self._stats_lock:
            self._device_stats = []
        self._stats = value

    def add_device_stats(self, t: torch.Tensor) -> None:
        """A bucket's StepStats fields as a (5,) int64 device tensor (device_codec)."""
        with self._stats_lock:
            self._device_stats.append(t)

    def _check_mode(self, device: torch.device) -> str:
        if self.check not in ("auto", "bucket", "step"):
            raise ValueError(f"check must be auto, bucket or step, got {self.check!r}")
        if self.check == "auto":
            return "bucket" if device.type == "cpu" else "step"
        return self.check

    def arm_final_check(self, device: torch.device) -> None:
        """Called from a hook (autograd's thread) on the device path: in "step" mode, queue the
        end-of-backward check once per backward."""
        if self._check_mode(device) != "step":
            return
        with self._lock:
            if self._final_queued:
                return
            self._final_queued = True
        torch.autograd.Variable._execution_engine.queue_callback(self._final_check)

    def check_later(self, bad: torch.Tensor, resolve) -> None:
        """A bucket's device validity flag: read now ("bucket") or at the end of backward
        ("step"); when True, `resolve()` raises the bucket's error (or repairs a false alarm)."""
        if self._check_mode(bad.device) == "bucket":
            if bool(bad):
                resolve()
            return
        with self._lock:
            self._deferred.append((bad, resolve))

    def _final_check(self) -> None:
        """End of backward (after DDP waited for every bucket): the step's one host read of
        every deferred flag; the first bad bucket's error is kept and raised."""
        # autograd runs final callbacks in the order queued, and DDP queues its own (which waits
        # for every bucket) only when the last bucket is ready, after this one: wait for the
        # step's collectives and decodes here (on CUDA their futures are already complete)
        with self._lock:
            futures = list(self._pending)
        for f in futures:
            try:
                f.wait()
            except Exception:  # noqa: BLE001 - a failed bucket's error is kept; DDP reports it
                pass
        with self._lock:
            pending, self._deferred = self._deferred, []
            self._final_queued = False
        if not pending:
            return
        flags = torch.stack([b for b, _ in pending]).tolist()
        for bad, (_, resolve) in zip(flags, pending):
            if bad:
                try:
                    resolve()
                except Exception as e:
                    self.keep_error(e)
                    raise

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
        if info is None and self._numbering:
            with self._lock:
                info = LayerInfo(len(self.layers), f"param{len(self.layers)}", tuple(param.shape))
                self.layers.append(info)
                self.compressor.layers.append(info)     # what its checkpoints are checked against
                self._layer_by_param[id(param)] = info
                self._params.append(param)
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
        except Exception as wrapped:
            if wrapped is self.error:       # the end-of-backward check raised it as it is
                self.drain()
                raise
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
