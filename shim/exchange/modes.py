"""How a training step's gradients travel between workers: one object per mode, so the
Trainer holds no `if ddp` branches.

* `SimulatedExchange`: N workers in this process (shim/exchange/workers.py's SimulatedCluster); the
  process holds every worker's compressor state and loss.
* `DdpExchange`: one worker per process under torchrun; DistributedDataParallel with the
  gradblock communication hook (shim/exchange/hook.py); gloo on CPU, NCCL on CUDA.

Both run the same `encode_group` / `decode_group` code, so they give the same bits.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..compress.compressors import Compressor, LayerInfo, StepStats, WorkerState
from .device import sync_device
from ..errors import ConfigError
from ..setup.problem import Problem, resolve_device, worker_batch
from .resilience import restart_count
from .state import rank_path
from .workers import SimulatedCluster, StepTimes

MERGE_BUCKET_CAP_MB = 0.001      # DDP buckets under a merge plan: one parameter each (about)


@dataclass
class StepOutcome:
    losses: list[float]              # one per loss slot of this process (worker ids in order)
    stats: list[StepStats]           # one per worker this process runs
    times: StepTimes | None          # per-worker phase seconds, when timed
    padded_bytes: int = 0            # what the collective really moved (DDP), padding included


class Exchange:
    """The interface the Trainer uses. `worker_ids`: the workers whose compressor state and
    loss this process holds."""

    mode: str
    device: torch.device
    rank: int
    n_workers: int
    worker_ids: list[int]

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def bind(self, model: torch.nn.Module, layers: Sequence[LayerInfo], compressor: Compressor,
             states: dict[int, WorkerState], groups: list[list[int]] | None = None) -> None:
        """`groups`: a merge plan (shim/systems/merge_apply.py), layer indices per group, each
        group compressed in one call and exchanged in one collective; None: the mode's default."""
        raise NotImplementedError

    def use(self, compressor: Compressor, states: dict[int, WorkerState]) -> None:
        """Exchange with this compressor and these worker states from the next step on."""
        raise NotImplementedError

    def step(self, problem: Problem, shards: Sequence[np.ndarray], step_in_epoch: int,
             batch_size: int, optimizer: torch.optim.Optimizer) -> StepOutcome:
        raise NotImplementedError

    def gather_floats(self, values: list[float]) -> list[float]:
        """Every process's values, concatenated in rank order."""
        return list(values)

    def sum_ints(self, values: list[int]) -> list[int]:
        """Element-wise sums over all processes."""
        return list(values)

    def all_agree(self, ok: bool) -> bool:
        """True when `ok` holds on every process (a collective under DDP): a rank that cannot
        go on makes every rank stop, instead of leaving the others blocked in a collective."""
        return ok

    def checkpoint_path(self, path: str | Path) -> Path:
        return Path(path)

    def model_file(self) -> str:
        return "model.pt"

    def close(self) -> None:
        pass


class SimulatedExchange(Exchange):
    mode = "simulated"

    def __init__(self, n_workers: int | None, device: str, timed: bool = False,
                 deterministic: bool = True):
        self.device = resolve_device(device, deterministic=deterministic)
        self.rank = 0
        self.n_workers = n_workers or 4
        self.worker_ids = list(range(self.n_workers))
        self.timed = timed
        self.cluster: SimulatedCluster | None = None

    def bind(self, model, layers, compressor, states, groups=None):
        self.cluster = SimulatedCluster(model, compressor, layers, F.cross_entropy, self.device,
                                        worker_states=states, timed=self.timed, groups=groups)

    def use(self, compressor, states):
        self.cluster.compressor, self.cluster.workers = compressor, states

    def step(self, problem, shards, step_in_epoch, batch_size, optimizer):
        batches = [worker_batch(problem, shards[w], step_in_epoch, batch_size)
                   for w in self.worker_ids]
        res = self.cluster.step(batches, optimizer)
        return StepOutcome(res.losses, res.stats, res.times if self.timed else None)


