"""cocotb testbench of hw/compress_top.sv against golden vectors: (grad_bits, residual_in) ->
ZRLE frame + residual_out + saturation counts, layer after layer, under random backpressure on
the input and both outputs; configuration errors; a misplaced tlast; resets in either pass;
cycles per word at full rate.

The RTL's build parameters come from the runner (tb_util.hdl_parameter). A case
the build cannot hold (n > N_MAX, k_eff > K_MAX, lmax_log2 > LMAX_LOG2_MAX) must be refused
with its error code, without consuming data.
"""
from __future__ import annotations

import numpy as np

import cocotb
from cocotb.simtime import get_sim_time
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame

from gradblock.codec.zrle import encode_frame
from gradblock.hw.sv_constants import package_constants
from gradblock.golden.format import case_norm
from gradblock.sim.benches import tb_util
from gradblock.sim.benches.tb_util import hdl_parameter as build_param   # the build's, from the runner
from gradblock.sim import functional_bins
from gradblock.sim.functional_bins import record as record_bins

# cfg_norm per norm kind (gradblock_pkg::NORM_L1 / NORM_L2; docs/spec.md §2.3)
NORM_BIT = {"l1": package_constants()["NORM_L1"], "l2": package_constants()["NORM_L2"]}

MODULE = "compress_top"
# err_code values come from the package the RTL compiles (gradblock_pkg TOP_*), not a copy
_TOP = package_constants()
ERR_OK = _TOP["TOP_OK"]
ERR_N = _TOP["TOP_ERR_N_OVER_N_MAX"]
ERR_BLOCK_SIZE = _TOP["TOP_ERR_BLOCK_SIZE_ZERO"]
ERR_N_BLOCKS = _TOP["TOP_ERR_N_BLOCKS_MISMATCH"]
ERR_K = _TOP["TOP_ERR_K_ZERO"]
ERR_K_MAX = _TOP["TOP_ERR_K_OVER_K_MAX"]
ERR_LMAX = _TOP["TOP_ERR_LMAX_RANGE"]
ERR_RANGE = _TOP["TOP_ERR_RANGE_INVALID"]
ERR_M = _TOP["TOP_ERR_M_BELOW_HALF"]
ERR_TLAST = _TOP["TOP_ERR_TLAST_MISPLACED"]
ERR_NAME = {v: k[len("TOP_ERR_"):] for k, v in _TOP.items() if k.startswith("TOP_ERR_")}


def config_of(case) -> dict:
    m = case.meta
    return {"n": m["n"], "block_size": m["block_size"], "n_blocks": m["n_blocks"],
            "k": m["k_eff"], "m": m["M"], "k_shift": m["k_shift"] & 0xFFFFFFFF,
            "range_bits": m["range_bits"], "layer_id": m["layer_id"], "lmax_log2": m["lmax_log2"],
            "norm": NORM_BIT[case_norm(m)]}


def expected_error(cfg: dict) -> int:
    """The code the RTL must report for this configuration (docs/hw.md, compress_top): N_MAX
    first, then the layer parameters (tb_util.layer_config_error, shared with the engine)."""
    if cfg["n"] > build_param("N_MAX"):
        return ERR_N
    failed = tb_util.layer_config_error(cfg, build_param("K_MAX"), build_param("LMAX_LOG2_MAX"))
    return ERR_OK if failed is None else _TOP["TOP_ERR_" + failed]


def refusal_reason(cfg: dict, err: int) -> str:
    return {ERR_N: f"n {cfg['n']} > N_MAX {build_param('N_MAX')}",
            ERR_K_MAX: f"k_eff {min(cfg['k'], cfg['n_blocks'])} > K_MAX {build_param('K_MAX')}",
            ERR_LMAX: f"lmax_log2 {cfg['lmax_log2']} outside 1..{build_param('LMAX_LOG2_MAX')}",
            }.get(err, "invalid configuration")


def input_words(case) -> list[int]:
    g = case.arrays["grad_bits"].astype(np.uint64)
    r = case.arrays["residual_in"].view(np.uint32).astype(np.uint64)
    return ((r << np.uint64(32)) | g).tolist()


