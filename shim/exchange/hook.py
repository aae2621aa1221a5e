"""A DDP communication hook that exchanges compressed gradients (torchrun; gloo or NCCL).

    state = GradblockHookState(compressor, ddp_model)
    ddp_model.register_comm_hook(state, gradblock_hook)

Per bucket: each parameter's gradient is encoded with this rank's compressor state
(`encode_group`), the bucket's message is exchanged with all_gather, and the decode
(`decode_group`, the same code the single-process simulation runs) is chained on the
collective's future with `fut.then(...)`, as PyTorch's own hooks do: the hook returns at once
and DDP's backward goes on computing the next buckets' gradients while the messages travel.

* Layers are keyed by parameter identity, never by bucket index: DDP rebuilds its buckets
  after the first iteration.
* all_gather needs equal sizes (gloo rejects anything else). Every packet's size is bounded
  in advance by what every rank knows alike (`Compressor.message_bound`: a coarse frame by its
  k_eff blocks, shim/compress/fastpath.py; sparse top-k and dense packets are fixed), so a bucket is
  ONE all_gather of fixed-width slots: word 0 the message's true length, then the message,
  zeros after. No size round trip, no `.item()` before the collective. A slot whose length
  word does not fit its width is refused by name (PacketError naming the peer rank). Only
  dlgs between threshold steps has no useful bound: it still gathers the sizes first (one
  int64 per rank, blocking) and pads to the largest.
  Collectives are issued from the hook itself, in bucket order, never from a callback:
  a collective launched from a completion callback could reach the ranks in different
  orders and cross-match with another bucket's.
* Decoding runs on the host: the gathered slots are copied off the device once (CUDA), the
  coarse frames validated and summed by the numba decoder (shim/compress/fastpath.py), and the
  averages written into the bucket's own gradient views (`bucket.gradients()`, which keep
  the parameters' strides: channels_last stays right).
* Every rank decodes every peer's message, so a malformed frame raises the same error on all
  ranks. DDP reports an error raised in a callback as a RuntimeError; the state keeps the
  original (its codec.errors class, message naming the peer rank and the layer) and
  `backward()` re-raises it.
* Timing is off by default (no CUDA synchronisation inside the step); with `timed=True` the
  state accumulates encode and exchange seconds.
* `state_dict()` / `load_state_dict()` (PowerSGD's pattern) save and restore this rank's
  compressor state; the process group and the parameter map are rebuilt, not saved.
"""

# no `from __future__ import annotations`: DDP inspects the hook's real annotations
import time
from typing import Callable

import torch
import torch.distributed as dist

from ..compress.compressors import Compressor, LayerInfo, WorkerState, decode_group, encode_group
from .device import sync_device
from .hook_state import HookState


class GradblockHookState(HookState):
    """The all_gather hook's state: the shared part (shim/exchange/hook_state.py) plus the outgoing
    message filter and `send`."""

    def __init__(self, compressor: Compressor, model: torch.nn.Module, process_group=None,
                 worker_state: WorkerState | None = None, timed: bool = False,
                 outgoing_filter: Callable[[torch.Tensor, list[LayerInfo], int], torch.Tensor]
                 | None = None):
        super().__init__(compressor, model, process_group, worker_state=worker_state,
                         timed=timed)
        # Fault injection for tests: rewrites this rank's outgoing message.
        self.outgoing_filter = outgoing_filter
        if compressor.frame_coded and compressor.host_fast and all(
                p.device.type == "cpu" for p in self._params):
            compressor.warm_host()            # numba's start-up here, not in the first step
        self.reset_step()

    def send(self, layers: list[LayerInfo], grads: list[torch.Tensor]):
        """Encode `layers` in one call, pass the message through the outgoing filter and start
        its all_gather (one fixed-width collective when the message size is bounded); the
        statistics and compress time are counted here. Returns (future, messages, t_sent):
        once the future is done, `messages()` gives every rank's message (host tensors, rank
        order) or raises PacketError naming a peer whose length word is out of range."""
        t0 = time.perf_counter()
        bound = self.compressor.message_bound(layers, self.worker_state)
        message, stats = encode_group(self.compressor, layers, grads, self.worker_state)
        if message.device != grads[0].device:
            message = message.to(grads[0].device)
        if self.outgoing_filter is not None:
            message = self.outgoing_filter(message, layers, self.rank)
        if self.timed:
            sync_device(message)
        t_sent = time.perf_counter()
        if bound is None:
            fut, gathered, lengths, width = all_gather_varlen_async(message, self.group)

            def messages() -> list[torch.Tensor]:
                return [g[:n].cpu() for g, n in zip(gathered, lengths)]
        else:
            fut, messages, width = all_gather_slots_async(message, bound, self.group)
        self.track(fut)
        with self._lock:
            self.stats.add(stats)
            self.padded_bytes += 4 * width
            self.times.compress_s += t_sent - t0
        return fut, messages, t_sent


