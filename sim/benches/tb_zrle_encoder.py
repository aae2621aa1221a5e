"""cocotb testbench for hw/zrle_encoder.sv: payload words in, frame words out, compared word for
word with codec.zrle.encode_frame (or a golden directory's `frame`).

Tests
  encode_cases     every selected case under every traffic profile, frames back to back
  reset_mid_frame  reset at several points inside a frame, then a clean frame must be exact
  config_clamp     cfg_lmax_log2 outside 1..LMAX_LOG2_MAX is clamped (and h1 says so)
  ready_paths      s_tready and cfg_ready do not change when only m_tready does
  throughput       unthrottled cycle counts against an ideal streaming encoder (TB_METRICS)

Settings come from the environment (see sim/benches/tb_util.py); LMAX_LOG2_MAX is the build's own
(tb_util.hdl_parameter): cases above it are skipped (and logged).
"""
from __future__ import annotations

import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge, Timer, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from gradblock.codec import zrle
from gradblock.sim.benches import tb_util as tb


def lmax_log2_max() -> int:
    """LMAX_LOG2_MAX of this build (from the runner, or the DUT's default)."""
    return tb.hdl_parameter("LMAX_LOG2_MAX")


class EncoderEnv:
    def __init__(self, dut):
        self.dut = dut
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s"), dut.clk, dut.rst,
                                      byte_size=32)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m"), dut.clk, dut.rst,
                                  byte_size=32)
        tb.quiet(self.source, self.sink)
        self.out = tb.WordRecorder(dut, "m")
        self.inp = tb.WordRecorder(dut, "s")
        dut.cfg_valid.value = 0
        dut.cfg_layer_id.value = 0
        dut.cfg_n.value = 0
        dut.cfg_range_bits.value = 0
        dut.cfg_lmax_log2.value = 0

    def traffic(self, p_in: float, p_out: float, rng: random.Random) -> None:
        self.source.set_pause_generator(tb.pause_generator(p_in, rng) if p_in else None)
        self.sink.set_pause_generator(tb.pause_generator(p_out, rng) if p_out else None)
        self.source.pause = False
        self.sink.pause = False

    async def configure(self, case: tb.CodecCase) -> int:
        """One config beat; returns the cycle of the handshake."""
        dut = self.dut
        dut.cfg_layer_id.value = case.layer_id
        dut.cfg_n.value = case.n
        dut.cfg_range_bits.value = case.range_bits
        dut.cfg_lmax_log2.value = case.lmax_log2
        dut.cfg_valid.value = 1
        while True:
            await RisingEdge(dut.clk)
            if dut.cfg_ready.value == 1:
                break
        dut.cfg_valid.value = 0
        return tb.cycle_now()

    async def send_frames(self, cases) -> None:
        for case in cases:
            await self.configure(case)
            if case.n:
                await self.source.send(AxiStreamFrame([int(x) for x in case.payload.view(np.uint32)]))

    async def receive_frames(self, cases) -> dict[str, str]:
        """Frames in order, one per case; case name -> first mismatch (absent when exact)."""
        problems = {}
        for case in cases:
            frame = await self.sink.recv()
            msg = tb.first_mismatch(case.name, "frame", case.frame, frame.tdata)
            if msg:
                problems[case.name] = msg
        return problems


def runnable(cases, log):
    """(cases this build can encode, {skipped case: reason})."""
    limit = lmax_log2_max()
    keep = [c for c in cases if c.lmax_log2 <= limit]
    skipped = {c.name: f"lmax_log2 {c.lmax_log2} > LMAX_LOG2_MAX {limit} of this build"
               for c in cases if c.lmax_log2 > limit}
    for name, why in skipped.items():
        log.info("skip %s: %s", name, why)
    return keep, skipped


def time_limit_ns(cases, slack: float = 12.0) -> int:
    words = sum(c.n + c.frame.size + 8 for c in cases)
    return int((words * slack + 2000) * tb.CLOCK_NS)


