"""The allreduce exchange of coarse blocks: global block selection (docs/spec.md §8).

`--exchange allreduce` (coarse only). Per DDP bucket (or simulated group) every worker:

1. computes a = clamp(r + Q(g)) (with momentum correction a = clamp(r + u'), §7) and its exact
   block norms (torchstep.global_select.prepare);
2. **collective 1**: an int32 allreduce SUM of [status, check digits, the shifted norms of
   every layer of the bucket]; the hook waits for it (a round trip of a small vector: LeNet-5
   has 472 blocks) because collective 2's content depends on it and a collective must be issued from
   the hook, never from a callback (ranks could otherwise issue them in different orders);
3. reads the header (torchstep.global_select.check: its own NaN -> NonFiniteError, a peer's ->
   PeerNonFiniteError, different check words -> RankMismatchError naming the layer; every rank
   raises, none is left waiting), selects the same k_eff blocks per layer by the summed norm on
   every rank and keeps r' = a off them (velocity masked on them);
4. **collective 2**: an int32 allreduce SUM of its values >> ceil(log2 N) on those blocks
   (k_eff blocks of W = min(B, n) words per layer, all layers of the bucket in one vector; the
   dropped low bits stay in the residual), issued from the hook with
   `async_op=True`; the callback chained with `fut.then` averages (§1.3) into the bucket.

Traffic per worker is the two vectors' size, the same for every N (a ring allreduce moves
2 (N-1)/N of it each way), where the all_gather path receives N-1 frames. Values travel raw
(int32), not as ZRLE frames: no CRC; integrity is the transport's (TCP checksums under gloo,
NCCL's links). Layers sent dense (`--dense-below`) are all_gathered as float32 words as in
the default path (the same bits: a float sum must be taken in rank order); so is every layer
under the dense warm-up compressor (`--warmup-epochs`), which the trainer swaps in.

The per-group steps live in shim/exchange/global_step.py, which the single-process simulation
(shim/exchange/workers.py) runs too, so DDP and simulation give the same bits
(tests/test_global_exchange.py). This module does not import shim/exchange/hook.py (hook.register
imports it): its state offers the same API as GradblockHookState (`reset_step`, `backward`,
`stats`, `times`, `state_dict` / `load_state_dict`, `compressor` and `worker_state` swappable).
"""
# no `from __future__ import annotations`: DDP inspects the hook's real annotations
import time
from typing import Callable

import torch
import torch.distributed as dist

from gradblock.refmodel.global_select import RankMismatchError

from .device import sync_device
from .device_codec import combine_futures, write_views
from ..errors import TrainingError
from ..compress.compressors import Compressor, WorkerState
from .global_step import (EXCHANGES, GroupPrep, average_group, exchange_of, finish_group,
                          is_global, prepare_group)
from .hook_state import HookState

__all__ = ["EXCHANGES", "exchange_of", "is_global", "GlobalHookState", "global_hook",
           "register_global", "ExchangeModeError"]


class ExchangeModeError(TrainingError):
    """The allreduce hook was handed a compressor it cannot exchange: one that compresses
    layers but whose exchange is not allreduce (register it with shim.exchange.hook.register)."""


# ------------------------------------------------------------------------------ DDP hook

class GlobalHookState(HookState):
    """The allreduce hook's state: the shared part (shim/exchange/hook_state.py, the API of
    shim.exchange.hook.GradblockHookState) plus the buckets whose lengths the ranks agreed on."""

    def __init__(self, compressor: Compressor, model: torch.nn.Module, process_group=None,
                 worker_state: WorkerState | None = None, timed: bool = False,
                 outgoing_filter: Callable | None = None):
        if outgoing_filter is not None:
            raise ValueError("outgoing_filter rewrites framed messages; the allreduce exchange "
                             "sends none")
        super().__init__(compressor, model, process_group, worker_state=worker_state,
                         timed=timed)
        self.verified: set = set()        # buckets (layer indices) whose lengths the ranks agreed on
        self.reset_step()


