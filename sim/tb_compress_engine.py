"""cocotb testbench of hw/compress_engine.sv: golden (grad_bits, residual_in) -> ZRLE frame, with
the residual in a cocotbext-axi AxiRam and checked word for word against residual_out after
every layer (and the words around it checked untouched). Random idle cycles on the gradient
stream and on every AXI channel of the memory, backpressure on the frame; configuration errors;
resets in either pass; cycles per layer against the budget n + 2 * (selected elements) + O(k).

Build parameters come from the runner's record (tb_util.hdl_parameter): K_MAX, LMAX_LOG2_MAX,
ADDR_W. A case the build cannot hold (k_eff > K_MAX, lmax_log2 > LMAX_LOG2_MAX) must be refused
with its code without touching memory.
"""
from __future__ import annotations

import numpy as np

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame

from gradblock.sim import tb_datapath_common as tbc
from gradblock.sim import tb_util
from gradblock.sim.tb_engine_common import AxiEngineBench

MODULE = "compress_engine"
GOLDEN_MODULE = "compress_top"      # the engine runs the golden "top" stage
ERR_OK, ERR_ADDR, ERR_BLOCK_SIZE, ERR_N_BLOCKS, ERR_K, ERR_K_MAX, ERR_LMAX, ERR_RANGE, ERR_M, \
    ERR_TLAST, ERR_AXI = range(11)
GUARD_WORDS = 16                    # checked-untouched words before and after the residual
GUARD = 0xA5C3_5A3C
# a base that is not 4 KiB aligned, so bursts must split at the boundary
BASE = 0x1000 * 3 - 4 * 5


def param(name: str) -> int:
    return tb_util.hdl_parameter(name)


def config_of(case, base: int = BASE) -> dict:
    m = case.meta
    return {"n": m["n"], "block_size": m["block_size"], "n_blocks": m["n_blocks"],
            "k": m["k_eff"], "m": m["M"], "k_shift": m["k_shift"] & 0xFFFFFFFF,
            "range_bits": m["range_bits"], "layer_id": m["layer_id"],
            "lmax_log2": m["lmax_log2"], "res_base": base}


