"""gradblock in your own DDP training script: a communication hook in torch's idiom (docs/ddp.md).

    from gradblock import ddp as gb
    model = DistributedDataParallel(model)
    state = gb.GradblockState()                      # settings only: build it anywhere
    model.register_comm_hook(state, gb.gradblock_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)   # no momentum: the hook has it

`GradblockState` holds settings alone -- compressor name, k, block rule, range, norm, momentum
correction, exchange -- like torch's `PowerSGDState(process_group=None)`: the process group
and the parameter -> layer map are resolved at the first bucket, so the state can be built
before `init_process_group` (Lightning's `DDPStrategy(ddp_comm_state=..., ddp_comm_hook=...)`
does that). The defaults are the best measured recipe (docs/training.md): coarse k = 1, L2
block norm, range 100 and momentum correction 0.9 (DGC's local momentum with factor masking),
so the optimiser must run without momentum; `PLAIN` holds the settings without correction.

Optional, all of them (a run without them ends with the same bits):
* `state.bind(model)`: layer names in error messages, and `load_state_dict` before a first
  step; without it the parameters are numbered as the buckets show them (the same on every
  rank).
* `state.backward(loss)`: `loss.backward()` re-raising a peer's error under its own class
  (DDP wraps an error raised in a hook in a RuntimeError).
* `state.reset_step()` then `state.stats` (bytes sent, saturations) for per-step figures;
  without resets the statistics add up over the run.
* `state.state_dict()` / `state.load_state_dict(sd)` for checkpoints (this rank's residuals
  and velocities).
* `end_process_group()` at the very end of the script (after the model is gone): the group
  destroyed and its last holders collected, so a gloo process does not abort at exit.

The first start in a fresh environment compiles numba's kernels (about a minute; cached on
disk afterwards: in the package's `__pycache__` when it is writable, else numba's per-user
cache folder, or `NUMBA_CACHE_DIR`); a one-line message says so while it happens.
"""
# no `from __future__ import annotations`: DDP inspects the hook's real annotations
import sys
import threading
from contextlib import contextmanager

import torch
import torch.distributed as dist

from gradblock.codec.errors import GradblockError, UsageError
from gradblock.shim.setup.recipe import LOCAL_MOMENTUM, recipe_norm, recipe_range

__all__ = ["GradblockState", "gradblock_hook", "end_process_group", "RECIPE", "PLAIN",
           "COMPILE_NOTICE_S"]

# the best measured recipe (docs/training.md "Which settings give which figure"; one home:
# shim/setup/recipe.py, the CLI's defaults too)
RECIPE = {"compressor": "coarse", "k": 1, "norm": recipe_norm("allgather"),
          "range": recipe_range(LOCAL_MOMENTUM), "local_momentum": LOCAL_MOMENTUM}
# the codec without momentum correction (then the optimiser keeps momentum): L1, range 10
PLAIN = {"norm": "l1", "range": recipe_range(0.0), "local_momentum": 0.0}
COMPILE_NOTICE_S = 2.0      # a first bucket slower than this prints the compile message


@contextmanager
def _compile_notice(enabled: bool):
    """Print one line if the block takes longer than COMPILE_NOTICE_S (numba compiling)."""
    timer = None
    if enabled:
        timer = threading.Timer(COMPILE_NOTICE_S, lambda: print(
            "gradblock: compiling the numba kernels (first use in this environment, about a "
            "minute; cached for later runs)", file=sys.stderr, flush=True))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