def _verify_lengths(state: GlobalHookState, gp: GroupPrep, device) -> None:
    """Once per bucket (DDP rebuilds its buckets after the first step): a fixed-size allreduce
    of [x, x^2] for the coarse layer count, collective 1's length and the dense words, so
    ranks configured with different block sizes or dense_below raise RankMismatchError naming
    the bucket's first layer instead of meeting in collectives of different lengths (gloo
    aborts the process on those)."""
    key = tuple(lay.index for lay in gp.layers)
    if key in state.verified:
        return
    xs = [len(gp.coarse), 0 if gp.plan is None else gp.plan.vector_words,
          0 if gp.dense_message is None else gp.dense_message.numel()]
    t = torch.tensor([v for x in xs for v in (x, x * x)], dtype=torch.int64, device=device)
    dist.all_reduce(t, group=state.group)
    s = t.tolist()
    n = state.world_size
    for i, what in enumerate(("compressed layers", "norm-vector words", "dense words")):
        if s[2 * i] ** 2 != n * s[2 * i + 1]:
            first = gp.layers[0]
            raise RankMismatchError(
                f"bucket from layer {first.index} {first.name!r}: the ranks' {what} differ "
                f"({xs[i]} here): block size, dense_below or the model differ between ranks")
    state.verified.add(key)


def global_hook(state: GlobalHookState, bucket: dist.GradBucket
                ) -> torch.futures.Future[torch.Tensor]:
    comp = state.compressor
    grads = bucket.gradients()
    layers = [state.layer_of(p) for p in bucket.parameters()]
    buffer = bucket.buffer()
    t0 = time.perf_counter()
    try:
        if not is_global(comp) and not all(comp.sends_dense(lay) for lay in layers):
            raise ExchangeModeError(f"the allreduce hook got a {comp.name} compressor whose "
                                    f"exchange is {exchange_of(comp)}")
        gp = prepare_group(comp, layers, grads, state.worker_state)
        _verify_lengths(state, gp, buffer.device)
        summed = None
        if state.timed:
            sync_device(buffer)
        t_prep = time.perf_counter()
        if gp.plan is not None:
            summed = gp.prep.vector
            dist.all_reduce(summed, group=state.group)          # collective 1: a round trip
        t_norms = time.perf_counter()       # (on CUDA the wait lands in finish's host read)
        fin, stats = finish_group(comp, gp, summed, state.worker_state,
                                  where=f"rank {state.rank} ")
        futs, gathered = [], None
        if fin is not None:
            futs.append(dist.all_reduce(fin.values, group=state.group,
                                        async_op=True).get_future())
        if gp.dense:
            msg = gp.dense_message
            gathered = [torch.empty_like(msg) for _ in range(state.world_size)]
            futs.append(dist.all_gather(gathered, msg, group=state.group,
                                        async_op=True).get_future())
    except Exception as e:
        state.keep_error(e)
        raise
    if state.timed:
        sync_device(buffer)
    t_sent = time.perf_counter()
    with state._lock:
        state.stats.add(stats)
        state.padded_bytes += stats.bytes_sent
        # compress: prepare and finish; exchange: collective 1's round trip (waiting for the
        # slowest rank included), then collective 2 and the average (in the callback)
        state.times.compress_s += (t_prep - t0) + (t_sent - t_norms)
        state.times.exchange_s += t_norms - t_prep
    for f in futs:
        state.track(f)
    fut = combine_futures(futs, buffer.device)

    def done(f: torch.futures.Future) -> torch.Tensor:
        f.wait()                                  # surfaces a failed collective
        for sub in futs:        # each collective's output, on this callback's stream (CUDA)
            sub.wait()
        try:
            averaged = average_group(comp, gp, fin, None if fin is None else fin.values,
                                     gathered)
            write_views(grads, averaged)          # through the views: channels_last stays right
        except Exception as e:
            state.keep_error(e)
            raise
        state.exchange_done(buffer, t_sent)
        return buffer

    return state.track(fut.then(done))


def register_global(ddp_model: torch.nn.parallel.DistributedDataParallel, compressor: Compressor,
                    worker_state: WorkerState | None = None, **kw) -> GlobalHookState:
    """Build the hook state for `ddp_model` and register the allreduce-exchange hook."""
    state = GlobalHookState(compressor, ddp_model, ddp_model.process_group,
                            worker_state=worker_state, **kw)
    ddp_model.register_comm_hook(state, global_hook)
    return state