def expected_error(cfg: dict) -> int:
    """The code the RTL must report for this configuration (docs/hw.md, compress_engine)."""
    n, bs, nb, k, rb = cfg["n"], cfg["block_size"], cfg["n_blocks"], cfg["k"], cfg["range_bits"]
    if cfg["res_base"] % 4 or cfg["res_base"] + 4 * n > 2 ** param("ADDR_W"):
        return ERR_ADDR
    if bs == 0:
        return ERR_BLOCK_SIZE
    if nb != (-(-n // bs) if n else 0):
        return ERR_N_BLOCKS
    if n and k == 0:
        return ERR_K
    if min(k, nb) > param("K_MAX"):
        return ERR_K_MAX
    if not 1 <= cfg["lmax_log2"] <= min(24, param("LMAX_LOG2_MAX")):
        return ERR_LMAX
    if rb >> 31 or (rb >> 23) & 0xFF == 0xFF or rb == 0:
        return ERR_RANGE
    if cfg["m"] < 2**31:
        return ERR_M
    return ERR_OK


def selected_elements(case) -> int:
    """Elements in the selected blocks: what pass 2 reads and zeroes."""
    n, bs = case.meta["n"], case.meta["block_size"]
    return sum(min(bs, n - int(j) * bs) for j in case.arrays["selected"].reshape(-1))


def fixed_cycles(case) -> int:
    """The budget's O(k_eff + latency) part: pipeline fill and drain, per-block set-up."""
    return 8 * case.meta["k_eff"] + 64


def cycle_budget(case) -> int:
    """n + 2 * selected elements + O(k_eff + latency): the documented bound (docs/hw.md)."""
    return case.meta["n"] + 2 * selected_elements(case) + fixed_cycles(case)


def line_rate_case(case) -> bool:
    """Where the issue's >= 0.95 elements/cycle applies: the selected blocks hold at most 2 % of
    the layer (k_eff * B <= 2 % of n) and the fixed part is at most 1 % of n, so the budget
    itself is at most 1.05 n. (The fixed part is the clock's price: the 150 MHz pipeline is
    deeper; a 1728-element layer spends ~6 % of its cycles there.)"""
    n = case.meta["n"]
    return 50 * selected_elements(case) <= n and 100 * fixed_cycles(case) <= n


class Engine(AxiEngineBench):
    def __init__(self, dut, mem_bytes: int):
        super().__init__(dut, mem_bytes)
        self.src = tbc.source(dut, "s_grad")
        self.frame = tbc.sink(dut, "m_frame")
        self.inputs.insert(0, self.src)
        self.outputs = [self.frame]

    def load_residual(self, case, base: int) -> None:
        n = case.meta["n"]
        guard = np.full(GUARD_WORDS, GUARD, np.uint32).tobytes()
        self.ram.write(base - 4 * GUARD_WORDS, guard)
        self.ram.write(base, case.arrays["residual_in"].view(np.uint32).tobytes())
        self.ram.write(base + 4 * n, guard)

    def residual(self, base: int, n: int) -> np.ndarray:
        return np.frombuffer(self.ram.read(base, 4 * n), np.uint32)

    async def configure(self, cfg: dict) -> int:
        """Present the config until it is taken; returns the cycle of the handshake."""
        return await self.present_config({name: cfg[name] for name in (
            "n", "block_size", "n_blocks", "k", "m", "k_shift", "range_bits", "layer_id",
            "lmax_log2", "res_base")})

    def status(self) -> dict:
        d = self.dut
        return {"err_code": int(d.err_code.value), "sat_quant": int(d.sat_quant_count.value),
                "sat_feedback": int(d.sat_feedback_count.value), "nan": int(d.nan_count.value)}

    async def run_layer(self, case, cfg: dict | None = None, grad=None):
        """One layer: residual into memory, config, gradient in, frame out, done.
        Returns (frame, status, cycles from the config handshake to done)."""
        cfg = cfg or config_of(case)
        n, base = cfg["n"], cfg["res_base"]
        self.load_residual(case, base)
        before = self.done_seen
        start = await self.configure(cfg)
        if n:
            for part in (grad if grad is not None else [case.arrays["grad_bits"].tolist()]):
                await self.src.send(AxiStreamFrame(tdata=part))
        frame = await tbc.recv(self.frame, case.meta["frame_words"] + 2 * n,
                               f"case {case.name}: frame")
        await self.wait_done(before, 20 * n + 2000, f"case {case.name}")
        return frame, self.status(), self.done_cycle - start

    def check(self, case, frame, status, err=ERR_OK, base: int = BASE) -> None:
        a, n = case.arrays, case.meta["n"]
        tbc.check_words(case.name, "frame", a["frame"], frame.tdata)
        tbc.check_words(case.name, "residual memory", a["residual_out"].view(np.uint32),
                        self.residual(base, n))
        for where, addr in (("before", base - 4 * GUARD_WORDS), ("after", base + 4 * n)):
            tbc.check_words(case.name, f"memory {where} the residual", [GUARD] * GUARD_WORDS,
                            self.residual(addr, GUARD_WORDS))
        tbc.check_value(case.name, "err_code", err, status["err_code"])
        tbc.check_value(case.name, "sat_quant", case.meta["sat_quant"], status["sat_quant"])
        tbc.check_value(case.name, "sat_feedback", case.meta["sat_feedback"],
                        status["sat_feedback"])
        tbc.check_value(case.name, "nan count", int(a["quant_nan"].sum()), status["nan"])

    async def refused(self, case, cfg: dict, err: int, what: str) -> None:
        """A bad configuration: its code, done right away, no input taken, memory untouched."""
        base = cfg["res_base"] - cfg["res_base"] % 4
        self.load_residual(case, base)
        before = self.done_seen
        await self.configure(cfg)
        await self.wait_done(before, 10, f"case {case.name} ({what})")
        await ClockCycles(self.dut.clk, 2)
        tbc.check_value(case.name, f"err_code ({what})", err, self.status()["err_code"])
        assert self.dut.s_grad_tready.value == 0, f"case {case.name} ({what}): input taken"
        assert self.frame.empty(), f"case {case.name} ({what}): frame produced after refusal"
        tbc.check_words(case.name, f"residual memory ({what})",
                        case.arrays["residual_in"].view(np.uint32),
                        self.residual(base, case.meta["n"]))


def mem_bytes_for(cases) -> int:
    top = BASE + 4 * (max(c.meta["n"] for c in cases) + GUARD_WORDS) + 4096
    return 1 << max(16, top.bit_length())


def fitting(cases):
    return [c for c in cases if expected_error(config_of(c)) == ERR_OK and c.meta["n"] > 0]


@tbc.traffic_test
async def golden_cases(dut, traffic):
    """Every case, layer after layer without reset, under this traffic profile (idle cycles
    on the gradient and on all five memory channels, backpressure on the frame)."""
    cases = tbc.load_cases(GOLDEN_MODULE)
    tb = Engine(dut, mem_bytes_for(cases))
    await tbc.start(dut)

    async def run_case(case):
        cfg = config_of(case)
        err = expected_error(cfg)
        if err:
            await tb.refused(case, cfg, err, f"err_code {err}")
            return tbc.Refused(f"refused as it must be: err_code {err} (k_eff "
                               f"{case.meta['k_eff']}, lmax_log2 {case.meta['lmax_log2']})")
        frame, status, _ = await tb.run_layer(case, cfg)
        tb.check(case, frame, status)
        return ""

    await tbc.golden_loop(dut, MODULE, cases, run_case, tb.inputs, tb.outputs, traffic)


@cocotb.test()
async def config_errors(dut):
    """Each configuration check refuses its config (memory untouched); then a clean layer."""
    cases = fitting(tbc.load_cases(GOLDEN_MODULE))
    tb = Engine(dut, mem_bytes_for(cases))
    await tbc.start(dut)
    case = tbc.medium_case(cases, 256)
    good = config_of(case)
    nb = good["n_blocks"]
    bad = [("base not 4-aligned", {"res_base": BASE + 2}),
           ("residual past the address space", {"res_base": 2 ** param("ADDR_W") - 4}),
           ("block_size 0", {"block_size": 0}), ("n_blocks + 1", {"n_blocks": nb + 1}),
           ("n_blocks - 1", {"n_blocks": nb - 1}), ("k 0", {"k": 0}),
           ("k > K_MAX", {"k": param("K_MAX") + 1, "block_size": 1, "n_blocks": good["n"]}),
           ("lmax_log2 0", {"lmax_log2": 0}),
           ("lmax_log2 above the build", {"lmax_log2": min(24, param("LMAX_LOG2_MAX")) + 1}),
           ("range Inf", {"range_bits": 0x7F800000}), ("M < 2^31", {"m": 0x7FFFFFFF})]
    for what, change in bad:
        cfg = {**good, **change}
        err = expected_error(cfg)
        if err == ERR_OK:
            continue       # e.g. k > K_MAX on a case with fewer blocks than that
        if what == "residual past the address space":
            tb.load_residual(case, BASE)        # the RTL must not touch it; nothing to check
            before = tb.done_seen
            await tb.configure(cfg)
            await tb.wait_done(before, 10, what)
            tbc.check_value(case.name, f"err_code ({what})", err, tb.status()["err_code"])
            continue
        await tb.refused(case, cfg, err, what)
    frame, status, _ = await tb.run_layer(case)
    tb.check(case, frame, status)


@cocotb.test()
async def misplaced_tlast(dut):
    """tlast one beat early: the layer is still counted by n and exact; err_code 9."""
    cases = fitting(tbc.load_cases(GOLDEN_MODULE))
    tb = Engine(dut, mem_bytes_for(cases))
    await tbc.start(dut)
    case = tbc.medium_case([c for c in cases if c.meta["n"] >= 2], 256)
    g = case.arrays["grad_bits"].tolist()
    frame, status, _ = await tb.run_layer(case, grad=[g[:-1], g[-1:]])
    tb.check(case, frame, status, err=ERR_TLAST)
    frame, status, _ = await tb.run_layer(case)
    tb.check(case, frame, status)


@cocotb.test()
async def reset_mid_layer(dut):
    """Resets in pass 1 and in pass 2 with bursts in flight, each followed by an exact layer
    (the memory is reloaded: a layer cut short leaves it partly written, by design)."""
    cases = fitting(tbc.load_cases(GOLDEN_MODULE))
    tb = Engine(dut, mem_bytes_for(cases))
    await tbc.start(dut)
    case = tbc.medium_case(cases, 2048)
    n = case.meta["n"]
    for salt, when in enumerate(("pass 1", "pass 2")):
        tbc.set_traffic(tb.inputs, tb.outputs, 0.3, 0.3, salt + 1)
        tb.load_residual(case, BASE)
        await tb.configure(config_of(case))
        cocotb.start_soon(tb.src.send(AxiStreamFrame(tdata=case.arrays["grad_bits"].tolist())))
        if when == "pass 1":
            await ClockCycles(dut.clk, max(4, n // 2))
        else:      # the first frame word leaving marks pass 2
            while not (dut.m_frame_tvalid.value == 1 and dut.m_frame_tready.value == 1):
                await RisingEdge(dut.clk)
            await ClockCycles(dut.clk, 3)
        await tbc.reset(dut)
        await ClockCycles(dut.clk, 2)
        tbc.drain(tb.frame)
        assert dut.busy.value == 0, f"busy after a reset in {when}"
        assert dut.m_axi_arvalid.value == 0 and dut.m_axi_awvalid.value == 0 \
            and dut.m_axi_wvalid.value == 0, f"AXI requests pending after a reset in {when}"
        tbc.no_traffic(tb.inputs + tb.outputs)
        frame, status, _ = await tb.run_layer(case)
        tb.check(case, frame, status)


@cocotb.test()
async def throughput(dut):
    """Unthrottled, memory one beat per cycle: cycles from the config handshake to done for
    the TB_THROUGHPUT_CASES (default 4) largest fitting cases, asserted against the budget
    n + 2 * selected elements + 8 k_eff + 64, and >= 0.95 elements/cycle where the selected
    blocks hold at most 2 % of the layer and the fixed part at most 1 % (line_rate_case);
    elements per cycle recorded."""
    cases = fitting(tbc.load_cases(GOLDEN_MODULE))
    tb = Engine(dut, mem_bytes_for(cases))
    await tbc.start(dut)
    tbc.no_traffic(tb.inputs + tb.outputs)
    largest_first = sorted(cases, key=lambda c: -c.meta["n"])
    for case in largest_first[:tb_util.env_int("TB_THROUGHPUT_CASES", 4)]:
        tb.beats = dict.fromkeys(tb.beats, 0)      # idle before the config: no handshakes
        frame, status, cycles = await tb.run_layer(case)
        tb.check(case, frame, status)
        n, sel = case.meta["n"], selected_elements(case)
        tb_util.write_metrics({"module": MODULE, "stream": f"layer (config to done), selected {sel}",
                               "case": case.name, "words": n, "cycles": cycles,
                               "cycles_per_word": round(cycles / n, 4), "sim": cocotb.SIM_NAME,
                               "selected": sel, "k_eff": case.meta["k_eff"],
                               "axi_beats": dict(tb.beats)})
        budget = cycle_budget(case)
        dut._log.info(f"{case.name}: n {n}, selected elements {sel}, k_eff "
                      f"{case.meta['k_eff']}: {cycles} cycles (budget {budget}), "
                      f"{n / cycles:.4f} elements/cycle")
        assert cycles <= budget, (f"case {case.name}: {cycles} cycles, over the budget {budget} "
                                  f"(n {n} + 2 * {sel} selected + 8 * k_eff + 64)")
        if line_rate_case(case):      # k_eff * B <= 2 % of n: the issue's line-rate target
            assert n / cycles >= 0.95, (f"case {case.name}: {n / cycles:.4f} elements/cycle "
                                        f"with {sel} of {n} elements selected (< 0.95)")

