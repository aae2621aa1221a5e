"""ZRLE v1 frames in torch (docs/spec.md §3): encoder, and a decoder that validates on the
tensor's own device.

A frame is a 1-D `torch.int32` tensor holding the uint32 words' bit patterns, so it goes straight
into `torch.distributed` collectives (gloo and NCCL both carry int32); on a little-endian host
`frame.numpy().view('<u4')` is the wire format. Bit-exact with `codec/zrle.py` (the reference):
same frames, and the decoder raises the same `codec.errors` class (and message) for the same
first fault.

Host syncs (documented, not hidden): the encoder needs one per frame for its data-dependent
length; the device decoder (codec/zrle_torch_decode.py) reads back only the header and a few
scalars per frame (the walk's summary, the CRC value): the frame's words and the decoded values
stay on the device, and the CRC is computed there.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import errors as E
from . import zrle
from .crc32_torch import crc32_segments, crc32_words
from .zrle_torch_decode import decode_frame_on_device

__all__ = ["encode_frame", "encode_frames", "decode_frame", "decode_message", "DecodedFrame",
           "check_args",
           "frame_to_numpy", "tokens", "split_runs", "u32_to_i32"]

_MASK32 = 0xFFFFFFFF


def u32_to_i32(v: int) -> int:
    """A uint32 value as the signed int32 with the same bits (what an int32 tensor stores)."""
    v &= _MASK32
    return v - (1 << 32) if v >= (1 << 31) else v


def split_runs(run_s, run_e, zeros_before, lmax: int):
    """Cut nonzero runs [run_s, run_e) into canonical tokens of at most LMAX literals; only a
    run's first token keeps the zeros before it. Returns (run of each token, literal start, L, z)."""
    chunks = (run_e - run_s + lmax - 1) // lmax
    n_chunks = int(chunks.sum().item()) if chunks.numel() else 0
    run_of_chunk = torch.repeat_interleave(torch.arange(run_s.numel(), device=run_s.device), chunks,
                                           output_size=n_chunks)
    first_chunk = torch.cumsum(chunks, 0) - chunks
    idx_in_run = torch.arange(n_chunks, device=run_s.device) - torch.repeat_interleave(
        first_chunk, chunks, output_size=n_chunks)
    lit_s = run_s[run_of_chunk] + idx_in_run * lmax
    L = torch.minimum(torch.full_like(lit_s, lmax), run_e[run_of_chunk] - lit_s)
    z = torch.where(idx_in_run == 0, zeros_before[run_of_chunk], torch.zeros_like(lit_s))
    return run_of_chunk, lit_s, L, z


def tokens(flat: torch.Tensor, lmax: int):
    """Canonical tokens of a flat int32 tensor: (z, L, literal_start), int64 on its device.

    Same vectorised run detection as codec.zrle.tokens."""
    n = flat.numel()
    dev = flat.device
    nz = (flat != 0).to(torch.int8)
    edge_pad = torch.zeros(1, dtype=torch.int8, device=dev)
    edges = torch.diff(torch.cat([edge_pad, nz, edge_pad]))
    run_s = torch.nonzero(edges == 1).reshape(-1)
    run_e = torch.nonzero(edges == -1).reshape(-1)
    prev_end = torch.cat([run_e.new_zeros(1), run_e[:-1]])
    zeros_before = run_s - prev_end
    run_of_chunk, lit_s, L, z = split_runs(run_s, run_e, zeros_before, lmax)
    last_end = run_e[-1:] if run_e.numel() else run_e.new_zeros(1)
    tail = n - last_end                                  # trailing zeros: final (z, 0) token
    if n > 0:
        has_tail = tail > 0
        z = torch.cat([z, tail[has_tail]])
        L = torch.cat([L, tail.new_zeros(1)[has_tail]])
        lit_s = torch.cat([lit_s, tail.new_full((1,), n)[has_tail]])
    return z, L, lit_s


