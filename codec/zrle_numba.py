"""ZRLE v1 frames in numba: a streaming encoder and a validating decoder (docs/spec.md §3).

Bit-exact with the numpy reference `codec.zrle`: same words out of the encoder, same
exception class, word index and meaning out of the decoder.

Public API (mirrors `codec.zrle`):

* `encode_frame(payload, layer_id=0, R=10.0, lmax_log2=8) -> uint32 array`
* `encode_into(payload, out, offset=0, layer_id=0, R=10.0, lmax_log2=8) -> words written`
  (no allocation; `out[offset:]` must hold `max_frame_words(n)` words)
* `decode_frame(words, expected_n=None, start=0) -> codec.zrle.Frame`
* `decode_into(words, out, expected_n=None, start=0) -> Frame` whose `values` is a view of
  `out[:n]` (no allocation; raises ValueError if `out` is shorter than the frame's `n`)
* `decode_add(words, acc, expected_n=None, start=0) -> Frame` adds the values into an int64
  accumulator, touching only the literals (the exchange's decode-and-sum)
* `decode_message(words, expected_sizes=None) -> list[Frame]`
* `encode_message_into(payload, offsets, out, layer_ids, R, lmax_log2)` and
  `decode_message_into(words, out, offsets)`: a whole message (layer i at
  payload[offsets[i]:offsets[i+1]] of one flat buffer) in one jitted call, no per-layer Python
* `check_frames(words, starts, ends, expected_n=None) -> (codes, word)`: validate many
  frames in one jitted loop (fuzzing, batch checks); 0 or the spec §3.5 code per frame.

For jitted callers (fastpath.fast) the encoder is also exposed as a state machine:
`enc_begin` writes the header, `enc_feed` / `enc_feed_zeros` stream payload words,
`enc_end` closes the frame and returns its length.

The jitted kernels never touch memory outside their arrays: the encoder's buffer is sized
before it starts (a frame is at most `5 + 3n + 2` words) and the decoder checks the input
length before every read and the frame's `n` against its output before every write.

"""
from __future__ import annotations

import operator

import numba as nb
import numpy as np

from . import errors as E
from . import zrle
from .crc32_numba import CRC_INIT, crc32_final, crc32_update
from .zrle import (DEFAULT_LMAX_LOG2, HEADER_WORDS, LMAX_LOG2_MAX, LMAX_LOG2_MIN, MAGIC,
                   TRAILER_WORDS, VERSION, Frame, check_lmax_log2, max_frame_words, range_bits)

__all__ = ["encode_frame", "encode_into", "decode_frame", "decode_into", "decode_add",
           "decode_message", "check_frames", "max_frame_words", "encode_message_into",
           "decode_message_into", "message_words", "as_words"]

OK = 0
NEED_BUFFER = -1           # kernel status: header valid but the output buffer is shorter than n

# ---------------------------------------------------------------------------------------------
# Encoder
#
# The streaming state machine of spec §3.2 with its state in a tuple
# (z, L, tok_pos, wp, T, crc, crc_at): pending zero count, literals buffered in the open
# token, where that token's z/L slots were reserved, next free word, tokens emitted, CRC
# register, first word not yet in the CRC. Literals go straight into the output after their
# token's reserved z/L slots; when the token closes, z and L are filled in and its words are
# final. The CRC follows the closed words in batches of at least CRC_BATCH words (one call
# per short token would cost more than the CRC itself).
# ---------------------------------------------------------------------------------------------


CRC_BATCH = 512


@nb.njit(inline="always", nogil=True, cache=True)
def _close_token(out, z, L, tok_pos, T, crc, crc_at):
    out[tok_pos] = np.uint32(z)
    out[tok_pos + 1] = np.uint32(L)
    end = tok_pos + 2 + L
    if end - crc_at >= CRC_BATCH:
        crc = crc32_update(crc, out, crc_at, end)
        crc_at = end
    return T + 1, crc, crc_at


