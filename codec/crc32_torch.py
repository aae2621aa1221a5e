"""CRC-32 (zlib / IEEE 802.3) of ZRLE frames held in int32 torch tensors (docs/spec.md §3.3).

On CPU tensors zlib runs over the tensor's own bytes (zero copy, C speed); on any other device a
vectorised GF(2) tree reduction in torch ops computes it where the frame lives, so a frame never
leaves the GPU for its checksum. Both agree with zlib (tests/test_torch_codec.py).
"""
from __future__ import annotations

import zlib
from functools import lru_cache

import torch

from .scan_torch import running_max

__all__ = ["crc32_words", "crc32_words_tensor", "crc32_segments", "crc32_spans"]

_MASK32 = 0xFFFFFFFF
_CRC_POLY = 0xEDB88320


def crc32_words(words: torch.Tensor, method: str = "auto") -> int:
    """CRC-32 (zlib / IEEE 802.3) over the little-endian bytes of 32-bit words held in an int32
    tensor. "zlib" copies to host if needed; "torch" runs on the tensor's device."""
    if method not in ("auto", "zlib", "torch"):
        raise ValueError(f"crc method must be 'auto', 'zlib' or 'torch', got {method!r}")
    if method == "torch" or (method == "auto" and words.device.type != "cpu"):
        return crc32_words_tensor(words)
    arr = words.detach().contiguous().cpu().numpy().astype("<i4", copy=False)
    return zlib.crc32(arr.tobytes() if arr.size else b"") & _MASK32


# CRC-32 is affine over GF(2). Feeding one little-endian word w to the reflected register is
# s' = A32(s ^ w), A32 = 32 zero-bit shift steps; so crc = A32^N-weighted XOR of the words with
# the init 0xFFFFFFFF folded into word 0. A pairwise tree combines segments:
# v(left ++ right) = A32^len(right) (v(left)) ^ v(right); leading zero words contribute nothing,
# so the word count is padded at the front to a power of two.


def _gf2_apply(cols: tuple[int, ...], v: int) -> int:
    out = 0
    for i in range(32):
        if (v >> i) & 1:
            out ^= cols[i]
    return out


@lru_cache(maxsize=None)
def _a32_power_cols(level: int) -> tuple[int, ...]:
    """Columns (images of each basis bit) of A32^(2**level)."""
    if level == 0:
        cols = []
        for i in range(32):
            s = 1 << i
            for _ in range(32):
                s = (s >> 1) ^ (_CRC_POLY if s & 1 else 0)
            cols.append(s)
        return tuple(cols)
    half = _a32_power_cols(level - 1)
    return tuple(_gf2_apply(half, c) for c in half)


_A32_TABLES: dict[tuple[int, str], torch.Tensor] = {}


def _a32_tables(level: int, device: torch.device) -> torch.Tensor:
    """A32^(2**level) as four 256-entry byte tables (slice-by-4): by linearity the image of a
    word is the XOR of its four bytes' images. int64 (4, 256) on `device`, cached."""
    key = (level, str(device))
    if key not in _A32_TABLES:
        cols = _a32_power_cols(level)
        tables = []
        for j in range(4):
            t = [0] * 256
            for b in range(1, 256):
                low = (b & -b).bit_length() - 1          # lowest set bit: reuse b without it
                t[b] = t[b & (b - 1)] ^ cols[8 * j + low]
            tables.append(t)
        _A32_TABLES[key] = torch.tensor(tables, dtype=torch.int64, device=device)
    return _A32_TABLES[key]


def _gf2_apply_tensor(level: int, v: torch.Tensor) -> torch.Tensor:
    """Apply A32^(2**level) to each 32-bit value in int64 tensor v (four table gathers)."""
    t = _a32_tables(level, v.device)
    return t[0][v & 0xFF] ^ t[1][(v >> 8) & 0xFF] ^ t[2][(v >> 16) & 0xFF] ^ t[3][(v >> 24) & 0xFF]


def crc32_words_tensor(words: torch.Tensor) -> int:
    """CRC-32 of int32 words computed on their own device (no host copy of the frame)."""
    n = words.numel()
    if n == 0:
        return 0
    v = words.reshape(-1).to(torch.int64) & _MASK32
    v = torch.cat([v[:1] ^ _MASK32, v[1:]])          # fold in the init value
    size = 1 << (n - 1).bit_length()
    if size != n:
        v = torch.cat([v.new_zeros(size - n), v])
    v = _gf2_apply_tensor(0, v)                        # leaves: A32(word)
    level = 0
    while v.numel() > 1:
        pairs = v.view(-1, 2)
        v = _gf2_apply_tensor(level, pairs[:, 0]) ^ pairs[:, 1]
        level += 1
    return (int(v.item()) ^ _MASK32) & _MASK32


def crc32_segments(words: torch.Tensor, starts: list[int], ends: list[int],
                   method: str = "auto") -> list[int]:
    """CRC-32 of words[s:e] for each (s, e): one host copy for all segments on CPU (zlib),
    the on-device tree per segment elsewhere."""
    if method not in ("auto", "zlib", "torch"):
        raise ValueError(f"crc method must be 'auto', 'zlib' or 'torch', got {method!r}")
    if method == "zlib" or (method == "auto" and words.device.type == "cpu"):
        buf = memoryview(words.detach().contiguous().cpu().numpy()).cast("B")
        return [zlib.crc32(buf[4 * s:4 * e]) & _MASK32 for s, e in zip(starts, ends)]
    return [crc32_words_tensor(words[s:e]) for s, e in zip(starts, ends)]