def encode_frame(payload: torch.Tensor, layer_id: int = 0, R: float = 10.0,
                 lmax_log2: int = zrle.DEFAULT_LMAX_LOG2, crc: str = "auto") -> torch.Tensor:
    """int32 payload (any shape, flattened row-major) -> one ZRLE v1 frame as an int32 tensor.

    `crc`: "auto" (zlib on CPU tensors, the torch tree elsewhere), "zlib" or "torch"."""
    if not isinstance(payload, torch.Tensor):
        raise TypeError(f"payload must be a torch.Tensor, got {type(payload).__name__}")
    if payload.dtype != torch.int32:
        raise TypeError(f"encode_frame expects int32, got {payload.dtype}")
    lmax_log2 = zrle.check_lmax_log2(lmax_log2)
    flat = payload.reshape(-1)
    n = flat.numel()
    if n >= 2**32:
        raise ValueError(f"layer of {n} elements does not fit the 32-bit n field")
    if not (0 <= int(layer_id) < 2**32):
        raise ValueError(f"layer id must fit 32 bits, got {layer_id}")
    rbits = zrle.range_bits(R)                    # checked last, in the reference's order
    dev = flat.device
    z, L, lit_s = tokens(flat, 1 << lmax_log2)
    T = z.numel()
    # one sync for the body length; the literal count is L.sum()
    lit_total = int(L.sum().item()) if T else 0
    size = zrle.HEADER_WORDS + 2 * T + lit_total + zrle.TRAILER_WORDS
    words = torch.empty(size, dtype=torch.int32, device=dev)
    header = [zrle.MAGIC, zrle.VERSION | (lmax_log2 << 8), int(layer_id), n, rbits]
    words[:zrle.HEADER_WORDS] = torch.tensor([u32_to_i32(h) for h in header], dtype=torch.int32,
                                             device=dev)
    if T:
        pos = zrle.HEADER_WORDS + torch.cumsum(2 + L, 0) - (2 + L)
        words[pos] = z.to(torch.int32)
        words[pos + 1] = L.to(torch.int32)
        if lit_total:
            tok = torch.repeat_interleave(torch.arange(T, device=dev), L, output_size=lit_total)
            off = torch.arange(lit_total, device=dev) - torch.repeat_interleave(
                torch.cumsum(L, 0) - L, L, output_size=lit_total)
            words[pos[tok] + 2 + off] = flat[lit_s[tok] + off]
    words[-2] = T
    words[-1] = u32_to_i32(crc32_words(words[:-1], method=crc))
    return words


def encode_frames(payload: torch.Tensor, headers: torch.Tensor, seg_start: torch.Tensor,
                  seg_end: torch.Tensor, seg_of_elem: torch.Tensor, is_seg_start: torch.Tensor,
                  lmax: int, crc: str = "auto"):
    """ZRLE frames of consecutive segments ("layers") of one flat int32 `payload`, back to back
    (spec §3.4), each bit-identical to encode_frame of its slice. The caller gives each
    segment's header words (L, 5) int32, its element bounds [seg_start, seg_end) (int64), the
    segment of every element and a flag on each segment's first element.

    Returns (message, words per frame, literals per frame)."""
    dev = payload.device
    L = headers.shape[0]
    n = payload.numel()
    nz = payload != 0
    false1 = torch.zeros(1, dtype=torch.bool, device=dev)
    # runs never cross a layer boundary
    prev_nz = torch.cat([false1, nz[:-1]]) & ~is_seg_start
    next_nz = torch.cat([nz[1:] & ~is_seg_start[1:], false1]) if n else nz
    run_s = torch.nonzero(nz & ~prev_nz).reshape(-1)
    run_e = torch.nonzero(nz & ~next_nz).reshape(-1) + 1
    run_layer = seg_of_elem[run_s]
    same_layer = torch.cat([false1, run_layer[1:] == run_layer[:-1]])
    prev_end = torch.where(same_layer, torch.cat([run_e.new_zeros(1), run_e[:-1]]),
                           seg_start[run_layer])
    zeros_before = run_s - prev_end
    run_of_chunk, lit_s, tok_L, tok_z = split_runs(run_s, run_e, zeros_before, lmax)
    tok_layer = run_layer[run_of_chunk]
    # trailing zeros of each layer: one (z, 0) token
    last_end = seg_start.clone()
    last_end.scatter_reduce_(0, run_layer, run_e, reduce="amax", include_self=True)
    tail = seg_end - last_end
    has_tail = tail > 0
    tail_layers = torch.nonzero(has_tail).reshape(-1)
    tok_z = torch.cat([tok_z, tail[has_tail]])
    tok_L = torch.cat([tok_L, torch.zeros_like(tail_layers)])
    lit_s = torch.cat([lit_s, seg_end[has_tail]])
    tok_layer = torch.cat([tok_layer, tail_layers])
    # tokens in frame order: by layer, then position (a tail sorts after its layer's runs)
    key = tok_layer * (n + 1) + lit_s
    perm = torch.sort(key).indices
    tok_z, tok_L, lit_s, tok_layer = tok_z[perm], tok_L[perm], lit_s[perm], tok_layer[perm]
    T = tok_z.numel()

    tokens_per_layer = torch.bincount(tok_layer, minlength=L) if T else \
        torch.zeros(L, dtype=torch.int64, device=dev)
    lits_per_layer = torch.zeros(L, dtype=torch.int64, device=dev).index_add_(0, tok_layer, tok_L)
    frame_len = zrle.HEADER_WORDS + 2 * tokens_per_layer + lits_per_layer + zrle.TRAILER_WORDS
    frame_words, nonzeros = torch.stack([frame_len, lits_per_layer]).tolist()
    frame_off = torch.cumsum(frame_len, 0) - frame_len
    total_words = int(sum(frame_words))
    words = torch.empty(total_words, dtype=torch.int32, device=dev)
    if L:
        hdr_pos = frame_off.unsqueeze(1) + torch.arange(zrle.HEADER_WORDS, device=dev)
        words[hdr_pos.reshape(-1)] = headers.reshape(-1)
    if T:
        # every earlier frame adds its 7 fixed words to the running token-word count
        step = 2 + tok_L
        tok_pos = torch.cumsum(step, 0) - step + (zrle.HEADER_WORDS + zrle.TRAILER_WORDS) * tok_layer \
            + zrle.HEADER_WORDS
        words[tok_pos] = tok_z.to(torch.int32)
        words[tok_pos + 1] = tok_L.to(torch.int32)
        lit_total = int(sum(nonzeros))
        if lit_total:
            tok = torch.repeat_interleave(torch.arange(T, device=dev), tok_L, output_size=lit_total)
            off = torch.arange(lit_total, device=dev) - torch.repeat_interleave(
                torch.cumsum(tok_L, 0) - tok_L, tok_L, output_size=lit_total)
            words[tok_pos[tok] + 2 + off] = payload[lit_s[tok] + off]
    if L:
        t0_pos = frame_off + frame_len - 2
        words[t0_pos] = tokens_per_layer.to(torch.int32)
        ends = torch.cumsum(frame_len, 0).tolist()
        starts = [0] + ends[:-1]
        crcs = crc32_segments(words, starts, [e - 1 for e in ends], method=crc)
        words[t0_pos + 1] = torch.tensor([u32_to_i32(c) for c in crcs], dtype=torch.int32,
                                         device=dev)
    return words, [int(v) for v in frame_words], [int(v) for v in nonzeros]