@nb.njit(inline="always", nogil=True, cache=True)
def enc_begin(out, base, n, layer_id, rbits, lmax_log2):
    """Write the header at out[base:base+5]; return the initial encoder state."""
    out[base] = np.uint32(MAGIC)
    out[base + 1] = np.uint32(VERSION | (lmax_log2 << 8))
    out[base + 2] = np.uint32(layer_id)
    out[base + 3] = np.uint32(n)
    out[base + 4] = np.uint32(rbits)
    crc = crc32_update(np.uint32(CRC_INIT), out, base, base + HEADER_WORDS)
    wp = np.int64(base + HEADER_WORDS)
    return (np.int64(0), np.int64(0), np.int64(0), wp, np.int64(0), crc, wp)


@nb.njit(inline="always", nogil=True, cache=True)
def _zero_run_end(src, i, hi):
    """First index in [i, hi) with src[index] != 0, else hi; 512 then 64 words per test (OR
    reductions LLVM vectorises: a selected block is a few thousand words, the zero runs
    between them a hundred times longer) on long runs, then 8, then 1."""
    u = np.uint64(i)
    end = np.uint64(hi)
    while u + 512 <= end:
        chunk = src[u:u + 512]
        acc = np.int32(0)
        for t in range(512):
            acc |= chunk[t]
        if acc != 0:
            break
        u += np.uint64(512)
    while u + 64 <= end:
        chunk = src[u:u + 64]
        acc = np.int32(0)
        for t in range(64):
            acc |= chunk[t]
        if acc != 0:
            break
        u += np.uint64(64)
    while u + 8 <= end and (src[u] | src[u + 1] | src[u + 2] | src[u + 3]
                            | src[u + 4] | src[u + 5] | src[u + 6] | src[u + 7]) == 0:
        u += np.uint64(8)
    while u < end and src[u] == 0:
        u += np.uint64(1)
    return np.int64(u)


@nb.njit(inline="always", nogil=True, cache=True)
def enc_feed(src, lo, hi, out, state, lmax):
    """Feed payload words src[lo:hi] (int32; 0 <= lo <= hi <= src.size) through the encoder.

    Walks alternating zero and nonzero runs; every word makes exactly the state change the
    per-word loop of spec §3.2 makes, so the output is the canonical frame. Indices are cast
    to unsigned so numba emits no negative-index wraparound test."""
    z, L, tok_pos, wp, T, crc, crc_at = state
    i = lo
    while i < hi:
        j = _zero_run_end(src, i, hi)
        if j > i:                               # zeros: close an open token, count them
            if L != 0:
                T, crc, crc_at = _close_token(out, z, L, tok_pos, T, crc, crc_at)
                z = 0
                L = 0
            z += j - i
            i = j
        while i < hi:                           # nonzeros: buffer up to LMAX per token
            x = src[np.uint64(i)]
            if x == 0:
                break
            if L == lmax:                       # buffer full: close, continue with z = 0
                T, crc, crc_at = _close_token(out, z, L, tok_pos, T, crc, crc_at)
                z = 0
                L = 0
            if L == 0:                          # open a token: reserve its z and L slots
                tok_pos = wp
                wp += 2
            out[np.uint64(wp)] = np.uint32(x)
            wp += 1
            L += 1
            i += 1
    return (z, L, tok_pos, wp, T, crc, crc_at)


@nb.njit(inline="always", nogil=True, cache=True)
def enc_feed_zeros(count, out, state):
    """Feed `count` zero words (the same as `count` iterations of the zero branch)."""
    z, L, tok_pos, wp, T, crc, crc_at = state
    if count > 0:
        if L != 0:
            T, crc, crc_at = _close_token(out, z, L, tok_pos, T, crc, crc_at)
            z = 0
            L = 0
        z += count
    return (z, L, tok_pos, wp, T, crc, crc_at)


@nb.njit(inline="always", nogil=True, cache=True)
def enc_end(out, base, state):
    """Close the last token, write the trailer; return the frame length in words."""
    z, L, tok_pos, wp, T, crc, crc_at = state
    if L != 0:
        T, crc, crc_at = _close_token(out, z, L, tok_pos, T, crc, crc_at)
    elif z != 0:                                # trailing zeros: final (z, 0) token
        tok_pos = wp
        wp += 2
        T, crc, crc_at = _close_token(out, z, 0, tok_pos, T, crc, crc_at)
    out[wp] = np.uint32(T)
    crc = crc32_update(crc, out, crc_at, wp + 1)
    out[wp + 1] = crc32_final(crc)
    return wp + TRAILER_WORDS - base