class GradblockState:
    """A gradblock DDP hook's state, built from settings alone (see the module's docstring).

    compressor: coarse (the codec) | dense | topk | dlgs; k: blocks per layer (an integer, or
    a fraction of the layer's blocks); block_size: None = the spec's block rule; range: the
    quantiser's R (None: 100 with momentum correction, else 10); norm: l1 | l2 (None: l2, l1
    under exchange allreduce); local_momentum: momentum correction's m (0: off; then use
    momentum in the optimiser); exchange: allgather | allreduce (global block selection);
    dense_below: layers with fewer elements go as float32; nonfinite: raise (a NaN is a named
    error on every rank) | skip (with torch's GradScaler: an Inf / NaN makes the bucket NaN on
    every rank so the scaler skips the step, no state moving); codec: auto | device | host
    (where the codec runs for device tensors); graphs: the device codec's encode and decode of
    a bucket each captured as one CUDA graph (far fewer launches; docs/gpu.md); process_group:
    None = the default group, looked
    up at the first bucket; timed: per-step compress / exchange seconds in `state.times`
    (synchronises the device). A bad setting raises its named error here."""

    def __init__(self, compressor: str = "coarse", *, k: int | float = 1,
                 block_size: int | None = None, range: float | None = None,
                 norm: str | None = None, local_momentum: float = LOCAL_MOMENTUM,
                 momentum_mask: bool = True, exchange: str = "allgather", dense_below: int = 0,
                 lmax_log2: int = 8, nonfinite: str = "raise", codec: str = "auto",
                 graphs: bool = False, process_group=None, timed: bool = False):
        from gradblock.shim.compress.compressors import build_compressor
        self.settings = dict(
            name=compressor, k=k, block_size=block_size,
            R=recipe_range(local_momentum) if range is None else float(range),
            norm=recipe_norm(exchange) if norm is None else norm,
            local_momentum=float(local_momentum), momentum_mask=bool(momentum_mask),
            exchange=exchange, dense_below=int(dense_below), lmax_log2=int(lmax_log2))
        try:                 # every check now, with the contract's named errors
            build_compressor(**self._compressor_kw(), layers=[], n_workers=1)
        except GradblockError:
            raise
        except (TypeError, ValueError) as e:     # an unknown name or exchange
            raise UsageError(f"gradblock.ddp: {e}") from None
        if nonfinite not in ("raise", "skip"):
            raise UsageError(f"gradblock.ddp: nonfinite must be raise or skip, got {nonfinite!r}")
        if codec not in ("auto", "device", "host"):
            raise UsageError(f"gradblock.ddp: codec must be auto, device or host, got {codec!r}")
        if not isinstance(graphs, bool):
            raise UsageError(f"gradblock.ddp: graphs must be True or False, got {graphs!r}")
        self.nonfinite, self.codec, self.graphs = nonfinite, codec, graphs
        self.process_group = process_group
        self.timed = bool(timed)
        self._model = None
        self._inner = None          # the shim's hook state, built at the first bucket
        self._hook = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Picklable before its first bucket (spawn launchers pickle a trainer's callbacks):
        settings only; a resolved state holds a process group and tensors."""
        if self._inner is not None:
            raise UsageError("gradblock.ddp: a state that has run cannot be pickled; save "
                             "state.state_dict() instead")
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()

    def _compressor_kw(self) -> dict:
        s = dict(self.settings)
        if s["name"] != "coarse":   # the codec's own settings mean nothing to the others
            for key in ("R", "norm", "lmax_log2", "exchange"):
                s.pop(key)
        return s

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.settings.items())
        return f"GradblockState({shown})"

    # -- optional
    def bind(self, model: torch.nn.Module) -> "GradblockState":
        """Name the layers after `model`'s parameters (a DDP model or its module)."""
        if self._inner is not None:
            raise UsageError("gradblock.ddp: bind(model) after the first bucket has no effect; "
                             "call it before training")
        self._model = model
        return self

    def _resolve(self):
        """The process group, the compressor for its size and the shim's hook state."""
        with self._lock:
            if self._inner is not None:
                return self._inner
            if not dist.is_initialized():
                raise UsageError("gradblock.ddp: the hook ran before torch.distributed's "
                                 "process group was initialised")
            from gradblock.shim.compress.compressors import build_compressor
            world = dist.get_world_size(self.process_group)
            comp = build_compressor(**self._compressor_kw(), layers=[], n_workers=world)
            comp.nonfinite, comp.codec = self.nonfinite, self.codec
            comp.graphs = self.graphs
            if comp.frame_coded and comp.host_fast and comp.momentum is not None:
                # the plain codec's kernels now (the momentum encoder's load at the first bucket)
                build_compressor("coarse", [], world).warm_host()
            if self.settings["exchange"] == "allreduce" and self.settings["name"] == "coarse":
                from gradblock.shim.exchange.global_exchange import GlobalHookState, global_hook
                inner = GlobalHookState(comp, self._model, self.process_group, timed=self.timed)
                self._hook = global_hook
            else:
                from gradblock.shim.exchange.hook import GradblockHookState, gradblock_hook
                inner = GradblockHookState(comp, self._model, self.process_group,
                                           timed=self.timed)
                self._hook = gradblock_hook
            self._inner = inner
            return inner

    @property
    def resolved(self) -> bool:
        """Whether the first bucket (or `load_state_dict`) has resolved the process group."""
        return self._inner is not None

    @property
    def stats(self):
        """What this rank sent since the last `reset_step()` (or since the start)."""
        from gradblock.shim.compress.compressors import StepStats
        return StepStats() if self._inner is None else self._inner.stats

    @property
    def times(self):
        from gradblock.shim.exchange.workers import StepTimes
        return StepTimes() if self._inner is None else self._inner.times

    @property
    def error(self):
        return None if self._inner is None else self._inner.error

    def reset_step(self) -> None:
        if self._inner is not None:
            self._inner.reset_step()

    def backward(self, loss: torch.Tensor) -> None:
        if self._inner is None:           # the first step: the state resolves inside
            try:
                loss.backward()
            except RuntimeError as wrapped:
                if self._inner is not None and self._inner.error is not None:
                    self._inner.drain()
                    raise self._inner.error from wrapped
                raise
            return
        self._inner.backward(loss)

    def state_dict(self) -> dict:
        if self._inner is None:
            raise UsageError("gradblock.ddp: state_dict() before the first step: nothing to save")
        return self._inner.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        if self._inner is None and self._model is None:
            raise UsageError("gradblock.ddp: load_state_dict() before the first step needs "
                             "state.bind(model) (the layers must be known)")
        self._resolve().load_state_dict(state_dict)


def gradblock_hook(state: GradblockState, bucket: dist.GradBucket
                   ) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook: `ddp_model.register_comm_hook(state, gradblock_hook)`."""
    # real (not string) annotations above: DDP checks them when the hook is registered
    if state._inner is None:
        with _compile_notice(state.settings["name"] == "coarse"):
            inner = state._resolve()
            return state._hook(inner, bucket)
    return state._hook(state._inner, bucket)


def end_process_group() -> None:
    """`torch.distributed.destroy_process_group()` for the end of a script, once the DDP model
    and the state are out of scope (after your `main()` returns): it also collects what still
    refers to the group, so gloo's worker threads are joined while the interpreter is alive.
    Without it a gloo process can abort at exit ("terminate called without an active
    exception"), now and then, after its work is done (shim/exchange/process_group.py)."""
    from gradblock.shim.exchange.process_group import end_process_group as end
    end()
