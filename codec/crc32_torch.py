"""CRC-32 (zlib / IEEE 802.3) of ZRLE frames held in int32 torch tensors (docs/spec.md §3.3).

On CPU tensors zlib runs over the tensor's own bytes (zero copy, C speed); on any other device a
vectorised GF(2) tree reduction in torch ops computes it where the frame lives, so a frame never
leaves the GPU for its checksum. Both agree with zlib (tests/test_torch_codec.py).
"""
from __future__ import annotations

import zlib
from functools import lru_cache

import torch

__all__ = ["crc32_words", "crc32_words_tensor", "crc32_segments"]

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
