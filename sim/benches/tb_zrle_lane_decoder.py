"""cocotb testbench for hw/zrle_lane_decoder.sv: frames on a W-lane stream (the lane convention
of issue 31: dense beats, word-level tkeep a run of ones from lane 0 on the frame's last beat),
decoded beats and a status report out, compared with codec.zrle.decode_frame (values, beats,
token count, header, error code and error word).

Tests
  decode_cases     valid frames back to back under every traffic profile (TB_TRAFFIC): the exact
                   beat sequence (a run beat per token with zeros, its literals in chunks of W),
                   values, m_tlast, one `done` per frame, the header outputs. Synthetic edge
                   cases (lmax_log2 1, 2, 3, 8, lengths that are not multiples of W), LMAX
                   splits, n = 0 and 1, or the frames of a golden directory (TB_GOLDEN_DIR).
  decode_errors    every error code of spec §3.5 on purpose (tb_zrle_decoder's targeted cases,
                   every truncation point, more LMAX-split and trailer cases), then TB_FUZZ
                   fixed-seed corruptions: the code and word must match codec.zrle, token_count
                   the tokens whose L word was read (tokens_read), and the values that did
                   come out must be a prefix of what the tokens describe; overruns whose
                   z + L passes 2^32
  reset_mid_frame  reset in the header, in a run under backpressure and while draining; the
                   status outputs read zero after it (zrle_decoder's reset state)
  ready_paths      s_tready does not change when only m_tready does
  throughput       unthrottled frames: frame words per cycle (TB_METRICS), >= 0.9·W on long
                   dense frames (LMAX 256), the beats exactly one per cycle

A beat is a zero run (m_tkeep 0, m_tdata 0, m_tcount its length) or m_tcount literals in lanes
0 .. m_tcount-1 (m_tkeep their lanes, the other lanes 0): with W = 1 exactly zrle_decoder
RUN_OUT = 1's beats.
"""
from __future__ import annotations

import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge, Timer
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from gradblock.codec import errors as E
from gradblock.codec import zrle
from gradblock.sim.benches import tb_util as tb
from gradblock.sim.benches.tb_zrle_decoder import (MASK, Status, build_frame, described_count,
                                                   expected_status, fuzz_cases,
                                                   is_prefix_of_segments, lasts_ok,
                                                   segments_before_error,
                                                   targeted_error_cases)

MODULE = "zrle_lane_decoder"


# ------------------------------------------------------------------ expected beats
def expected_beats(frame, W: int) -> list[tuple[int, int, tuple[int, ...], bool]]:
    """(count, keep, literals, last) of every output beat of a valid frame: per token a run beat
    (if z > 0), then its literals in chunks of W; `last` on the beat holding the n-th value."""
    w = [int(x) & MASK for x in frame]
    n = w[3]
    out = []
    pos, produced = zrle.HEADER_WORDS, 0
    while produced < n:
        z, L = w[pos], w[pos + 1]
        produced += z + L
        if z:
            out.append((z, 0, (), L == 0 and produced == n))
        lits = w[pos + 2:pos + 2 + L]
        for i in range(0, L, W):
            chunk = tuple(lits[i:i + W])
            out.append((len(chunk), (1 << len(chunk)) - 1, chunk,
                        produced == n and i + W >= L))
        pos += 2 + L
    return out


