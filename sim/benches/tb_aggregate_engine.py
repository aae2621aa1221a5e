"""cocotb testbench of hw/aggregate_engine.sv: golden exchange cases (N worker frames -> int64
sums, or the reference's error) with the sums in a cocotbext-axi AxiRam (64-bit data), checked
word for word after every layer, 16 guard words on each side checked untouched. Random idle
cycles on the frame stream and on all five AXI channels; hostile cases (bad CRC, mismatched
layer id / range, truncated frame, size mismatch) each followed by a clean layer; a refused
configuration; resets mid-layer with bursts in flight; cycles and memory beats per layer;
rready never low while rvalid is high (the read FIFO has room for every burst it asks for).

Lanes (issue 31): W is the frame stream's width over 32 (s_tdata[32W], word-level s_tkeep): the
frames go in as dense W-word beats, the sums sit in an AxiRam of 64·W bits (sum i in beat i / W,
lane i % W), the bases are aligned to a beat; a sum beat holding a literal is read and written
once per frame, so the memory beats are counted per touched beat (one per literal at W = 1).

Cases: the "exchange" list of every golden directory in TB_GOLDEN_DIR / TB_GOLDEN_DIRS
(gradblock.golden.format.load_exchange), narrowed by TB_CASES and TB_MAX_N.
Layers alternate between cfg_clear = 1 (the memory holds garbage first) and adding onto
random int64 start values (expected = start + sums).
"""
from __future__ import annotations

import types

import numpy as np

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from gradblock.codec import zrle
from gradblock.hw.sv_constants import codes
from gradblock.golden.format import load_exchange
from gradblock.sim.benches import tb_util
from gradblock.sim.benches.tb_util import hdl_parameter as param   # the build's, from the runner
from gradblock.sim import functional_bins
from gradblock.sim.functional_bins import record as record_bins

MODULE = "aggregate_engine"


def _lanes() -> int:
    """W, the build's lanes: the frame stream's width over 32."""
    sig = getattr(getattr(cocotb, "top", None), "s_tdata", None)
    return len(sig) // 32 if sig is not None else 1


W = _lanes()
BEAT = 8 * W                       # bytes a sum beat: the bases' alignment
GUARD_WORDS = 16
GUARD = 0xA5C3_5A3C_0F1E_2D3B
BASE = 0x1000 * 3 - BEAT * 5       # not 4 KiB aligned: bursts split at the page boundary
FRAME_CODES = codes("FRAME_ERR_")
AGG_CODES = codes("AGG_ERR_")


def error_code(name: str) -> int:
    """The RTL's err_code for a golden error name (gradblock_pkg)."""
    return FRAME_CODES[name] if name in FRAME_CODES else AGG_CODES[name]


def load_exchange_cases():
    wanted = tb_util.wanted_cases()
    hi = tb_util.n_bounds()[1]
    cases = [c for d in tb_util.golden_dirs() for c in load_exchange(d)]
    unknown = sorted(wanted - {c.name for c in cases})
    if unknown:
        raise ValueError(f"TB_CASES names unknown cases: {unknown}")
    cases = [c for c in cases if (not wanted or c.name in wanted) and c.meta["n"] <= hi]
    if not cases:
        raise RuntimeError("no exchange case in the golden directories within the selection")
    return cases


def worker_frames(case) -> list[list[int]]:
    ends = np.cumsum(case.meta["frame_words"])
    f = case.arrays["frames"]
    return [f[e - w:e].tolist() for e, w in zip(ends, case.meta["frame_words"])]


def decoded(case):
    return [zrle.decode_frame(np.asarray(f, np.uint32), case.meta["n"])
            for f in worker_frames(case)]


def literals(case) -> int:
    """Literals of a valid exchange."""
    return sum(int(np.count_nonzero(fr.values)) for fr in decoded(case))


