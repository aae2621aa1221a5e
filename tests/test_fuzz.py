"""Fuzzing the decoders with mutated and truncated frames (docs/spec.md §3.5).

Mutants are made in one jitted loop and validated by `codec.zrle_numba.check_frames` in
another, each frame a bounded view of one big array: the numba decoder must return a known
code for every one (no crash, no stray status), and on a sample the numpy reference must
report the same class and word index, or decode the same values.
"""
from __future__ import annotations

import numba as nb
import numpy as np
import pytest

from gradblock.codec import errors as E
from gradblock.codec import zrle, zrle_numba
from gradblock.codec.crc32_numba import CRC_INIT, crc32_final, crc32_update

VALID_CODES = {0} | {e.code for e in E.ALL_ERRORS}
HUGE_N = 1 << 22          # the reference allocates n values; skip cross-checks beyond this


def base_frames() -> list[tuple[np.ndarray, int]]:
    """(frame, n) pairs covering LMAX 2..2**24, empty/all-zero/dense/sparse payloads."""
    rng = np.random.default_rng(99)
    out = [(zrle.encode_frame(np.array([0, 0, 5, -1, 0], np.int32), 7), 5),
           (zrle.encode_frame(np.zeros(0, np.int32)), 0),
           (zrle.encode_frame(np.zeros(17, np.int32)), 17)]
    for i in range(45):
        n = int(rng.integers(1, 120))
        density = rng.choice([0.05, 0.3, 0.7, 1.0])
        p = rng.integers(-5, 6, n).astype(np.int32) * (rng.random(n) < density)
        p[rng.random(n) < 0.1] = rng.choice([-2**31, 2**31 - 1, 1, -1])
        lmax_log2 = int(rng.choice([1, 1, 2, 2, 3, 4, 8, 24]))
        out.append((zrle.encode_frame(p.astype(np.int32), i, 10.0, lmax_log2), n))
    return out


@nb.njit(cache=True)
def _mutate(bases, starts, ends, ns, n_cases, seed, words, case_starts, case_ends, expected):
    """Write n_cases mutants of the base frames into `words`; return the words used.

    Each mutant gets 1-3 edits (bit flip, word replacement, insertion, deletion, truncation,
    block duplication), then half of them get their trailer CRC recomputed over everything
    but the last word, so the structural checks behind the CRC are reached too."""
    np.random.seed(seed)
    specials = np.array([0, 1, 2, 3, 4, 5, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0x5A524C45,
                         0x00000801, 0x41200000, 0x7F800000], dtype=np.uint32)
    buf = np.empty(4096, dtype=np.uint32)
    at = 0
    for c in range(n_cases):
        b = np.random.randint(0, starts.size)
        L = ends[b] - starts[b]
        buf[:L] = bases[starts[b]:ends[b]]
        for _ in range(np.random.randint(1, 4)):
            op = np.random.randint(0, 6)
            if op == 0 and L > 0:                               # flip one bit
                buf[np.random.randint(0, L)] ^= np.uint32(1) << np.random.randint(0, 32)
            elif op == 1 and L > 0:                             # replace one word
                i = np.random.randint(0, L)
                r = np.random.randint(0, 4)
                if r == 0:
                    buf[i] = np.uint32(np.random.randint(0, 2**32))
                elif r == 1:
                    buf[i] = specials[np.random.randint(0, specials.size)]
                else:
                    buf[i] = np.uint32(ns[b] + np.random.randint(-2, 3)) if ns[b] > 2 else 3
            elif op == 2 and L < 4000:                          # insert a word
                i = np.random.randint(0, L + 1)
                buf[i + 1:L + 1] = buf[i:L].copy()
                buf[i] = specials[np.random.randint(0, specials.size)]
                L += 1
            elif op == 3 and L > 0:                             # delete a word
                i = np.random.randint(0, L)
                buf[i:L - 1] = buf[i + 1:L].copy()
                L -= 1
            elif op == 4 and L > 0:                             # truncate
                L = np.random.randint(0, L)
            elif op == 5 and 2 < L < 3000:                      # duplicate a stretch
                i = np.random.randint(0, L - 1)
                j = min(L, i + 1 + np.random.randint(0, 6))
                seg = buf[i:j].copy()
                buf[j + (j - i):L + (j - i)] = buf[j:L].copy()
                buf[j:j + (j - i)] = seg
                L += j - i
        if L > 0 and np.random.randint(0, 2) == 0:
            buf[L - 1] = crc32_final(crc32_update(np.uint32(CRC_INIT), buf, 0, L - 1))
        words[at:at + L] = buf[:L]
        case_starts[c] = at
        case_ends[c] = at + L
        expected[c] = ns[b] if np.random.randint(0, 2) == 0 else -1
        at += L
    return at


