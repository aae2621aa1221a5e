"""The coarse all_gather exchange kept on the device (docs/network.md, "Decode on the device"),
and the one write of a bucket's averages through its gradient views that every hook uses.

`codec` (an attribute of the compressor, "auto" unless set): "device" encodes a bucket's
message straight into its all_gather slot and decodes the gathered slots where they are
(torchstep.bucket: no host sync, a number of ops that does not grow with the layers); "host"
is the numba path (shim/compress/fastpath.py); "auto" is "device" for gradients off the CPU.
The device path on CPU tensors is the same code a GPU runs, so the test suite checks it bit
for bit against the reference on every run.

Errors. Nothing on the device path raises before the collective: a NaN gradient is carried as
the slot's length word (torchstep.bucket.NONFINITE_WORD) so every rank still enters it and
every rank raises (NonFiniteError where the NaN was, PeerNonFiniteError naming the rank on the
others). A bad frame, length word or non-finite dense value sets a device flag; after the one
host read of the flag (per bucket in the callback, or once per step at the end of backward:
`HookState.check`) the reference's walk runs on the host copy of the slots and raises the
reference's error class and message. A NaN leaves every rank's compressor state as it was.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from gradblock import torchstep as tc
from gradblock.refmodel.global_select import PeerNonFiniteError
from gradblock.refmodel.quantiser import NonFiniteError
from gradblock.torchstep.bucket import (NONFINITE_WORD, SKIP_WORD, BucketLayout, bucket_layout,
                                        decode_slots, encode_slot)

from .bucket_graphs import graphed

from ..compress.compressors import (Compressor, LayerInfo, PacketError, StepStats, WorkerState,
                                    decode_group, widen)

__all__ = ["CODECS", "resolve_codec", "ViewMap", "view_map", "write_views", "combine_futures",
           "skip_bucket",
           "DeviceSend",
           "encode_bucket", "decode_bucket", "bucket_error", "nonfinite_slot_error"]

CODECS = ("auto", "host", "device")


def resolve_codec(comp: Compressor, layers, device: torch.device) -> str:
    """"device" or "host" for this bucket: the device path takes the coarse all_gather
    exchange (with local momentum only when no layer of the bucket is sent dense)."""
    codec = getattr(comp, "codec", "auto")
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")
    if not comp.frame_coded or getattr(comp, "exchange", "allgather") != "allgather":
        return "host"
    if comp.momentum is not None and any(comp.sends_dense(lay) for lay in layers):
        return "host"
    if codec == "auto":
        return "host" if device.type == "cpu" else "device"
    return codec


# ------------------------------------------------------------------------------ views

class ViewMap:
    """A list of gradient views (a DDP bucket's `gradients()`, or a merged group's across
    buckets) as one flat vector in logical (row-major, layer after layer) order. Views that
    share a storage are read and written with ONE gather / scatter per storage (an index
    built once), so a channels_last layer keeps its strides and no op runs per layer."""

    def __init__(self, views: list[torch.Tensor]):
        self.total = sum(v.numel() for v in views)
        self.dtype = views[0].dtype if views else torch.float32
        self.device = views[0].device if views else torch.device("cpu")
        groups: dict[int, list[tuple[int, torch.Tensor]]] = {}
        at = 0
        for v in views:
            groups.setdefault(v.untyped_storage().data_ptr(), []).append((at, v))
            at += v.numel()
        self.parts = []
        for members in groups.values():
            lo = min(v.storage_offset() for _, v in members)
            hi = max(v.storage_offset() + _extent(v) for _, v in members)
            base = members[0][1].as_strided((hi - lo,), (1,), lo)
            ar = torch.arange(hi - lo, dtype=torch.int64, device=self.device)
            idx = torch.cat([ar.as_strided(v.shape, v.stride(), v.storage_offset() - lo).reshape(-1)
                             for _, v in members])
            logical = torch.cat([torch.arange(a, a + v.numel(), dtype=torch.int64,
                                              device=self.device) for a, v in members])
            if idx.numel() == hi - lo and torch.equal(idx, ar):
                idx = None                            # contiguous, back to back: the base itself
            if logical.numel() == self.total and torch.equal(
                    logical, torch.arange(self.total, device=self.device)):
                logical = None
            self.parts.append((base, idx, logical))

    def gather(self) -> torch.Tensor:
        """The views' values, flat in logical order (a view of the storage when it can be)."""
        if len(self.parts) == 1 and self.parts[0][2] is None:
            base, idx, _ = self.parts[0]
            return base if idx is None else base.index_select(0, idx)
        out = torch.empty(self.total, dtype=self.dtype, device=self.device)
        for base, idx, logical in self.parts:
            vals = base if idx is None else base.index_select(0, idx)
            out.index_copy_(0, logical, vals) if logical is not None else out.copy_(vals)
        return out

    def scatter(self, flat: torch.Tensor) -> None:
        """Write `flat` (logical order) into the views."""
        if flat.numel() != self.total:
            raise RuntimeError(f"bucket holds {self.total} gradient elements, got {flat.numel()}")
        flat = flat.to(self.dtype)
        for base, idx, logical in self.parts:
            vals = flat if logical is None else flat.index_select(0, logical)
            if idx is None:
                base.copy_(vals)
            else:
                base.index_copy_(0, idx, vals)


