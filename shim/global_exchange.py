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
the default path (the same bits: a float sum must be taken in rank order). A compressor whose
exchange is not allreduce (the dense warm-up epochs) goes through shim/hook.py's path.

The single-process simulation (shim/workers.py) calls `encode_for` / `decode_for`, which run
the same prepare / check / finish / average on every simulated worker, so DDP and simulation
give the same bits (tests/test_global_exchange.py).
"""
# no `from __future__ import annotations`: DDP inspects the hook's real annotations
import time
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.distributed as dist

from gradblock import torchstep as tc
from gradblock.refmodel.global_select import RankMismatchError
from gradblock.refmodel.quantiser import NonFiniteError
from gradblock.torchstep import global_select as gs

from .compressors import (Compressor, LayerInfo, StepStats, WorkerState, decode_group,
                          encode_group)
from .hook import GradblockHookState, gradblock_hook

EXCHANGES = ("allgather", "allreduce")

__all__ = ["EXCHANGES", "exchange_of", "is_global", "GroupPrep", "prepare_group", "finish_group",
           "average_group", "encode_for", "decode_for", "GlobalHookState", "global_hook",
           "register_global", "bytes_per_step"]


def _sync(t: torch.Tensor) -> None:
    if t.device.type == "cuda":
        torch.cuda.synchronize(t.device)


def exchange_of(compressor: Compressor) -> str:
    return getattr(compressor, "exchange", "allgather")


def is_global(compressor: Compressor) -> bool:
    return exchange_of(compressor) == "allreduce"


def _plan(compressor, layers: list[LayerInfo], device, ks) -> gs.GlobalPlan:
    cache = compressor.__dict__.setdefault("_global_plans", {})
    key = (tuple(lay.index for lay in layers), str(device),
           tuple(ks) if isinstance(ks, list) else ks)
    plan = cache.get(key)
    if plan is None:
        if isinstance(ks, list):          # warm-up plans change every few steps: keep one
            for k in [k for k in cache if isinstance(k[2], tuple)]:
                del cache[k]
        m = compressor.momentum
        plan = gs.plan_global([lay.shape for lay in layers], k=ks,
                              block_size=compressor.block_size,
                              layer_ids=[lay.index for lay in layers],
                              names=[lay.name for lay in layers], R=compressor.cfg,
                              m_fix=None if m is None else m.m_fix,
                              mask=compressor.momentum_mask, n_workers=compressor.n_workers,
                              device=device)
        cache[key] = plan
    return plan


@dataclass
class GroupPrep:
    """One worker's group before the exchange."""
    layers: list[LayerInfo]
    coarse: list[int]                    # positions of the layers exchanged by global selection
    dense: list[int]                     # positions of the layers sent dense (float32 words)
    plan: gs.GlobalPlan | None
    prep: gs.GlobalPrep | None
    dense_message: torch.Tensor | None   # int32: the dense layers' float32 words, layer order
    dense_stats: StepStats
    dense_error: BaseException | None    # a NaN in a dense layer, raised after collective 1


def prepare_group(compressor: Compressor, layers: Sequence[LayerInfo],
                  grads: Sequence[torch.Tensor], ws: WorkerState) -> GroupPrep:
    """a and the block norms of the coarse layers (collective 1's vector); the dense layers'
    float32 words (their velocity updated as the default path does)."""
    layers = list(layers)
    dense = [j for j, lay in enumerate(layers) if compressor.sends_dense(lay)]
    coarse = [j for j, lay in enumerate(layers) if not compressor.sends_dense(lay)]
    dense_message, dense_stats, dense_error = None, StepStats(), None
    if dense:
        try:
            dense_message, dense_stats = encode_group(compressor, [layers[j] for j in dense],
                                                      [grads[j] for j in dense], ws)
        except NonFiniteError as e:
            dense_error = e
    plan = prep = None
    if coarse:
        sub = [layers[j] for j in coarse]
        g = [grads[j].detach() for j in coarse]
        plan = _plan(compressor, sub, g[0].device,
                     compressor._ks(sub, compressor.compressed_step(sub[0], ws)))
        state = [ws.layers.get(lay.index, {}) for lay in sub]
        prep = gs.prepare(plan, g, [st.get("residual") for st in state],
                          [st.get("velocity") for st in state] if plan.m_fix is not None else None)
        if dense_error is not None:
            prep.vector[0] = 1
    return GroupPrep(layers, coarse, dense, plan, prep, dense_message, dense_stats, dense_error)


