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
* Where the codec runs (`compressor.codec`, shim/exchange/device_codec.py): on the device
  for gradients off the CPU ("auto"; "device" forces it on the CPU too, the same code): the
  bucket is encoded straight into its slot and the gathered slots validated, decoded, summed
  and averaged where they are, without a host sync, the decode chained on the collective's
  (CUDA-aware) future so the hook returns at once and backward goes on. On the host ("host",
  and "auto" on CPU tensors) the slots are copied off the device once and the coarse frames
  validated and summed by the numba decoder (shim/compress/fastpath.py). Either way the
  averages are written into the bucket's own gradient views (`bucket.gradients()`, which
  keep the parameters' strides: channels_last stays right) by the one helper every hook uses
  (device_codec.write_views).
* A NaN gradient does not stop this rank before its collective (the others would wait until
  the timeout): the slot's length word carries it, every rank enters the all_gather, and
  every rank raises -- NonFiniteError where the NaN was, PeerNonFiniteError naming the rank
  on the others -- and no rank's compressor state moves.
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

from gradblock.refmodel.quantiser import NonFiniteError
from gradblock.torchstep.bucket import NONFINITE_WORD, SKIP_WORD

from ..compress.compressors import (Compressor, LayerInfo, StepStats, WorkerState, decode_group,
                                    encode_group)