def _extent(v: torch.Tensor) -> int:
    """Elements of storage a view spans from its offset."""
    if v.numel() == 0:
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(v.shape, v.stride()))


_VIEW_MAPS: dict = {}


def view_map(views: list[torch.Tensor]) -> ViewMap:
    """The ViewMap of `views`, cached by their storage, offsets, shapes and strides (a DDP
    bucket's views are the same tensors step after step)."""
    key = tuple((v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), v.stride(),
                 v.dtype, str(v.device)) for v in views)
    vm = _VIEW_MAPS.get(key)
    if vm is None:
        if len(_VIEW_MAPS) > 256:
            _VIEW_MAPS.clear()
        vm = _VIEW_MAPS[key] = ViewMap(views)
    return vm


def write_views(views: list[torch.Tensor], averaged) -> None:
    """The one write of a bucket's (or merged group's) averages into its gradient views, for
    all three hooks: `averaged` is the flat logical vector or one tensor per view. The views
    keep their strides (channels_last stays right); one op per storage when flat."""
    if not views:
        return
    if isinstance(averaged, torch.Tensor):
        view_map(views).scatter(averaged.to(views[0].device))
        return
    if len(views) != len(averaged):
        raise RuntimeError(f"bucket holds {len(views)} gradients, {len(averaged)} averages")
    flat = torch.cat([a.reshape(-1).to(views[0].device) for a in averaged])
    view_map(views).scatter(flat)


def combine_futures(futs: list, device: torch.device) -> torch.futures.Future:
    """One future done when every one of `futs` (collectives' futures) is. On CUDA it is
    chained on the first, whose callback runs on a stream that waited for the first's
    collective, and calls wait() on the others, which makes that stream wait for theirs too:
    work chained on the result sees every collective's output (torch.futures.collect_all is
    not CUDA-aware: its callbacks would read the tensors on a stream that never waited for
    NCCL's). On the CPU collect_all (a gloo callback must not block on another collective).
    The caller's callback still calls wait() on each sub-future (the same stream rule)."""
    if len(futs) == 1:
        return futs[0]
    if device.type == "cuda":
        rest = list(futs[1:])

        def chain(first: torch.futures.Future):
            first.wait()
            for f in rest:
                f.wait()
            return None
        return futs[0].then(chain)
    return torch.futures.collect_all(list(futs))


# ------------------------------------------------------------------------------ encode / decode

_LAYOUTS: dict = {}


def _layout(comp: Compressor, layers) -> BucketLayout:
    key = (id(comp), tuple(lay.index for lay in layers), comp.cfg.range_bits, comp.n_workers,
           comp.dense_below)
    lay = _LAYOUTS.get(key)
    if lay is None:
        if len(_LAYOUTS) > 256:
            _LAYOUTS.clear()
        lay = _LAYOUTS[key] = bucket_layout([not comp.sends_dense(x) for x in layers],
                                            [x.numel for x in layers], [x.index for x in layers],
                                            comp.cfg, comp.n_workers)
    return lay