class Bench:
    def __init__(self, dut):
        self.dut = dut
        self.src = tb_util.source(dut, "s")
        self.frame = tb_util.sink(dut, "m_frame")
        self.res = tb_util.sink(dut, "m_res")
        self.endpoints = [self.src, self.frame, self.res]
        dut.cfg_valid.value = 0
        self.done_seen = 0
        cocotb.start_soon(self._count_done())

    async def _count_done(self):
        while True:
            await RisingEdge(self.dut.clk)
            if self.dut.done.value == 1:
                self.done_seen += 1

    async def configure(self, cfg: dict) -> None:
        d = self.dut
        d.cfg_n.value = cfg["n"]
        d.cfg_block_size.value = cfg["block_size"]
        d.cfg_n_blocks.value = cfg["n_blocks"]
        d.cfg_k.value = cfg["k"]
        d.cfg_m.value = cfg["m"]
        d.cfg_k_shift.value = cfg["k_shift"]
        d.cfg_range_bits.value = cfg["range_bits"]
        d.cfg_layer_id.value = cfg["layer_id"]
        d.cfg_lmax_log2.value = cfg["lmax_log2"]
        d.cfg_norm.value = cfg.get("norm", NORM_BIT["l1"])
        d.cfg_valid.value = 1
        for _ in range(1000):
            await RisingEdge(d.clk)
            if d.cfg_ready.value == 1:
                break
        else:
            raise AssertionError("cfg_ready did not rise within 1000 cycles")
        d.cfg_valid.value = 0

    async def wait_done(self, before: int, cycles: int, what: str) -> None:
        for _ in range(cycles):
            if self.done_seen > before:
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"{what}: done did not pulse within {cycles} cycles")

    def status(self) -> dict:
        d = self.dut
        return {"err_code": int(d.err_code.value), "sat_quant": int(d.sat_quant_count.value),
                "sat_feedback": int(d.sat_feedback_count.value), "nan": int(d.nan_count.value)}

    async def run_layer(self, case, cfg: dict | None = None, words=None):
        """One layer through the RTL; returns (frame words, residual words, status)."""
        cfg = cfg or config_of(case)
        n = cfg["n"]
        before = self.done_seen
        await self.configure(cfg)
        if n:
            frames = words if words is not None else [input_words(case)]
            for f in frames:
                await self.src.send(AxiStreamFrame(tdata=f))
        limit = case.meta["frame_words"]
        frame = await tb_util.recv(self.frame, limit + 2 * n, f"case {case.name}: frame")
        res = (await tb_util.recv(self.res, 2 * n, f"case {case.name}: residual_out")
               if n else None)
        await self.wait_done(before, 200, f"case {case.name}")
        return frame, res, self.status()

    def check(self, case, frame, res, status, err=ERR_OK) -> None:
        a = case.arrays
        tb_util.check_words(case.name, "frame", a["frame"], frame.tdata)
        if case.meta["n"]:
            tb_util.check_words(case.name, "residual_out", a["residual_out"].view(np.uint32),
                                res.tdata)
        tb_util.check_value(case.name, "err_code", err, status["err_code"])
        tb_util.check_value(case.name, "sat_quant", case.meta["sat_quant"], status["sat_quant"])
        tb_util.check_value(case.name, "sat_feedback", case.meta["sat_feedback"],
                            status["sat_feedback"])
        tb_util.check_value(case.name, "nan count", int(a["quant_nan"].sum()), status["nan"])

    async def refused(self, case, cfg: dict, err: int, what: str) -> None:
        """A bad configuration: its error code, done at once, no data taken, nothing out."""
        before = self.done_seen
        await self.configure(cfg)
        await self.wait_done(before, 10, f"case {case.name} ({what})")
        await ClockCycles(self.dut.clk, 2)
        tb_util.check_value(case.name, f"err_code ({what})", err, self.status()["err_code"])
        assert self.dut.s_tready.value == 0, f"case {case.name} ({what}): input taken after refusal"
        assert self.frame.empty() and self.res.empty(), \
            f"case {case.name} ({what}): output produced after refusal"
        record_bins(f"top.err.{ERR_NAME[err]}")        # seen, and refused as it must be