def _byte_tables(cols: tuple[int, ...]) -> list[int]:
    """A 32x32 GF(2) matrix as four 256-entry byte tables, flat (byte j of a word at 256 j)."""
    out = []
    for j in range(4):
        t = [0] * 256
        for b in range(1, 256):
            low = (b & -b).bit_length() - 1
            t[b] = t[b & (b - 1)] ^ cols[8 * j + low]
        out += t
    return out


_DIGIT_TABLES: dict[tuple[int, str], torch.Tensor] = {}


def _digit_tables(level: int, device: torch.device) -> torch.Tensor:
    """A32^(m * 16**level) for every hex digit m, as byte tables: int64 (16 * 1024,), entry
    m * 1024 + 256 j + b the image of byte b in position j."""
    key = (level, str(device))
    if key not in _DIGIT_TABLES:
        base = _a32_power_cols(4 * level)                     # A32^(16**level)
        cols = tuple(1 << i for i in range(32))               # the identity, m = 0
        flat = []
        for _ in range(16):
            flat += _byte_tables(cols)
            cols = tuple(_gf2_apply(base, c) for c in cols)
        _DIGIT_TABLES[key] = torch.tensor(flat, dtype=torch.int64, device=device)
    return _DIGIT_TABLES[key]


_CONSTS: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}


def _byte_consts(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The byte shifts and table offsets on `device`, made once (no copy per call)."""
    key = str(device)
    if key not in _CONSTS:
        _CONSTS[key] = (torch.tensor([0, 8, 16, 24], dtype=torch.int64, device=device),
                        torch.tensor([0, 256, 512, 768], dtype=torch.int64, device=device))
    return _CONSTS[key]


def _apply_power(v: torch.Tensor, d: torch.Tensor, levels: int) -> torch.Tensor:
    """A32^d applied to each value of v, d >= 0 elementwise with d < 2**levels:
    one table gather per hex digit of d (the digit picks the table), whatever the values, so
    the number of ops is set by `levels` alone."""
    dev = v.device
    shifts, offs = _byte_consts(dev)
    for k in range((levels + 3) // 4):
        digit = (d >> (4 * k)) & 15
        idx = ((v.unsqueeze(-1) >> shifts) & 0xFF) + (digit.unsqueeze(-1) * 1024 + offs)
        g = _digit_tables(k, dev)[idx]
        v = g[..., 0] ^ g[..., 1] ^ g[..., 2] ^ g[..., 3]
    return v


def _prefix_xor(x: torch.Tensor) -> torch.Tensor:
    """Inclusive prefix XOR along the last dimension (Hillis-Steele: log2 rounds)."""
    s = 1
    while s < x.shape[-1]:
        y = x.clone()
        y[..., s:] ^= x[..., :-s]
        x, s = y, 2 * s
    return x


def crc32_spans(u: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """CRC-32 of many spans of words at once, on the words' device, without a host sync:
    u (rows, W) int64 holding uint32 word values, starts / ends (rows, S) int64 span bounds
    [start, end) with 0 <= start < end <= W for real spans (others may hold anything and give
    garbage). Spans must be disjoint (the frames of a message are): each start's word takes
    the init value, and each word belongs to the span that starts last at or before it.
    Returns (rows, S) int64 CRCs.

    Each word j of a span [s, e) adds A32^(e - j)(word) to the span's raw value (the tree in
    crc32_words_tensor, unrolled; the init folded into the first word). Every word's term is
    computed at once with its own span's end (one table gather per hex digit of e - j), and
    a prefix XOR P of the terms gives each span's raw value as P[e] ^ P[s]. The number of
    torch ops depends only on log2(W), not on the number of spans."""
    rows, W = u.shape
    dev = u.device
    S = starts.shape[1]
    ok = (starts >= 0) & (starts < ends) & (ends <= W)
    s_c = torch.where(ok, starts, torch.full_like(starts, W))
    e_c = torch.where(ok, ends, torch.full_like(ends, W))
    init = torch.zeros(rows, W + 1, dtype=torch.int64, device=dev)
    init.scatter_(1, s_c, torch.full((rows, S), _MASK32, dtype=torch.int64, device=dev))
    v = (u & _MASK32) ^ init[:, :W]
    # each word's span end: ends scattered at their starts, carried forward (disjoint spans
    # in position order have rising ends)
    end_at = torch.zeros(rows, W + 1, dtype=torch.int64, device=dev).scatter_(1, s_c, e_c)
    e_of = running_max(end_at[:, :W])
    d = (e_of - torch.arange(W, dtype=torch.int64, device=dev)).clamp(min=0)
    c = _apply_power(v, d, max(1, (W + 1).bit_length()))
    P = torch.cat([torch.zeros(rows, 1, dtype=torch.int64, device=dev), _prefix_xor(c)], dim=1)
    return (P.gather(1, e_c) ^ P.gather(1, s_c)) ^ _MASK32