def _gather_sizes(message: torch.Tensor, group=None) -> list[int]:
    world = dist.get_world_size(group)
    size = torch.tensor([message.numel()], dtype=torch.int64, device=message.device)
    sizes = torch.zeros(world, dtype=torch.int64, device=message.device)
    dist.all_gather(list(sizes.chunk(world)), size, group=group)
    return sizes.tolist()                                   # one host copy, not one per rank


def all_gather_slots_async(message: torch.Tensor, bound: int, group=None):
    """Launch ONE all_gather of fixed-width slots for a message of at most `bound` words:
    slot = [length, message..., zeros], width bound + 1, the same on every rank without
    asking the others. -> (future, messages, width); messages() (after the future) returns
    each rank's message on the host, or raises PacketError naming the peer whose length word
    does not fit its slot. A local message longer than `bound` (a fault-injection filter) is
    sent cut with its true length, so every rank refuses it by name instead of hanging."""
    from ..compress.compressors import PacketError
    world = dist.get_world_size(group)
    width = int(bound) + 1
    n = message.numel()
    slot = torch.zeros(width, dtype=torch.int32, device=message.device)
    slot[0] = n
    slot[1:1 + min(n, bound)] = message[:bound]
    out = torch.empty(world * width, dtype=torch.int32, device=message.device)
    work = dist.all_gather(list(out.chunk(world)), slot, group=group, async_op=True)

    def messages() -> list[torch.Tensor]:
        host = out.cpu().view(world, width)          # one copy off the device for all ranks
        lengths = host[:, 0].tolist()
        got = []
        for r, n_r in enumerate(lengths):
            if not 0 <= n_r <= width - 1:
                raise PacketError(f"peer rank {r}: message length word {n_r} does not fit its "
                                  f"slot of {width - 1} words (the bound of this bucket's "
                                  f"packets)")
            got.append(host[r, 1:1 + n_r])
        return got

    return work.get_future(), messages, width


def _pad(message: torch.Tensor, width: int) -> torch.Tensor:
    padded = torch.zeros(width, dtype=torch.int32, device=message.device)
    padded[:message.numel()] = message
    return padded


def all_gather_varlen_async(message: torch.Tensor, group=None
                            ) -> tuple[torch.futures.Future, list[torch.Tensor], list[int], int]:
    """Launch an all_gather of 1-D int32 tensors of different lengths -> (future of the
    gather, padded receive buffers in rank order, true lengths, padded width)."""
    lengths = _gather_sizes(message, group)
    width = max(1, max(lengths))
    gathered = [torch.empty(width, dtype=torch.int32, device=message.device) for _ in lengths]
    work = dist.all_gather(gathered, _pad(message, width), group=group, async_op=True)
    return work.get_future(), gathered, lengths, width


def all_gather_varlen(message: torch.Tensor, group=None) -> tuple[list[torch.Tensor], int]:
    """Blocking form: (messages in rank order, padded length each rank sent)."""
    fut, gathered, lengths, width = all_gather_varlen_async(message, group)
    fut.wait()
    return [g[:n] for g, n in zip(gathered, lengths)], width


def write_averages(views: list[torch.Tensor], averaged: list[torch.Tensor]) -> None:
    """Copy each layer's average (host or device) into its gradient view of the bucket (the
    parameter's own strides); on CUDA wait until the copies are done, so the bucket's future
    is complete whichever stream or callback wrote it."""
    if len(views) != len(averaged):
        raise RuntimeError(f"bucket holds {len(views)} gradients, {len(averaged)} averages")
    for v, avg in zip(views, averaged):
        v.copy_(avg.reshape(v.shape))
    if views and views[0].device.type == "cuda":
        torch.cuda.current_stream(views[0].device).synchronize()


def gradblock_hook(state: GradblockHookState, bucket: dist.GradBucket
                   ) -> torch.futures.Future[torch.Tensor]:
    # real (not string) annotations: DDP checks them when the hook is registered
    grads = bucket.gradients()
    layers = [state.layer_of(p) for p in bucket.parameters()]
    fut, messages, t1 = state.send(layers, grads)
    buffer = bucket.buffer()

    def decode(done: torch.futures.Future) -> torch.Tensor:
        done.wait()                               # surfaces a failed collective
        try:
            averaged = decode_group(state.compressor, layers, messages())
            write_averages(grads, averaged)
        except Exception as e:
            state.keep_error(e)
            raise
        state.exchange_done(buffer, t1)
        return buffer

    return state.track(fut.then(decode))


def register(ddp_model: torch.nn.parallel.DistributedDataParallel, compressor: Compressor,
             worker_state: WorkerState | None = None, **kw) -> GradblockHookState:
    """Build the hook state for `ddp_model` and register the hook; returns the state. A
    compressor with exchange "allreduce" gets shim/exchange/global_exchange.py's hook."""
    if getattr(compressor, "exchange", "allgather") == "allreduce":
        from .global_exchange import register_global
        return register_global(ddp_model, compressor, worker_state=worker_state, **kw)
    state = GradblockHookState(compressor, ddp_model, ddp_model.process_group,
                               worker_state=worker_state, **kw)
    ddp_model.register_comm_hook(state, gradblock_hook)
    return state