def finish_group(compressor: Compressor, gp: GroupPrep, summed: torch.Tensor | None,
                 ws: WorkerState, where: str = ""):
    """After collective 1 (`summed`, None without coarse layers): this worker's errors first
    (NonFiniteError), then a peer's (PeerNonFiniteError) or a mismatch (RankMismatchError);
    else the selection, the new residuals / velocities committed to `ws`, and
    (GlobalFinish | None, StepStats)."""
    if gp.dense_error is not None:
        raise gp.dense_error
    stats = StepStats()
    stats.add(gp.dense_stats)
    if gp.plan is None:
        return None, stats
    counts = gs.check(gp.plan, gp.prep, summed, where)
    fin = gs.finish(gp.plan, gp.prep, summed)
    for j, pos in enumerate(gp.coarse):
        lay = gp.layers[pos]
        st = {"residual": fin.residuals[j]}
        if fin.velocities is not None:
            st["velocity"] = fin.velocities[j]
        ws.layers[lay.index] = st
        ws.steps[lay.index] = ws.steps.get(lay.index, 0) + 1
    # elements_sent: the value words (padding included), known without a device sync
    stats.add(StepStats(4 * (gp.plan.vector_words + gp.plan.n_values), gp.plan.n_values,
                        counts.sat_quant, counts.sat_feedback, counts.sat_momentum))
    return fin, stats


def average_group(compressor: Compressor, gp: GroupPrep, fin, value_sum: torch.Tensor | None,
                  dense_messages: Sequence[torch.Tensor] | None,
                  ranks: Sequence[int] | None = None) -> list[torch.Tensor]:
    """The averaged float32 gradient of every layer of the group, in the group's order:
    collective 2's sum for the coarse layers, the dense layers' words decoded and averaged in
    the order given (rank order)."""
    out: list = [None] * len(gp.layers)
    if gp.plan is not None:
        for pos, avg in zip(gp.coarse, gs.average(gp.plan, fin, value_sum)):
            out[pos] = avg
    if gp.dense:
        decoded = decode_group(compressor, [gp.layers[j] for j in gp.dense], dense_messages,
                               ranks)
        for pos, avg in zip(gp.dense, decoded):
            out[pos] = avg
    return out


def bytes_per_step(plan_layers, dense_elements: int = 0) -> int:
    """Bytes one worker puts into the collectives per step for these layers
    (refmodel.global_select.GlobalLayer list): 4 per word of both int32 vectors, 4 per
    dense float."""
    from gradblock.refmodel.global_select import value_count, vector_words
    return 4 * (vector_words(plan_layers) + value_count(plan_layers) + dense_elements)


# ------------------------------------------------------------------------------ simulation

def encode_for(compressor: Compressor, layers, grads, ws: WorkerState):
    """The simulation's per-worker step: encode_group, or under global selection the worker's
    GroupPrep (its statistics come with `decode_for`)."""
    if not is_global(compressor):
        return encode_group(compressor, layers, grads, ws)
    return prepare_group(compressor, layers, grads, ws), StepStats()