@nb.njit(nogil=True, cache=True)
def _encode_kernel(flat, out, base, layer_id, rbits, lmax_log2):
    n = flat.size
    state = enc_begin(out, base, n, layer_id, rbits, lmax_log2)
    state = enc_feed(flat, 0, n, out, state, np.int64(1) << lmax_log2)
    return enc_end(out, base, state)


def _check_encode_args(payload, layer_id, R, lmax_log2):
    """Same checks, same order, same exceptions as codec.zrle.encode_frame."""
    payload = np.asarray(payload)
    if payload.dtype != np.int32:
        raise TypeError(f"encode_frame expects int32, got {payload.dtype}")
    lmax_log2 = check_lmax_log2(lmax_log2)
    flat = np.ascontiguousarray(payload).reshape(-1)
    n = flat.size
    if n >= 2**32:
        raise ValueError(f"layer of {n} elements does not fit the 32-bit n field")
    if not (0 <= int(layer_id) < 2**32):
        raise ValueError(f"layer id must fit 32 bits, got {layer_id}")
    return flat, int(layer_id), range_bits(R), lmax_log2


def encode_into(payload, out: np.ndarray, offset: int = 0, layer_id: int = 0, R: float = 10.0,
                lmax_log2: int = DEFAULT_LMAX_LOG2) -> int:
    """Encode `payload` (int32, any shape, flattened row-major) as one frame written at
    out[offset:]; return the number of words written. `out` is a 1-D uint32 array with at
    least `max_frame_words(payload.size)` words from `offset` on (checked before writing)."""
    flat, layer_id, rbits, lmax_log2 = _check_encode_args(payload, layer_id, R, lmax_log2)
    _check_out(out, np.uint32, "out")
    offset = operator.index(offset)
    need = max_frame_words(flat.size)
    if offset < 0 or out.size - offset < need:
        raise ValueError(f"out has {out.size - offset} words from offset {offset}, "
                         f"a frame of {flat.size} elements may need {need}")
    return int(_encode_kernel(flat, out, offset, layer_id, rbits, lmax_log2))


def encode_frame(payload, layer_id: int = 0, R: float = 10.0,
                 lmax_log2: int = DEFAULT_LMAX_LOG2) -> np.ndarray:
    """int32 payload (any shape, flattened row-major) -> one frame of uint32 words."""
    flat, layer_id, rbits, lmax_log2 = _check_encode_args(payload, layer_id, R, lmax_log2)
    # np.empty does not touch pages it never writes, so the worst-case size costs nothing.
    out = np.empty(max_frame_words(flat.size), dtype=np.uint32)
    used = int(_encode_kernel(flat, out, 0, layer_id, rbits, lmax_log2))
    return out[:used].copy()


def _check_out(out, dtype, name):
    if not isinstance(out, np.ndarray) or out.dtype != dtype or out.ndim != 1 \
            or not out.flags.c_contiguous or not out.flags.writeable:
        raise TypeError(f"{name} must be a writeable 1-D contiguous {np.dtype(dtype).name} array")


# ---------------------------------------------------------------------------------------------
# Decoder
#
# `_decode_kernel` returns a tuple of 10 int64:
#   (status, word, n, layer_id, range_bits, lmax_log2, tokens, n_words, d1, d2)
# status OK, NEED_BUFFER, or an error code of spec §3.5; `word` is the frame-relative index
# the error is reported at; d1/d2 carry the numbers the error message names.
# ---------------------------------------------------------------------------------------------

_BAD_MAGIC, _BAD_VERSION, _BAD_LMAX, _BAD_RANGE = 1, 2, 3, 4
_LIT_TOO_LONG, _ZERO_LITERAL, _EMPTY_TOKEN, _EARLY_ZERO = 5, 6, 7, 8
_SPLIT_RUN, _OVERRUN, _TRUNCATED, _TOKEN_COUNT, _CRC, _SIZE = 9, 10, 11, 12, 13, 14


@nb.njit(inline="always", nogil=True, cache=True)
def _result(status, word, n, layer_id, rbits, lmax_log2, T, n_words, d1, d2):
    return (np.int64(status), np.int64(word), np.int64(n), np.int64(layer_id), np.int64(rbits),
            np.int64(lmax_log2), np.int64(T), np.int64(n_words), np.int64(d1), np.int64(d2))