@tb_util.traffic_test
async def golden_cases(dut, traffic):
    """Every case, layer after layer without reset, under this traffic profile on all three
    streams. Cases this build cannot hold must be refused with the right code."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)

    async def run_case(case):
        cfg = config_of(case)
        err = expected_error(cfg)
        if err:
            why = refusal_reason(cfg, err)
            await tb.refused(case, cfg, err, why)
            return tb_util.Refused(f"refused as it must be: err_code {err} ({why})")
        tb.check(case, *await tb.run_layer(case, cfg))
        return ""

    await tb_util.golden_loop(dut, MODULE, tb_util.load_cases(MODULE), run_case, [tb.src],
                              [tb.frame, tb.res], traffic)


def small_case(cases):
    fit = [c for c in cases if expected_error(config_of(c)) == ERR_OK and c.meta["n"] > 0]
    if not fit:
        raise RuntimeError("no golden case fits this build: nothing to run the checks on")
    return tb_util.medium_case(fit, 256)


@cocotb.test()
async def config_errors(dut):
    """Each configuration check refuses its config; a clean layer runs right after."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    case = small_case(tb_util.load_cases(MODULE))
    good = config_of(case)
    n, nb = good["n"], good["n_blocks"]
    bad = [
        ("n > N_MAX", {"n": build_param("N_MAX") + 1}),
        ("block_size 0", {"block_size": 0}),
        ("n_blocks + 1", {"n_blocks": nb + 1}),
        ("n_blocks - 1", {"n_blocks": nb - 1}),
        ("n_blocks 0", {"n_blocks": 0}),
        ("k 0", {"k": 0}),
        ("lmax_log2 0", {"lmax_log2": 0}),
        ("lmax_log2 above the build", {"lmax_log2": min(24, build_param("LMAX_LOG2_MAX")) + 1}),
        ("range 0", {"range_bits": 0}),
        ("range -R", {"range_bits": good["range_bits"] | 0x80000000}),
        ("range Inf", {"range_bits": 0x7F800000}),
        ("M < 2^31", {"m": 0x7FFFFFFF}),
    ]
    if n > 1:
        bad.append(("n_blocks > n", {"block_size": 1, "n_blocks": n + 1}))
    if nb > build_param("K_MAX"):
        bad.append(("k > K_MAX", {"k": build_param("K_MAX") + 1}))
    elif n > build_param("K_MAX"):      # one-element blocks: more blocks than K_MAX
        bad.append(("k > K_MAX (block_size 1)", {"k": build_param("K_MAX") + 1,
                                                 "block_size": 1, "n_blocks": n}))
    for what, change in bad:
        cfg = {**good, **change}
        err = expected_error(cfg)
        assert err != ERR_OK, f"{what}: the testbench's own check calls this config good"
        await tb.refused(case, cfg, err, what)
    tb.check(case, *await tb.run_layer(case))


@cocotb.test()
async def empty_layer(dut):
    """n = 0: a frame of header and trailer only, no residual, done."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    case = small_case(tb_util.load_cases(MODULE))
    cfg = {**config_of(case), "n": 0, "n_blocks": 0}
    before = tb.done_seen
    await tb.configure(cfg)
    frame = await tb_util.recv(tb.frame, 7, "empty layer frame")
    await tb.wait_done(before, 50, "empty layer")
    rng = float(np.uint32(cfg["range_bits"]).view(np.float32))
    want = encode_frame(np.zeros(0, np.int32), cfg["layer_id"], rng, cfg["lmax_log2"])
    tb_util.check_words(case.name + " (n = 0)", "frame", want, frame.tdata)
    tb_util.check_value(case.name + " (n = 0)", "err_code", ERR_OK, tb.status()["err_code"])
    assert tb.res.empty(), "n = 0 produced residual words"


@cocotb.test()
async def misplaced_tlast(dut):
    """tlast one beat early: the layer is still counted by n and exact, err_code 9 reports it."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    case = small_case(tb_util.load_cases(MODULE))
    if case.meta["n"] < 2:
        raise AssertionError(f"case {case.name} is too short to misplace tlast")
    words = input_words(case)
    frame, res, status = await tb.run_layer(case, words=[words[:-1], words[-1:]])
    tb.check(case, frame, res, status, err=ERR_TLAST)
    record_bins("top.err.TLAST_MISPLACED")
    tb.check(case, *await tb.run_layer(case))


