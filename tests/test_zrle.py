"""ZRLE v1 frames (docs/spec.md §3): both encoders, both decoders, every error class."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradblock.codec import crc32_numba, zrle, zrle_numba
from gradblock.codec import errors as E

ENCODERS = {"numpy": zrle.encode_frame, "numba": zrle_numba.encode_frame}
DECODERS = {"numpy": zrle.decode_frame, "numba": zrle_numba.decode_frame}
MESSAGE_DECODERS = {"numpy": zrle.decode_message, "numba": zrle_numba.decode_message}
encoders = pytest.mark.parametrize("encode", list(ENCODERS.values()), ids=list(ENCODERS))
decoders = pytest.mark.parametrize("decode", list(DECODERS.values()), ids=list(DECODERS))

R10 = 0x41200000
I32_MIN, I32_MAX = -2**31, 2**31 - 1


# ------------------------------------------------------------------------------ helpers

def make_frame(tokens, n, lmax_log2=2, layer_id=3, rbits=R10, h0=zrle.MAGIC, h1=None,
               t0=None, crc_xor=0) -> np.ndarray:
    """A frame from raw tokens (z, [literals]) with a correct CRC unless crc_xor."""
    h1 = (1 | lmax_log2 << 8) if h1 is None else h1
    words = [h0, h1, layer_id, n, rbits]
    for z, lits in tokens:
        words += [z, len(lits)] + [v & 0xFFFFFFFF for v in lits]
    words.append(len(tokens) if t0 is None else t0)
    w = np.array(words, dtype=np.uint32)
    return np.append(w, np.uint32(zrle.crc32_words(w) ^ crc_xor))


def parse_tokens(frame: np.ndarray):
    n, pos, toks = int(frame[3]), 5, []
    produced = 0
    while produced < n:
        z, L = int(frame[pos]), int(frame[pos + 1])
        toks.append((z, frame[pos + 2:pos + 2 + L].view(np.int32).tolist()))
        produced += z + L
        pos += 2 + L
    assert int(frame[pos]) == len(toks) and pos + 2 == frame.size
    return toks


def assert_canonical(frame: np.ndarray, payload: np.ndarray, lmax: int):
    toks = parse_tokens(frame)
    flat = payload.reshape(-1)
    at = 0
    for i, (z, lits) in enumerate(toks):
        L = len(lits)
        assert 0 <= L <= lmax and (z, L) != (0, 0)
        assert np.all(flat[at:at + z] == 0)
        assert flat[at:at + z + L].tolist() == [0] * z + lits
        assert 0 not in lits
        # z is the whole zero run: the token does not start inside one
        if z and at:
            assert flat[at - 1] != 0
        # L = min(LMAX, nonzero run): the run continues only when the token is full
        if L < lmax and at + z + L < flat.size:
            assert flat[at + z + L] == 0
        if z == 0 and i:
            assert len(toks[i - 1][1]) == lmax
        if i < len(toks) - 1:
            assert L >= 1
        at += z + L
    assert at == flat.size


def outcome(decode, words, expected_n=None, start=0):
    """('ok', values, n_words, n_tokens) or (error class, word index)."""
    try:
        f = decode(words, expected_n, start)
    except E.FrameError as e:
        return (type(e), e.word)
    return ("ok", f.values.tolist(), f.n_words, f.n_tokens, f.layer_id, f.range_bits, f.lmax_log2)


def buffered_outcome(words, expected_n, start, add):
    """decode_into (add=False) or decode_add (add=True) into a roomy, dirty buffer."""
    w = np.asarray(words, dtype=np.uint32)
    room = int(w[start + 3]) if w.size > start + 3 else 0
    if room > 1 << 16:
        return None                              # covered by the decoders that allocate
    base = np.arange(room, dtype=np.int64) - 7
    try:
        if add:
            acc = base.copy()
            f = zrle_numba.decode_add(w, acc, expected_n, start)
            values = (acc - base).tolist()
        else:
            out = np.full(room, -99, dtype=np.int32)
            f = zrle_numba.decode_into(w, out, expected_n, start)
            values = f.values.tolist()
    except E.FrameError as e:
        return (type(e), e.word)
    return ("ok", values, f.n_words, f.n_tokens, f.layer_id, f.range_bits, f.lmax_log2)


def both(words, expected_n=None, start=0):
    """The outcome of both decoders (and of the numba buffer forms), asserted equal."""
    a = outcome(zrle.decode_frame, words, expected_n, start)
    b = outcome(zrle_numba.decode_frame, words, expected_n, start)
    assert a == b
    for add in (False, True):
        c = buffered_outcome(words, expected_n, start, add)
        assert c is None or c == a, ("decode_add" if add else "decode_into", c, a)
    return a


# ------------------------------------------------------------------------------ CRC

@given(words=st.lists(st.integers(0, 2**32 - 1), max_size=70))
def test_crc_matches_zlib(words):
    w = np.array(words, dtype=np.uint32)
    assert crc32_numba.crc32_words(w) == zlib.crc32(w.tobytes()) == zrle.crc32_words(w)


def test_crc_incremental(rng):
    w = rng.integers(0, 2**32, 1000, dtype=np.uint32)
    state = np.uint32(crc32_numba.CRC_INIT)
    for lo, hi in [(0, 3), (3, 4), (4, 517), (517, 518), (518, 1000)]:
        state = crc32_numba.crc32_update(state, w, lo, hi)
    assert int(crc32_numba.crc32_final(state)) == zlib.crc32(w.tobytes())


# ------------------------------------------------------------------------------ spec example

@encoders
def test_spec_frame_word_for_word(encode, spec_frame):
    payload, frame = spec_frame
    got = encode(payload, layer_id=7, R=10.0, lmax_log2=8)
    assert got.dtype == np.uint32
    assert [f"{w:08X}" for w in got] == [f"{w:08X}" for w in frame]
    assert zlib.crc32(frame[:-1].astype("<u4").tobytes()) == 0x455EB0ED


@decoders
def test_spec_frame_decodes(decode, spec_frame):
    payload, frame = spec_frame
    f = decode(frame, 5)
    assert f.values.tolist() == payload.tolist() and f.values.dtype == np.int32
    assert (f.layer_id, f.range, f.lmax_log2, f.n_tokens, f.n_words) == (7, 10.0, 8, 2, 13)


# ------------------------------------------------------------------------------ round trips

@st.composite
def payloads(draw):
    """Payloads made of runs, so long zero and nonzero runs (and LMAX boundaries) occur."""
    runs = draw(st.lists(st.tuples(st.booleans(), st.integers(1, 40)), max_size=12))
    values = st.one_of(st.integers(I32_MIN, I32_MAX).filter(bool),
                       st.sampled_from([1, -1, I32_MIN, I32_MAX, -I32_MAX]))
    out = []
    for nonzero, length in runs:
        out += draw(st.lists(values, min_size=length, max_size=length)) if nonzero else [0] * length
    return np.array(out, dtype=np.int32)


@given(payload=payloads(), lmax_log2=st.one_of(st.integers(1, 6), st.integers(1, 24)),
       layer_id=st.integers(0, 2**32 - 1))
def test_round_trip_and_canonical(payload, lmax_log2, layer_id):
    a = zrle.encode_frame(payload, layer_id, 10.0, lmax_log2)
    b = zrle_numba.encode_frame(payload, layer_id, 10.0, lmax_log2)
    assert np.array_equal(a, b)
    assert_canonical(a, payload, 1 << lmax_log2)
    assert a.size <= zrle.max_frame_words(payload.size)
    result = both(a, payload.size)
    assert result[0] == "ok" and result[1] == payload.tolist() and result[2] == a.size


@encoders
@pytest.mark.parametrize("lmax_log2", [1, 2, 3])
def test_runs_of_lmax_and_lmax_plus_one(encode, lmax_log2):
    lmax = 1 << lmax_log2
    run = list(range(1, lmax + 1))
    frame = encode(np.array(run, dtype=np.int32), lmax_log2=lmax_log2)
    assert parse_tokens(frame) == [(0, run)]
    run1 = list(range(1, lmax + 2))
    frame = encode(np.array([0, 0] + run1 + [0], dtype=np.int32), lmax_log2=lmax_log2)
    assert parse_tokens(frame) == [(2, run1[:lmax]), (0, run1[lmax:]), (1, [])]
    two = list(range(1, 2 * lmax + 1))                 # exactly two full tokens
    frame = encode(np.array(two + [0, 9], dtype=np.int32), lmax_log2=lmax_log2)
    assert parse_tokens(frame) == [(0, two[:lmax]), (0, two[lmax:]), (1, [9])]


@encoders
def test_all_zero_empty_and_single(encode):
    f = encode(np.zeros(1000, dtype=np.int32))
    assert f.size == 9 and parse_tokens(f) == [(1000, [])]
    f = encode(np.zeros(0, dtype=np.int32))
    assert f.size == 7 and f[5] == 0 and int(f[6]) == zlib.crc32(f[:6].tobytes())
    assert parse_tokens(encode(np.array([-7], dtype=np.int32))) == [(0, [-7])]
    assert parse_tokens(encode(np.array([0], dtype=np.int32))) == [(1, [])]
    f = encode(np.zeros((3, 0, 2), dtype=np.int32))
    assert f[3] == 0


@encoders
def test_worst_case_length(encode):
    alternating = np.array([1, 0] * 50, dtype=np.int32)   # 50 (z, 1) tokens + final (1, 0)
    f = encode(alternating)
    assert f.size == 5 + 3 * 50 + 2 + 2 <= zrle.max_frame_words(100)
    # LMAX = 2, all nonzero: tokens of 2, 2, 2, 1 literals
    assert encode(np.ones(7, np.int32), lmax_log2=1).size == 5 + 4 * 2 + 7 + 2


def test_decoders_accept_lmax_log2_24_and_large_runs():
    payload = np.zeros(300_000, dtype=np.int32)
    payload[5:200_005] = 3
    f = zrle_numba.encode_frame(payload, lmax_log2=24)
    assert np.array_equal(f, zrle.encode_frame(payload, lmax_log2=24))
    assert parse_tokens(f)[0][0] == 5 and len(parse_tokens(f)) == 2
    assert np.array_equal(zrle_numba.decode_frame(f).values, payload)


# ------------------------------------------------------------------------------ encoder input

@encoders
@pytest.mark.parametrize("kwargs, exc", [
    (dict(payload=np.zeros(3, np.int64)), TypeError),
    (dict(payload=np.zeros(3, np.float32)), TypeError),
    (dict(lmax_log2=0), ValueError), (dict(lmax_log2=25), ValueError),
    (dict(layer_id=-1), ValueError), (dict(layer_id=2**32), ValueError),
    (dict(R=0.0), ValueError), (dict(R=-1.0), ValueError), (dict(R=float("inf")), ValueError),
    (dict(R=float("nan")), ValueError),
])
def test_encoder_rejects_bad_input(encode, kwargs, exc):
    args = dict(payload=np.zeros(3, np.int32), layer_id=0, R=10.0, lmax_log2=8) | kwargs
    with pytest.raises(exc):
        encode(**args)


def test_encode_into_offsets_and_bounds(rng):
    p = rng.integers(-3, 3, 50).astype(np.int32)
    ref = zrle.encode_frame(p, 4)
    out = np.full(zrle.max_frame_words(50) + 10, 0xDEADBEEF, dtype=np.uint32)
    used = zrle_numba.encode_into(p, out, 10, 4)
    assert used == ref.size and np.array_equal(out[10:10 + used], ref)
    assert np.all(out[:10] == 0xDEADBEEF)
    assert np.all(out[10 + used:] == 0xDEADBEEF)      # nothing written past the frame
    with pytest.raises(ValueError, match="may need"):
        zrle_numba.encode_into(p, out, 11, 4)
    with pytest.raises(ValueError):
        zrle_numba.encode_into(p, out, -1, 4)
    with pytest.raises(TypeError):
        zrle_numba.encode_into(p, out.astype(np.int32), 0, 4)
    with pytest.raises(TypeError):
        zrle_numba.encode_into(p, np.zeros(400, np.uint32)[::2], 0, 4)


def test_decode_add_accumulates(rng):
    layers = [rng.integers(-3, 3, 60).astype(np.int32) * (rng.random(60) < 0.3) for _ in range(3)]
    acc = np.full(60, 2**40, dtype=np.int64)
    for p in layers:
        f = zrle_numba.decode_add(zrle.encode_frame(p.astype(np.int32)), acc, 60)
        assert f.values is None and f.n_words > 0
    assert np.array_equal(acc, 2**40 + np.sum(layers, axis=0))
    with pytest.raises(ValueError, match="room"):
        zrle_numba.decode_add(zrle.encode_frame(layers[0].astype(np.int32)), acc[:59])
    with pytest.raises(TypeError):
        zrle_numba.decode_add(zrle.encode_frame(layers[0].astype(np.int32)), acc.astype(np.int32))


def test_decode_into_writes_only_n_values(rng):
    p = rng.integers(-3, 3, 40).astype(np.int32)
    frame = zrle.encode_frame(p, 1)
    out = np.full(50, 12345, dtype=np.int32)
    f = zrle_numba.decode_into(frame, out, 40)
    assert np.array_equal(f.values, p) and np.shares_memory(f.values, out)
    assert np.all(out[40:] == 12345)
    with pytest.raises(ValueError, match="room"):
        zrle_numba.decode_into(frame, np.zeros(39, np.int32))
    with pytest.raises(E.SizeMismatchError):
        zrle_numba.decode_into(frame, np.zeros(39, np.int32), 39)
    with pytest.raises(TypeError):
        zrle_numba.decode_into(frame, np.zeros(40, np.int64))


# ------------------------------------------------------------------------------ every error

def header_error_cases():
    ok = [(1, [5, -1])]
    yield "magic", make_frame(ok, 3, h0=0x5A524C46), None, E.BadMagicError, 0
    yield "magic-zero", make_frame(ok, 3, h0=0), None, E.BadMagicError, 0
    yield "version-2", make_frame(ok, 3, h1=0x202), None, E.BadVersionError, 1
    yield "version-0", make_frame(ok, 3, h1=0x200), None, E.BadVersionError, 1
    yield "lmax-25", make_frame(ok, 3, h1=0x1901), None, E.BadLmaxError, 1
    yield "lmax-0", make_frame(ok, 3, h1=0x0001), None, E.BadLmaxError, 1
    yield "lmax-reserved", make_frame(ok, 3, h1=0x10201), None, E.BadLmaxError, 1
    yield "lmax-reserved-top", make_frame(ok, 3, h1=0x80000201), None, E.BadLmaxError, 1
    for bits in (0x80000000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000000):
        yield f"range-{bits:08x}", make_frame(ok, 3, rbits=bits), None, E.BadRangeError, 4
    yield "size", make_frame(ok, 3), 4, E.SizeMismatchError, 3
    yield "size-zero", make_frame(ok, 3), 0, E.SizeMismatchError, 3
    # precedence inside the header
    yield "magic-before-version", make_frame(ok, 3, h0=1, h1=0x202), None, E.BadMagicError, 0
    yield "version-before-lmax", make_frame(ok, 3, h1=0x1902), None, E.BadVersionError, 1
    yield "lmax-before-range", make_frame(ok, 3, h1=0x1901, rbits=0), None, E.BadLmaxError, 1
    yield "range-before-size", make_frame(ok, 3, rbits=0), 4, E.BadRangeError, 4


def token_error_cases():
    # LMAX = 4 (lmax_log2 = 2); the first token starts at word 5
    yield "L>LMAX", make_frame([(0, [1, 2, 3, 4, 5])], 5), None, E.LiteralRunTooLongError, 6
    yield "empty", make_frame([(0, [])], 3), None, E.EmptyTokenError, 5
    yield "split", make_frame([(0, [1]), (0, [2]), (1, [])], 3), None, E.SplitLiteralRunError, 8
    yield "overrun", make_frame([(2, [1, 2])], 3), None, E.OverrunError, 5
    yield "overrun-zeros", make_frame([(4, [])], 3), None, E.OverrunError, 5
    yield "early-zero", make_frame([(2, []), (0, [1])], 3), None, E.EarlyZeroLengthError, 6
    yield "zero-literal", make_frame([(0, [1, 0, 2])], 3), None, E.ZeroLiteralError, 8
    yield "zero-literal-first", make_frame([(1, [0])], 2), None, E.ZeroLiteralError, 7
    yield "token-count", make_frame([(1, [5])], 2, t0=2), None, E.TokenCountMismatchError, 8
    yield "crc", make_frame([(1, [5])], 2, crc_xor=1), None, E.CrcMismatchError, 9
    # precedence: the table order of spec §3.5 within one token
    yield "L>LMAX-before-overrun", make_frame([(0, [1] * 5)], 3), None, E.LiteralRunTooLongError, 6
    yield "empty-before-split", make_frame([(0, [1]), (0, [])], 3), None, E.EmptyTokenError, 8
    yield "split-before-overrun", make_frame([(0, [1]), (0, [2, 3, 4])], 3), None, \
        E.SplitLiteralRunError, 8
    yield "overrun-before-early", make_frame([(9, [])], 3), None, E.OverrunError, 5
    yield "early-before-count", make_frame([(1, []), (2, [])], 3, t0=7), None, \
        E.EarlyZeroLengthError, 6
    yield "overrun-before-zero-literal", make_frame([(0, [0, 0, 0, 0])], 3), None, E.OverrunError, 5
    yield "count-before-crc", make_frame([(1, [5])], 2, t0=0, crc_xor=1), None, \
        E.TokenCountMismatchError, 8
    # a token after a full one may have z = 0
    yield "split-after-full-ok", make_frame([(0, [1, 2, 3, 4]), (0, [5])], 5), None, "ok", None


ERROR_CASES = list(header_error_cases()) + list(token_error_cases())


@pytest.mark.parametrize("name, words, expected_n, exc, word", ERROR_CASES,
                         ids=[c[0] for c in ERROR_CASES])
def test_error_class_and_word_on_both_decoders(name, words, expected_n, exc, word):
    result = both(words, expected_n)
    assert result[0] == exc
    if exc != "ok":
        assert result[1] == word


def error_text(decode, words, expected_n=None):
    try:
        decode(words, expected_n)
    except E.FrameError as e:
        return str(e)
    return "ok"


@pytest.mark.parametrize("name, words, expected_n, exc, word", ERROR_CASES,
                         ids=[c[0] for c in ERROR_CASES])
def test_error_messages_are_identical(name, words, expected_n, exc, word):
    assert error_text(zrle.decode_frame, words, expected_n) == \
        error_text(zrle_numba.decode_frame, words, expected_n)


def test_every_error_class_is_provoked():
    seen = {c[3] for c in ERROR_CASES} | {E.TruncatedError}   # truncation: tested below
    assert set(E.ALL_ERRORS) <= seen


@decoders
def test_error_carries_code_and_readable_message(decode):
    with pytest.raises(E.ZeroLiteralError) as e:
        decode(make_frame([(0, [1, 0, 2])], 3))
    assert e.value.code == 6 and e.value.word == 8
    assert "ZERO_LITERAL at word 8" in str(e.value) and "literal 1" in str(e.value)


@pytest.mark.parametrize("tokens, n", [([(1, [5, -1]), (2, [])], 5), ([], 0),
                                       ([(0, [1, 2, 3, 4]), (0, [5]), (3, [])], 8)])
def test_truncation_at_every_length(tokens, n):
    frame = make_frame(tokens, n)
    assert both(frame, n)[0] == "ok"
    for length in range(frame.size):
        assert both(frame[:length], n) == (E.TruncatedError, length), length
        assert error_text(zrle.decode_frame, frame[:length], n) == \
            error_text(zrle_numba.decode_frame, frame[:length], n)


def test_truncation_with_start_offset():
    frame = make_frame([(1, [5, -1])], 3)
    words = np.concatenate([np.arange(7, dtype=np.uint32), frame])
    assert both(words, 3, start=7)[0] == "ok"
    for cut in range(frame.size):
        assert both(words[:7 + cut], 3, start=7) == (E.TruncatedError, cut)
    assert both(words, 3, start=words.size + 5) == (E.TruncatedError, 0)


def test_truncated_literals_reported_before_zero_literal():
    """The reference checks that all of a token's literals are present before it looks at
    them, so a truncated token with a zero literal reports TRUNCATED (at the input's end)."""
    frame = make_frame([(0, [1, 0, 2, 3])], 4)
    assert both(frame[:9], 4) == (E.TruncatedError, 9)


def test_start_must_not_be_negative():
    with pytest.raises(ValueError, match="start"):
        zrle_numba.decode_frame(make_frame([(1, [5])], 2), start=-1)
    with pytest.raises(ValueError, match="start"):
        zrle.decode_frame(make_frame([(1, [5])], 2), start=-1)


def test_trailing_words_after_a_frame_are_ignored():
    frame = make_frame([(1, [5])], 2)
    r = both(np.concatenate([frame, np.array([1, 2, 3], np.uint32)]), 2)
    assert r[0] == "ok" and r[2] == frame.size


def test_huge_n_with_short_frame_is_an_error_not_an_allocation():
    frame = make_frame([(3, [])], 0xFFFFFFFF)
    assert both(frame[:6]) == (E.TruncatedError, 6)
    assert both(frame, 0xFFFFFFFF) == (E.EarlyZeroLengthError, 6)


# ------------------------------------------------------------------------------ messages

@pytest.mark.parametrize("impl", list(MESSAGE_DECODERS), ids=list(MESSAGE_DECODERS))
def test_message_decode(impl, rng):
    decode_message = MESSAGE_DECODERS[impl]
    layers = [rng.integers(-2, 3, n).astype(np.int32) for n in (10, 0, 33, 1)]
    parts = [zrle.encode_frame(p, i) for i, p in enumerate(layers)]
    msg = np.concatenate(parts)
    frames = decode_message(msg, [10, 0, 33, 1])
    assert [f.values.tolist() for f in frames] == [p.tolist() for p in layers]
    assert [f.layer_id for f in frames] == [0, 1, 2, 3]
    assert len(decode_message(msg)) == 4
    assert decode_message(np.zeros(0, np.uint32), []) == []

    with pytest.raises(E.SizeMismatchError) as e:
        decode_message(msg, [10, 0, 33])                 # one frame too many
    assert e.value.word == msg.size - parts[-1].size     # where the extra frame starts
    with pytest.raises(E.SizeMismatchError) as e:
        decode_message(msg, [10, 0, 33, 1, 4])           # one frame missing
    assert e.value.word is None
    with pytest.raises(E.SizeMismatchError) as e:
        decode_message(msg, [10, 0, 34, 1])
    assert e.value.word == 3
    with pytest.raises(E.TruncatedError):
        decode_message(msg[:-1], [10, 0, 33, 1])
    bad = msg.copy()
    bad[-1] ^= 1
    with pytest.raises(E.CrcMismatchError):
        decode_message(bad)


# ------------------------------------------------------------------------------ batch check

def test_check_frames_batch():
    good = make_frame([(1, [5, -1])], 3)
    frames = [good, good[:5], make_frame([(0, [])], 3), make_frame([(1, [5])], 2, crc_xor=4),
              make_frame([(1, [5])], 2)]
    words = np.concatenate(frames)
    ends = np.cumsum([f.size for f in frames])
    starts = ends - [f.size for f in frames]
    codes, at = zrle_numba.check_frames(words, starts, ends)
    assert codes.tolist() == [0, 11, 7, 13, 0]
    assert at.tolist() == [good.size, 5, 5, 9, 10]
    codes, _ = zrle_numba.check_frames(words, starts, ends, [3, 3, 3, 2, 5])
    assert codes.tolist() == [0, 11, 7, 13, 14]
    with pytest.raises(ValueError):
        zrle_numba.check_frames(words, starts, ends + 1)


# ------------------------------------------------------------------------------ caller errors

FRAME5 = make_frame([(1, [5])], 2)


@decoders
@pytest.mark.parametrize("words, kwargs", [
    (FRAME5.reshape(1, -1), {}),                          # 2-D: not flattened silently
    (FRAME5.astype(np.float64), {}),                      # float: not cast silently
    (FRAME5.astype(np.int64), {}),
    (FRAME5.astype(">u4"), {}),                           # big-endian words
    (list(FRAME5), {}),
    (FRAME5, {"expected_n": 2.0}),
    (FRAME5, {"expected_n": True}),
    (FRAME5, {"expected_n": -1}),
    (FRAME5, {"expected_n": 2**32}),
    (FRAME5, {"expected_n": 99999999999999999999}),
    (FRAME5, {"start": 1.0}),
    (FRAME5, {"start": -1}),
], ids=["2d", "float64", "int64", "big-endian", "list", "n-float", "n-bool", "n-negative",
        "n-2^32", "n-huge", "start-float", "start-negative"])
def test_bad_arguments_raise_the_same_named_error(decode, words, kwargs):
    with pytest.raises(E.DecodeArgumentError) as exc:
        decode(words, **kwargs)
    assert isinstance(exc.value, ValueError) and isinstance(exc.value, TypeError)
    assert "\n" not in str(exc.value)


def test_bad_arguments_give_the_same_message_on_both_decoders():
    for kwargs in ({"expected_n": 2**32}, {"expected_n": 5.0}, {"start": -1}):
        msgs = []
        for decode in DECODERS.values():
            with pytest.raises(E.DecodeArgumentError) as exc:
                decode(FRAME5, **kwargs)
            msgs.append(str(exc.value))
        assert msgs[0] == msgs[1], kwargs


def test_reference_decoder_allocates_only_after_the_frame_validates():
    """A 9-word frame may claim 2**32-1 elements: the reference must find the error in the
    body before reserving 16 GiB (tracemalloc sees numpy's allocations)."""
    import tracemalloc
    bad = [make_frame([(3, [])], 0xFFFFFFFF),             # EARLY_ZERO_LENGTH
           make_frame([(0xFFFFFFFF, [])], 0xFFFFFFFF)[:-1],   # TRUNCATED before the CRC
           make_frame([(0xFFFFFFFF, [])], 0xFFFFFFFF, crc_xor=1)]   # CRC_MISMATCH
    tracemalloc.start()
    try:
        for words in bad:
            with pytest.raises(E.FrameError):
                zrle.decode_frame(words)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


@pytest.mark.parametrize("name, words, expected_n, exc, word", ERROR_CASES,
                         ids=[c[0] for c in ERROR_CASES])
def test_read_header_reports_header_errors_like_the_decoder(name, words, expected_n, exc, word):
    """read_header raises exactly what decode_frame raises for a bad header, and passes a
    frame whose problem lies in its body."""
    w = np.asarray(words, dtype=np.uint32)
    try:
        zrle.decode_frame(w, expected_n)
        full = None
    except E.FrameError as e:
        full = e
    try:
        head = zrle.read_header(w, expected_n)
    except E.FrameError as e:
        assert full is not None
        assert (type(e), e.word, str(e)) == (type(full), full.word, str(full))
    else:
        assert full is None or full.word is None or full.word >= zrle.HEADER_WORDS
        assert head.n == int(w[3])