def _flat_state(ws: WorkerState, layers, key: str, dev, dtype=torch.int32) -> torch.Tensor:
    """The layers' state tensors `key` as one flat tensor: the storage they share when they lie
    back to back in it (what this module wrote last step), else a copy (zeros where absent)."""
    ts = [ws.layers.get(lay.index, {}).get(key) for lay in layers]
    if ts and all(t is not None and t.device == dev and t.dtype == dtype and t.is_contiguous()
                  for t in ts):
        ptr, at = ts[0].untyped_storage().data_ptr(), ts[0].storage_offset()
        ok = True
        for t in ts:
            if t.untyped_storage().data_ptr() != ptr or t.storage_offset() != at:
                ok = False
                break
            at += t.numel()
        if ok:
            return ts[0].as_strided((at - ts[0].storage_offset(),), (1,), ts[0].storage_offset())
    return torch.cat([torch.zeros(lay.numel, dtype=dtype, device=dev) if t is None
                      else t.reshape(-1).to(dev) for lay, t in zip(layers, ts)])


@dataclass
class DeviceSend:
    """One rank's bucket on the device path: its slot and what the error path needs."""
    slot: torch.Tensor
    width: int
    layout: BucketLayout
    layers: list
    views: list
    stats: torch.Tensor              # (5,) int64: StepStats' fields, read when stats are read
    nan_masks: tuple                 # (dense NaN mask, coarse NaN mask) for the error's message
    old_layers: dict                 # the compressor state before this step, for a NaN
    # (with graphs: a function that builds it, views of the graph's inputs, on a rollback only)
    old_steps: dict
    graphs: dict | None = None       # the worker's CUDA graphs when the compressor has them

    def rollback(self, ws: WorkerState) -> None:
        old = self.old_layers() if callable(self.old_layers) else self.old_layers
        for i, d in old.items():
            if d is None:
                ws.layers.pop(i, None)
            else:
                ws.layers[i] = d
        for i, s in self.old_steps.items():
            ws.steps[i] = s

    def nonfinite_error(self) -> NonFiniteError:
        """This rank's NaN, as encode_group raises it: the first dense layer holding one, else
        the first compressed layer (count and first flat index in that layer)."""
        dense_nan, coarse_nan = self.nan_masks
        for want, mask in ((False, dense_nan), (True, coarse_nan)):
            if mask is None:
                continue
            at = 0
            for lay, framed in zip(self.layers, self.layout.framed):
                if framed != want:
                    continue
                seg = mask[at:at + lay.numel]
                at += lay.numel
                c = int(seg.sum())
                if c:
                    return NonFiniteError(c, int(torch.argmax(seg.to(torch.uint8))), lay.name)
        raise AssertionError("no NaN found for a slot flagged non-finite")


