"""cocotb testbench for hw/zrle_decoder.sv: frame words in, int32 values and a status report out,
compared with codec.zrle.decode_frame (values, token count, error code and error word).

Tests
  decode_cases     valid frames back to back under every traffic profile: exact values, m_tlast
                   on each frame's n-th value, one `done` per frame with the right status
  decode_errors    corrupted frames, one at a time: every error code of spec §3.5 on purpose,
                   then TB_FUZZ random corruptions; the code and word must match the Python
                   decoder and the values that did come out must be a prefix of the token stream
  reset_mid_frame  reset while a frame is in flight, then a clean frame must be exact
  ready_paths      s_tready does not change when only m_tready does
  throughput       unthrottled cycle counts against an ideal decoder (TB_METRICS)

Built with RUN_OUT = 1 the decoder gives a zero run as one beat (m_tdata 0, m_tcount = its
length); the output recorder expands every beat by m_tcount, so every test compares the same
values, m_tlast (on the beat holding the n-th value) and prefixes as with RUN_OUT = 0, and it
checks each beat's shape: m_tcount >= 1, a literal (nonzero) beat has m_tcount 1, and with
RUN_OUT = 0 m_tcount is always 1. The ideal decoder of `throughput` then gives one beat per run.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge, Timer
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from gradblock.codec import errors as E
from gradblock.codec import zrle
from gradblock.sim.benches import tb_util as tb
from gradblock.sim.functional_bins import record as record_bins

MASK = 0xFFFFFFFF
MAX_DESCRIBED = 4096          # fuzz frames may describe at most this many values


@dataclass
class Status:
    kind: str            # "done" or "err"
    code: int
    word: int
    tokens: int
    cycle: int


class ValueRecorder(tb.WordRecorder):
    """The decoder's output beats expanded into values (a beat holds m_tcount values), with the
    beats themselves in `beats` (data, count, last, cycle) and malformed beats in `bad`."""

    def __init__(self, dut):
        self.count = dut.m_tcount
        self.run_out = bool(tb.hdl_parameter("RUN_OUT", dut))
        self.beats: list[tuple[int, int, bool, int]] = []
        self.bad: list[str] = []
        super().__init__(dut, "m")

    async def _run(self):
        while True:
            await RisingEdge(self.clk)
            if self.valid.value == 1 and self.ready.value == 1:
                data, count = int(self.data.value), int(self.count.value)
                last, now = self.last.value == 1, tb.cycle_now()
                self.beats.append((data, count, last, now))
                if count < 1 or (data != 0 and count != 1) or (not self.run_out and count != 1):
                    self.bad.append(f"beat {len(self.beats) - 1}: m_tdata {data:#x} with "
                                    f"m_tcount {count} (RUN_OUT {int(self.run_out)})")
                    count = max(count, 1)
                if count > 1 << 20:         # a corrupted frame can describe billions of zeros
                    self.bad.append(f"beat {len(self.beats) - 1}: run of {count} zeros")
                    count = 1
                self.words += [data] * count
                self.lasts += [False] * (count - 1) + [last]
                self.cycles += [now] * count

    def clear(self):
        super().clear()
        self.beats.clear()
        self.bad.clear()


class DecoderEnv:
    def __init__(self, dut):
        self.dut = dut
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s"), dut.clk, dut.rst,
                                      byte_size=32)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m"), dut.clk, dut.rst,
                                  byte_size=32)
        tb.quiet(self.source, self.sink)
        self.out = ValueRecorder(dut)
        self.inp = tb.WordRecorder(dut, "s")
        self.status: list[Status] = []
        self.headers: list[tuple[int, int, int, int]] = []
        dut.cfg_check_n.value = 0
        dut.cfg_expected_n.value = 0
        cocotb.start_soon(self._watch())

    async def _watch(self):
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            if dut.hdr_valid.value == 1:
                self.headers.append((int(dut.hdr_layer_id.value), int(dut.hdr_n.value),
                                     int(dut.hdr_range_bits.value), int(dut.hdr_lmax_log2.value)))
            if dut.done.value == 1:
                self.status.append(Status("done", 0, 0, int(dut.token_count.value), tb.cycle_now()))
            if dut.err_valid.value == 1:
                self.status.append(Status("err", int(dut.err_code.value), int(dut.err_word.value),
                                          int(dut.token_count.value), tb.cycle_now()))

    def traffic(self, p_in: float, p_out: float, rng: random.Random) -> None:
        self.source.set_pause_generator(tb.pause_generator(p_in, rng) if p_in else None)
        self.sink.set_pause_generator(tb.pause_generator(p_out, rng) if p_out else None)
        self.source.pause = False
        self.sink.pause = False

    def clear(self):
        self.out.clear()
        self.inp.clear()
        self.status.clear()
        self.headers.clear()

    async def wait_status(self, count: int, limit_cycles: int) -> None:
        for _ in range(limit_cycles):
            if len(self.status) >= count:
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"decoder gave {len(self.status)} of {count} status reports "
                             f"within {limit_cycles} cycles (hang?)")

    async def wait_quiet(self, limit_cycles: int = 10000) -> None:
        """Until the source has sent everything and no value is waiting on the output."""
        for _ in range(limit_cycles):
            await RisingEdge(self.dut.clk)
            if self.source.idle() and self.dut.m_tvalid.value == 0 and self.dut.s_tvalid.value == 0:
                await ClockCycles(self.dut.clk, 2)
                if self.dut.m_tvalid.value == 0:
                    return
        raise AssertionError("decoder output did not go quiet")


def frame_of(words) -> AxiStreamFrame:
    return AxiStreamFrame([int(w) & MASK for w in words])


# ------------------------------------------------------------------ reference expectations
def expected_status(words, expected_n):
    """(code, word) the RTL must report, (0, tokens) on success. Besides codec.zrle's checks,
    words after a complete frame (t1 without s_tlast) are TRUNCATED at the first extra word."""
    w = np.asarray(words, dtype=np.uint32)
    try:
        fr = zrle.decode_frame(w, expected_n)
    except E.FrameError as exc:
        return exc.code, exc.word
    if fr.n_words < w.size:
        return E.TruncatedError.code, fr.n_words
    return 0, fr.n_tokens


def segments_before_error(words) -> list[tuple[int, int]]:
    """What the tokens describe up to the first problem, as (value, count) segments: the
    decoder may have emitted any prefix of these values before it reported the error, and
    nothing else. (Segments, because a corrupted frame can describe billions of zeros.)"""
    w = [int(x) & MASK for x in words]
    if len(w) < 5 or w[0] != zrle.MAGIC or (w[1] & 0xFF) != 1:
        return []
    lg = (w[1] >> 8) & 0xFF
    if (w[1] >> 16) or not 1 <= lg <= 24 or not zrle.range_is_valid(w[4]):
        return []
    lmax, n = 1 << lg, w[3]
    out, pos, produced, prev_l = [], 5, 0, lmax
    while produced < n and pos + 1 < len(w):
        z, L = w[pos], w[pos + 1]
        rem = n - produced
        if L > lmax or (z == 0 and L == 0) or (z == 0 and prev_l != lmax) or z + L > rem \
                or (L == 0 and z < rem):
            break
        if z:
            out.append((0, z))
        lits = w[pos + 2:pos + 2 + L]
        for x in lits:
            if x == 0:
                return out
            out.append((x, 1))
        if len(lits) < L:
            break
        produced += z + L
        pos += 2 + L
        prev_l = L
    return out


def described_count(words) -> int:
    return sum(c for _, c in segments_before_error(words))


def is_prefix_of_segments(values, segments) -> bool:
    i = 0
    for v, c in segments:
        take = min(c, len(values) - i)
        if any(int(x) != v for x in values[i:i + take]):
            return False
        i += take
        if i == len(values):
            return True
    return i == len(values)


# ------------------------------------------------------------------ corrupted frames
def build_frame(tokens, n, lmax_log2=3, layer=1, rbits=0x41200000, t0=None, h1=None):
    """A frame from explicit (z, [literals]) tokens, with a correct t0 and CRC unless told
    otherwise, so that exactly the intended defect is present."""
    words = [zrle.MAGIC, h1 if h1 is not None else (1 | lmax_log2 << 8), layer, n, rbits]
    for z, lits in tokens:
        words += [z, len(lits)] + [int(x) & MASK for x in lits]
    words.append(len(tokens) if t0 is None else t0)
    words.append(zrle.crc32_words(np.array(words, dtype=np.uint32)))
    return words


def targeted_error_cases():
    """(name, words, expected_n) provoking each error code of spec §3.5 at least once."""
    base = tb.make_case("base", [0, 0, 5, -1, 0, 7, 0, 0, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0], 3, 7)
    f = [int(x) for x in base.frame]
    last = len(f) - 1

    def with_word(i, v):
        g = list(f)
        g[i] = v & MASK
        return g

    cases = [
        ("bad_magic", with_word(0, zrle.MAGIC ^ 1), None),
        ("bad_version", with_word(1, (f[1] & ~0xFF) | 2), None),
        ("bad_lmax_reserved", with_word(1, f[1] | 1 << 16), None),
        ("bad_lmax_zero", with_word(1, 1), None),
        ("bad_lmax_25", with_word(1, 1 | 25 << 8), None),
        ("bad_range_negative", with_word(4, 0xC1200000), None),
        ("bad_range_inf", with_word(4, 0x7F800000), None),
        ("bad_range_nan", with_word(4, 0x7FC00000), None),
        ("bad_range_zero", with_word(4, 0), None),
        ("size_mismatch", f, base.n + 1),
        ("size_ok", f, base.n),
        ("literal_run_too_long", build_frame([(0, [1] * 9)], 9), None),
        ("zero_literal_first", build_frame([(2, [0, 4])], 4), None),
        ("zero_literal_middle", build_frame([(1, [3, 0, 4, 0])], 5), None),
        ("empty_token", build_frame([(0, [])], 4), None),
        ("early_zero_length", build_frame([(2, []), (0, [1, 2])], 4), None),
        ("split_literal_run", build_frame([(1, [5]), (0, [6])], 3), None),
        ("overrun_z", build_frame([(9, [])], 4), None),
        ("overrun_l", build_frame([(3, [1, 2])], 4), None),
        ("overrun_huge", build_frame([(0xFFFFFFFF, [1])], 4), None),
        ("token_count_mismatch", build_frame([(1, [5])], 2, t0=2), None),
        ("crc_mismatch", with_word(last, f[last] ^ 0x80), None),
        ("extra_word_after_t1", f + [0x12345678], None),
        ("n0_ok", build_frame([], 0), None),
        ("n0_extra_token", build_frame([(1, [])], 0, t0=0), None),
        ("lmax_24_ok", build_frame([(0, list(range(1, 40)))], 39, lmax_log2=24), None),
    ]
    # TRUNCATED: every proper prefix of a frame (tlast on the prefix's last word)
    cases += [(f"truncated_{k}", f[:k], None) for k in range(1, len(f))]
    # a zero literal in a token cut short is TRUNCATED, as in software
    zl = build_frame([(1, [3, 0, 4, 5])], 5)
    cases += [("zero_literal_then_truncated", zl[:9], None)]
    return cases


def fuzz_cases(count: int, seed: int, lmax_max: int = 24):
    rng = np.random.default_rng(seed)
    out = []
    bases = []
    for lg in (1, 2, 3, 8):
        n = int(rng.integers(1, 60))
        p = np.where(rng.random(n) < 0.5, rng.integers(-2**31, 2**31, size=n), 0).astype(np.int32)
        bases.append(tb.make_case(f"fz{lg}", p, lg, int(rng.integers(0, 2**32))))
    for i in range(count):
        c = bases[i % len(bases)]
        f = [int(x) for x in c.frame]
        kind = i % 5
        j = int(rng.integers(0, len(f)))
        if kind == 0:      # one bit flipped
            f[j] ^= 1 << int(rng.integers(0, 32))
        elif kind == 1:    # a small integer in place of a word
            f[j] = int(rng.integers(0, 12))
        elif kind == 2:    # a word dropped
            del f[j]
        elif kind == 3:    # a word inserted
            f.insert(j, int(rng.integers(0, 2**32)) if rng.random() < 0.5 else 0)
        else:              # two bits in two words
            f[j] ^= 1 << int(rng.integers(0, 32))
            k = int(rng.integers(0, len(f)))
            f[k] ^= 1 << int(rng.integers(0, 32))
        # a corrupted n and z can describe billions of zeros, which a streaming decoder
        # rightly emits before it meets the error; keep the simulation short
        if f and described_count(f) <= MAX_DESCRIBED:
            out.append((f"fuzz{i}_k{kind}", f, None))
    return out


# ------------------------------------------------------------------ tests
def lasts_ok(lasts, n):
    idx = [i for i, last in enumerate(lasts) if last]
    return idx == ([n - 1] if len(lasts) >= n > 0 else [])


@tb.traffic_test
async def decode_cases(dut, traffic):
    """Valid frames back to back under this traffic profile (one cocotb test per profile,
    tb_util.traffic_test, so a failure hides no other profile)."""
    cases = tb.selected_cases("decode")
    assert cases, "no cases selected"
    await tb.start(dut)
    env = DecoderEnv(dut)
    rng = random.Random(tb.env_int("TB_SEED", 7))
    failed: dict[str, str] = {}
    problems = []
    p_in, p_out = traffic
    tag = f"[traffic {p_in}:{p_out}]"
    env.traffic(p_in, p_out, rng)
    env.clear()
    for c in cases:
        await env.source.send(frame_of(c.frame))
    slack = 12.0 / ((1 - p_in) * (1 - p_out))
    words = sum(c.n + c.frame.size for c in cases)
    await env.wait_status(len(cases), int(words * slack) + 1000)
    await env.wait_quiet()
    at = 0
    for i, c in enumerate(cases):
        got = env.out.words[at:at + c.n]
        msg = tb.first_mismatch(c.name, "values", c.payload.view(np.uint32), got)
        if msg:
            failed.setdefault(c.name, f"{tag} {msg}")
        if not lasts_ok(env.out.lasts[at:at + c.n], c.n):
            failed.setdefault(c.name, f"{tag} case {c.name}: m_tlast not exactly on value {c.n - 1}")
        st = env.status[i] if i < len(env.status) else None
        want_tokens = int(c.frame[-2])
        if st is None or st.kind != "done" or st.tokens != want_tokens:
            failed.setdefault(c.name, f"{tag} case {c.name}: status {st}, expected done with "
                                      f"{want_tokens} tokens")
        want_hdr = (c.layer_id, c.n, c.range_bits, c.lmax_log2)
        if i >= len(env.headers) or env.headers[i] != want_hdr:
            got_hdr = env.headers[i] if i < len(env.headers) else None
            failed.setdefault(c.name, f"{tag} case {c.name}: header outputs {got_hdr}, "
                                      f"expected {want_hdr}")
        at += c.n
    if len(env.out.words) != at:
        problems.append(f"{tag} {len(env.out.words)} values out, frames hold {at}")
    problems += [f"{tag} {b}" for b in env.out.bad[:5]]
    if len(env.status) != len(cases):
        problems.append(f"{tag} {len(env.status)} status reports for {len(cases)} frames")
    tb.write_case_results("zrle_decoder", {c.name: ("fail", failed[c.name]) if c.name in failed
                                           else ("pass", "") for c in cases})
    assert not failed and not problems, "\n".join((problems + list(failed.values()))[:20])


async def run_one(env, dut, name, words, expected_n, slack=10.0):
    """Feed one frame (s_tlast on its last word), wait for its status; problems found."""
    limit_cycles = int(1000 + slack * (len(words) + described_count(words)))
    env.clear()
    dut.cfg_check_n.value = int(expected_n is not None)
    dut.cfg_expected_n.value = 0 if expected_n is None else expected_n
    await env.source.send(frame_of(words))
    await env.wait_status(1, limit_cycles)
    await env.wait_quiet()
    problems = []
    code, word = expected_status(words, expected_n)
    st = env.status[0]
    if len(env.status) != 1:
        problems.append(f"{name}: {len(env.status)} status reports")
    if code == 0:
        if st.kind != "done" or st.tokens != word:
            problems.append(f"{name}: expected done with {word} tokens, got {st}")
        payload = zrle.decode_frame(np.asarray(words, dtype=np.uint32)).values.view(np.uint32)
        msg = tb.first_mismatch(name, "values", payload, env.out.words)
        if msg:
            problems.append(msg)
        if not lasts_ok(env.out.lasts, payload.size):
            problems.append(f"{name}: m_tlast misplaced")
    else:
        if st.kind != "err" or st.code != code or st.word != word:
            problems.append(f"{name}: expected {E.ERROR_NAMES[code]} ({code}) at word {word}, got "
                            + (f"{E.ERROR_NAMES.get(st.code, '?')} ({st.code}) at word {st.word}"
                               if st.kind == "err" else "done"))
        allowed = segments_before_error(words)
        got = env.out.words
        if not is_prefix_of_segments(got, allowed):
            problems.append(f"{name}: after the error the output {got[:8]}... is not a prefix of "
                            f"the values the tokens describe {allowed[:8]}...")
        n = int(words[3]) if len(words) > 3 else 0
        if any(env.out.lasts) and not (len(got) == n and env.out.lasts[-1] and sum(env.out.lasts) == 1):
            problems.append(f"{name}: m_tlast on a value other than the n-th")
    problems += [f"{name}: {b}" for b in env.out.bad[:3]]
    # every word offered was taken (the decoder drains to s_tlast)
    if len(env.inp.words) != len(words):
        problems.append(f"{name}: decoder took {len(env.inp.words)} of {len(words)} words")
    return problems


@cocotb.test()
async def decode_errors(dut):
    """Each error code on purpose, then random corruptions, checked against codec.zrle."""
    await tb.start(dut)
    env = DecoderEnv(dut)
    rng = random.Random(5)
    cases = targeted_error_cases() + fuzz_cases(tb.env_int("TB_FUZZ", 200), tb.env_int("TB_SEED", 7))
    seen = set()
    observed = set()      # codes the decoder reported exactly as expected (functional bins)
    problems = []
    for i, (name, words, expected_n) in enumerate(cases):
        # alternate traffic so errors meet stalls on both sides
        p_in, p_out = ((0.0, 0.0), (0.4, 0.0), (0.0, 0.6), (0.5, 0.5))[i % 4]
        env.traffic(p_in, p_out, rng)
        mine = await run_one(env, dut, name, words, expected_n,
                             slack=10.0 / ((1 - p_in) * (1 - p_out)))
        problems += mine
        code = expected_status(words, expected_n)[0]
        seen.add(code)
        if not mine and code:
            observed.add(code)
        if len(problems) > 20:
            break
    missing = sorted(set(E.ERROR_NAMES) - seen)
    if missing:
        problems.append(f"error codes never provoked: {[E.ERROR_NAMES[c] for c in missing]}")
    assert not problems, "\n".join(problems[:20])
    record_bins(*(f"decoder.err.{E.ERROR_NAMES[c]}" for c in sorted(observed)))
    dut._log.info("%d corrupted/edge frames agree with codec.zrle", len(cases))


@cocotb.test()
async def reset_mid_frame(dut):
    """Reset in the header, in a zero run under backpressure, and while draining after an
    error; the next frame must decode exactly."""
    await tb.start(dut)
    env = DecoderEnv(dut)
    rng = np.random.default_rng(2)
    vals = rng.integers(1, 2**31, size=200).astype(np.int32)
    vals[:120] = 0
    victim = tb.make_case("victim", vals, 3, 4)
    bad = [int(x) for x in victim.frame]
    bad[0] ^= 1                                       # BAD_MAGIC: the rest is drained
    clean = tb.make_case("clean", np.where(rng.random(90) < 0.5, vals[110:], 0), 3, 9)
    prng = random.Random(1)
    for when, frame, p_out in ((3, victim.frame, 0.0), (40, victim.frame, 0.7), (12, bad, 0.0)):
        env.traffic(0.0, p_out, prng)
        await env.source.send(frame_of(frame))
        await ClockCycles(dut.clk, when)
        await tb.reset_endpoints_idle(dut, env.source, env.sink)
        env.traffic(0.0, 0.0, prng)
        problems = await run_one(env, dut, f"clean after reset at {when}", clean.frame, clean.n)
        assert not problems, "\n".join(problems)


@cocotb.test()
async def ready_paths(dut):
    """No combinational path from m_tready to s_tready: in the middle of each cycle (random
    input valid, random m_tready) m_tready is flipped and s_tready must not move."""
    rng = random.Random(3)
    vals = np.random.default_rng(3).integers(1, 2**31, size=240).astype(np.int32)
    vals[np.random.default_rng(4).random(240) < 0.6] = 0
    vals[100:160] = 0                                   # a long run fills the queue
    frame = [int(x) for x in tb.make_case("ready_probe", vals, 3, 1).frame]
    await tb.start(dut)
    dut.s_tvalid.value = 0
    dut.m_tready.value = 0
    sent, frames_sent = 0, 0
    for cycle in range(3000):
        await FallingEdge(dut.clk)
        valid = int(rng.random() < 0.8)
        dut.s_tvalid.value = valid
        dut.s_tdata.value = frame[sent]
        dut.s_tlast.value = int(sent == len(frame) - 1)
        m_ready = int(rng.random() < 0.5)
        dut.m_tready.value = m_ready
        await Timer(1, "ns")
        before = int(dut.s_tready.value)
        dut.m_tready.value = 1 - m_ready
        await Timer(1, "ns")
        after = int(dut.s_tready.value)
        assert before == after, (f"cycle {cycle}: s_tready went {before} -> {after} when only "
                                 f"m_tready changed")
        dut.m_tready.value = m_ready
        await RisingEdge(dut.clk)
        if valid and before:
            sent += 1
            if sent == len(frame):
                sent, frames_sent = 0, frames_sent + 1
    assert frames_sent >= 2, f"only {frames_sent} frames went in while probing"


def ideal_cycles(case: tb.CodecCase, run_out: bool = False) -> int:
    """Cycles from the first frame word to the last value for an ideal decoder: one word in and
    one beat out per cycle, unlimited read-ahead. A zero can leave once its token's L word is
    read, a literal once it is read. A beat is one value, or with run_out a whole zero run."""
    lmax = 1 << case.lmax_log2
    z, L, lit_s = zrle.tokens(case.payload, lmax)
    ready = []                                 # cycle at which each value becomes available
    pos = zrle.HEADER_WORDS
    for zk, lk in zip(z, L):
        l_word_cycle = pos + 2                 # 1-based cycle of reading word pos + 1
        ready += [l_word_cycle] * (min(int(zk), 1) if run_out else int(zk))
        ready += [l_word_cycle + 1 + j for j in range(int(lk))]
        pos += 2 + int(lk)
    t = 0
    for r in ready:
        t = max(t + 1, r + 1)
    return t


@cocotb.test()
async def throughput(dut):
    """Unthrottled cycle counts: values (with RUN_OUT, beats) leave at one per cycle through
    zero runs, frame words are read at one per cycle through literals."""
    rng = np.random.default_rng(4)
    n = 2048

    def nz(k):
        return rng.integers(1, 2**31, size=k).astype(np.int32)

    patterns = [
        ("dense_lg8", nz(n), 8),
        ("dense_lg2", nz(n), 2),
        ("all_zero", np.zeros(n, np.int32), 8),
        ("sparse_1pct", np.where(rng.random(n) < 0.01, nz(n), 0).astype(np.int32), 8),
        ("half", np.where(rng.random(n) < 0.5, nz(n), 0).astype(np.int32), 8),
        ("blocks_25pct", np.where(np.repeat(rng.random(n // 64) < 0.25, 64), nz(n), 0).astype(np.int32), 8),
    ]
    await tb.start(dut)
    env = DecoderEnv(dut)
    env.traffic(0.0, 0.0, random.Random(0))
    run_out = env.out.run_out
    problems = []
    for name, payload, lg in patterns:
        case = tb.make_case(name, payload, lg, 2)
        env.clear()
        await env.source.send(frame_of(case.frame))
        await env.wait_status(1, 20 * (case.n + case.frame.size) + 1000)
        await env.wait_quiet()
        problems += [m for m in [tb.first_mismatch(name, "values", case.payload.view(np.uint32),
                                                   env.out.words)] if m]
        first_in, last_out = env.inp.cycles[0], env.out.cycles[-1]
        cycles = last_out - first_in + 1
        ideal = ideal_cycles(case, run_out)
        problems += env.out.bad[:3]
        out_span = env.out.cycles[-1] - env.out.cycles[0] + 1
        in_span = env.inp.cycles[-1] - env.inp.cycles[0] + 1
        rec = {"module": "zrle_decoder", "run_out": int(run_out), "pattern": name,
               "lmax_log2": lg, "n": case.n, "beats": len(env.out.beats),
               "frame_words": int(case.frame.size), "cycles": int(cycles), "ideal_cycles": int(ideal),
               "overhead_cycles": int(cycles - ideal), "cycles_per_value": out_span / case.n,
               "cycles_per_frame_word": in_span / case.frame.size,
               "done_after_last_value": int(env.status[0].cycle - last_out)}
        tb.write_metrics(rec)
        dut._log.info("throughput %s", rec)
        if cycles - ideal > 4:
            problems.append(f"{name}: {cycles} cycles, ideal decoder {ideal}")
    assert not problems, "\n".join(problems)
