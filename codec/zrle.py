"""ZRLE v1 frames: the numpy reference encoder and decoder (docs/spec.md §3).

The encoder is vectorised (run detection with numpy); the decoder walks the tokens
in the exact validation order the numba and RTL decoders use.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from . import errors as E

MAGIC = 0x5A524C45          # 'ZRLE'
VERSION = 1
HEADER_WORDS = 5
TRAILER_WORDS = 2
DEFAULT_LMAX_LOG2 = 8
LMAX_LOG2_MIN, LMAX_LOG2_MAX = 1, 24


def check_lmax_log2(lmax_log2: int) -> int:
    """lmax_log2 as an int, or LmaxError (a ValueError), the class refmodel.validation raises."""
    try:
        v = int(lmax_log2)
    except (TypeError, ValueError, OverflowError):
        v = None
    if v is None or not LMAX_LOG2_MIN <= v <= LMAX_LOG2_MAX:
        raise E.LmaxError(f"lmax_log2 must be in {LMAX_LOG2_MIN}..{LMAX_LOG2_MAX}, "
                          f"got {lmax_log2!r}")
    return v


def range_bits(R: float) -> int:
    """R as the float32 bits of h4; RangeError unless a real number that is finite and > 0
    as a float32 (the quantiser's own check, refmodel.quantiser.QuantConfig)."""
    if isinstance(R, bool) or not isinstance(R, (int, float, np.integer, np.floating)):
        raise E.RangeError(f"range R must be a finite float32 > 0, got {R!r}")
    with np.errstate(over="ignore"):
        r32 = np.float32(R)
    if not np.isfinite(r32) or r32 <= 0:
        raise E.RangeError(f"range R must be a finite float32 > 0, got {R!r}")
    return int(r32.view(np.uint32))


def range_is_valid(bits: int) -> bool:
    """Finite and > 0: sign 0, exponent not 255, not +0."""
    return (bits >> 31) == 0 and ((bits >> 23) & 0xFF) != 0xFF and bits != 0


def max_frame_words(n: int) -> int:
    """Upper bound on a frame's length: every token covers >= 1 element and costs 2 words
    plus its literals, so the body is at most 3n words."""
    return HEADER_WORDS + 3 * n + TRAILER_WORDS


# ------------------------------------------------------------------------------ size bounds
# `frame_words_bound(n, B, k_eff, lmax_log2)` is the most words a ZRLE v1 frame (docs/spec.md §3)
# of a layer of n elements can take when its payload is nonzero only on k_eff blocks of B
# elements. Derivation (docs/network.md, "The all_gather path"): a frame is 5 header words,
# 2 words per token, one word per literal and 2 trailer words. A nonzero run of r elements is
# ceil(r / LMAX) tokens. On a segment of P positions holding t runs of s nonzeros in all
# (s + t - 1 <= P), the body words are s + 2 * sum ceil(r_i / LMAX); for LMAX >= 4 this is
# largest with the most runs (runs of 1 or 2 separated by single zeros):
# f(P) = P + floor((P + 1) / 2) + 1; for LMAX = 2 with one run: f(P) = P + 2 * ceil(P / 2).
# Runs that cross block edges merge (ceil is subadditive), so selected blocks cost at most
# f(B) each, plus one final (z, 0) token (2 words) for trailing zeros. For the whole layer
# (every block selected) the exact maximum is g(n) = max(f(n), f(n - 1) + 2). The bound is
# 7 + min(g(n), 2 + k_eff * f(B)); it is attained when the selected blocks are not adjacent.
# Tested against the real encoder exhaustively on short layers and with hypothesis.
# The all_gather's slot width of the training hook is built from it (one slot per rank: the
# message's length word, then at most Compressor.message_bound words: shim/compress/compressors.py).


def segment_words_max(p: int, lmax: int) -> int:
    """Most body words (tokens' z, L and literals) the nonzeros of a segment of p positions
    can cost, bordered by zeros or the layer's ends (the trailing (z, 0) token not counted)."""
    if p <= 0:
        return 0
    if lmax <= 2:
        return p + 2 * ((p + 1) // 2)
    return p + (p + 1) // 2 + 1


def body_words_max(n: int, lmax: int) -> int:
    """Most body words of a frame of n elements (any payload), trailing zero token included."""
    if n <= 0:
        return 0
    return max(segment_words_max(n, lmax), segment_words_max(n - 1, lmax) + 2)


def frame_words_bound(n: int, block_size: int, k_eff: int, lmax_log2: int) -> int:
    """Most words of a frame of n elements whose payload is zero outside k_eff blocks of
    block_size elements (see the comment above)."""
    lmax = 1 << int(lmax_log2)
    body = body_words_max(n, lmax)
    if k_eff * block_size < n:
        body = min(body, 2 + k_eff * segment_words_max(block_size, lmax))
    return HEADER_WORDS + body + TRAILER_WORDS


def crc32_words(words: np.ndarray) -> int:
    """CRC-32 (zlib / IEEE 802.3) over the little-endian bytes of uint32 words."""
    return zlib.crc32(np.ascontiguousarray(words, dtype="<u4").tobytes()) & 0xFFFFFFFF


def tokens(payload: np.ndarray, lmax: int):
    """Canonical tokens of a flat int32 array: arrays (z, L, literal_start)."""
    flat = payload.reshape(-1)
    n = flat.size
    nz = flat != 0
    # nonzero runs: [starts, ends)
    edges = np.diff(np.concatenate(([False], nz, [False])).astype(np.int8))
    run_s = np.flatnonzero(edges == 1)
    run_e = np.flatnonzero(edges == -1)
    prev_end = np.concatenate(([0], run_e[:-1])).astype(np.int64)
    zeros_before = run_s - prev_end
    # split each run into ceil(len / LMAX) chunks; only the first keeps the zero count
    chunks = (run_e - run_s + lmax - 1) // lmax
    run_of_chunk = np.repeat(np.arange(run_s.size), chunks)
    first_chunk = np.cumsum(chunks) - chunks
    idx_in_run = np.arange(run_of_chunk.size) - np.repeat(first_chunk, chunks)
    lit_s = run_s[run_of_chunk] + idx_in_run * lmax
    L = np.minimum(lmax, run_e[run_of_chunk] - lit_s)
    z = np.where(idx_in_run == 0, zeros_before[run_of_chunk], 0)
    tail = n - (run_e[-1] if run_e.size else 0)
    if tail > 0:                                   # trailing zeros: final (z, 0) token
        z = np.append(z, tail)
        L = np.append(L, 0)
        lit_s = np.append(lit_s, n)
    return z.astype(np.int64), L.astype(np.int64), lit_s.astype(np.int64)


def encode_frame(payload: np.ndarray, layer_id: int = 0, R: float = 10.0,
                 lmax_log2: int = DEFAULT_LMAX_LOG2) -> np.ndarray:
    """int32 payload (any shape, flattened row-major) -> one frame of uint32 words."""
    payload = np.asarray(payload)
    if payload.dtype != np.int32:
        raise TypeError(f"encode_frame expects int32, got {payload.dtype}")
    lmax_log2 = check_lmax_log2(lmax_log2)
    flat = payload.reshape(-1)
    n = flat.size
    if n >= 2**32:
        raise ValueError(f"layer of {n} elements does not fit the 32-bit n field")
    if not (0 <= int(layer_id) < 2**32):
        raise ValueError(f"layer id must fit 32 bits, got {layer_id}")
    z, L, lit_s = tokens(flat, 1 << lmax_log2)
    T = z.size
    body_len = 2 * T + int(L.sum())
    words = np.empty(HEADER_WORDS + body_len + TRAILER_WORDS, dtype=np.uint32)
    words[:HEADER_WORDS] = [MAGIC, VERSION | (lmax_log2 << 8), int(layer_id), n, range_bits(R)]
    pos = HEADER_WORDS + np.cumsum(2 + L) - (2 + L)
    words[pos] = z.astype(np.uint32)
    words[pos + 1] = L.astype(np.uint32)
    if T:
        tok = np.repeat(np.arange(T), L)                         # token of every literal
        off = np.arange(tok.size) - np.repeat(np.cumsum(L) - L, L)
        words[pos[tok] + 2 + off] = flat[lit_s[tok] + off].view(np.uint32)
    words[-2] = T
    words[-1] = crc32_words(words[:-1])
    return words


@dataclass
class Frame:
    layer_id: int
    range_bits: int
    lmax_log2: int
    values: np.ndarray     # int32, flat
    n_tokens: int
    n_words: int           # words consumed, header to trailer

    @property
    def range(self) -> float:
        return float(np.uint32(self.range_bits).view(np.float32))


MAX_N = 2**32 - 1           # header word h3


def _integer(value) -> int | None:
    """int(value) for a Python or numpy integer (not bool); None for anything else."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def check_decode_args(words, expected_n=None, start=0) -> tuple[np.ndarray, int | None, int]:
    """The one check of a decoder call's arguments, shared by every decoder so all raise the
    same DecodeArgumentError: `words` a 1-D numpy uint32 array (nothing is cast: a float or
    2-D input is a caller's bug, not a frame), `expected_n` None or an integer in 0..2**32-1
    (a frame cannot declare more, so a larger value is a mistake, not a SIZE_MISMATCH),
    `start` an integer >= 0."""
    if not isinstance(words, np.ndarray):
        raise E.DecodeArgumentError(f"words must be a numpy uint32 array, got {type(words).__name__}")
    if words.dtype != np.uint32 or words.ndim != 1:
        raise E.DecodeArgumentError(f"words must be a 1-D uint32 array, got {words.ndim}-D "
                                    f"{words.dtype}")
    if expected_n is not None:
        n = _integer(expected_n)
        if n is None or not 0 <= n <= MAX_N:
            raise E.DecodeArgumentError(f"expected n must be an integer in 0..{MAX_N}, "
                                        f"got {expected_n!r}")
        expected_n = n
    s = _integer(start)
    if s is None or s < 0:
        raise E.DecodeArgumentError(f"start must be an integer >= 0, got {start!r}")
    return words, expected_n, s


@dataclass(frozen=True)
class FrameHeader:
    layer_id: int
    n: int                 # elements the frame declares (h3)
    range_bits: int
    lmax_log2: int


def read_header(words: np.ndarray, expected_n: int | None = None, start: int = 0) -> FrameHeader:
    """Validate and return the header of the frame at words[start] (the first checks of
    docs/spec.md §3.5, raising what decode_frame raises). Lets a caller refuse a frame whose n
    passes its own limit before any decoder allocates n values."""
    w, expected_n, start = check_decode_args(words, expected_n, start)
    return _read_header(w, expected_n, start)


def _word_reader(w: np.ndarray, start: int):
    end = w.size

    def word(i: int) -> int:
        if start + i >= end:
            raise E.TruncatedError(f"frame needs word {i} but only {max(0, end - start)} are "
                                   f"present", i)
        return int(w[start + i])
    return word


def _read_header(w: np.ndarray, expected_n: int | None, start: int) -> FrameHeader:
    word = _word_reader(w, start)
    if word(0) != MAGIC:
        raise E.BadMagicError(f"h0 = {word(0):#010x}, expected {MAGIC:#010x}", 0)
    h1 = word(1)
    if h1 & 0xFF != VERSION:
        raise E.BadVersionError(f"version {h1 & 0xFF}, this decoder reads {VERSION}", 1)
    lmax_log2 = (h1 >> 8) & 0xFF
    if (h1 >> 16) != 0 or not (LMAX_LOG2_MIN <= lmax_log2 <= LMAX_LOG2_MAX):
        raise E.BadLmaxError(f"h1 = {h1:#010x}: LMAX_LOG2 {lmax_log2}, reserved bits {h1 >> 16:#x}", 1)
    layer_id, n, rbits = word(2), word(3), word(4)
    if not range_is_valid(rbits):
        raise E.BadRangeError(f"h4 = {rbits:#010x} is not a finite positive float32", 4)
    if expected_n is not None and n != expected_n:
        raise E.SizeMismatchError(f"frame holds {n} elements, caller expects {expected_n}", 3)
    return FrameHeader(layer_id, n, rbits, lmax_log2)


def decode_frame(words: np.ndarray, expected_n: int | None = None, start: int = 0) -> Frame:
    """Decode the frame that begins at words[start]. Raises a FrameError subclass naming the
    first problem, in the order of docs/spec.md §3.5 (DecodeArgumentError for bad arguments).
    Never reads past the end of `words`, and allocates the n values only once the whole frame
    (tokens, trailer, CRC) has been validated: a header may claim 2**32-1 elements in 9 words,
    so memory is never sized by an unchecked header."""
    w, expected_n, start = check_decode_args(words, expected_n, start)
    end = w.size
    word = _word_reader(w, start)
    head = _read_header(w, expected_n, start)
    n, lmax_log2 = head.n, head.lmax_log2
    lmax = 1 << lmax_log2

    runs = []                  # (first element, first literal word, L) of each literal run
    pos, produced, T, prev_L = HEADER_WORDS, 0, 0, lmax
    while produced < n:
        z, L = word(pos), word(pos + 1)
        remaining = n - produced
        if L > lmax:
            raise E.LiteralRunTooLongError(f"token {T}: L = {L} > LMAX = {lmax}", pos + 1)
        if z == 0 and L == 0:
            raise E.EmptyTokenError(f"token {T} is (0, 0)", pos)
        if z == 0 and prev_L != lmax:
            raise E.SplitLiteralRunError(f"token {T} has z = 0 after a run of {prev_L} < LMAX", pos)
        if z + L > remaining:
            raise E.OverrunError(f"token {T}: z + L = {z + L} > {remaining} elements left", pos)
        if L == 0 and z < remaining:
            raise E.EarlyZeroLengthError(f"token {T}: L = 0 with {remaining - z} elements left", pos + 1)
        lits_at = start + pos + 2
        if lits_at + L > end:
            raise E.TruncatedError(f"token {T} needs {L} literals, {max(0, end - lits_at)} present",
                                   end - start)
        lits = w[lits_at:lits_at + L]
        if L and not lits.all():
            i = int(np.argmin(lits != 0))
            raise E.ZeroLiteralError(f"token {T}: literal {i} is zero", pos + 2 + i)
        if L:
            runs.append((produced + z, lits_at, L))
        produced += z + L
        pos += 2 + L
        prev_L = L
        T += 1
    t0, t1 = word(pos), word(pos + 1)
    if t0 != T:
        raise E.TokenCountMismatchError(f"trailer says {t0} tokens, frame has {T}", pos)
    crc = crc32_words(w[start:start + pos + 1])
    if t1 != crc:
        raise E.CrcMismatchError(f"trailer CRC {t1:#010x}, computed {crc:#010x}", pos + 1)
    out = np.zeros(n, dtype=np.int32)      # the frame is valid: n is what the sender meant
    for at, lits_at, L in runs:
        out[at:at + L] = w[lits_at:lits_at + L].view(np.int32)
    return Frame(head.layer_id, head.range_bits, lmax_log2, out, T, pos + TRAILER_WORDS)


def walk_message(total: int, decode_at, expected_sizes: list[int] | None = None) -> list:
    """The message walk every decoder shares (docs/spec.md §3.4): frames back to back over
    `total` words, `decode_at(expected_n, start)` decoding the frame at word `start` (anything
    with `n_words`), the frame count checked against `expected_sizes` with SizeMismatchError."""
    frames, at = [], 0
    while at < total:
        i = len(frames)
        exp = None
        if expected_sizes is not None:
            if i >= len(expected_sizes):
                raise E.SizeMismatchError(f"message has more than {len(expected_sizes)} frames", at)
            exp = expected_sizes[i]
        frames.append(decode_at(exp, at))
        at += frames[-1].n_words
    if expected_sizes is not None and len(frames) != len(expected_sizes):
        raise E.SizeMismatchError(f"message has {len(frames)} frames, expected {len(expected_sizes)}")
    return frames


def decode_message(words: np.ndarray, expected_sizes: list[int] | None = None,
                   decode_frame=decode_frame) -> list[Frame]:
    """Decode concatenated frames (one per layer, in parameter order). `decode_frame` lets a
    faster decoder with the same contract (codec.zrle_numba) reuse this walk."""
    w, _, _ = check_decode_args(words)
    return walk_message(w.size, lambda exp, at: decode_frame(w, exp, at), expected_sizes)