@tb.traffic_test
async def encode_cases(dut, traffic):
    """Every case under this traffic profile, frames back to back: exact frames, nothing lost.
    One cocotb test per profile (tb_util.traffic_test), so a failure hides no other profile."""
    cases, skipped = runnable(tb.selected_cases("encode"), dut._log)
    results = {name: ("skip", why) for name, why in skipped.items()}
    if not cases:
        tb.write_case_results("zrle_encoder", results)
        assert skipped, "no cases selected"
        return
    await tb.start(dut)
    env = EncoderEnv(dut)
    rng = random.Random(tb.env_int("TB_SEED", 7))
    failed: dict[str, str] = {}
    p_in, p_out = traffic
    tag = f"[traffic in {p_in} out {p_out}]"
    env.traffic(p_in, p_out, rng)
    env.out.clear()
    env.inp.clear()
    slack = 12.0 / ((1 - p_in) * (1 - p_out))
    sender = cocotb.start_soon(env.send_frames(cases))
    got = await with_timeout(env.receive_frames(cases), time_limit_ns(cases, slack), "ns")
    await sender
    for name, msg in got.items():
        failed.setdefault(name, f"{tag} {msg}")
    # every payload word was taken exactly once, in order; m_tlast exactly on each t1
    at, out_at = 0, 0
    for c in cases:
        msg = tb.first_mismatch(c.name, "payload words taken", c.payload.view(np.uint32),
                                env.inp.words[at:at + c.n])
        if msg:
            failed.setdefault(c.name, f"{tag} {msg}")
        lasts = env.out.lasts[out_at:out_at + c.frame.size]
        if [i for i, last in enumerate(lasts) if last] != [c.frame.size - 1]:
            failed.setdefault(c.name, f"{tag} case {c.name}: m_tlast not exactly on t1")
        at += c.n
        out_at += c.frame.size
    for c in cases:
        results[c.name] = ("fail", failed[c.name]) if c.name in failed else ("pass", "")
    tb.write_case_results("zrle_encoder", results)
    assert not failed, "\n".join(list(failed.values())[:20])
    dut._log.info("%d cases exact under traffic %s:%s", len(cases), p_in, p_out)


@cocotb.test()
async def reset_mid_frame(dut):
    """Reset while a frame is in flight (header, tokens, input stalled); the next frame is exact."""
    limit = lmax_log2_max()
    lg = min(3, limit)
    rng = np.random.default_rng(11)
    vals = rng.integers(1, 2**31, size=300).astype(np.int32)
    vals[rng.random(300) < 0.4] = 0
    victim = tb.make_case("victim", vals, lg, 5)
    clean = tb.make_case("clean", np.where(rng.random(200) < 0.5, vals[:200], 0), lg, 6)
    await tb.start(dut)
    env = EncoderEnv(dut)
    prng = random.Random(3)
    for when, p_out in ((2, 0.0), (9, 0.5), (40, 0.0), (150, 0.8)):
        env.traffic(0.2, p_out, prng)
        sender = cocotb.start_soon(env.send_frames([victim]))
        await ClockCycles(dut.clk, when)
        sender.cancel()
        dut.cfg_valid.value = 0
        await tb.reset_endpoints_idle(dut, env.source, env.sink)
        env.traffic(0.0, 0.0, prng)
        env.out.clear()
        sender = cocotb.start_soon(env.send_frames([clean]))
        got = await with_timeout(env.receive_frames([clean]), time_limit_ns([clean]), "ns")
        await sender
        assert not got, f"after reset at cycle {when}: " + "\n".join(got.values())
        assert len(env.out.words) == clean.frame.size, \
            f"after reset at cycle {when}: {len(env.out.words)} words out, frame has {clean.frame.size}"


