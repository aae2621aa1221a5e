"""A DDP communication hook that exchanges compressed gradients (torchrun; gloo or NCCL).

    state = GradblockHookState(compressor, ddp_model)
    ddp_model.register_comm_hook(state, gradblock_hook)

Per bucket: each parameter's gradient is encoded with this rank's compressor state
(`encode_group`), the bucket's message is exchanged with all_gather, every rank's message is
decoded and reduced (`decode_group`, the same code the single-process simulation runs), and
the averaged gradients are written back into the bucket buffer.

* Layers are keyed by parameter identity, never by bucket index: DDP rebuilds its buckets
  after the first iteration.
* all_gather needs equal sizes (gloo rejects anything else): the message sizes are gathered
  first, every message is padded to the largest (at least one word, so an empty payload
  still takes part in the collective) and trimmed again after the gather.
* Every rank decodes every peer's message, so a malformed frame raises the same error
  (its codec.errors class, message naming the peer rank and the layer) on all ranks at once
  instead of leaving some rank blocked in the next collective.
"""
import time
from typing import Callable

import torch
import torch.distributed as dist

from .compressors import (Compressor, LayerInfo, StepStats, WorkerState, decode_group,
                          encode_group, layers_of)
from .workers import StepTimes


class GradblockHookState:
    """What the hook needs across calls: the compressor, this rank's compressor state, the
    parameter -> layer map, and the per-step statistics the training loop reads."""

    def __init__(self, compressor: Compressor, model: torch.nn.Module, process_group=None,
                 worker_state: WorkerState | None = None,
                 outgoing_filter: Callable[[torch.Tensor, list[LayerInfo], int], torch.Tensor]
                 | None = None):
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
        self.worker_state = worker_state if worker_state is not None else compressor.new_worker_state()
        # Fault injection for tests: rewrites this rank's outgoing message.
        self.outgoing_filter = outgoing_filter
        self.reset_step()

    def reset_step(self) -> None:
        self.stats = StepStats()
        self.times = StepTimes()
        self.padded_bytes = 0          # what all_gather really moved for this rank, padding included

    def layer_of(self, param: torch.Tensor) -> LayerInfo:
        info = self._layer_by_param.get(id(param))
        if info is None:
            raise KeyError(f"bucket holds a parameter of shape {tuple(param.shape)} that is not a "
                           f"trainable parameter of the model this hook state was built for")
        return info


def _sync(t: torch.Tensor) -> None:
    if t.device.type == "cuda":
        torch.cuda.synchronize(t.device)


def all_gather_varlen(message: torch.Tensor, group=None) -> tuple[list[torch.Tensor], int]:
    """all_gather of 1-D int32 tensors of different lengths -> (messages in rank order,
    padded length each rank sent)."""
    world = dist.get_world_size(group)
    size = torch.tensor([message.numel()], dtype=torch.int64, device=message.device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    lengths = [int(s.item()) for s in sizes]
    width = max(1, max(lengths))
    padded = torch.zeros(width, dtype=torch.int32, device=message.device)
    padded[:message.numel()] = message
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded, group=group)
    return [g[:n] for g, n in zip(gathered, lengths)], width


def gradblock_hook(state: GradblockHookState, bucket: dist.GradBucket
                   ) -> torch.futures.Future[torch.Tensor]:
    # real (not string) annotations: DDP checks them when the hook is registered
    grads = bucket.gradients()
    layers = [state.layer_of(p) for p in bucket.parameters()]
    t0 = time.perf_counter()
    message, stats = encode_group(state.compressor, layers, grads, state.worker_state)
    if message.device != grads[0].device:
        message = message.to(grads[0].device)
    if state.outgoing_filter is not None:
        message = state.outgoing_filter(message, layers, state.rank)
    _sync(message)
    t1 = time.perf_counter()
    messages, width = all_gather_varlen(message, state.group)
    averaged = decode_group(state.compressor, layers, messages)
    buffer = bucket.buffer()
    offset = 0
    for avg in averaged:
        n = avg.numel()
        buffer[offset:offset + n].copy_(avg.reshape(-1))
        offset += n
    if offset != buffer.numel():
        raise RuntimeError(f"bucket buffer holds {buffer.numel()} elements, its parameters {offset}")
    _sync(buffer)
    t2 = time.perf_counter()
    state.stats.add(stats)
    state.times.compress_s += t1 - t0
    state.times.exchange_s += t2 - t1
    state.padded_bytes += 4 * width
    fut = torch.futures.Future()
    fut.set_result(buffer)
    return fut


def register(ddp_model: torch.nn.parallel.DistributedDataParallel, compressor: Compressor,
             worker_state: WorkerState | None = None, **kw) -> GradblockHookState:
    """Build the hook state for `ddp_model` and register the hook; returns the state."""
    state = GradblockHookState(compressor, ddp_model, ddp_model.process_group,
                               worker_state=worker_state, **kw)
    ddp_model.register_comm_hook(state, gradblock_hook)
    return state