def touched_beats(case) -> int:
    """Sum beats holding a literal, per frame: what the engine reads and writes, one R and one
    W beat each (one per literal at W = 1)."""
    return sum(len(np.unique(np.flatnonzero(fr.values) // W)) for fr in decoded(case))


def tokens(case) -> int:
    return sum(fr.n_tokens for fr in decoded(case))


# the AXI master's outputs besides the constant ones: the idle address, length and W lines are
# reset on purpose (no X on the bus while nothing is offered, hw/aggregate_engine.sv)
AXI_OUTPUTS = ("m_axi_araddr", "m_axi_arlen", "m_axi_arvalid", "m_axi_rready", "m_axi_awaddr",
               "m_axi_awlen", "m_axi_awvalid", "m_axi_wdata", "m_axi_wstrb", "m_axi_wlast",
               "m_axi_wvalid", "m_axi_bready")


def check_resolved(dut, when: str) -> None:
    """No X or Z on the AXI master's outputs (sharp after a simulation's first reset, when the
    unreset data registers still hold X on a four-state simulator)."""
    bad = [n for n in AXI_OUTPUTS if set(str(getattr(dut, n).value)) - set("01")]
    assert not bad, f"X or Z on {bad} {when}"


async def start_engine(dut) -> None:
    """Clock and reset (tb_util.start_streams), then the master's outputs checked resolved."""
    await tb_util.start_streams(dut)
    check_resolved(dut, "after the reset")


class Engine(tb_util.AxiEngineBench):
    def __init__(self, dut, mem_bytes: int):
        super().__init__(dut, mem_bytes)
        if hasattr(dut, "s_tkeep"):     # word-level: cocotbext-axi sizes a "byte" 32 bits from it
            self.src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s"), dut.clk, dut.rst)
            tb_util.quiet(self.src)
        else:
            self.src = tb_util.source(dut, "s")
        self.inputs.insert(0, self.src)
        self.rng = np.random.default_rng(5)
        self.r_stalls = 0           # cycles with rvalid high and rready low: must stay 0

    def on_cycle(self) -> None:
        if self.dut.m_axi_rvalid.value == 1 and self.dut.m_axi_rready.value == 0:
            self.r_stalls += 1

    # ---- memory
    def write_sums(self, base: int, values) -> None:
        self.ram.write(base, np.asarray(values, np.int64).tobytes())

    def sums(self, base: int, n: int) -> np.ndarray:
        return np.frombuffer(self.ram.read(base, 8 * n), np.int64)

    def load(self, base: int, n: int, clear: bool) -> np.ndarray:
        """Guards around the region and its start values (garbage when the engine clears);
        returns what the region must hold before the frames add to it."""
        guard = np.full(GUARD_WORDS, GUARD, np.uint64)
        self.ram.write(base - 8 * GUARD_WORDS, guard.tobytes())
        self.ram.write(base + 8 * n, guard.tobytes())
        start = self.rng.integers(-2**62, 2**62, n, dtype=np.int64)
        self.write_sums(base, start)
        return np.zeros(n, np.int64) if clear else start

    def check_guards(self, name: str, base: int, n: int) -> None:
        for where, addr in (("before", base - 8 * GUARD_WORDS), ("after", base + 8 * n)):
            tb_util.check_words(name, f"memory {where} the sums", [GUARD] * GUARD_WORDS,
                                np.frombuffer(self.ram.read(addr, 8 * GUARD_WORDS), np.uint64),
                                width=64)

    # ---- control
    async def configure(self, n: int, workers: int, base: int, clear: bool) -> int:
        return await self.present_config({"n": n, "workers": workers, "sum_base": base,
                                          "clear": int(clear)})

    def status(self) -> dict:
        d = self.dut
        return {k: int(getattr(d, k).value) for k in (
            "err_code", "err_word", "err_worker", "frames_done", "hdr_layer_id",
            "hdr_range_bits", "lit_count", "rd_beats", "wr_beats")}

    async def run_layer(self, case, clear: bool, base: int = BASE, frames=None):
        """Config, every worker's frame, done. Returns (expected start, status, cycles)."""
        n, workers = case.meta["n"], case.meta["n_workers"]
        start_vals = self.load(base, n, clear)
        frames = worker_frames(case) if frames is None else frames
        before = self.done_seen
        t0 = await self.configure(n, workers, base, clear)
        for f in frames:
            await self.src.send(AxiStreamFrame(tdata=f))
        words = sum(len(f) for f in frames)
        await self.wait_done(before, 60 * (words + workers * n) + 60 * n + 5000,
                             f"case {case.name}")
        return start_vals, self.status(), self.done_cycle - t0

    def check(self, case, start_vals, status, clear: bool, base: int = BASE) -> None:
        name, n, err = case.name, case.meta["n"], case.meta["error"]
        self.check_guards(name, base, n)
        tb_util.check_value(name, "cycles the engine held off read data (rready low)", 0,
                            self.r_stalls)
        tb_util.check_value(name, "frames_done", case.meta["n_workers"], status["frames_done"])
        if err is None:
            tb_util.check_value(name, "err_code", 0, status["err_code"])
            tb_util.check_words(name, "sums", (start_vals + case.arrays["sums"]).view(np.uint64),
                                self.sums(base, n).view(np.uint64), width=64)
            lit, beats = literals(case), touched_beats(case)
            tb_util.check_value(name, "lit_count", lit, status["lit_count"])
            tb_util.check_value(name, "rd_beats (one per sum beat holding a literal)", beats,
                                status["rd_beats"])
            tb_util.check_value(name, "wr_beats (those, and one per cleared sum beat)",
                                beats + (-(-n // W) if clear else 0), status["wr_beats"])
            if case.meta["n_workers"]:
                tb_util.check_value(name, "hdr_layer_id", case.meta["layer_id"],
                                    status["hdr_layer_id"])
                tb_util.check_value(name, "hdr_range_bits", case.meta["range_bits"],
                                    status["hdr_range_bits"])
        else:
            tb_util.check_value(name, f"err_code ({err['name']})", error_code(err["name"]),
                                status["err_code"])
            tb_util.check_value(name, "err_worker", err["worker"], status["err_worker"])
            tb_util.check_value(name, "err_word", err["word"], status["err_word"])


def mem_bytes_for(cases) -> int:
    top = BASE + 8 * (max(c.meta["n"] for c in cases) + GUARD_WORDS) + 4096
    return 1 << max(16, top.bit_length())


def good_cases(cases):
    return [c for c in cases if c.meta["error"] is None]


@tb_util.traffic_test
async def golden_cases(dut, traffic):
    """Every exchange case, layer after layer without reset, under this traffic profile; an
    error case is followed by a clean layer (with clear) that must be exact."""
    cases = load_exchange_cases()
    tb = Engine(dut, mem_bytes_for(cases))
    await start_engine(dut)
    # the smallest valid layer with elements: what must come out exact after an error
    clean = min([c for c in good_cases(cases) if c.meta["n"]] or cases, key=lambda c: c.meta["n"])
    layer = 0

    async def run_case(case):
        nonlocal layer
        layer += 1
        clear = layer % 2 == 1
        start_vals, status, _ = await tb.run_layer(case, clear)
        tb.check(case, start_vals, status, clear)
        if case.meta["error"] is not None and clean.meta["error"] is None:
            start_vals, status, _ = await tb.run_layer(clean, True)
            tb.check(clean, start_vals, status, True)
            return f"{case.meta['error']['name']} reported, then {clean.name} exact"
        return ""

    await tb_util.golden_loop(dut, MODULE, cases, run_case, tb.inputs, [], traffic)


@cocotb.test()
async def config_errors(dut):
    """A base not 8-aligned (at W > 1 also one 8-aligned but not on a beat), sums past the
    address space, 0 workers: AGG_ERR_CONFIG, no frame word taken, memory untouched; then an
    exact layer."""
    cases = good_cases(load_exchange_cases())
    tb = Engine(dut, mem_bytes_for(cases))
    await start_engine(dut)
    case = tb_util.medium_case(cases, 256)
    n, workers = case.meta["n"], case.meta["n_workers"]
    bad = [("base not 8-aligned", BASE + 4, workers),
           ("sums past the address space", 2 ** param("ADDR_W") - BEAT, workers),
           ("0 workers", BASE, 0)]
    if W > 1:
        bad.insert(1, ("base 8-aligned, not on a beat", BASE + BEAT - 8, workers))
    for what, base, w in bad:
        start_vals = tb.load(BASE, n, False)
        before = tb.done_seen
        await tb.configure(n, w, base, True)
        await tb.wait_done(before, 10, what)
        await ClockCycles(dut.clk, 2)
        st = tb.status()
        tb_util.check_value(case.name, f"err_code ({what})", AGG_CODES["CONFIG"], st["err_code"])
        assert dut.s_tready.value == 0, f"{what}: frame input taken"
        tb_util.check_words(case.name, f"sums ({what})", start_vals.view(np.uint64),
                            tb.sums(BASE, n).view(np.uint64), width=64)
        record_bins("aggregate.err.CONFIG")
    start_vals, status, _ = await tb.run_layer(case, False)
    tb.check(case, start_vals, status, False)


@cocotb.test()
async def config_edges(dut):
    """Configurations at the edges that must be accepted: sums ending exactly at the top of the
    address space (all-zero frames, so nothing touches the memory: done, no error, every frame
    taken; one beat further is AGG_ERR_CONFIG, config_errors); layers with clear whose base
    lies in an odd 4 KiB page (address bit 12 set) off the burst grid, so the first clear burst
    ends at the page end; and layers with clear of n = 8W + r for every tail r = 1 .. W - 1 (the
    golden n are mostly multiples of 4), so the last clear beat keeps lanes 0 .. r - 1 only:
    exact, guards untouched."""
    cases = good_cases(load_exchange_cases())
    pool = [c for c in cases if literals(c)] or cases
    case = tb_util.medium_case(pool, 256)
    bases = [0x4000 - BEAT * 5, 0x6000 - BEAT * 11]     # 4 KiB pages 3 and 5
    top = max(bases) + 8 * (case.meta["n"] + GUARD_WORDS) + 4096
    tb = Engine(dut, 1 << max(16, top.bit_length()))
    await start_engine(dut)
    n, workers = 16 * 6, 2
    frames = [zrle.encode_frame(np.zeros(n, np.int32), layer_id=9, R=3.0).tolist()] * workers
    before = tb.done_seen
    await tb.configure(n, workers, 2 ** param("ADDR_W") - 8 * n, False)
    for f in frames:
        await tb.src.send(AxiStreamFrame(tdata=f))
    await tb.wait_done(before, 60 * sum(map(len, frames)) + 2000, "sums at the address top")
    st = tb.status()
    what = "sums ending at the top of the address space"
    tb_util.check_value(what, "err_code", 0, st["err_code"])
    tb_util.check_value(what, "frames_done", workers, st["frames_done"])
    tb_util.check_value(what, "memory beats", 0, st["rd_beats"] + st["wr_beats"])
    for base in bases:
        start_vals, status, _ = await tb.run_layer(case, True, base=base)
        tb.check(case, start_vals, status, True, base=base)
    rng = np.random.default_rng(31)
    for r in range(1, W) if W > 1 else [1]:
        tail = synthetic_case(rng, f"clear_tail_{r}", 8 * W + r, 2)
        start_vals, status, _ = await tb.run_layer(tail, True)
        tb.check(tail, start_vals, status, True)


def synthetic_case(rng, name: str, n: int, workers: int):
    """A valid exchange case made here: each worker's sparse random int32 payload (a third of
    the elements nonzero) as its frame (codec.zrle), the sums their int64 total."""
    payloads = [np.where(rng.random(n) < 0.34, rng.integers(-2**31, 2**31, n), 0).astype(np.int32)
                for _ in range(workers)]
    frames = [zrle.encode_frame(p, layer_id=5, R=2.0) for p in payloads]
    meta = {"name": name, "n": n, "n_workers": workers, "frame_words": [len(f) for f in frames],
            "error": None, "layer_id": 5, "range_bits": zrle.range_bits(2.0)}
    arrays = {"frames": np.concatenate(frames),
              "sums": np.sum([p.astype(np.int64) for p in payloads], axis=0)}
    return types.SimpleNamespace(name=name, meta=meta, arrays=arrays)


@cocotb.test()
async def reset_mid_layer(dut):
    """Resets in the clear phase and in the middle of the frames with bursts in flight, each
    followed by an exact layer (a layer cut short leaves its sums partly added, by design)."""
    cases = good_cases(load_exchange_cases())
    tb = Engine(dut, mem_bytes_for(cases))
    await start_engine(dut)
    case = max(cases, key=lambda c: sum(c.meta["frame_words"]) if c.meta["n"] <= 2048 else 0)
    n = case.meta["n"]
    for salt, when in enumerate(("clear", "frames")):
        tb_util.set_traffic(tb.inputs, [], 0.3, 0.0, salt + 1)
        tb.load(BASE, n, True)
        await tb.configure(n, case.meta["n_workers"], BASE, True)

        async def feed():
            for f in worker_frames(case):
                await tb.src.send(AxiStreamFrame(tdata=f))

        cocotb.start_soon(feed())
        if when == "clear":
            await ClockCycles(dut.clk, max(4, n // 8))
        else:      # the second frame's first read burst marks the middle
            reads = 0
            while reads < 3 or int(dut.frames_done.value) < 1:
                await RisingEdge(dut.clk)
                if dut.m_axi_arvalid.value == 1 and dut.m_axi_arready.value == 1:
                    reads += 1
        await tb_util.reset(dut)
        await ClockCycles(dut.clk, 2)
        assert dut.busy.value == 0, f"busy after a reset in {when}"
        assert dut.m_axi_arvalid.value == 0 and dut.m_axi_awvalid.value == 0 \
            and dut.m_axi_wvalid.value == 0, f"AXI requests pending after a reset in {when}"
        # the status a host reads after a reset, before any configuration: the reset state
        # (every status output 0), not what the aborted layer left
        after = {**tb.status(), **{k: int(getattr(dut, k).value)
                                   for k in ("done", "err_valid", "busy")}}
        assert after == dict.fromkeys(after, 0), f"status after a reset in {when}: {after}"
        assert dut.cfg_ready.value == 1, f"cfg_ready low after a reset in {when}"
        check_resolved(dut, f"after a reset in {when}")
        await ClockCycles(dut.clk, 20)          # let the feeder see the reset and stop
        tb_util.no_traffic(tb.inputs)
        start_vals, status, _ = await tb.run_layer(case, salt == 0)
        tb.check(case, start_vals, status, salt == 0)


@cocotb.test()
async def memory_errors(dut):
    """AGG_ERR_MEMORY: the memory answers one read, then (next layer) one write, with SLVERR
    (cocotbext-axi's AxiRam answers SLVERR when its backing store raises; DECERR sets the same
    bit 1 of rresp/bresp the engine reads). The layer still ends (done, every frame taken)
    with err_code MEMORY, and the next layer, on a healthy memory, is exact."""
    cases = good_cases(load_exchange_cases())
    tb = Engine(dut, mem_bytes_for(cases))
    await start_engine(dut)
    pool = [c for c in cases if literals(c)]
    case = tb_util.medium_case(pool, 256)
    for side in ("read", "write"):
        with tb_util.memory_fails_once(tb.ram, side) as hits:
            _, status, _ = await tb.run_layer(case, False)
        assert hits, f"{case.name}: no {side} to fail"
        tb_util.check_value(case.name, f"err_code after a failed {side}",
                            AGG_CODES["MEMORY"], status["err_code"])
        tb_util.check_value(case.name, f"frames_done after a failed {side}",
                            case.meta["n_workers"], status["frames_done"])
        record_bins("aggregate.err.MEMORY")
        start_vals, status, _ = await tb.run_layer(case, False)
        tb.check(case, start_vals, status, False)


@cocotb.test()
async def reset_in_every_state(dut):
    """A reset in every state of aggregate_engine's FSM (state_t: the configuration checks,
    the clear phase, the frames), bursts in flight, each followed by an exact layer: records
    reset.aggregate_engine.<STATE> (sim/functional_bins.py)."""
    cases = good_cases(load_exchange_cases())
    tb = Engine(dut, mem_bytes_for(cases))
    await start_engine(dut)
    case = tb_util.medium_case([c for c in cases if literals(c)], 256)
    n, workers = case.meta["n"], case.meta["n_workers"]

    async def start():
        tb_util.set_traffic(tb.inputs, [], 0.3, 0.0, 3)
        tb.load(BASE, n, True)
        await tb.configure(n, workers, BASE, True)
        for f in worker_frames(case):
            await tb.src.send(AxiStreamFrame(tdata=f))

    async def recover():
        await ClockCycles(dut.clk, 2)
        assert dut.busy.value == 0, "busy after a reset"
        tb_util.no_traffic(tb.inputs)
        start_vals, status, _ = await tb.run_layer(case, True)
        tb.check(case, start_vals, status, True)

    words = sum(len(f) for f in worker_frames(case))
    reached = await functional_bins.reset_in_every_state(
        dut, MODULE, start, recover, flush=tb.src.clear,
        limit=60 * (words + workers * n) + 5000)
    assert reached, "no state reached"


@cocotb.test()
async def throughput(dut):
    """Unthrottled, memory one beat per cycle: cycles from the config handshake to done and the
    AXI beats per layer, for every valid case (TB_METRICS), without and with clear.
    Asserted: one R and one W beat per sum beat holding a literal (per literal at W = 1), none
    per zero, the clear one W beat per W sums, and cycles <= sum over workers of (frame words
    + 40) + 40 at W = 1; at W > 1 of (ceil(frame words / W) + tokens + 40) + 40, the lane
    decoder's step count (a token's z and L take a step, its literals ceil(L / W)); the clear
    adds ceil(n / W) + 2 ceil(n / W / MAX_BURST) + 40. The decoder gives a zero run as one beat,
    so a frame costs its words, not n."""
    cases = good_cases(load_exchange_cases())
    tb = Engine(dut, mem_bytes_for(cases))
    await start_engine(dut)
    tb_util.no_traffic(tb.inputs)
    for case in cases:
        n, workers = case.meta["n"], case.meta["n_workers"]
        words = sum(case.meta["frame_words"])
        lit, touched, toks = literals(case), touched_beats(case), tokens(case)
        n_beats = -(-n // W)
        for clear in (False, True):
            tb.beats = dict.fromkeys(tb.beats, 0)
            start_vals, status, cycles = await tb.run_layer(case, clear)
            tb.check(case, start_vals, status, clear)
            b = dict(tb.beats)
            if W == 1:
                budget = sum(w + 40 for w in case.meta["frame_words"]) + 40
            else:
                budget = sum(-(-w // W) + 40 for w in case.meta["frame_words"]) + toks + 40
            if clear:
                budget += n_beats + 2 * (-(-n_beats // param("MAX_BURST"))) + 40
            tb_util.write_metrics({
                "module": MODULE, "case": case.name, "sim": cocotb.SIM_NAME, "clear": clear,
                "lanes": W, "n": n, "workers": workers, "frame_words": words, "literals": lit,
                "sum_beats": touched, "cycles": cycles, "budget": budget, "axi_beats": b,
                "cycles_per_frame_word": round(cycles / words, 4),
                "frame_words_per_cycle": round(words / cycles, 4),
                "cycles_per_element_per_worker": round(cycles / (n * workers), 4) if n else None,
                "mem_beats_per_literal":
                round((b["r"] + b["w"] - (n_beats if clear else 0)) / lit, 4) if lit else None})
            dut._log.info(f"{case.name} clear={clear}: n {n} x {workers} workers, {words} frame "
                          f"words, {lit} literals: {cycles} cycles (budget {budget}), beats {b}")
            tb_util.check_value(case.name, "R beats", touched, b["r"])
            tb_util.check_value(case.name, "W beats", touched + (n_beats if clear else 0), b["w"])
            assert cycles <= budget, f"case {case.name}: {cycles} cycles, budget {budget}"