def frame_to_numpy(words: torch.Tensor) -> np.ndarray:
    """A frame / message tensor as uint32 words on the host (the wire format)."""
    if words.dtype != torch.int32:
        raise TypeError(f"frames are int32 tensors, got {words.dtype}")
    return words.detach().contiguous().cpu().numpy().view(np.uint32)


@dataclass
class DecodedFrame:
    layer_id: int
    range_bits: int
    lmax_log2: int
    values: torch.Tensor   # int32, flat, on the requested device
    n_tokens: int
    n_words: int


_NO_WORDS = np.zeros(0, dtype=np.uint32)


def check_args(words, expected_n, start):
    """The reference's argument checks (DecodeArgumentError), for a 1-D int32 tensor of words
    or a host uint32 array."""
    if isinstance(words, torch.Tensor):
        if words.dtype != torch.int32 or words.dim() != 1:
            raise E.DecodeArgumentError(f"words must be a 1-D int32 tensor (uint32 bit patterns), "
                                        f"got {words.dim()}-D {words.dtype}")
        _, expected_n, start = zrle.check_decode_args(_NO_WORDS, expected_n, start)
        return words, expected_n, start
    return zrle.check_decode_args(words, expected_n, start)


def _use_device_walk(words, method: str) -> bool:
    if method not in ("auto", "device", "host"):
        raise ValueError(f"decode method must be 'auto', 'device' or 'host', got {method!r}")
    if not isinstance(words, torch.Tensor):
        return False
    return method == "device" or (method == "auto" and words.device.type != "cpu")


def decode_frame(words: torch.Tensor | np.ndarray, expected_n: int | None = None, start: int = 0,
                 device: torch.device | str | None = None, method: str = "auto") -> DecodedFrame:
    """Decode the frame starting at words[start]; raises the codec.errors class (and message)
    the reference raises for the first problem (docs/spec.md §3.5).

    `words`: a 1-D int32 tensor (or a host uint32 array). `method`: "device" validates and
    decodes where the tensor lives (codec/zrle_torch_decode.py); "host" runs the reference
    decoder on the host words (zero copy for CPU tensors); "auto" is "device" for tensors off
    the CPU and "host" otherwise. The values land on `device` (default: the input's)."""
    words, expected_n, start = check_args(words, expected_n, start)
    if _use_device_walk(words, method):
        hdr, values, T, used = decode_frame_on_device(words, expected_n, start)
        if device is not None:
            values = values.to(device)
        return DecodedFrame(hdr.layer_id, hdr.range_bits, hdr.lmax_log2, values, T, used)
    if isinstance(words, torch.Tensor):
        device = words.device if device is None else device
        words = frame_to_numpy(words)
    f = zrle.decode_frame(words, expected_n, start)
    values = torch.from_numpy(f.values).to("cpu" if device is None else device)
    return DecodedFrame(f.layer_id, f.range_bits, f.lmax_log2, values, f.n_tokens, f.n_words)


def decode_message(words: torch.Tensor | np.ndarray, expected_sizes: list[int] | None = None,
                   device: torch.device | str | None = None,
                   method: str = "auto") -> list[DecodedFrame]:
    """Decode concatenated frames (one per layer, in parameter order), checking the frame count
    against `expected_sizes` as codec.zrle.decode_message does (the same walk and errors)."""
    words, _, _ = check_args(words, None, 0)
    total = words.numel() if isinstance(words, torch.Tensor) else words.size
    return zrle.walk_message(total, lambda exp, at: decode_frame(words, exp, at, device=device,
                                                                 method=method), expected_sizes)
