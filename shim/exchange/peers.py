"""The peers a user already has, run in gradblock's harness: torch's own DDP communication.

* `allreduce`: DistributedDataParallel with no hook (its built-in bucketed allreduce, float32);
* `fp16`: `torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook`
  (each bucket cast to float16 and divided by N, allreduced in float16, cast back);
* `powersgd`: `powerSGD_hook.powerSGD_hook` with `PowerSGDState(matrix_approximation_rank=R,
  use_error_feedback=True, warm_start=True, start_powerSGD_iter=2, random_seed=0)`; R is
  `--rank` (TrainConfig.powersgd_rank). start_powerSGD_iter=2 is the smallest torch accepts with
  error feedback (DDP rebuilds its buckets after the first step): step 0 and 1 are plain
  allreduce, every later step is PowerSGD. torch's default min_compression_rate=2 decides which
  tensors are compressed (biases and small matrices go uncompressed, float32).

The hooks are torch's, called unchanged; nothing here re-implements their arithmetic. They need
a process group, so every peer run is a real multi-process DDP run:
* `gradblock train --ddp --compressor fp16` under torchrun (or `gradblock netbench`): one
  worker per process, `PeerDdpExchange`;
* without `--ddp` (`gradblock train`, and the peer rows of `gradblock validate`):
  `run_peer_locally` starts N local processes (gloo on 127.0.0.1, one torch thread each), runs
  the same `--ddp` training in them and returns rank 0's result. The data order, model
  initialisation and optimiser are the harness's (shim/setup/problem.py), as for gradblock's own
  methods, so the accuracy rows compare like with like. Peer runs are not bit-identical to a
  simulation (gloo sums floats in its own order); gradblock's methods are.

Not supported with a peer (refused with ConfigError): local momentum, dense warm-up epochs,
sparsity warm-up, merge plans, checkpoints / resume (torch's hook state is not saved here).
`bytes_sent` counts the payload the hook hands to allreduce per worker per step (float32 4 B,
float16 2 B per element; PowerSGD its P and Q plus the uncompressed tensors), not the ring's
traffic, which `gradblock netbench` reads off the wire.
"""
# no `from __future__ import annotations`: DDP inspects the hook's real annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..compress.compressors import Compressor, LayerInfo, StepStats
from .device import sync_device
from ..errors import ConfigError, TrainingError
from .modes import DdpExchange, StepOutcome
from ..setup.problem import worker_batch
from .workers import StepTimes

# the names and the settings a peer refuses are declared with every training parameter
# (shim/params.py), so TrainConfig.check uses them without importing this module's exchange
from ..params import PEERS  # noqa: F401  (re-exported)

POWERSGD_START_ITER = 2                 # PowerSGD's fixed settings
POWERSGD_MIN_COMPRESSION_RATE = 2


class PeerCompressor(Compressor):
    """Stands in for a gradblock compressor in the Trainer: its name, its configuration and its
    payload per step. It encodes nothing: torch's hook does the work."""

    def __init__(self, name: str, layers: Sequence[LayerInfo], n_workers: int, rank: int = 1):
        if name not in PEERS:
            raise ConfigError(f"unknown peer {name!r}; choose one of {', '.join(PEERS)}")
        super().__init__(layers, n_workers)
        self.name = name
        self.rank = int(rank)

    def config(self) -> dict:
        c = {"name": self.name, "n_workers": self.n_workers, "peer": "torch ddp_comm_hooks"}
        if self.name == "powersgd":
            c |= {"matrix_approximation_rank": self.rank, "use_error_feedback": True,
                  "warm_start": True, "start_powerSGD_iter": POWERSGD_START_ITER,
                  "min_compression_rate": POWERSGD_MIN_COMPRESSION_RATE}
        return c

    def payload(self, step: int) -> StepStats:
        """What one worker hands to allreduce at global step `step` (0-based)."""
        numel = sum(lay.numel for lay in self.layers)
        if self.name == "allreduce" or (self.name == "powersgd" and step < POWERSGD_START_ITER):
            return StepStats(bytes_sent=4 * numel, elements_sent=numel)
        if self.name == "fp16":
            return StepStats(bytes_sent=2 * numel, elements_sent=numel)
        elements = 0
        for lay in self.layers:
            n = lay.shape[0] if lay.shape else 1
            m = lay.numel // n if n else 0
            r = min(n, m, self.rank)
            if (n + m) * r * POWERSGD_MIN_COMPRESSION_RATE < n * m:
                elements += (n + m) * r
            else:
                elements += lay.numel
        return StepStats(bytes_sent=4 * elements, elements_sent=elements)


def build_peer(cfg, layers: Sequence[LayerInfo], n_workers: int) -> PeerCompressor:
    return PeerCompressor(cfg.compressor, layers, n_workers, getattr(cfg, "powersgd_rank", 1))


class _TimedHookState:
    """Wraps a torch hook's state: the seconds spent inside the hook call (the synchronous
    part: casts, PowerSGD's P = MQ, launching the collective) are counted as compress time."""

    def __init__(self, inner, hook: Callable):
        self.inner, self.hook, self.compress_s = inner, hook, 0.0


def _timed_hook(state: _TimedHookState, bucket: dist.GradBucket
                ) -> torch.futures.Future[torch.Tensor]:
    t0 = time.perf_counter()
    fut = state.hook(state.inner, bucket)
    state.compress_s += time.perf_counter() - t0
    return fut