def decode_for(compressor: Compressor, layers, messages, ranks, states: dict[int, WorkerState],
               stats: list[StepStats]) -> list[torch.Tensor]:
    """The simulation's exchange: decode_group, or under global selection the two sums taken
    in this process, every worker finished (its state and `stats[w]` updated)."""
    if not is_global(compressor):
        return decode_group(compressor, layers, messages, ranks)
    preps = list(messages)
    ranks = list(ranks)
    first = preps[0]
    summed = None
    if first.plan is not None:
        summed = preps[0].prep.vector.clone()
        for p in preps[1:]:
            summed += p.prep.vector
    for w, gp in zip(ranks, preps):     # a worker's own NaN first, as the reference raises it
        if gp.dense_error is not None:
            raise gp.dense_error
        if gp.plan is not None:
            gs.own_nan(gp.plan, gp.prep, where=f"worker {w} ")
    fins = []
    for w, gp in zip(ranks, preps):
        fin, st = finish_group(compressor, gp, summed, states[w], where=f"worker {w} ")
        fins.append(fin)
        stats[w].add(st)
    value_sum = None
    if first.plan is not None:
        value_sum = fins[0].values.clone()
        for f in fins[1:]:
            value_sum += f.values
    dense = [gp.dense_message for gp in preps] if first.dense else None
    return average_group(compressor, first, fins[0], value_sum, dense, ranks)


# ------------------------------------------------------------------------------ DDP hook

class GlobalHookState(GradblockHookState):
    """GradblockHookState for the allreduce exchange; a compressor whose exchange is not
    allreduce (the dense warm-up) uses the default hook."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.verified: set = set()      # buckets (layer indices) whose lengths the ranks agreed on


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
    if not is_global(state.compressor):
        return gradblock_hook(state, bucket)
    comp = state.compressor
    grads = bucket.gradients()
    layers = [state.layer_of(p) for p in bucket.parameters()]
    buffer = bucket.buffer()
    t0 = time.perf_counter()
    try:
        gp = prepare_group(comp, layers, grads, state.worker_state)
        _verify_lengths(state, gp, buffer.device)
        summed = None
        if state.timed:
            _sync(buffer)
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
        with state._lock:
            if state.error is None:
                state.error = e
        raise
    if state.timed:
        _sync(buffer)
    t_sent = time.perf_counter()
    with state._lock:
        state.stats.add(stats)
        state.padded_bytes += stats.bytes_sent
        # compress: prepare and finish; exchange: collective 1's round trip (waiting for the
        # slowest rank included), then collective 2 and the average (in the callback)
        state.times.compress_s += (t_prep - t0) + (t_sent - t_norms)
        state.times.exchange_s += t_norms - t_prep
    fut = futs[0] if len(futs) == 1 else torch.futures.collect_all(futs)

    def done(f: torch.futures.Future) -> torch.Tensor:
        f.wait()                                  # surfaces a failed collective
        try:
            averaged = average_group(comp, gp, fin, None if fin is None else fin.values,
                                     gathered)
            offset = 0
            for avg in averaged:
                n = avg.numel()
                buffer[offset:offset + n].copy_(avg.reshape(-1))
                offset += n
            if offset != buffer.numel():
                raise RuntimeError(f"bucket buffer holds {buffer.numel()} elements, "
                                   f"its parameters {offset}")
        except Exception as e:
            with state._lock:
                if state.error is None:
                    state.error = e
            raise
        if state.timed:
            if buffer.device.type == "cuda":
                torch.cuda.synchronize(buffer.device)
            with state._lock:
                state.times.exchange_s += time.perf_counter() - t_sent
        return buffer

    return fut.then(done)


def register_global(ddp_model: torch.nn.parallel.DistributedDataParallel, compressor: Compressor,
                    worker_state: WorkerState | None = None, **kw) -> GlobalHookState:
    """Build the hook state for `ddp_model` and register the allreduce-exchange hook."""
    state = GlobalHookState(compressor, ddp_model, ddp_model.process_group,
                            worker_state=worker_state, **kw)
    ddp_model.register_comm_hook(state, global_hook)
    return state