from .device import sync_device
from .device_codec import (bucket_error, decode_bucket, encode_bucket, nonfinite_slot_error,
                           resolve_codec, skip_bucket, write_views)
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
        statistics and compress time are counted here. Returns (future, received, t_sent):
        once the future is done, `received.finish(state, views)` decodes every rank's message
        and writes the averages into `views` (the layers' gradients), or raises the step's
        error (PacketError naming a peer whose length word is out of range, a frame error
        naming the peer and layer, NonFiniteError / PeerNonFiniteError for a NaN)."""
        t0 = time.perf_counter()
        comp, ws = self.compressor, self.worker_state
        bound = comp.message_bound(layers, ws)
        device = grads[0].device
        if bound is not None and resolve_codec(comp, layers, device) == "device":
            return self._send_device(layers, grads, bound, t0)
        own_nan = None
        # the "skip" policy (mixed precision): a NaN or Inf here makes every rank skip
        skip = bound is not None and getattr(comp, "nonfinite", "raise") == "skip"
        own_skip = skip and not all(bool(torch.isfinite(g).all()) for g in grads)
        old = ({lay.index: ws.layers.get(lay.index) for lay in layers},
               {lay.index: ws.steps.get(lay.index, 0) for lay in layers})

        def rollback():
            for i, d in old[0].items():
                if d is None:
                    ws.layers.pop(i, None)
                else:
                    ws.layers[i] = d
            ws.steps.update(old[1])
        try:
            if own_skip:
                message, stats = torch.zeros(0, dtype=torch.int32), StepStats()
            else:
                message, stats = encode_group(comp, layers, grads, ws)
        except NonFiniteError as e:
            if bound is None:            # dlgs between threshold steps: no slot to carry it
                raise
            # every rank still enters the collective; the length word carries the NaN
            own_nan, message, stats = e, torch.zeros(0, dtype=torch.int32), StepStats()
        if message.device != device:
            message = message.to(device)
        if self.outgoing_filter is not None and own_nan is None and not own_skip:
            message = self.outgoing_filter(message, layers, self.rank)
        if self.timed:
            sync_device(message)
        t_sent = time.perf_counter()
        if bound is None:
            fut, gathered, lengths, width = all_gather_varlen_async(message, self.group)

            def messages() -> list[torch.Tensor]:
                return [g[:n].cpu() for g, n in zip(gathered, lengths)]
        else:
            fut, messages, width = all_gather_slots_async(message, bound, self.group,
                                                          rank=self.rank, own_error=own_nan,
                                                          skip=own_skip)
        self.track(fut)
        with self._lock:
            self.stats.add(stats)
            self.padded_bytes += 4 * width
            self.times.compress_s += t_sent - t0
        return fut, HostReceived(layers, messages, rollback), t_sent

    def _send_device(self, layers, grads, bound: int, t0: float):
        """send() on the device path: the slot encoded where the gradients are, no host sync."""
        width = bound + 1
        sent = encode_bucket(self.compressor, layers, grads, self.worker_state, width)
        if self.outgoing_filter is not None:      # fault injection (tests): via the host
            n = int(sent.slot[0])
            if n >= 0:                            # not a NaN / skip flag
                msg = self.outgoing_filter(sent.slot[1:1 + n].clone(), layers, self.rank)
                sent.slot = slot_of(msg, width - 1)
        if self.timed:
            sync_device(sent.slot)
        t_sent = time.perf_counter()
        world = self.world_size
        out = torch.empty(world * width, dtype=torch.int32, device=sent.slot.device)
        work = dist.all_gather(list(out.chunk(world)), sent.slot, group=self.group, async_op=True)
        fut = work.get_future()
        self.track(fut)
        self.add_device_stats(sent.stats)
        with self._lock:
            self.padded_bytes += 4 * width
            self.times.compress_s += t_sent - t0
        self.arm_final_check(sent.slot.device)
        return fut, DeviceReceived(sent, out.view(world, width)), t_sent


class HostReceived:
    """A bucket's messages reached through the host: the reference / numba decode."""

    def __init__(self, layers, messages, rollback=None):
        self.layers, self.messages, self.rollback = layers, messages, rollback

    def finish(self, state: HookState, views: list[torch.Tensor]) -> None:
        got = self.messages()
        if got is None:                      # a rank skipped the bucket ("skip" policy)
            self.rollback()
            skip_bucket(views)
            return
        write_views(views, decode_group(state.compressor, self.layers, got))


class DeviceReceived:
    """A bucket's gathered slots on the device: decoded and written without a host sync; the
    validity flag is read per bucket or once per step (HookState.check_later)."""

    def __init__(self, sent, gathered: torch.Tensor):
        self.sent, self.gathered = sent, gathered

    def finish(self, state: HookState, views: list[torch.Tensor]) -> None:
        self.sent.views = list(views)
        bad = decode_bucket(self.sent, self.gathered)
        state.check_later(bad, lambda: bucket_error(state.compressor, self.sent, self.gathered,
                                                    state.rank, state.worker_state))


def slot_of(message: torch.Tensor, bound: int, nonfinite: bool = False,
            skip: bool = False) -> torch.Tensor:
    """[length, message, zeros] of width bound + 1; a message longer than `bound` is cut with
    its true length, so every rank refuses it by name instead of hanging."""
    n = message.numel()
    slot = torch.zeros(bound + 1, dtype=torch.int32, device=message.device)
    slot[0] = SKIP_WORD if skip else NONFINITE_WORD if nonfinite else n
    slot[1:1 + min(n, bound)] = message[:bound]
    return slot


def _gather_sizes(message: torch.Tensor, group=None) -> list[int]:
    world = dist.get_world_size(group)
    size = torch.tensor([message.numel()], dtype=torch.int64, device=message.device)
    sizes = torch.zeros(world, dtype=torch.int64, device=message.device)
    dist.all_gather(list(sizes.chunk(world)), size, group=group)
    return sizes.tolist()                                   # one host copy, not one per rank


def all_gather_slots_async(message: torch.Tensor, bound: int, group=None, rank: int = 0,
                           own_error: BaseException | None = None, skip: bool = False):
    """Launch ONE all_gather of fixed-width slots for a message of at most `bound` words:
    slot = [length, message..., zeros], width bound + 1, the same on every rank without
    asking the others. -> (future, messages, width); messages() (after the future) returns
    each rank's message on the host, or raises PacketError naming the peer whose length word
    does not fit its slot. A local message longer than `bound` (a fault-injection filter) is
    sent cut with its true length, so every rank refuses it by name instead of hanging. With
    `own_error` (this rank's NaN) the length word says so and every rank raises: this rank
    `own_error`, the others PeerNonFiniteError naming `rank`. With `skip` (the "skip" policy)
    the length word says so and messages() returns None on every rank."""
    from ..compress.compressors import PacketError
    world = dist.get_world_size(group)
    width = int(bound) + 1
    slot = slot_of(message, int(bound), own_error is not None, skip)
    out = torch.empty(world * width, dtype=torch.int32, device=message.device)
    work = dist.all_gather(list(out.chunk(world)), slot, group=group, async_op=True)

    def messages() -> list[torch.Tensor]:
        host = out.cpu().view(world, width)          # one copy off the device for all ranks
        lengths = host[:, 0].tolist()
        if SKIP_WORD in lengths:
            return None
        err = nonfinite_slot_error(lengths, rank, own_error)
        if err is not None:
            raise err
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


def gradblock_hook(state: GradblockHookState, bucket: dist.GradBucket
                   ) -> torch.futures.Future[torch.Tensor]:
    # real (not string) annotations: DDP checks them when the hook is registered
    grads = bucket.gradients()
    layers = [state.layer_of(p) for p in bucket.parameters()]
    fut, received, t1 = state.send(layers, grads)
    buffer = bucket.buffer()

    def decode(done: torch.futures.Future) -> torch.Tensor:
        done.wait()                               # surfaces a failed collective
        try:
            received.finish(state, grads)
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