# What the decoder does with the values it validates.
WRITE = 0       # out[:n] = values (zero runs written only with zero_fill)
ADD = 1         # acc[:n] += values (int64; zero runs cost nothing)
VALIDATE = 2    # check only


@nb.njit(nogil=True, cache=True)
def _decode_kernel(w, start, has_expected, expected_n, out, acc, mode, zero_fill):
    """Decode the frame at w[start:] (mode WRITE, ADD or VALIDATE; see above).
    A freshly calloc'ed `out` needs no zero_fill. On an error, out/acc may be partly updated.
    Checks in the order of spec §3.5 and of codec.zrle.decode_frame."""
    avail = w.size - start                      # words present from `start` on
    if avail < 0:
        avail = 0
    # Header. A plain missing word is reported as TRUNCATED with d1 = -1.
    if avail < 1:
        return _result(_TRUNCATED, 0, 0, 0, 0, 0, 0, 0, -1, avail)
    h0 = np.int64(w[start])
    if h0 != MAGIC:
        return _result(_BAD_MAGIC, 0, 0, 0, 0, 0, 0, 0, h0, 0)
    if avail < 2:
        return _result(_TRUNCATED, 1, 0, 0, 0, 0, 0, 0, -1, avail)
    h1 = np.int64(w[start + 1])
    if (h1 & 0xFF) != VERSION:
        return _result(_BAD_VERSION, 1, 0, 0, 0, 0, 0, 0, h1, 0)
    lmax_log2 = (h1 >> 8) & 0xFF
    if (h1 >> 16) != 0 or lmax_log2 < LMAX_LOG2_MIN or lmax_log2 > LMAX_LOG2_MAX:
        return _result(_BAD_LMAX, 1, 0, 0, 0, lmax_log2, 0, 0, h1, 0)
    lmax = np.int64(1) << lmax_log2
    for i in range(2, HEADER_WORDS):
        if avail <= i:
            return _result(_TRUNCATED, i, 0, 0, 0, lmax_log2, 0, 0, -1, avail)
    layer_id = np.int64(w[start + 2])
    n = np.int64(w[start + 3])
    rbits = np.int64(w[start + 4])
    if (rbits >> 31) != 0 or ((rbits >> 23) & 0xFF) == 0xFF or rbits == 0:
        return _result(_BAD_RANGE, 4, n, layer_id, rbits, lmax_log2, 0, 0, rbits, 0)
    if has_expected and n != expected_n:
        return _result(_SIZE, 3, n, layer_id, rbits, lmax_log2, 0, 0, n, expected_n)
    if (mode == WRITE and out.size < n) or (mode == ADD and acc.size < n):
        return _result(NEED_BUFFER, 0, n, layer_id, rbits, lmax_log2, 0, 0, 0, 0)

    crc = np.uint32(CRC_INIT)
    crc_at = start                              # first word not yet in the CRC (batched)
    pos = np.int64(HEADER_WORDS)
    produced = np.int64(0)
    T = np.int64(0)
    prev_L = lmax
    while produced < n:
        if avail <= pos:
            return _result(_TRUNCATED, pos, n, layer_id, rbits, lmax_log2, T, 0, -1, avail)
        z = np.int64(w[start + pos])
        if avail <= pos + 1:
            return _result(_TRUNCATED, pos + 1, n, layer_id, rbits, lmax_log2, T, 0, -1, avail)
        L = np.int64(w[start + pos + 1])
        remaining = n - produced
        if L > lmax:
            return _result(_LIT_TOO_LONG, pos + 1, n, layer_id, rbits, lmax_log2, T, 0, L, lmax)
        if z == 0 and L == 0:
            return _result(_EMPTY_TOKEN, pos, n, layer_id, rbits, lmax_log2, T, 0, 0, 0)
        if z == 0 and prev_L != lmax:
            return _result(_SPLIT_RUN, pos, n, layer_id, rbits, lmax_log2, T, 0, prev_L, 0)
        if z + L > remaining:
            return _result(_OVERRUN, pos, n, layer_id, rbits, lmax_log2, T, 0, z + L, remaining)
        if L == 0 and z < remaining:
            return _result(_EARLY_ZERO, pos + 1, n, layer_id, rbits, lmax_log2, T, 0,
                           remaining - z, 0)
        lits_at = pos + 2
        if lits_at + L > avail:                 # all of this token's literals must be present
            return _result(_TRUNCATED, avail, n, layer_id, rbits, lmax_log2, T, 0, L,
                           max(0, avail - lits_at))
        # Unsigned indices: numba then emits no negative-index wraparound test, and LLVM
        # vectorises the copy and the zero test together.
        src = np.uint64(start + lits_at)
        o = np.uint64(produced + z)
        nl = np.uint64(L)
        zero = False
        if mode == WRITE:
            if zero_fill:
                for i in range(np.uint64(produced), o):
                    out[i] = 0
            for j in range(nl):
                v = w[src + j]
                zero |= v == 0
                out[o + j] = np.int32(v)
        elif mode == ADD:
            for j in range(nl):
                v = w[src + j]
                zero |= v == 0
                acc[o + j] += np.int32(v)
        else:
            for j in range(nl):
                zero |= w[src + j] == 0
        if zero:                                # rare: find which literal is zero
            j = 0
            while w[start + lits_at + j] != 0:
                j += 1
            return _result(_ZERO_LITERAL, lits_at + j, n, layer_id, rbits, lmax_log2, T, 0, j, 0)
        if start + lits_at + L - crc_at >= CRC_BATCH:
            crc = crc32_update(crc, w, crc_at, start + lits_at + L)
            crc_at = start + lits_at + L
        produced += z + L
        pos = lits_at + L
        prev_L = L
        T += 1
    if avail <= pos:
        return _result(_TRUNCATED, pos, n, layer_id, rbits, lmax_log2, T, 0, -1, avail)
    if avail <= pos + 1:
        return _result(_TRUNCATED, pos + 1, n, layer_id, rbits, lmax_log2, T, 0, -1, avail)
    t0 = np.int64(w[start + pos])
    t1 = np.int64(w[start + pos + 1])
    if t0 != T:
        return _result(_TOKEN_COUNT, pos, n, layer_id, rbits, lmax_log2, T, 0, t0, T)
    crc = np.int64(crc32_final(crc32_update(crc, w, crc_at, start + pos + 1)))
    if t1 != crc:
        return _result(_CRC, pos + 1, n, layer_id, rbits, lmax_log2, T, 0, t1, crc)
    return _result(OK, 0, n, layer_id, rbits, lmax_log2, T, pos + TRAILER_WORDS, 0, 0)