class BeatRecorder:
    """Every m_* handshake as (count, keep, literals, last, cycle), expanded into values
    (`words`, `lasts`, `cycles` like tb_util.WordRecorder); malformed beats in `bad`."""

    def __init__(self, dut, W: int):
        self.dut, self.W = dut, W
        self.beats: list[tuple[int, int, tuple[int, ...], bool, int]] = []
        self.words: list[int] = []
        self.lasts: list[bool] = []
        self.cycles: list[int] = []
        self.bad: list[str] = []
        cocotb.start_soon(self._run())

    async def _run(self):
        dut, W = self.dut, self.W
        while True:
            await RisingEdge(dut.clk)
            if dut.m_tvalid.value == 1 and dut.m_tready.value == 1:
                data, keep = int(dut.m_tdata.value), int(dut.m_tkeep.value)
                count, last, now = int(dut.m_tcount.value), dut.m_tlast.value == 1, tb.cycle_now()
                lanes_ = [(data >> (32 * i)) & MASK for i in range(W)]
                i = len(self.beats)
                if keep == 0:
                    lits = ()
                    if count < 1 or data != 0:
                        self.bad.append(f"beat {i}: run beat with m_tcount {count}, "
                                        f"m_tdata {data:#x}")
                    if count > 1 << 20:     # a corrupted frame can describe billions of zeros
                        self.bad.append(f"beat {i}: run of {count} zeros")
                        count = 1
                    vals = [0] * max(count, 1)
                else:
                    lits = tuple(lanes_[:count])
                    if not 1 <= count <= W or keep != (1 << count) - 1:
                        self.bad.append(f"beat {i}: m_tkeep {keep:#x} with m_tcount {count}")
                    elif any(v == 0 for v in lits) or any(lanes_[count:]):
                        self.bad.append(f"beat {i}: literal lanes {lanes_} (count {count})")
                    vals = list(lits) if lits else [0]
                self.beats.append((count, keep, lits, last, now))
                self.words += vals
                self.lasts += [False] * (len(vals) - 1) + [last]
                self.cycles += [now] * len(vals)

    def clear(self):
        self.beats.clear()
        self.words.clear()
        self.lasts.clear()
        self.cycles.clear()
        self.bad.clear()


class InputRecorder:
    """Frame words taken on s_* (tkeep's lanes of each beat), with the cycle of each beat."""

    def __init__(self, dut, W: int):
        self.dut, self.W = dut, W
        self.words: list[int] = []
        self.beat_cycles: list[int] = []
        cocotb.start_soon(self._run())

    async def _run(self):
        dut, W = self.dut, self.W
        while True:
            await RisingEdge(dut.clk)
            if dut.s_tvalid.value == 1 and dut.s_tready.value == 1:
                data, keep = int(dut.s_tdata.value), int(dut.s_tkeep.value)
                self.words += [(data >> (32 * i)) & MASK for i in range(W) if keep >> i & 1]
                self.beat_cycles.append(tb.cycle_now())

    def clear(self):
        self.words.clear()
        self.beat_cycles.clear()


class LaneDecoderEnv:
    def __init__(self, dut):
        self.dut = dut
        self.W = tb.hdl_parameter("W")
        # tkeep is word-level: cocotbext-axi sizes its "bytes" as 32 bits from it
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m"), dut.clk, dut.rst)
        tb.quiet(self.source, self.sink)
        self.out = BeatRecorder(dut, self.W)
        self.inp = InputRecorder(dut, self.W)
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
        self.sink.clear()

    async def wait_status(self, count: int, limit_cycles: int) -> None:
        for _ in range(limit_cycles):
            if len(self.status) >= count:
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"decoder gave {len(self.status)} of {count} status reports "
                             f"within {limit_cycles} cycles (hang?)")

    async def wait_quiet(self, limit_cycles: int = 10000) -> None:
        for _ in range(limit_cycles):
            await RisingEdge(self.dut.clk)
            if self.source.idle() and self.dut.m_tvalid.value == 0 and self.dut.s_tvalid.value == 0:
                await ClockCycles(self.dut.clk, 2)
                if self.dut.m_tvalid.value == 0:
                    return
        raise AssertionError("decoder output did not go quiet")


def tokens_read(words, expected_n=None) -> int:
    """token_count at a frame's error report: the tokens whose L word the decoder read, the
    failing token included (hw/zrle_lane_decoder.sv; codec.zrle.decode_frame's token loop): 0
    for a header error, the failing token's index + 1 for an error in its (z, L) or literals,
    the index alone when the frame ends before its L word, every token for a trailer error."""
    w = [int(x) & MASK for x in words]
    code, word = expected_status(words, expected_n)
    if len(w) < zrle.HEADER_WORDS or (code and word < zrle.HEADER_WORDS):
        return 0
    lmax, n = 1 << ((w[1] >> 8) & 0xFF), w[3]
    pos, produced, count, prev_l = zrle.HEADER_WORDS, 0, 0, lmax
    while produced < n:
        if pos + 1 >= len(w):
            return count
        count += 1
        z, L = w[pos], w[pos + 1]
        rem = n - produced
        if L > lmax or (z == 0 and L == 0) or (z == 0 and prev_l != lmax) or z + L > rem \
                or (L == 0 and z < rem) or pos + 2 + L > len(w) \
                or any(x == 0 for x in w[pos + 2:pos + 2 + L]):
            return count
        produced += z + L
        pos += 2 + L
        prev_l = L
    return count