class PeerDdpExchange(DdpExchange):
    """DdpExchange with torch's hook (or none) instead of gradblock's."""

    def bind(self, model, layers, compressor, states, groups=None):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
        self.compressor = compressor
        self.ddp_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.timed_state = None
        if compressor.name == "fp16":
            self.timed_state = _TimedHookState(None, default_hooks.fp16_compress_hook)
        elif compressor.name == "powersgd":
            ps = powerSGD_hook.PowerSGDState(
                process_group=None, matrix_approximation_rank=compressor.rank,
                start_powerSGD_iter=POWERSGD_START_ITER,
                min_compression_rate=POWERSGD_MIN_COMPRESSION_RATE, use_error_feedback=True,
                warm_start=True, random_seed=0)
            self.timed_state = _TimedHookState(ps, powerSGD_hook.powerSGD_hook)
        if self.timed_state is not None:
            self.ddp_model.register_comm_hook(self.timed_state, _timed_hook)
        self.steps_done = 0

    def use(self, compressor, states):
        pass                                    # peers never swap (no dense warm-up epochs)

    def close(self) -> None:
        self.timed_state = None                 # powerSGD's state also holds the group
        super().close()

    def step(self, problem, shards, step_in_epoch, batch_size, optimizer):
        x, y = worker_batch(problem, shards[self.rank], step_in_epoch, batch_size)
        before = self.timed_state.compress_s if self.timed_state else 0.0
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.ddp_model(x), y)
        loss.backward()
        optimizer.step()
        stats = self.compressor.payload(self.steps_done)
        self.steps_done += 1
        times = None
        if self.timed:
            sync_device(self.device)
            wall = time.perf_counter() - t0
            compress = (self.timed_state.compress_s if self.timed_state else 0.0) - before
            # compute and waiting are not separable inside DDP's backward: the rest of the step
            # counts as compute here; `gradblock netbench` measures compute apart (no_sync)
            times = StepTimes(wall - compress, compress, 0.0)
        return StepOutcome([float(loss.item())], [stats], times, stats.bytes_sent)


def make_peer_exchange(cfg):
    import inspect
    kw = {}
    if "timeout_s" in inspect.signature(DdpExchange.__init__).parameters and hasattr(cfg, "timeout"):
        kw["timeout_s"] = cfg.timeout          # the bound on every collective, where it exists
    return PeerDdpExchange(cfg.workers, cfg.device, cfg.time_phases,
                           deterministic=cfg.deterministic, **kw)


# ------------------------------------------------------------------ N processes on this machine

def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _tail(path: Path, limit: int = 1500) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-3:])[-limit:]


def wait_ranks(procs: Sequence[subprocess.Popen], logs: Sequence[Path], timeout: float,
               what: str = "rank", progress: Callable[[], int] | None = None) -> None:
    """Wait for every rank; the first to fail (or the timeout) kills the others and raises
    TrainingError naming the rank and quoting the end of its output. No hang. `progress`: a
    count of finished work; the timeout restarts whenever it grows."""
    deadline = time.monotonic() + timeout
    seen = progress() if progress else 0
    failed = None
    try:
        while True:
            if progress is not None and progress() != seen:
                seen, deadline = progress(), time.monotonic() + timeout
            codes = [p.poll() for p in procs]
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed = bad[0]
                break
            if all(c == 0 for c in codes):
                return
            if time.monotonic() > deadline:
                raise TrainingError(f"{what}s ran past {timeout:.0f} s; stopped them all "
                                    f"(still running: {[r for r, c in enumerate(codes) if c is None]})")
            time.sleep(0.05)
        code = procs[failed].returncode
        raise TrainingError(f"{what} {failed} failed (exit status {code}): "
                            f"{_tail(logs[failed]) or 'no output'}; stopped the other {what}s")
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def _package_root() -> str:
    """The repository root (the rank processes run from there, as torchrun's tests do)."""
    return str(Path(__file__).resolve().parents[1])


def rank_env(rank: int, world: int, port: int, addr: str = "127.0.0.1") -> dict:
    env = dict(os.environ)
    env.update(MASTER_ADDR=addr, MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
               WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world), OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [_package_root(), env.get("PYTHONPATH")])))
    return env


def run_peer_locally(cfg, progress=None, timeout: float = 6 * 3600) -> dict:
    """Run a peer's training in cfg.workers local processes (gloo on 127.0.0.1) and return
    rank 0's result; cfg.out gets rank 0's result.json and every rank's model, as under --ddp."""
    from dataclasses import replace
    cfg.check()
    n = cfg.workers or 4
    run_cfg = replace(cfg, ddp=True, workers=n, progress=False, device="cpu",
                      threads=cfg.threads or 1)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="gradblock-peer-") as tmp:
        tmp = Path(tmp)
        (tmp / "config.json").write_text(json.dumps(asdict(run_cfg)))
        procs, logs = [], []
        for r in range(n):
            log = tmp / f"rank{r}.log"
            logs.append(log)
            with open(log, "w") as fh:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "gradblock.shim.training.peer_rank", str(tmp / "config.json"),
                     str(tmp / "result.json")], env=rank_env(r, n, port), stdout=fh,
                    stderr=subprocess.STDOUT, start_new_session=True, cwd=_package_root()))
        wait_ranks(procs, logs, timeout)
        result = json.loads((tmp / "result.json").read_text())
    if progress is not None:
        progress.update(result["steps"])
    result["mode"] = "ddp-local"                 # N local processes, started here
    if cfg.out:
        from gradblock.codec.fileio import write_own_text
        write_own_text(Path(cfg.out) / "result.json", json.dumps(result, indent=2) + "\n")
    return result