def _raise_for(res) -> None:
    """Turn a kernel result into the exception codec.zrle.decode_frame would raise."""
    status, word, n, _, rbits, lmax_log2, T, _, d1, d2 = (int(v) for v in res)
    if status == _TRUNCATED:
        if d1 < 0:
            raise E.TruncatedError(f"frame needs word {word} but only {d2} are present", word)
        raise E.TruncatedError(f"token {T} needs {d1} literals, {d2} present", word)
    if status == _BAD_MAGIC:
        raise E.BadMagicError(f"h0 = {d1:#010x}, expected {MAGIC:#010x}", word)
    if status == _BAD_VERSION:
        raise E.BadVersionError(f"version {d1 & 0xFF}, this decoder reads {VERSION}", word)
    if status == _BAD_LMAX:
        raise E.BadLmaxError(f"h1 = {d1:#010x}: LMAX_LOG2 {lmax_log2}, reserved bits "
                             f"{d1 >> 16:#x}", word)
    if status == _BAD_RANGE:
        raise E.BadRangeError(f"h4 = {rbits:#010x} is not a finite positive float32", word)
    if status == _SIZE:
        raise E.SizeMismatchError(f"frame holds {d1} elements, caller expects {d2}", word)
    if status == _LIT_TOO_LONG:
        raise E.LiteralRunTooLongError(f"token {T}: L = {d1} > LMAX = {d2}", word)
    if status == _EMPTY_TOKEN:
        raise E.EmptyTokenError(f"token {T} is (0, 0)", word)
    if status == _SPLIT_RUN:
        raise E.SplitLiteralRunError(f"token {T} has z = 0 after a run of {d1} < LMAX", word)
    if status == _OVERRUN:
        raise E.OverrunError(f"token {T}: z + L = {d1} > {d2} elements left", word)
    if status == _EARLY_ZERO:
        raise E.EarlyZeroLengthError(f"token {T}: L = 0 with {d1} elements left", word)
    if status == _ZERO_LITERAL:
        raise E.ZeroLiteralError(f"token {T}: literal {d1} is zero", word)
    if status == _TOKEN_COUNT:
        raise E.TokenCountMismatchError(f"trailer says {d1} tokens, frame has {d2}", word)
    if status == _CRC:
        raise E.CrcMismatchError(f"trailer CRC {d1:#010x}, computed {d2:#010x}", word)
    raise AssertionError(f"decoder kernel returned unknown status {status}")