def frame_of(words) -> AxiStreamFrame:
    """A frame as cocotbext-axi sends it on a bus of W 32-bit "bytes": dense beats, the last
    beat's tkeep a run of ones from lane 0 (the lane convention)."""
    return AxiStreamFrame([int(w) & MASK for w in words])


# ------------------------------------------------------------------ cases
def lane_cases(W: int) -> list[tb.CodecCase]:
    """Valid frames beyond tb_util's synthetic set: n = 0 and 1, lengths around multiples of W,
    literal runs that split at LMAX right at and around beat edges."""
    rng = np.random.default_rng(31)

    def nz(k):
        v = rng.integers(-2**31, 2**31, size=k, dtype=np.int64)
        v[v == 0] = 3
        return v.astype(np.int32)

    def zeros(k):
        return np.zeros(k, np.int32)

    cases = [tb.make_case("n0", zeros(0), 3, 1), tb.make_case("n1_zero", zeros(1), 3, 2),
             tb.make_case("n1_lit", nz(1), 3, 3)]
    for lg in (1, 2, 4, 8):
        L = 1 << lg
        for extra in (-1, 0, 1, W - 1, W, W + 1):
            k = max(1, L + extra)
            cases.append(tb.make_case(f"split_lg{lg}_{k}", np.concatenate([zeros(1), nz(k),
                                                                            zeros(2)]), lg, lg))
        cases.append(tb.make_case(f"splits_lg{lg}", nz(5 * L + 3), lg, 7))
    # a frame of each length from 7 to 7 + 2W + 1 words (n zeros: one token; then literals)
    for k in range(0, 2 * W + 2):
        cases.append(tb.make_case(f"len_lit{k}", np.concatenate([zeros(2), nz(k)]), 8, 40 + k))
    # short tokens: several tokens start in one beat
    cases.append(tb.make_case("short_tokens", np.where(np.arange(97) % 3 == 0, nz(97), 0), 8, 5))
    return cases


def decode_case_list(W: int) -> list[tb.CodecCase]:
    cases = tb.selected_cases("decode")
    if not tb.env_str("TB_GOLDEN_DIR") and not tb.wanted_cases() \
            and tb.env_str("TB_SYNTHETIC", "edge") == "edge":
        cases = cases + lane_cases(W)
    return cases


def extra_error_cases(W: int):
    """Errors at lane positions: a frame cut at every word of its first 2W + 8, a bad t0,
    a zero literal in each lane of a token, a split run at LMAX and extra words after t1."""
    rng = np.random.default_rng(17)
    lits = [int(x) for x in rng.integers(1, 2**31, size=3 * W + 5)]
    f = build_frame([(2, lits)], 2 + len(lits), lmax_log2=8)
    cases = [(f"lane_truncated_{k}", f[:k], None) for k in range(1, len(f))]
    for lane in range(min(W + 2, len(lits))):
        bad = list(lits)
        bad[lane] = 0
        cases.append((f"zero_literal_at_{lane}", build_frame([(1, bad)], 1 + len(bad), 8), None))
        cases.append((f"zero_literal_{lane}_cut",
                      build_frame([(1, bad)], 1 + len(bad), 8)[:5 + 2 + lane + 2], None))
    cases += [
        ("split_after_full", build_frame([(0, [5, 6]), (0, [7])], 3, lmax_log2=1), None),
        ("split_after_short", build_frame([(0, [5]), (0, [7])], 2, lmax_log2=1), None),
        ("split_ok_then_zero_run", build_frame([(0, [5, 6]), (0, [7]), (2, [])], 5, 1), None),
        ("t0_wrong_big", build_frame([(2, lits)], 2 + len(lits), 8, t0=0xFFFFFFFF), None),
        ("extra_beat_after_t1", f + [1] * (W + 1), None),
        # z + L past 2^32: the overrun compare must see the sum's carry (rem - z - L below
        # -2^32 looks positive in 33 bits), also after a token and when the sum wraps to rem
        ("overrun_z_wraps", build_frame([(0xFFFFFFFF, [5, 6, 7])], 1, 8), None),
        ("overrun_z_wraps_late", build_frame([(2, [5]), (0xFFFFFFFF, [1, 2, 3, 4])], 5, 8),
         None),
        ("overrun_sum_wraps_to_rem", build_frame([(0xFFFFFFFF, [5, 6])], 1, 8), None),
        ("n0_truncated_t1", build_frame([], 0)[:6], None),
        ("size_ok_n0", build_frame([], 0), 0),
        ("size_mismatch_n0", build_frame([], 0), 1),
    ]
    return cases