@cocotb.test()
async def config_clamp(dut):
    """cfg_lmax_log2 0 encodes as 1, anything above the build's LMAX_LOG2_MAX as that maximum;
    the frame's h1 names the value used, so it decodes."""
    limit = lmax_log2_max()
    rng = np.random.default_rng(8)
    payload = np.where(rng.random(70) < 0.7, rng.integers(1, 2**31, size=70), 0).astype(np.int32)
    await tb.start(dut)
    env = EncoderEnv(dut)
    env.traffic(0.2, 0.2, random.Random(2))
    for asked, used in ((0, 1), (limit + 1, limit), (31, limit)):
        want = tb.make_case(f"clamp_{asked}", payload, used, 3)
        asked_case = tb.CodecCase(want.name, want.payload, want.frame, want.layer_id,
                                  want.range_bits, asked)
        sender = cocotb.start_soon(env.send_frames([asked_case]))
        got = await with_timeout(env.receive_frames([want]), time_limit_ns([want]), "ns")
        await sender
        assert not got, f"cfg_lmax_log2 {asked}: " + "\n".join(got.values())


@cocotb.test()
async def ready_paths(dut):
    """No combinational path from m_tready to s_tready or cfg_ready: in the middle of each
    cycle of a frame (random input valid, random m_tready) m_tready is flipped and the ready
    outputs must not move."""
    limit = lmax_log2_max()
    rng = random.Random(9)
    vals = np.random.default_rng(9).integers(1, 2**31, size=300).astype(np.int32)
    vals[np.random.default_rng(10).random(300) < 0.4] = 0
    case = tb.make_case("ready_probe", vals, min(3, limit), 1)
    await tb.start(dut)
    dut.s_tvalid.value = 0
    dut.m_tready.value = 0
    dut.cfg_valid.value = 0
    words = [int(x) for x in case.payload.view(np.uint32)]
    sent, configured, frames_seen = 0, False, 0
    for cycle in range(2500):
        await FallingEdge(dut.clk)
        valid = int(configured and sent < len(words) and rng.random() < 0.8)
        dut.s_tvalid.value = valid
        dut.s_tdata.value = words[sent] if valid else 0
        if not configured:
            dut.cfg_valid.value = 1
            dut.cfg_layer_id.value = case.layer_id
            dut.cfg_n.value = case.n
            dut.cfg_range_bits.value = case.range_bits
            dut.cfg_lmax_log2.value = case.lmax_log2
        m_ready = int(rng.random() < 0.5)
        dut.m_tready.value = m_ready
        await Timer(1, "ns")
        before = (int(dut.s_tready.value), int(dut.cfg_ready.value))
        dut.m_tready.value = 1 - m_ready
        await Timer(1, "ns")
        after = (int(dut.s_tready.value), int(dut.cfg_ready.value))
        assert before == after, (f"cycle {cycle}: (s_tready, cfg_ready) went {before} -> {after} "
                                 f"when only m_tready changed")
        dut.m_tready.value = m_ready
        handshake_cfg = not configured and before[1] == 1
        handshake_in = valid and before[0] == 1
        last_out = m_ready and dut.m_tvalid.value == 1 and dut.m_tlast.value == 1
        await RisingEdge(dut.clk)
        if handshake_cfg:
            configured = True
            dut.cfg_valid.value = 0
        if handshake_in:
            sent += 1
        if last_out:
            frames_seen += 1
            configured, sent = False, 0
    assert frames_seen >= 2, f"only {frames_seen} frames completed while probing"


