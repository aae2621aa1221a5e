"""Single-process simulation of N data-parallel workers.

One model holds the parameters every worker shares (synchronous SGD keeps them identical).
Each simulated worker computes the gradient of its own batch, keeps its own compressor state
(residuals) and encodes its own message with `encode_group`; the messages are then decoded
and reduced with `decode_group`, the very code path the DDP hook runs after its all_gather.
So a simulated run and a `torchrun` run of the same configuration produce the same bits.

Buffers (BatchNorm running statistics) follow DDP's default `broadcast_buffers=True`:
every worker runs its forward pass from the same buffers and rank 0's updated buffers win.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..compress.compressors import Compressor, LayerInfo, StepStats, WorkerState, decode_group, encode_group
from .device import sync_device


@dataclass
class StepTimes:
    compute_s: float = 0.0     # forward + backward
    compress_s: float = 0.0    # encode (quantise, select, frame)
    exchange_s: float = 0.0    # collective (DDP) + decode + reduce

    def add(self, other: "StepTimes") -> None:
        self.compute_s += other.compute_s
        self.compress_s += other.compress_s
        self.exchange_s += other.exchange_s


@dataclass
class StepResult:
    losses: list[float]                     # per worker, in worker order
    stats: list[StepStats]                  # per worker
    times: StepTimes = field(default_factory=StepTimes)   # per-worker average for this step


class SimulatedCluster:
    def __init__(self, model: torch.nn.Module, compressor: Compressor, layers: Sequence[LayerInfo],
                 loss_fn: Callable, device: torch.device | str = "cpu",
                 worker_states: dict[int, WorkerState] | None = None, timed: bool = True,
                 groups: Sequence[Sequence[int]] | None = None):
        self.model = model
        # timed: per-phase seconds in StepResult.times (synchronises CUDA between phases)
        self.timed = bool(timed)
        self.compressor = compressor
        self.layers = list(layers)
        self.loss_fn = loss_fn
        self.device = torch.device(device)
        self.n_workers = compressor.n_workers
        trainable = [p for p in model.parameters() if p.requires_grad]
        if len(trainable) != len(self.layers):
            raise ValueError(f"model has {len(trainable)} trainable parameters, "
                             f"{len(self.layers)} layers given")
        self.params = trainable
        self.workers = worker_states if worker_states is not None else {
            w: compressor.new_worker_state() for w in range(self.n_workers)}
        if sorted(self.workers) != list(range(self.n_workers)):
            raise ValueError(f"need states for workers 0..{self.n_workers - 1}, got {sorted(self.workers)}")
        # a merge plan (shim/systems/merge_apply.py): per worker one encode call per group, one
        # exchange (decode of every worker's message) per group; None: the whole model at once
        self.groups = [list(range(len(self.layers)))] if groups is None else [list(g) for g in groups]
        if groups is not None and (not all(self.groups) or sorted(
                i for g in self.groups for i in g) != list(range(len(self.layers)))):
            raise ValueError(f"merge groups must cover layers 0..{len(self.layers) - 1} exactly once")

    def _sync(self) -> None:
        if self.timed:
            sync_device(self.device)

    def _buffers(self) -> list[torch.Tensor]:
        return [b.detach().clone() for b in self.model.buffers()]

    def _load_buffers(self, saved: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for b, s in zip(self.model.buffers(), saved):
                b.copy_(s)

    def step(self, batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
             optimizer: torch.optim.Optimizer, order: Sequence[int] | None = None) -> StepResult:
        """One synchronous step: batches[w] is worker w's (x, y). `order` permutes the order in
        which workers compute and in which their messages are reduced; the coarse codec's int64
        sums make its result independent of it."""
        n = self.n_workers
        if len(batches) != n:
            raise ValueError(f"{len(batches)} batches for {n} workers")
        order = list(range(n)) if order is None else list(order)
        # encode_group / decode_group, or global block selection (--exchange allreduce)
        from .global_step import decode_for, encode_for
        if sorted(order) != list(range(n)):
            raise ValueError(f"order must be a permutation of 0..{n - 1}, got {order}")
        self.model.train()
        start_buffers = self._buffers()
        rank0_buffers = start_buffers
        messages: dict[int, list[torch.Tensor]] = {}
        losses = [0.0] * n
        stats: list[StepStats] = [StepStats() for _ in range(n)]
        times = StepTimes()
        for w in order:
            if start_buffers:
                self._load_buffers(start_buffers)
            t0 = time.perf_counter()
            self.model.zero_grad(set_to_none=True)
            x, y = batches[w]
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            losses[w] = float(loss.item())
            self._sync()
            t1 = time.perf_counter()
            messages[w] = []
            for g in self.groups:
                msg, st = encode_for(self.compressor, [self.layers[i] for i in g],
                                     [self.params[i].grad for i in g], self.workers[w])
                messages[w].append(msg)
                stats[w].add(st)
            self._sync()
            t2 = time.perf_counter()
            times.compute_s += t1 - t0
            times.compress_s += t2 - t1
            if w == 0 and start_buffers:
                rank0_buffers = self._buffers()
        if start_buffers:
            self._load_buffers(rank0_buffers)
        t0 = time.perf_counter()
        averaged: list = [None] * len(self.params)
        for j, g in enumerate(self.groups):
            decoded = decode_for(self.compressor, [self.layers[i] for i in g],
                                 [messages[w][j] for w in order], order, self.workers, stats)
            for i, avg in zip(g, decoded):
                averaged[i] = avg
        self._sync()
        times.exchange_s = time.perf_counter() - t0     # every real worker decodes all N messages
        times.compute_s /= n
        times.compress_s /= n
        for p, g in zip(self.params, averaged):
            # a bfloat16 / float16 parameter takes the float32 average rounded to nearest even
            p.grad = g if g.dtype == p.dtype else g.to(p.dtype)
        optimizer.step()
        return StepResult(losses, stats, times)
