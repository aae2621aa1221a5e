"""The exchange's fast path: the coarse codec on host memory through the numba kernels (zero
copy). A frame's size bound (one collective per bucket, no size round trip) is the wire
format's: codec/zrle.py `frame_words_bound`.

* `encode_coarse_host`: CoarseCompressor's packets for CPU tensors in one jitted call
  (gradblock.fastpath.fast.compress_message; fastpath.momentum_numba per layer with momentum
  correction), frames bit-identical to the torch path (tests/test_hook_fastpath.py).
* `decode_coarse_host`: every peer's frames of a run of coarse layers validated and summed
  into one int64 buffer in one jitted call per peer message (codec.zrle_numba's decoder in
  its ADD mode), raising what the torch path raises for the same first problem.
"""
from __future__ import annotations

import threading

import numba as nb
import numpy as np
import torch

from gradblock.codec import zrle_numba as ZN
from gradblock.codec.zrle import HEADER_WORDS, TRAILER_WORDS
from gradblock.refmodel.quantiser import NonFiniteError

__all__ = ["host_words",
           "flat_host", "encode_coarse_host", "decode_coarse_host"]


# ------------------------------------------------------------------------------ host memory

def host_words(t: torch.Tensor) -> np.ndarray:
    """A 1-D int32 CPU tensor as uint32 numpy words, zero copy when contiguous."""
    return t.detach().contiguous().numpy().view(np.uint32)


def flat_host(tensors, dtype: torch.dtype, sizes) -> torch.Tensor | None:
    """The tensors as one flat CPU tensor: a view of their common storage when they lie back
    to back in it (a DDP bucket's gradients, the residuals this module wrote), else a copy.
    None entries are zeros."""
    if tensors and all(t is not None and t.device.type == "cpu" and t.is_contiguous()
                       and t.dtype == dtype for t in tensors):
        first = tensors[0]
        ptr = first.untyped_storage().data_ptr()
        at = first.storage_offset()
        ok = True
        for t in tensors:
            if t.untyped_storage().data_ptr() != ptr or t.storage_offset() != at:
                ok = False
                break
            at += t.numel()
        if ok:
            total = at - first.storage_offset()
            return torch.empty(0, dtype=dtype).set_(first.untyped_storage(),
                                                    first.storage_offset(), (total,))
    parts = [torch.zeros(n, dtype=dtype) if t is None else t.detach().reshape(-1)
             for t, n in zip(tensors, sizes)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=dtype)


_SCRATCH = threading.local()


def _scratch(words: int) -> np.ndarray:
    """A reusable uint32 buffer of at least `words` words, one per thread (the frames are
    copied out before the next encode on that thread)."""
    buf = getattr(_SCRATCH, "out", None)
    if buf is None or buf.size < words:
        buf = _SCRATCH.out = np.empty(max(words, 1024), dtype=np.uint32)
    return buf


def _nonzeros(frame: np.ndarray) -> int:
    """Literals in a frame: its words less header, trailer and two per token (t0)."""
    T = int(frame[-2])
    return int(frame.size) - HEADER_WORDS - TRAILER_WORDS - 2 * T


def encode_coarse_host(comp, layers, grads, ws, ks):
    """CoarseCompressor._encode_layers on CPU tensors through the numba kernels: the same
    frames, residuals, velocities and statistics as the torch path; `ws` changes only when
    every layer encoded. -> [(frame, (bytes, nonzeros, sat_quant, sat_feedback,
    sat_momentum))] (the caller makes its StepStats)."""
    from gradblock.fastpath.fast import compress_message
    from gradblock.refmodel.plan import message_plan
    from gradblock.fastpath.step_schedule import nan_error

    names = [lay.name for lay in layers]
    shapes = [lay.shape for lay in layers]
    sizes = [lay.numel for lay in layers]         # dtypes and shapes: checked by encode_many
    plan = message_plan(shapes, ks if not isinstance(ks, list) else list(ks), comp.block_size,
                        [lay.index for lay in layers], comp.lmax_log2, comp.norm)
    state = [ws.layers.get(lay.index, {}) for lay in layers]
    if comp.momentum is not None:
        return _encode_momentum_host(comp, layers, grads, ws, plan, state)
    flat_g = flat_host(list(grads), torch.float32, sizes).numpy()
    # a new residual buffer each step: the previous step's views may be held by a checkpoint
    flat_r = flat_host([st.get("residual") for st in state], torch.int32, sizes)
    if flat_r.data_ptr() == (state[0].get("residual").data_ptr() if state and
                             state[0].get("residual") is not None else -1):
        flat_r = flat_r.clone()
    out = _scratch(plan.max_words)
    try:
        message, info = compress_message(flat_g, flat_r.numpy(), plan, comp.cfg, out)
    except NonFiniteError:
        bits = flat_g.view(np.uint32)
        off = plan.elem_offsets
        for j, name in enumerate(names):
            nan = nan_error(bits[off[j]:off[j + 1]], name)
            if nan is not None:
                raise nan from None
        raise
    message_t = torch.from_numpy(message.view(np.int32).copy())
    frame_words = [int(w) for w in info.n_words]
    frames = torch.split(message_t, frame_words)
    residuals = torch.split(flat_r, sizes)
    results = []
    at = 0
    for j, lay in enumerate(layers):
        ws.layers[lay.index] = {"residual": residuals[j].view(lay.shape)}
        w = frame_words[j]
        nz = _nonzeros(message[at:at + w])
        at += w
        results.append((frames[j], (4 * w, nz, int(info.sat_quant[j]),
                                    int(info.sat_feedback[j]), 0)))
    return results


