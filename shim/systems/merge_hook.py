"""The DDP communication hook with a DLGS merge plan (shim/systems/merge_apply.py): whatever DDP's
buckets, a plan group's layers are compressed in one call and exchanged in one all_gather.

    state = MergedHookState(compressor, ddp_model, groups)
    ddp_model.register_comm_hook(state, merged_hook)      # or register_merged(...)

DDP hands the hook one bucket at a time, in bucket order (the same on every rank: DDP
rebuilds its buckets from rank 0's order after the first iteration). Per bucket the hook
notes where each of its parameters sits in the bucket's buffer and returns a fresh Future at
once; every group whose last parameter has now arrived is encoded (`encode_group`, one call
for the whole group) and exchanged (`GradblockHookState.send`: one all_gather of fixed-width
slots, or for dlgs between threshold steps a size gather first), in plan order, from the hook itself so the
collectives reach every rank in the same order. The decode (`decode_group`, chained with
`fut.then`) writes each layer's averaged gradient into its gradient view of its bucket
(`bucket.gradients()`: the parameter's strides) through the one write every hook uses
(`received.finish`: the host or the device codec, shim/exchange/device_codec.py); a bucket's
Future is completed with that buffer once every group touching it is decoded. A bucket that
spans two groups therefore completes when both have; a group spanning two buckets waits for
the second. Small buckets (`bucket_cap_mb`) let groups start during backward; with one big
bucket every group starts after the last gradient.

Merging changes the call structure only: each layer's packet, sum and average are the bits
the plain hook (shim/exchange/hook.py) and the simulation produce. Statistics, timing, the decode error
re-raised by `backward()` and `state_dict()` / `load_state_dict()` (this rank's residuals per
layer) are the plain hook state's.
"""

# no `from __future__ import annotations`: DDP inspects the hook's real annotations
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..compress.compressors import Compressor, WorkerState
from ..exchange.device import sync_device
from ..exchange.hook import GradblockHookState
from .merge_apply import Groups, check_groups


@dataclass
class _Bucket:
    future: torch.futures.Future
    buffer: torch.Tensor
    offsets: dict[int, int]                       # layer index -> element offset in the buffer
    groups_left: int = 0
    failed: bool = False


@dataclass
class _Iteration:
    """What one backward pass has seen so far."""
    grads: dict[int, torch.Tensor] = field(default_factory=dict)       # layer index -> gradient
    bucket_of: dict[int, _Bucket] = field(default_factory=dict)
    arrived: list[int] = field(default_factory=list)                   # per group
    launched: int = 0


class MergedHookState(GradblockHookState):
    """The plain hook state plus the plan: `groups` are lists of layer indices
    (LayerInfo.index), each layer exactly once; groups are exchanged in list order."""

    def __init__(self, compressor: Compressor, model: torch.nn.Module, groups: Groups,
                 process_group=None, worker_state: WorkerState | None = None, timed: bool = False,
                 outgoing_filter=None):
        super().__init__(compressor, model, process_group, worker_state=worker_state, timed=timed,
                         outgoing_filter=outgoing_filter)
        self.groups = check_groups(groups, len(self.layers))
        self._group_of = {i: g for g, members in enumerate(self.groups) for i in members}
        self._iter = self._new_iteration()
        # the layouts met so far (tests and diagnostics): the most plan groups one DDP bucket
        # held, the most buckets one group's layers came in
        self.max_groups_per_bucket = self.max_buckets_per_group = 0

    def reset_step(self) -> None:
        super().reset_step()
        if hasattr(self, "groups"):              # not yet during __init__
            self._iter = self._new_iteration()

    def _new_iteration(self) -> _Iteration:
        return _Iteration(arrived=[0] * len(self.groups))

    def _take_bucket(self, bucket: dist.GradBucket) -> tuple[_Bucket, list[int]]:
        """Record a bucket's parameters; -> (its record, groups now complete, in plan order)."""
        it = self._iter
        if it.launched == len(self.groups):       # the previous backward pass is done
            it = self._iter = self._new_iteration()
        buffer = bucket.buffer()
        # a future holding CUDA tensors must name their device (stream synchronisation)
        fut = torch.futures.Future(devices=[buffer.device] if buffer.device.type == "cuda" else None)
        rec = _Bucket(fut, buffer, {})
        offset, touched = 0, set()
        for p, g in zip(bucket.parameters(), bucket.gradients()):
            info = self.layer_of(p)
            if info.index in it.grads:
                raise RuntimeError(f"layer {info.name!r} arrived twice in one backward pass")
            rec.offsets[info.index] = offset
            offset += info.numel
            it.grads[info.index], it.bucket_of[info.index] = g, rec
            gid = self._group_of[info.index]
            it.arrived[gid] += 1
            touched.add(gid)
        rec.groups_left = len(touched)
        self.max_groups_per_bucket = max(self.max_groups_per_bucket, len(touched))
        ready = [gid for gid in sorted(touched) if it.arrived[gid] == len(self.groups[gid])]
        return rec, ready

    def _launch(self, gid: int) -> None:
        """Encode group `gid` in one call, start its all_gather, chain its decode."""
        it = self._iter
        it.launched += 1
        members = self.groups[gid]
        layers = [self.layers[i] for i in members]
        grads = [it.grads[i] for i in members]
        targets = [(it.bucket_of[i], i) for i in members]
        buckets = list({id(b): b for b, _ in targets}.values())
        self.max_buckets_per_group = max(self.max_buckets_per_group, len(buckets))
        try:
            fut, received, t1 = self.send(layers, grads)
        except Exception as e:
            self._fail(buckets, e)
            raise

        def decode(done: torch.futures.Future) -> None:
            try:
                done.wait()                       # surfaces a failed collective
                received.finish(self, grads)          # the layers' views of their buckets
            except Exception as e:
                self._fail(buckets, e)
                raise
            if self.timed:
                sync_device(buckets[0].buffer)
            finished = []
            with self._lock:
                if self.timed:
                    self.times.exchange_s += time.perf_counter() - t1
                for rec in buckets:
                    rec.groups_left -= 1
                    if rec.groups_left == 0 and not rec.failed:
                        finished.append(rec)
            for rec in finished:
                rec.future.set_result(rec.buffer)

        self.track(fut.then(decode))

    def _fail(self, buckets: list[_Bucket], err: Exception) -> None:
        """Keep the first error (backward() re-raises it) and fail the waiting buckets, so
        DDP reports the error instead of waiting for ever."""
        self.keep_error(err)
        failing = []
        with self._lock:
            for rec in buckets:
                if not rec.failed and not rec.future.done():
                    rec.failed = True
                    failing.append(rec)
        for rec in failing:
            rec.future.set_exception(err)


def merged_hook(state: MergedHookState, bucket: dist.GradBucket
                ) -> torch.futures.Future[torch.Tensor]:
    # real (not string) annotations: DDP checks them when the hook is registered
    rec, ready = state._take_bucket(bucket)
    for gid in ready:
        state._launch(gid)
    return rec.future


def register_merged(ddp_model: torch.nn.parallel.DistributedDataParallel, compressor: Compressor,
                    groups: Groups, worker_state: WorkerState | None = None, **kw
                    ) -> MergedHookState:
    """Build the merged hook state for `ddp_model` and register it; returns the state."""
    state = MergedHookState(compressor, ddp_model, groups, ddp_model.process_group,
                            worker_state=worker_state, **kw)
    ddp_model.register_comm_hook(state, merged_hook)
    return state