def ideal_cycles(case: tb.CodecCase) -> int:
    """Cycles from the config handshake to t1 for an ideal streaming encoder: one input word and
    one output word per cycle, unlimited buffering, zero latency. A token can leave once the
    input word that closes it (the zero after its run, its LMAX-th literal, or the last word)
    has been read, because L precedes the literals."""
    lmax = 1 << case.lmax_log2
    z, L, lit_s = zrle.tokens(case.payload, lmax)
    n = case.n
    out_free = 1 + zrle.HEADER_WORDS          # header leaves in cycles 1..5
    close = 0
    for zk, lk, sk in zip(z, L, lit_s):
        if lk == 0 or sk + lk == n:
            close = n                          # closes with the last word
        elif lk == lmax:
            close = sk + lk                    # its LMAX-th literal (1-based cycle)
        else:
            close = sk + lk + 1                # the zero after the run
        out_free = max(out_free, close + 1) + 2 + int(lk)
    out_free = max(out_free, n + 1)
    return out_free + 2 - 1                    # t0, t1; cycle of t1


@cocotb.test()
async def throughput(dut):
    """Unthrottled: cycles per frame against the ideal encoder; dense payloads must leave at one
    word per cycle once the first token is out, zero runs must be read at one word per cycle."""
    limit = lmax_log2_max()
    rng = np.random.default_rng(5)
    n = 2048

    def nz(k):
        v = rng.integers(1, 2**31, size=k).astype(np.int32)
        return v

    patterns = []
    for lg in sorted({1, 3, min(8, limit)}):
        if lg <= limit:
            patterns.append((f"dense_lg{lg}", nz(n), lg))
    lg = min(8, limit)
    patterns += [
        ("all_zero", np.zeros(n, np.int32), lg),
        ("sparse_1pct", np.where(rng.random(n) < 0.01, nz(n), 0).astype(np.int32), lg),
        ("half", np.where(rng.random(n) < 0.5, nz(n), 0).astype(np.int32), lg),
        ("blocks_25pct", np.where(np.repeat(rng.random(n // 64) < 0.25, 64), nz(n), 0).astype(np.int32), lg),
    ]
    await tb.start(dut)
    env = EncoderEnv(dut)
    env.traffic(0.0, 0.0, random.Random(0))
    problems = []
    for name, payload, lg in patterns:
        case = tb.make_case(name, payload, lg, 1)
        env.out.clear()
        env.inp.clear()
        sender = cocotb.start_soon(env.send_frames([case]))
        cfg_cycle = None
        while cfg_cycle is None:
            await RisingEdge(dut.clk)
            if dut.cfg_valid.value == 1 and dut.cfg_ready.value == 1:
                cfg_cycle = tb.cycle_now()
        got = await with_timeout(env.receive_frames([case]), time_limit_ns([case]), "ns")
        await sender
        problems += got.values()
        W, cyc = case.frame.size, env.out.cycles
        cycles = cyc[-1] - cfg_cycle
        ideal = ideal_cycles(case)
        first_tok = cyc[zrle.HEADER_WORDS] if W > zrle.HEADER_WORDS + 2 else cyc[-1]
        token_span = cyc[-1] - first_tok + 1
        in_span = (env.inp.cycles[-1] - env.inp.cycles[0] + 1) if env.inp.cycles else 0
        rec = {"module": "zrle_encoder", "pattern": name, "lmax_log2": lg, "n": case.n,
               "frame_words": int(W), "cycles": int(cycles), "ideal_cycles": int(ideal),
               "overhead_cycles": int(cycles - ideal),
               "cycles_per_out_word_after_first_token": token_span / (W - zrle.HEADER_WORDS),
               "cycles_per_in_word": in_span / case.n}
        tb.write_metrics(rec)
        dut._log.info("throughput %s", rec)
        if cycles - ideal > 4:
            problems.append(f"{name}: {cycles} cycles, ideal streaming encoder {ideal}")
        if name.startswith("dense") and token_span != W - zrle.HEADER_WORDS:
            problems.append(f"{name}: tokens and trailer took {token_span} cycles for "
                            f"{W - zrle.HEADER_WORDS} words")
        if name in ("all_zero", "sparse_1pct") and in_span != case.n:
            problems.append(f"{name}: {in_span} cycles to read {case.n} payload words")
    assert not problems, "\n".join(problems)
