"""Memory-bandwidth yardsticks on the same bytes as the compress step: a read-sum and a copy,
parallel over chunks with numba so they follow the thread count being measured."""
from __future__ import annotations

import numpy as np
from numba import njit, prange

CHUNK = 1 << 16     # elements per parallel chunk (256 KiB of float32)


# The per-chunk loops are separate serial functions: written inline in the prange body they
# do not vectorise (measured 5-10x slower).
@njit(cache=True, inline="never")
def _sum_chunk(words: np.ndarray) -> np.uint64:
    s = np.uint64(0)
    for i in range(words.size):
        s += words[i]
    return s


@njit(cache=True, inline="never")
def _copy_chunk(dst: np.ndarray, src: np.ndarray) -> None:
    for i in range(src.size):
        dst[i] = src[i]


@njit(parallel=True, cache=True)
def read_sum(words: np.ndarray) -> np.uint64:
    """Sum of a uint32 array (the float32 bits): reads every byte once. Integer adds keep
    the loop vectorised without fast-math."""
    n_chunks = (words.size + CHUNK - 1) // CHUNK
    parts = np.zeros(n_chunks, dtype=np.uint64)
    for c in prange(n_chunks):
        parts[c] = _sum_chunk(words[c * CHUNK:(c + 1) * CHUNK])
    return parts.sum()


@njit(parallel=True, cache=True)
def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[:] = src: reads and writes every byte once (plus the write-allocate read of dst)."""
    n_chunks = (src.size + CHUNK - 1) // CHUNK
    for c in prange(n_chunks):
        _copy_chunk(dst[c * CHUNK:(c + 1) * CHUNK], src[c * CHUNK:(c + 1) * CHUNK])


def flat_words(arrays: list[np.ndarray]) -> np.ndarray:
    """All arrays' bytes as one contiguous uint32 buffer (the gradient as one message)."""
    return np.concatenate([np.ascontiguousarray(a).reshape(-1).view(np.uint32) for a in arrays])