def make_mutants(n_cases: int, seed: int):
    bases = base_frames()
    flat = np.concatenate([f for f, _ in bases])
    ends = np.cumsum([f.size for f, _ in bases]).astype(np.int64)
    starts = ends - [f.size for f, _ in bases]
    ns = np.array([n for _, n in bases], dtype=np.int64)
    longest = int(max(f.size for f, _ in bases))
    words = np.empty(n_cases * (longest + 20), dtype=np.uint32)
    cs = np.empty(n_cases, np.int64)
    ce = np.empty(n_cases, np.int64)
    exp = np.empty(n_cases, np.int64)
    used = _mutate(flat, starts, ends, ns, n_cases, seed, words, cs, ce, exp)
    return words[:used], cs, ce, exp


def reference_outcome(words, expected_n):
    try:
        f = zrle.decode_frame(words, expected_n)
    except E.FrameError as e:
        return (e.code, e.word)
    return (0, f.n_words, f.values.tolist())


def numba_outcome(words, expected_n):
    try:
        f = zrle_numba.decode_frame(words, expected_n)
    except E.FrameError as e:
        return (e.code, e.word)
    return (0, f.n_words, f.values.tolist())


def add_outcome(words, expected_n):
    acc = np.zeros(header_n(words), dtype=np.int64)
    try:
        f = zrle_numba.decode_add(words, acc, expected_n)
    except E.FrameError as e:
        return (e.code, e.word)
    return (0, f.n_words, acc.tolist())


def header_n(frame: np.ndarray) -> int:
    return int(frame[3]) if frame.size > 3 else 0


def fuzz(n_cases: int, seed: int, n_cross: int):
    words, starts, ends, exp = make_mutants(n_cases, seed)
    codes, at = zrle_numba.check_frames(words, starts, ends, exp)
    lengths = ends - starts
    assert set(np.unique(codes).tolist()) <= VALID_CODES
    assert np.all(at >= 0) and np.all(at <= lengths)
    ok = codes == 0
    # a frame that decodes is at least header + trailer long and never longer than its input
    assert np.all(at[ok] >= 7)

    # the numpy reference agrees on a sample (the same class and word, or the same values)
    rng = np.random.default_rng(seed)
    sample = rng.choice(n_cases, size=min(n_cross, n_cases), replace=False)
    compared = 0
    for c in sample:
        frame = words[starts[c]:ends[c]]
        if header_n(frame) > HUGE_N:
            continue
        e = None if exp[c] < 0 else int(exp[c])
        ref = reference_outcome(frame, e)
        assert ref == numba_outcome(frame, e), (int(c), frame.tolist(), e)
        if header_n(frame) <= 4096:
            assert ref == add_outcome(frame, e), (int(c), frame.tolist(), e)
        assert ref[:2] == (int(codes[c]), int(at[c])), int(c)
        compared += 1
    assert compared >= 0.8 * len(sample)
    return codes


def test_fuzz_quick():
    codes = fuzz(5000, seed=1, n_cross=1500)
    seen = set(np.unique(codes).tolist())
    # the mutants reach deep into the frame: most classes, including a valid decode, occur
    assert {0, 1, 5, 6, 9, 10, 11, 12, 13, 14} <= seen, sorted(seen)


@pytest.mark.slow
def test_fuzz_many():
    seen = set()
    for seed in range(2, 10):                       # 8 x 50k mutants in the jitted loops
        codes = fuzz(50_000, seed=seed, n_cross=1000)
        seen |= set(np.unique(codes).tolist())
    assert VALID_CODES <= seen, sorted(VALID_CODES - seen)


def test_every_single_bit_flip_of_small_frames():
    small = [(f, n) for f, n in base_frames() if f.size <= 16]
    assert len(small) >= 4
    for frame, n in small[:5]:
        for i in range(frame.size):
            for bit in range(32):
                bad = frame.copy()
                bad[i] ^= np.uint32(1 << bit)
                for e in (None, n):
                    assert reference_outcome(bad, e) == numba_outcome(bad, e), (i, bit, e)


def test_every_truncation_of_every_base_frame():
    for frame, n in base_frames():
        for length in range(frame.size):
            assert reference_outcome(frame[:length], n) == numba_outcome(frame[:length], n) \
                == (E.TruncatedError.code, length)


def test_decode_into_never_writes_outside_its_view():
    words, starts, ends, exp = make_mutants(3000, seed=11)
    guard = 0x5EED
    arena = np.full(200 + 64, guard, dtype=np.int32)
    view = arena[32:232]                            # 200 values with guards on both sides
    for c in range(3000):
        frame = words[starts[c]:ends[c]]
        try:
            f = zrle_numba.decode_into(frame, view, None if exp[c] < 0 else int(exp[c]))
            assert f.values.size <= view.size
        except (E.FrameError, ValueError):
            pass
        assert np.all(arena[:32] == guard) and np.all(arena[232:] == guard), c