def encode_bucket(comp: Compressor, layers: list[LayerInfo], grads: list[torch.Tensor],
                  ws: WorkerState, width: int) -> DeviceSend:
    """This rank's slot for `layers` (gradients `grads`, views of one bucket or several),
    encoded on the device without a host sync; `ws` takes the new residuals (and velocities)
    at once, and DeviceSend.rollback restores it if a NaN shows after the collective. With
    `comp.graphs` the encode is one CUDA graph per bucket (bucket_graphs.py)."""
    dev = grads[0].device
    for lay, g in zip(layers, grads):
        if g.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise TypeError(f"layer {lay.name!r}: gradient must be float32 (or bfloat16 / "
                            f"float16, widened exactly), got {g.dtype}")
        if tuple(g.shape) != lay.shape:
            raise ValueError(f"layer {lay.name!r}: gradient shape {tuple(g.shape)}, "
                             f"expected {lay.shape}")
    layout = _layout(comp, layers)
    T = layout.tensors(dev)
    coarse = [lay for lay, f in zip(layers, layout.framed) if f]
    flat_in = view_map(list(grads)).gather().detach()
    skip = getattr(comp, "nonfinite", "raise") == "skip"
    flag_word = SKIP_WORD if skip else NONFINITE_WORD
    old_layers = {lay.index: ws.layers.get(lay.index) for lay in layers}
    old_steps = {lay.index: ws.steps.get(lay.index, 0) for lay in coarse}
    graphs = ws.graphs if getattr(comp, "graphs", False) else None
    if not coarse:
        flat_all = widen(flat_in)
        dense_f = flat_all.index_select(0, T["dense_map"])
        dense_nan = torch.isnan(dense_f)
        nonfinite = (~torch.isfinite(flat_all)).any() if skip else dense_nan.any()
        slot, _ = encode_slot(layout, None, flat_all[:0].view(torch.int32),
                              dense_f.view(torch.int32), width, 1 << comp.lmax_log2, nonfinite,
                              flag_word)
        stats = torch.tensor([4 * T["dense_total"], T["dense_total"], 0, 0, 0],
                             dtype=torch.int64, device=dev)
        return DeviceSend(slot, width, layout, list(layers), list(grads), stats,
                          (dense_nan, None), old_layers, old_steps, graphs)
    ks = comp._ks(coarse, comp.compressed_step(coarse[0], ws))
    plan = comp._plan(coarse, dev, ks)
    flat_r = _flat_state(ws, coarse, "residual", dev)
    flat_u = None if comp.momentum is None else _flat_state(ws, coarse, "velocity", dev)

    def encode(flat_in, flat_r, flat_u):
        return _encode_core(comp, layout, plan, width, skip, flag_word, flat_in, flat_r, flat_u)
    g = None
    if graphs is None:
        out = encode(flat_in, flat_r, flat_u)
    else:
        key = ("encode", id(comp), id(layout), tuple(ks) if isinstance(ks, list) else ks, width,
               flat_in.dtype, skip)
        out, g = graphed(graphs, key, encode, (flat_in, flat_r, flat_u),
                         keep=(comp, layout, plan))
        if g is not None:       # the state before this step now lives in the graph's inputs
            old_layers = functools.partial(_state_views, old_layers, coarse, *g.static_in[1:])
    slot, stats, residual, velocity, dense_nan, coarse_nan = out
    # a graph's outputs are the same tensors every step: their per-layer views are made once
    views = None if g is None else g.memo.get("state")
    if views is None:
        views = _layer_views(coarse, residual, velocity)
        if g is not None:
            g.memo["state"] = views
    for lay, st in zip(coarse, views):
        ws.layers[lay.index] = dict(st)
        ws.steps[lay.index] = ws.steps.get(lay.index, 0) + 1
    return DeviceSend(slot, width, layout, list(layers), list(grads), stats,
                      (dense_nan, coarse_nan), old_layers, old_steps, graphs)


def _encode_core(comp: Compressor, layout: BucketLayout, plan, width: int, skip: bool,
                 flag_word: int, flat_in: torch.Tensor, flat_r: torch.Tensor,
                 flat_u: torch.Tensor | None) -> tuple:
    """The encode's device work, tensors in and out (what a CUDA graph captures): the flat
    gradients (any float dtype), residuals and velocities -> (slot, stats, residuals,
    velocities or None, dense NaN mask or None, coarse NaN mask)."""
    T = layout.tensors(flat_in.device)
    flat_all = widen(flat_in)
    flat_g = flat_all if T["identity"] else flat_all.index_select(0, T["coarse_map"])
    dense_words = dense_nan = None
    if T["dense_total"]:
        dense_f = flat_all.index_select(0, T["dense_map"])
        dense_words = dense_f.view(torch.int32)
        dense_nan = torch.isnan(dense_f)
    m_fix = None if comp.momentum is None else comp.momentum.m_fix
    fs = tc.step_flat(plan, flat_g, flat_r, comp.cfg, flat_u, m_fix, comp.momentum_mask)
    coarse_nan = fs.flags[0]
    nonfinite = (~torch.isfinite(flat_all)).any() if skip else coarse_nan.any()
    if dense_nan is not None and not skip:
        nonfinite = nonfinite | dense_nan.any()
    slot, frame_len = encode_slot(layout, plan, fs.payload, dense_words, width,
                                  1 << comp.lmax_log2, nonfinite, flag_word)
    zero = torch.zeros((), dtype=torch.int64, device=flat_in.device)
    sat = [f.sum() for f in fs.flags[1:]] + ([] if len(fs.flags) > 3 else [zero])
    stats = torch.stack([4 * (frame_len.sum() + T["dense_total"]),
                         (fs.payload != 0).sum() + T["dense_total"], *sat])
    return slot, stats, fs.residual, fs.velocity, dense_nan, coarse_nan