def as_words(words) -> np.ndarray:
    # the reference's argument check, so both decoders raise the same DecodeArgumentError
    w, _, _ = zrle.check_decode_args(words)
    return np.ascontiguousarray(w)


def _expected(expected_n):
    """(has_expected, value) for the kernel, checked as the reference checks it."""
    _, n, _ = zrle.check_decode_args(_EMPTY_U32, expected_n)
    return (False, 0) if n is None else (True, n)


def _start(start) -> int:
    return zrle.check_decode_args(_EMPTY_U32, None, start)[2]


_EMPTY_U32 = np.zeros(0, dtype=np.uint32)


def _frame(res, values) -> Frame:
    _, _, _, layer_id, rbits, lmax_log2, T, n_words, _, _ = (int(v) for v in res)
    return Frame(layer_id, rbits, lmax_log2, values, T, n_words)


_EMPTY_I32 = np.zeros(0, dtype=np.int32)
_EMPTY_I64 = np.zeros(0, dtype=np.int64)


def decode_into(words, out: np.ndarray, expected_n: int | None = None, start: int = 0) -> Frame:
    """Decode the frame at words[start:] into out[:n] without allocating the values; the
    returned Frame's `values` is that view. On a FrameError `out` may be partly written.
    Raises ValueError (before touching `out`) if the frame's n exceeds out.size."""
    _check_out(out, np.int32, "out")
    w = as_words(words)
    has_exp, exp = _expected(expected_n)
    res = _decode_kernel(w, _start(start), has_exp, exp, out, _EMPTY_I64, WRITE, True)
    if res[0] == NEED_BUFFER:
        raise ValueError(f"frame holds {int(res[2])} elements, out has room for {out.size}")
    if res[0] != OK:
        _raise_for(res)
    return _frame(res, out[:int(res[2])])


def decode_add(words, acc: np.ndarray, expected_n: int | None = None, start: int = 0) -> Frame:
    """Decode the frame at words[start:] and add its values into acc[:n] (int64), touching
    only the literals: the cost follows the frame's length, not n. The returned Frame has
    values=None. On a FrameError acc may already hold some of the frame's values, so treat
    it as garbage. Raises ValueError (before touching acc) if n exceeds acc.size."""
    _check_out(acc, np.int64, "acc")
    w = as_words(words)
    has_exp, exp = _expected(expected_n)
    res = _decode_kernel(w, _start(start), has_exp, exp, _EMPTY_I32, acc, ADD, False)
    if res[0] == NEED_BUFFER:
        raise ValueError(f"frame holds {int(res[2])} elements, acc has room for {acc.size}")
    if res[0] != OK:
        _raise_for(res)
    return _frame(res, None)


VALIDATE_FIRST = 1 << 20    # decode_frame validates larger frames before it allocates their values