# ------------------------------------------------------------------ tests
@tb.traffic_test
async def decode_cases(dut, traffic):
    """Valid frames back to back under this traffic profile."""
    await tb.start(dut)
    env = LaneDecoderEnv(dut)
    W = env.W
    cases = decode_case_list(W)
    assert cases, "no cases selected"
    rng = random.Random(tb.env_int("TB_SEED", 7))
    p_in, p_out = traffic
    tag = f"[W {W} traffic {p_in}:{p_out}]"
    env.traffic(p_in, p_out, rng)
    env.clear()
    for c in cases:
        await env.source.send(frame_of(c.frame))
    slack = 12.0 / ((1 - p_in) * (1 - p_out))
    words = sum(c.frame.size + 8 for c in cases)
    await env.wait_status(len(cases), int(words * slack) + 1000)
    await env.wait_quiet()
    failed: dict[str, str] = {}
    problems = []
    at_beat = 0
    for i, c in enumerate(cases):
        want = expected_beats(c.frame, W)
        got = [b[:4] for b in env.out.beats[at_beat:at_beat + len(want)]]
        if got != want:
            j = next((j for j, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
            failed.setdefault(c.name, f"{tag} case {c.name}: beat {j} expected "
                                      f"{want[j] if j < len(want) else None}, got "
                                      f"{got[j] if j < len(got) else None}")
        vals = [v for b in got for v in (b[2] if b[1] else [0] * b[0])]
        msg = tb.first_mismatch(c.name, "values", c.payload.view(np.uint32), vals)
        if msg:
            failed.setdefault(c.name, f"{tag} {msg}")
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
        at_beat += len(want)
    if len(env.out.beats) != at_beat:
        problems.append(f"{tag} {len(env.out.beats)} beats out, frames hold {at_beat}")
    problems += [f"{tag} {b}" for b in env.out.bad[:5]]
    if len(env.status) != len(cases):
        problems.append(f"{tag} {len(env.status)} status reports for {len(cases)} frames")
    total = sum(int(c.frame.size) for c in cases)
    if len(env.inp.words) != total:
        problems.append(f"{tag} decoder took {len(env.inp.words)} of {total} frame words")
    tb.write_case_results(MODULE, {c.name: ("fail", failed[c.name]) if c.name in failed
                                   else ("pass", "") for c in cases})
    assert not failed and not problems, "\n".join((problems + list(failed.values()))[:20])


async def run_one(env, dut, name, words, expected_n, slack=10.0):
    """Feed one frame (s_tlast on its last beat), wait for its status; problems found."""
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
        elif st.tokens != tokens_read(words, expected_n):
            problems.append(f"{name}: token_count {st.tokens} at the error, expected "
                            f"{tokens_read(words, expected_n)} (tokens whose L word was read)")
        got = env.out.words
        allowed = segments_before_error(words)
        if not is_prefix_of_segments(got, allowed):
            problems.append(f"{name}: after the error the output {got[:8]}... is not a prefix of "
                            f"the values the tokens describe {allowed[:8]}...")
        n = int(words[3]) if len(words) > 3 else 0
        if any(env.out.lasts) and not (len(got) == n and env.out.lasts[-1]
                                       and sum(env.out.lasts) == 1):
            problems.append(f"{name}: m_tlast on a value other than the n-th")
    problems += [f"{name}: {b}" for b in env.out.bad[:3]]
    if len(env.inp.words) != len(words):          # the decoder drains to s_tlast
        problems.append(f"{name}: decoder took {len(env.inp.words)} of {len(words)} words")
    return problems


@cocotb.test()
async def decode_errors(dut):
    """Each error code on purpose, at lane positions, then random corruptions."""
    await tb.start(dut)
    env = LaneDecoderEnv(dut)
    rng = random.Random(5)
    cases = (targeted_error_cases() + extra_error_cases(env.W)
             + fuzz_cases(tb.env_int("TB_FUZZ", 200), tb.env_int("TB_SEED", 7)))
    seen, problems = set(), []
    for i, (name, words, expected_n) in enumerate(cases):
        p_in, p_out = ((0.0, 0.0), (0.4, 0.0), (0.0, 0.6), (0.5, 0.5))[i % 4]
        env.traffic(p_in, p_out, rng)
        mine = await run_one(env, dut, name, words, expected_n,
                             slack=10.0 / ((1 - p_in) * (1 - p_out)))
        problems += mine
        seen.add(expected_status(words, expected_n)[0])
        if len(problems) > 20:
            break
    missing = sorted(set(E.ERROR_NAMES) - seen)
    if missing:
        problems.append(f"error codes never provoked: {[E.ERROR_NAMES[c] for c in missing]}")
    assert not problems, "\n".join(problems[:20])
    dut._log.info("%d corrupted/edge frames agree with codec.zrle at W %d", len(cases), env.W)


@cocotb.test()
async def reset_mid_frame(dut):
    """Reset in the header, in a zero run under backpressure, and while draining after an
    error; the next frame must decode exactly."""
    await tb.start(dut)
    env = LaneDecoderEnv(dut)
    rng = np.random.default_rng(2)
    vals = rng.integers(1, 2**31, size=400).astype(np.int32)
    vals[:120] = 0
    victim = tb.make_case("victim", vals, 3, 4)
    bad = [int(x) for x in victim.frame]
    bad[0] ^= 1                                       # BAD_MAGIC: the rest is drained
    clean = tb.make_case("clean", np.where(rng.random(290) < 0.5, vals[110:], 0), 3, 9)
    prng = random.Random(1)
    for when, frame, p_out in ((1, victim.frame, 0.0), (3, victim.frame, 0.0),
                               (40, victim.frame, 0.7), (6, bad, 0.0)):
        env.traffic(0.0, p_out, prng)
        await env.source.send(frame_of(frame))
        await ClockCycles(dut.clk, when)
        await tb.reset_endpoints_idle(dut, env.source, env.sink)
        # the status outputs read as nothing decoded, as zrle_decoder's do after a reset
        status = {s: int(getattr(dut, s).value) for s in (
            "hdr_layer_id", "hdr_n", "hdr_range_bits", "hdr_lmax_log2", "token_count",
            "err_code", "err_word", "hdr_valid", "done", "err_valid")}
        assert not any(status.values()), f"after reset at {when}: status outputs {status}"
        env.traffic(0.0, 0.0, prng)
        problems = await run_one(env, dut, f"clean after reset at {when}", clean.frame, clean.n)
        assert not problems, "\n".join(problems)


@cocotb.test()
async def ready_paths(dut):
    """No combinational path from m_tready to s_tready: in the middle of each cycle (random
    input valid, random m_tready) m_tready is flipped and s_tready must not move."""
    await tb.start(dut)
    W = tb.hdl_parameter("W")
    rng = random.Random(3)
    vals = np.random.default_rng(3).integers(1, 2**31, size=480).astype(np.int32)
    vals[np.random.default_rng(4).random(480) < 0.6] = 0
    vals[100:200] = 0
    frame = [int(x) for x in tb.make_case("ready_probe", vals, 3, 1).frame]
    beats = [frame[i:i + W] for i in range(0, len(frame), W)]
    dut.s_tvalid.value = 0
    dut.m_tready.value = 0
    dut.cfg_check_n.value = 0
    sent, frames_sent = 0, 0
    for cycle in range(3000):
        await FallingEdge(dut.clk)
        valid = int(rng.random() < 0.8)
        beat = beats[sent]
        dut.s_tvalid.value = valid
        dut.s_tdata.value = sum(w << (32 * i) for i, w in enumerate(beat))
        dut.s_tkeep.value = (1 << len(beat)) - 1
        dut.s_tlast.value = int(sent == len(beats) - 1)
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
            if sent == len(beats):
                sent, frames_sent = 0, frames_sent + 1
    assert frames_sent >= 2, f"only {frames_sent} frames went in while probing"


def gradient_payload(n: int, rng) -> np.ndarray:
    """A quantised gradient after coarse selection: int32 values of a normal gradient scaled to
    the quantiser's range (rarely exactly 0), whole blocks of 256 kept, the rest zero."""
    g = rng.standard_normal(n) * 0.05
    q = np.clip(np.rint(g / 10.0 * (2**31 - 1)), -(2**31 - 1), 2**31 - 1).astype(np.int64)
    keep = np.repeat(rng.random(n // 256 + 1) < 0.25, 256)[:n]
    return np.where(keep, q, 0).astype(np.int32)


@cocotb.test()
async def throughput(dut):
    """Unthrottled frames: frame words per cycle from the first beat taken to the status, and
    one output beat per cycle. Long dense frames (LMAX 256) must reach 0.9·W words a cycle."""
    rng = np.random.default_rng(4)
    await tb.start(dut)
    env = LaneDecoderEnv(dut)
    W = env.W
    n = 256 * max(16, 4 * W)

    def nz(k):
        return rng.integers(1, 2**31, size=k).astype(np.int32)

    patterns = [
        ("dense_lg8", nz(n), 8, 0.9 * W),
        ("gradient_blocks_lg8", gradient_payload(n, rng), 8, None),
        ("dense_lg2", nz(n // 4), 2, None),
        ("all_zero", np.zeros(n, np.int32), 8, None),
        ("sparse_1pct", np.where(rng.random(n) < 0.01, nz(n), 0).astype(np.int32), 8, None),
        ("half", np.where(rng.random(n // 4) < 0.5, nz(n // 4), 0).astype(np.int32), 8, None),
        ("short_tokens", np.where(np.arange(n // 4) % 3 == 0, nz(n // 4), 0).astype(np.int32),
         8, None),
    ]
    env.traffic(0.0, 0.0, random.Random(0))
    problems = []
    for name, payload, lg, floor in patterns:
        case = tb.make_case(name, payload, lg, 2)
        env.clear()
        await env.source.send(frame_of(case.frame))
        await env.wait_status(1, 20 * case.frame.size + 1000)
        await env.wait_quiet()
        if env.status[0].kind != "done":
            problems.append(f"{name}: status {env.status[0]}")
        msg = tb.first_mismatch(name, "values", case.payload.view(np.uint32), env.out.words)
        if msg:
            problems.append(msg)
        problems += env.out.bad[:3]
        first_in = env.inp.beat_cycles[0]
        cycles = env.status[0].cycle - first_in
        in_span = env.inp.beat_cycles[-1] - first_in + 1
        beats = len(env.out.beats)
        out_span = env.out.beats[-1][4] - env.out.beats[0][4] + 1 if beats else 0
        words = int(case.frame.size)
        rec = {"module": MODULE, "W": W, "pattern": name, "lmax_log2": lg, "n": case.n,
               "frame_words": words, "beats": beats, "cycles": int(cycles),
               "words_per_cycle": words / cycles, "words_per_cycle_in": words / in_span,
               "beats_per_cycle_out": beats / out_span if out_span else 0.0}
        tb.write_metrics(rec)
        dut._log.info("throughput %s", rec)
        if floor is not None and words / cycles < floor:
            problems.append(f"{name}: {words / cycles:.2f} frame words per cycle < {floor:.2f}")
    assert not problems, "\n".join(problems)