def _layer_views(coarse, residual: torch.Tensor, velocity: torch.Tensor | None) -> list[dict]:
    """Each coarse layer's state as views of the flat residuals (and velocities)."""
    sizes = [lay.numel for lay in coarse]
    rs = torch.split(residual, sizes)
    us = None if velocity is None else torch.split(velocity, sizes)
    out = []
    for j, lay in enumerate(coarse):
        st = {"residual": rs[j].view(lay.shape)}
        if us is not None:
            st["velocity"] = us[j].view(lay.shape)
        out.append(st)
    return out


def _state_views(old_layers: dict, coarse, flat_r: torch.Tensor, flat_u) -> dict:
    """`old_layers` with the coarse layers' tensors as views of the flat state `flat_r` /
    `flat_u` (the same values: the graph's copies of them); absent stays absent."""
    out, at = dict(old_layers), 0
    for lay in coarse:
        d = old_layers.get(lay.index)
        if d is not None:
            seg = {"residual": flat_r[at:at + lay.numel].view(lay.shape)}
            if "velocity" in d and flat_u is not None:
                seg["velocity"] = flat_u[at:at + lay.numel].view(lay.shape)
            out[lay.index] = {**d, **seg}
        at += lay.numel
    return out


def decode_bucket(sent: DeviceSend, gathered: torch.Tensor) -> torch.Tensor:
    """Decode and average the gathered slots (world, width) and write the averages into the
    bucket's views, all on the device; -> `bad` (0-d bool): the averages are void and
    bucket_error must run. No host sync. One CUDA graph when the encode had them."""
    if sent.graphs is None:
        flat, bad = decode_slots(sent.layout, gathered)
    else:
        key = ("decode", id(sent.layout), tuple(gathered.shape))
        layout = sent.layout
        (flat, bad), _ = graphed(sent.graphs, key, lambda g: decode_slots(layout, g),
                                 (gathered,), keep=layout)
    write_views(sent.views, flat)
    return bad


def nonfinite_slot_error(lengths: list[int], rank: int, own: BaseException | None):
    """The error of a bucket where some rank flagged a NaN in its length word, or None: this
    rank's own NonFiniteError first, else a PeerNonFiniteError naming the ranks."""
    ranks = [r for r, n in enumerate(lengths) if n == NONFINITE_WORD]
    if not ranks:
        return None
    if rank in ranks and own is not None:
        return own
    others = [r for r in ranks if r != rank]
    return PeerNonFiniteError(f"peer rank{'s' if len(others) > 1 else ''} "
                              f"{', '.join(map(str, others))} had NaN gradients in this bucket")


def bucket_error(comp: Compressor, sent: DeviceSend, gathered: torch.Tensor, rank: int,
                 ws: WorkerState):
    """After `bad` read True: the reference's walk over the host copy of the slots. Raises the
    reference's error (a NaN restores `ws` first); if the reference accepts the slots after all
    (literal words that looked like a header misled the device walk), writes its averages
    into the views and returns."""
    host = gathered.detach().cpu()
    width = host.shape[1]
    lengths = host[:, 0].tolist()
    if SKIP_WORD in lengths:
        sent.rollback(ws)
        skip_bucket(sent.views)
        return
    err = nonfinite_slot_error(lengths, rank, None)
    if err is not None:
        sent.rollback(ws)
        if lengths[rank] == NONFINITE_WORD:
            raise sent.nonfinite_error()
        raise err
    for r, n in enumerate(lengths):
        if not 0 <= n <= width - 1:
            raise PacketError(f"peer rank {r}: message length word {n} does not fit its slot of "
                              f"{width - 1} words (the bound of this bucket's packets)")
    messages = [host[r, 1:1 + n] for r, n in enumerate(lengths)]
    averaged = decode_group(comp, sent.layers, messages)
    write_views(sent.views, averaged)


def skip_bucket(views: list[torch.Tensor]) -> None:
    """The "skip" policy's result: the bucket's gradients NaN on every rank (torch's GradScaler
    then skips the step, as it would have for the Inf / NaN that some rank had)."""
    for v in views:
        v.fill_(float("nan"))


def stats_of(t: torch.Tensor) -> StepStats:
    return StepStats(*[int(v) for v in t.tolist()])