def decode_frame(words, expected_n: int | None = None, start: int = 0) -> Frame:
    """Decode the frame that begins at words[start]. Raises a FrameError subclass naming the
    first problem, in the order of docs/spec.md §3.5. Never reads past the end of `words`.
    The value array is allocated only once the header has been validated, and for a frame
    of more than VALIDATE_FIRST elements only once the whole frame has (a header alone
    cannot make it reserve more than that)."""
    w = as_words(words)
    has_exp, exp = _expected(expected_n)
    start = _start(start)
    res = _decode_kernel(w, start, has_exp, exp, _EMPTY_I32, _EMPTY_I64, WRITE, False)
    if res[0] == NEED_BUFFER and res[2] > VALIDATE_FIRST:
        res = _decode_kernel(w, start, has_exp, exp, _EMPTY_I32, _EMPTY_I64, VALIDATE, False)
        if res[0] == OK:
            res = _result(NEED_BUFFER, 0, res[2], 0, 0, 0, 0, 0, 0, 0)
    if res[0] == NEED_BUFFER:                   # valid so far: now allocate n values
        out = np.zeros(int(res[2]), dtype=np.int32)   # calloc: zero runs cost nothing
        res = _decode_kernel(w, start, has_exp, exp, out, _EMPTY_I64, WRITE, False)
    else:
        out = _EMPTY_I32.copy()
    if res[0] != OK:
        _raise_for(res)
    return _frame(res, out)


def decode_message(words, expected_sizes: list[int] | None = None) -> list[Frame]:
    """Decode concatenated frames (one per layer, in parameter order), as codec.zrle does."""
    return zrle.decode_message(as_words(words), expected_sizes, decode_frame=decode_frame)


@nb.njit(nogil=True, cache=True)
def _check_frames_kernel(w, starts, ends, expected_n, scratch, codes, words_at):
    empty64 = np.zeros(0, dtype=np.int64)
    for f in range(starts.size):
        lo, hi = starts[f], ends[f]
        view = w[lo:hi]                         # the decoder sees only this frame's words
        has_exp = expected_n[f] >= 0
        res = _decode_kernel(view, 0, has_exp, expected_n[f], scratch, empty64, WRITE, True)
        if res[0] == NEED_BUFFER:               # n larger than scratch: validate only
            res = _decode_kernel(view, 0, has_exp, expected_n[f], scratch, empty64, VALIDATE,
                                 False)
        codes[f] = res[0]
        words_at[f] = res[1] if res[0] != OK else res[7]


def check_frames(words, starts, ends, expected_n=None, scratch_elems: int = 1 << 16):
    """Validate the frames words[starts[i]:ends[i]] in one jitted loop.

    Returns (codes, word): codes[i] is 0 or the spec §3.5 error code; word[i] is the
    frame-relative word index of the error, or the frame length when it decoded. Each frame
    is decoded into a scratch buffer of `scratch_elems` values; a larger frame is validated
    without writing values. expected_n: None, or one size per frame (-1 for "any")."""
    w = as_words(words)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    if starts.shape != ends.shape or starts.ndim != 1:
        raise ValueError("starts and ends must be 1-D arrays of the same length")
    if ((starts < 0) | (ends < starts) | (ends > w.size)).any():
        raise ValueError("every frame must satisfy 0 <= start <= end <= len(words)")
    if expected_n is None:
        exp = np.full(starts.size, -1, dtype=np.int64)
    else:
        exp = np.ascontiguousarray(expected_n, dtype=np.int64)
        if exp.shape != starts.shape:
            raise ValueError("expected_n needs one entry per frame")
    codes = np.zeros(starts.size, dtype=np.int32)
    word = np.zeros(starts.size, dtype=np.int64)
    scratch = np.empty(int(scratch_elems), dtype=np.int32)
    _check_frames_kernel(w, starts, ends, exp, scratch, codes, word)
    return codes, word


# ---------------------------------------------------------------------------------------------
# A whole message (one frame per layer, layers back to back in one flat buffer) in one call
# ---------------------------------------------------------------------------------------------

def _layer_offsets(offsets, total: int) -> np.ndarray:
    """Element offsets of the layers: int64, 1-D, from 0 to `total`, never decreasing."""
    off = np.asarray(offsets)
    if off.ndim != 1 or off.size < 1 or not np.issubdtype(off.dtype, np.integer):
        raise ValueError("offsets must be a 1-D integer array: 0, end of layer 0, ..., total")
    off = np.ascontiguousarray(off, dtype=np.int64)
    if off[0] != 0 or off[-1] != total or (off.size > 1 and (np.diff(off) < 0).any()):
        raise ValueError(f"offsets must rise from 0 to {total} (the payload's size)")
    if off.size > 1 and int(np.diff(off).max()) >= 2**32:
        raise ValueError("a layer does not fit the 32-bit n field")
    return off