def _encode_momentum_host(comp, layers, grads, ws, plan, state):
    """Momentum correction (docs/spec.md §7) one layer at a time through
    refmodel.momentum_numba (bit-exact with the torch group path)."""
    from gradblock.fastpath.momentum_numba import momentum_layer

    steps = []
    for j, (lay, g, st) in enumerate(zip(layers, grads, state)):
        p = plan.layers[j]
        r, u = st.get("residual"), st.get("velocity")
        steps.append(momentum_layer(
            g.detach().contiguous().numpy(), None if r is None else r.numpy(),
            None if u is None else u.numpy(), comp.momentum, R=comp.cfg, k=p.k_eff,
            block_size=p.layout.block_size, layer_id=lay.index, lmax_log2=comp.lmax_log2,
            mask=comp.momentum_mask, where=lay.name, norm=comp.norm))
    results = []
    for lay, s in zip(layers, steps):
        ws.layers[lay.index] = {"residual": torch.from_numpy(s.residual_out),
                                "velocity": torch.from_numpy(s.velocity_out)}
        frame = s.frame
        results.append((torch.from_numpy(frame.view(np.int32).copy()),
                        (4 * frame.size, _nonzeros(frame), int(s.sat_quant),
                         int(s.sat_feedback), int(s.sat_momentum))))
    return results


# ------------------------------------------------------------------------------ decode

_LAYER_ID, _RANGE = -10, -11


@nb.njit(nogil=True, cache=True)
def _decode_run_kernel(w, at, expected_n, acc_off, layer_ids, rbits, acc):
    """Frames at w[at:], one per layer j of the run: validated, expected size, layer id and
    range checked (in the torch path's order), values added into acc[acc_off[j]:]. Returns
    (failing layer or -1, word after the run, decoder result)."""
    empty32 = np.zeros(0, dtype=np.int32)
    ok = ZN._result(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    for j in range(expected_n.size):
        lo = acc_off[j]
        res = ZN._decode_kernel(w, at, True, expected_n[j], empty32,
                                acc[lo:lo + expected_n[j]], ZN.ADD, False)
        if res[0] != 0:
            return j, at, res
        if res[3] != layer_ids[j]:
            return j, at, ZN._result(_LAYER_ID, 0, 0, res[3], 0, 0, 0, 0, 0, 0)
        if res[4] != rbits:
            return j, at, ZN._result(_RANGE, 0, 0, 0, res[4], 0, 0, 0, 0, 0)
        at += res[7]
    return -1, at, ok


def decode_coarse_host(comp, layers, words: np.ndarray, at: int, acc: np.ndarray,
                       acc_off: np.ndarray, packet_error: type = ValueError):
    """Add the frames of `layers` (all coarse-compressed) found at words[at:] into acc at
    acc_off; -> the word after them. Raises the torch path's error (a codec FrameError, or
    `packet_error` for a wrong layer id or range) with the failing layer's position in
    `layers` as `.layer_pos`."""
    PacketError = packet_error
    expected = np.array([lay.numel for lay in layers], dtype=np.int64)
    ids = np.array([lay.index for lay in layers], dtype=np.int64)
    j, end, res = _decode_run_kernel(words, at, expected, acc_off, ids, comp.cfg.range_bits, acc)
    if j < 0:
        return int(end)
    lay = layers[j]
    status = int(res[0])
    try:
        if status == _LAYER_ID:
            raise PacketError(f"frame carries layer id {int(res[3])}, expected {lay.index} "
                              f"({lay.name!r}): messages are out of step")
        if status == _RANGE:
            raise PacketError(f"frame for layer {lay.name!r} uses range bits {int(res[4]):#010x}, "
                              f"this worker {comp.cfg.range_bits:#010x}")
        ZN._raise_for(res)
    except Exception as e:
        e.layer_pos = j
        raise
    raise AssertionError("unreachable")