@cocotb.test()
async def reset_mid_stream(dut):
    """Resets in pass 1 and in pass 2 with data everywhere, each followed by an exact layer."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    case = small_case(tb_util.load_cases(MODULE))
    n = case.meta["n"]
    for when in ("pass 1", "pass 2"):
        tb_util.set_traffic([tb.src], [tb.frame, tb.res], 0.3, 0.3, len(when))
        await tb.configure(config_of(case))
        await tb.src.send(AxiStreamFrame(tdata=input_words(case)))
        if when == "pass 1":
            await ClockCycles(dut.clk, max(2, n // 2))
        else:     # the first residual word leaving marks pass 2; go a little further in
            while not (dut.m_res_tvalid.value == 1 and dut.m_res_tready.value == 1):
                await RisingEdge(dut.clk)
            await ClockCycles(dut.clk, max(1, n // 4))
        await tb_util.reset(dut)
        await ClockCycles(dut.clk, 2)
        tb_util.drain(tb.frame, tb.res)     # whatever completed before the reset is legitimate
        assert dut.busy.value == 0, f"busy after a reset in {when}"
        tb_util.no_traffic(tb.endpoints)
        frame, res, status = await tb.run_layer(case)
        tb.check(case, frame, res, status)


@cocotb.test()
async def reset_in_every_state(dut):
    """A reset in every state of compress_top's FSM (state_t), traffic on all three streams,
    each followed by an exact layer: records reset.compress_top.<STATE>
    (sim/functional_bins.py)."""
    tb = Bench(dut)
    await tb_util.start_streams(dut)
    case = small_case(tb_util.load_cases(MODULE))
    n = case.meta["n"]

    async def start():
        tb_util.set_traffic([tb.src], [tb.frame, tb.res], 0.3, 0.3, 9)
        await tb.configure(config_of(case))
        await tb.src.send(AxiStreamFrame(tdata=input_words(case)))

    async def recover():
        await ClockCycles(dut.clk, 2)
        tb_util.drain(tb.frame, tb.res)
        assert dut.busy.value == 0, "busy after a reset"
        tb_util.no_traffic(tb.endpoints)
        tb.check(case, *await tb.run_layer(case))

    reached = await functional_bins.reset_in_every_state(
        dut, MODULE, start, recover, flush=tb.src.clear, limit=20 * n + 2000)
    assert reached, "no state reached"


@cocotb.test()
async def throughput(dut):
    """Unthrottled: cycles per word on the input (pass 1), the residual and the frame (pass 2),
    and cycles per element for the whole layer (config to done), on the largest case and on
    the one with the densest frame (the encoder's output is the limit there)."""
    tb = Bench(dut)
    mon = tb_util.monitor(dut, "s")
    await tb_util.start_streams(dut)
    cases = [c for c in tb_util.load_cases(MODULE)
             if expected_error(config_of(c)) == ERR_OK and c.meta["n"] > 0]
    largest = max(cases, key=lambda c: c.meta["n"])
    longer = [c for c in cases if c.meta["n"] >= 32] or cases
    densest = max(longer, key=lambda c: (c.meta["frame_words"] / c.meta["n"], c.meta["n"]))
    for case in [largest] + ([densest] if densest.name != largest.name else []):
        n = case.meta["n"]
        start = get_sim_time("ns")
        frame, res, status = await tb.run_layer(case)
        end = get_sim_time("ns")
        tx = await tb_util.recv(mon, n, "input monitor")
        tb.check(case, frame, res, status)
        cycles_in = tb_util.frame_cycles(tx)
        tb_util.record_metric(MODULE, "in (pass 1)", case.name, n, cycles_in)
        tb_util.record_metric(MODULE, "residual (pass 2)", case.name, n, tb_util.frame_cycles(res))
        tb_util.record_metric(MODULE, "frame", case.name, len(frame.tdata),
                              tb_util.frame_cycles(frame))
        tb_util.record_metric(MODULE, "layer (config to done)", case.name, n,
                              round((end - start) / tb_util.CLOCK_NS))
        assert cycles_in == n, f"case {case.name}: input of {n} words took {cycles_in} cycles"