def message_words(offsets) -> int:
    """Words an encoded message of these layers can take at most."""
    sizes = np.diff(np.asarray(offsets, dtype=np.int64))
    return int(sizes.size * (HEADER_WORDS + TRAILER_WORDS) + 3 * sizes.sum())


@nb.njit(nogil=True, cache=True)
def _encode_message_kernel(flat, offsets, layer_ids, out, rbits, lmax_log2):
    lmax = np.int64(1) << lmax_log2
    at = 0
    for i in range(offsets.size - 1):
        lo = offsets[i]
        hi = offsets[i + 1]
        state = enc_begin(out, at, hi - lo, layer_ids[i], rbits, lmax_log2)
        state = enc_feed(flat, lo, hi, out, state, lmax)
        at += enc_end(out, at, state)
    return at


def encode_message_into(payload, offsets, out: np.ndarray, layer_ids=None, R: float = 10.0,
                        lmax_log2: int = DEFAULT_LMAX_LOG2) -> int:
    """Encode every layer of a flat int32 payload (layer i = payload[offsets[i]:offsets[i+1]])
    as one frame each, back to back at out[0:], in one jitted call; returns the words
    written. The same words as encode_frame layer by layer. `out` needs message_words(offsets)
    words; layer_ids default to 0, 1, 2, ..."""
    flat, _, rbits, lmax_log2 = _check_encode_args(payload, 0, R, lmax_log2)
    off = _layer_offsets(offsets, flat.size)
    count = off.size - 1
    if layer_ids is None:
        ids = np.arange(count, dtype=np.int64)
    else:
        ids = np.asarray(layer_ids)
        if ids.shape != (count,) or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"layer_ids must be {count} integers, one per layer")
        if count and (int(ids.min()) < 0 or int(ids.max()) >= 2**32):
            raise ValueError("layer id must fit 32 bits")
        ids = np.ascontiguousarray(ids, dtype=np.int64)
    _check_out(out, np.uint32, "out")
    need = message_words(off)
    if out.size < need:
        raise ValueError(f"out has {out.size} words, a message of these layers may need {need}")
    return int(_encode_message_kernel(flat, off, ids, out, rbits, lmax_log2))


_MISSING_FRAMES, _EXTRA_FRAMES = -2, -3


@nb.njit(nogil=True, cache=True)
def _decode_message_kernel(w, offsets, out, starts):
    """Frame i into out[offsets[i]:offsets[i + 1]] (its size expected), back to back.
    Returns (frame index, word it starts at, decoder result)."""
    empty64 = np.zeros(0, dtype=np.int64)
    at = 0
    count = offsets.size - 1
    for i in range(count):
        if at >= w.size:
            return i, at, _result(_MISSING_FRAMES, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        lo = offsets[i]
        hi = offsets[i + 1]
        res = _decode_kernel(w, at, True, hi - lo, out[lo:hi], empty64, WRITE, True)
        if res[0] != OK:
            return i, at, res
        starts[i] = at
        at += res[7]
    if at < w.size:
        return count, at, _result(_EXTRA_FRAMES, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    starts[count] = at
    return count, at, _result(OK, 0, 0, 0, 0, 0, 0, 0, 0, 0)


def decode_message_into(words, out: np.ndarray, offsets) -> np.ndarray:
    """Decode a message whose layer i must hold offsets[i+1] - offsets[i] elements into
    out[offsets[i]:offsets[i+1]] (int32, flat), in one jitted call. Returns the frames' start
    words (and the message length last). Raises what decode_message(words, sizes) raises,
    for the same first problem; on an error `out` may be partly written."""
    _check_out(out, np.int32, "out")
    w = as_words(words)
    off = _layer_offsets(offsets, out.size)
    starts = np.zeros(off.size, dtype=np.int64)
    count = off.size - 1
    i, at, res = _decode_message_kernel(w, off, out, starts)
    status = int(res[0])
    if status == _MISSING_FRAMES:
        raise E.SizeMismatchError(f"message has {i} frames, expected {count}")
    if status == _EXTRA_FRAMES:
        raise E.SizeMismatchError(f"message has more than {count} frames", int(at))
    if status != OK:
        _raise_for(res)
    return starts
