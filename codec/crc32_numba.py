"""CRC-32 (zlib / IEEE 802.3) over uint32 words, in numba (docs/spec.md §3.3).

The frame CRC covers the little-endian bytes of every word, so one word is exactly four
bytes of the byte-wise CRC. The kernels are table driven: slice-by-16 consumes four
words per step, slice-by-4 one word.

The state is the raw CRC register, so a streaming encoder or decoder can feed words as
they appear::

    state = CRC_INIT
    state = crc32_update_word(state, w)            # one word (inside jitted code)
    state = crc32_update(state, words, lo, hi)     # words[lo:hi]
    crc = crc32_final(state)                       # == zlib.crc32 of those bytes
"""
from __future__ import annotations

import numba as nb
import numpy as np

POLY = 0xEDB88320          # reflected IEEE polynomial
CRC_INIT = 0xFFFFFFFF      # register value before the first byte (also the final XOR)


def _make_tables(slices: int = 16) -> np.ndarray:
    """Flat table: T[j*256 + b] = CRC register after byte b followed by j zero bytes."""
    t = np.zeros((slices, 256), dtype=np.uint32)
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (POLY if c & 1 else 0)
        t[0, b] = c
    for j in range(1, slices):
        for b in range(256):
            prev = int(t[j - 1, b])
            t[j, b] = (prev >> 8) ^ int(t[0, prev & 0xFF])
    return t.reshape(-1)


# A global array is frozen into the compiled code as a constant.
_T = _make_tables()


@nb.njit(inline="always", nogil=True, cache=True)
def _word_table(c, j):
    """XOR of the four table entries for word c entering `j` bytes before the end of a step."""
    return (_T[(j + 3) * 256 + (c & 0xFF)] ^ _T[(j + 2) * 256 + ((c >> 8) & 0xFF)]
            ^ _T[(j + 1) * 256 + ((c >> 16) & 0xFF)] ^ _T[j * 256 + (c >> 24)])


@nb.njit(inline="always", nogil=True, cache=True)
def crc32_update_word(state, word):
    """Feed one uint32 word (its 4 little-endian bytes) into the CRC register."""
    return _word_table(np.uint32(state) ^ np.uint32(word), 0)


@nb.njit(nogil=True, cache=True)
def crc32_update(state, words, lo, hi):
    """Feed words[lo:hi] into the register (slice-by-16: four words per step).
    The caller guarantees 0 <= lo <= hi <= words.size."""
    c = np.uint32(state)
    i = lo
    while i + 4 <= hi:
        c = (_word_table(c ^ np.uint32(words[i]), 12) ^ _word_table(np.uint32(words[i + 1]), 8)
             ^ _word_table(np.uint32(words[i + 2]), 4) ^ _word_table(np.uint32(words[i + 3]), 0))
        i += 4
    while i < hi:
        c = _word_table(c ^ np.uint32(words[i]), 0)
        i += 1
    return np.uint32(c)


@nb.njit(inline="always", nogil=True, cache=True)
def crc32_final(state):
    return np.uint32(state) ^ np.uint32(CRC_INIT)


def crc32_words(words) -> int:
    """CRC-32 of the little-endian bytes of uint32 words; equals codec.zrle.crc32_words."""
    w = np.ascontiguousarray(words, dtype=np.uint32)
    if w.ndim != 1:
        w = w.reshape(-1)
    return int(crc32_final(crc32_update(np.uint32(CRC_INIT), w, 0, w.size)))
