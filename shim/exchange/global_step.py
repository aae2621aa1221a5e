"""Global block selection (docs/spec.md §8) for a group of layers, shared by the DDP hook
(shim/exchange/global_exchange.py) and the single-process simulation (shim/exchange/workers.py): one worker's
prepare (a, block norms: collective 1's vector) and finish (selection by the summed norms,
collective 2's vector, new residuals and velocities), and the average. The simulation's entry
points `encode_for` / `decode_for` fall back to encode_group / decode_group when the
compressor's exchange is not allreduce, so DDP and simulation give the same bits
(tests/test_global_exchange.py).

Layers sent dense (`--dense-below`, or every layer under the dense warm-up compressor) keep
the default path's packets (float32 words, all_gather, float sums in rank order).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from gradblock.refmodel.quantiser import NonFiniteError
from gradblock.torchstep import global_select as gs

from ..compress.compressors import (Compressor, LayerInfo, StepStats, WorkerState, decode_group,
                          encode_group, widen)
from ..params import EXCHANGES  # noqa: F401  (the one list, re-exported)

__all__ = ["EXCHANGES", "exchange_of", "is_global", "GroupPrep", "prepare_group", "finish_group",
           "average_group", "encode_for", "decode_for", "bytes_per_step"]


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
        g = [widen(grads[j].detach()) for j in coarse]     # bf16 / fp16: exact float32
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