class DdpExchange(Exchange):
    mode = "ddp"

    def __init__(self, n_workers: int | None, device: str, timed: bool = False,
                 timeout_s: float = 300.0, deterministic: bool = True):
        from datetime import timedelta

        import torch.distributed as dist
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise ConfigError("--ddp needs torchrun (RANK / WORLD_SIZE are not set); see "
                              "docs/training.md")
        self.device = resolve_device(device, int(os.environ.get("LOCAL_RANK", "0")),
                                     deterministic=deterministic)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        # every collective is bounded: a silent peer ends the step (resilience.peer_lost)
        self.timeout_s = float(timeout_s)
        timeout = timedelta(seconds=self.timeout_s)
        # torchrun's static rendezvous reuses one store across restarts: keys of the failed
        # attempt (rank 0's old gloo address) would race the new ones, so each attempt keeps
        # its own prefix
        store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
        store = dist.PrefixStore(f"gradblock/attempt{restart_count()}/", store)
        dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo", store=store,
                                rank=rank, world_size=world, timeout=timeout)
        self.rank, world = dist.get_rank(), dist.get_world_size()
        if n_workers is not None and n_workers != world:
            self.close()
            raise ConfigError(f"--workers {n_workers} but torchrun started {world} processes")
        self.n_workers = world
        self.worker_ids = [self.rank]
        self.timed = timed
        self.ddp_model = None
        self.hook = None

    def bind(self, model, layers, compressor, states, groups=None):
        from .hook import register
        # with a merge plan the plan decides what travels together: the smallest buckets let
        # DDP hand each gradient over as soon as it is ready, so a group starts during backward
        bucketing = {} if groups is None else {"bucket_cap_mb": MERGE_BUCKET_CAP_MB}
        self.ddp_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
            **bucketing)
        if groups is None:
            self.hook = register(self.ddp_model, compressor, worker_state=states[self.rank],
                                 timed=self.timed)
        else:
            # the one way into the papers' systems from the exchange (shim/systems/__init__.py)
            from ..systems.merge_hook import register_merged
            self.hook = register_merged(self.ddp_model, compressor, groups,
                                        worker_state=states[self.rank], timed=self.timed)

    def use(self, compressor, states):
        self.hook.compressor, self.hook.worker_state = compressor, states[self.rank]

    def step(self, problem, shards, step_in_epoch, batch_size, optimizer):
        x, y = worker_batch(problem, shards[self.rank], step_in_epoch, batch_size)
        hook = self.hook
        hook.reset_step()
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.ddp_model(x), y)
        hook.backward(loss)
        optimizer.step()
        times = None
        if self.timed:
            sync_device(self.device)
            wall = time.perf_counter() - t0
            ht = hook.times
            times = StepTimes(wall - ht.compress_s - ht.exchange_s, ht.compress_s, ht.exchange_s)
        return StepOutcome([float(loss.item())], [hook.stats], times, hook.padded_bytes)

    def gather_floats(self, values):
        import torch.distributed as dist
        mine = torch.tensor(values, dtype=torch.float64, device=self.device)
        out = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(out, mine)
        return [float(v) for t in out for v in t.tolist()]

    def sum_ints(self, values):
        import torch.distributed as dist
        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.all_reduce(t)
        return [int(v) for v in t.tolist()]

    def all_agree(self, ok):
        return self.sum_ints([0 if ok else 1])[0] == 0

    def checkpoint_path(self, path):
        return rank_path(path, self.rank)

    def model_file(self) -> str:
        return f"model.rank{self.rank}.pt"

    def close(self) -> None:
        from .process_group import end_process_group
        self.ddp_model = self.hook = None      # the group's last holders, see end_process_group
        end_process_group()


def make_exchange(ddp: bool, n_workers: int | None, device: str, timed: bool = False,
                  timeout_s: float = 300.0, deterministic: bool = True) -> Exchange:
    if ddp:
        return DdpExchange(n_workers, device, timed, timeout_s, deterministic)
    return SimulatedExchange(n_workers, device, timed, deterministic)
