"""cocotb testbench of hw/csr/compress_engine_axil.sv: compress_engine programmed only through
its AXI4-Lite register block (cocotbext-axi's AxiLiteMaster), bit-exact with the golden set.

Every layer: the CFG_* registers written, CTRL.start, the gradient written word by word to
GRAD_DATA, the frame read from FRAME_DATA while STATUS.frame_valid, INT_STATUS.done awaited
(and the irq line seen high, then low after the write-1-to-clear), then STATUS.err_code and the
four counters read from their registers. Nothing but the clock, the reset and the AXI4-Lite
port is driven; the residual (and the velocity of the momentum cases) sits in cocotbext-axi
AxiRams behind the engine's two AXI4 masters, loaded and checked word for word (guard words
around each region untouched) as sim/benches/tb_compress_engine.py does, whose configuration and error
model this bench reuses. A case the build cannot hold must be refused with its code (through
STATUS.err_code and INT_STATUS.error), memory untouched.

Register addresses and fields come from the one SystemRDL source (hw/csr/compress_engine_csr.rdl,
compiled here with systemrdl-compiler: the testbench's register model).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from gradblock.hw.csr import generate as csr
from gradblock.sim.benches import tb_util
from gradblock.sim.benches.tb_compress_engine import (
    BASE, GUARD, GUARD_WORDS, VEL_GUARD, config_of, expected_error, is_momentum,
    load_engine_cases, vel_base_for)

MODULE = "compress_engine_axil"
RDL = csr.HERE / "compress_engine_csr.rdl"     # the one SystemRDL source
POLL_LIMIT = 20000          # register polls before a wait is declared hung


def register_model(path: Path = RDL) -> dict[str, tuple[int, dict[str, tuple[int, int]]]]:
    """{register: (byte address, {field: (lsb, width)})} from the SystemRDL source."""
    from systemrdl import RDLCompiler
    from systemrdl.node import RegNode
    rdlc = RDLCompiler()
    rdlc.compile_file(str(path))
    top = rdlc.elaborate().top
    return {reg.inst_name: (reg.absolute_address,
                            {f.inst_name: (f.lsb, f.width) for f in reg.fields()})
            for reg in top.descendants() if isinstance(reg, RegNode)}


class AxilRegs:
    """An AXI4-Lite master on the DUT's s_axil port and the register model of one .rdl:
    registers read and written by name, fields packed and extracted by name. (The aggregate
    engine's bench uses it too.)"""

    def __init__(self, dut, rdl_path: Path = RDL):
        self.dut = dut
        self.regs = register_model(rdl_path)
        self.bus = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        tb_util.quiet(self.bus.write_if, self.bus.read_if)

    def addr(self, reg: str) -> int:
        return self.regs[reg][0]

    def field(self, reg: str, name: str, word: int) -> int:
        lsb, width = self.regs[reg][1][name]
        return (word >> lsb) & ((1 << width) - 1)

    def pack(self, reg: str, **values: int) -> int:
        word = 0
        for name, value in values.items():
            lsb, width = self.regs[reg][1][name]
            assert 0 <= value < 1 << width, f"{reg}.{name} = {value} does not fit {width} bits"
            word |= value << lsb
        return word

    async def write(self, reg: str, word: int) -> None:
        await self.bus.write_dword(self.addr(reg), word & 0xFFFFFFFF)

    async def read(self, reg: str) -> int:
        return await self.bus.read_dword(self.addr(reg))

    async def start_layer(self) -> None:
        """INT_STATUS cleared, done and error enabled (irq low), CTRL.start."""
        await self.write("INT_STATUS", self.pack("INT_STATUS", done=1, error=1))   # w1c
        await self.write("INT_ENABLE", self.pack("INT_ENABLE", done=1, error=1))
        assert self.dut.irq.value == 0, "irq high with INT_STATUS cleared"
        await self.write("CTRL", self.pack("CTRL", start=1))

    async def await_done(self, what: str) -> int:
        """Poll INT_STATUS until done; irq must be high (both enabled), and low after the
        write-1-to-clear. Returns INT_STATUS as it was."""
        for _ in range(POLL_LIMIT):
            ints = await self.read("INT_STATUS")
            if self.field("INT_STATUS", "done", ints):
                break
        else:
            raise AssertionError(f"{what}: INT_STATUS.done not set")
        await RisingEdge(self.dut.clk)
        assert self.dut.irq.value == 1, f"{what}: irq low with INT_STATUS.done enabled and set"
        await self.write("INT_STATUS", ints)          # write 1 to clear what was set
        await RisingEdge(self.dut.clk)
        assert self.dut.irq.value == 0, f"{what}: irq still high after INT_STATUS was cleared"
        return ints


class AxilEngine(AxilRegs):
    def __init__(self, dut, cases):
        super().__init__(dut)
        max_n = max(c.meta["n"] for c in cases)
        self.vel_base = vel_base_for(max_n)
        size = 1 << max(16, (self.vel_base + 4 * (max_n + GUARD_WORDS) + 4096).bit_length())
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=size)
        self.vel_ram = AxiRam(AxiBus.from_prefix(dut, "m_axi_vel"), dut.clk, dut.rst,
                              mem=self.ram.mem)      # one memory, two masters
        tb_util.quiet(self.ram.read_if, self.ram.write_if, self.vel_ram.read_if,
                      self.vel_ram.write_if)

    # ---- one layer -------------------------------------------------------------------------
    def load(self, base: int, words, guard: int) -> None:
        g = np.full(GUARD_WORDS, guard, np.uint32).tobytes()
        data = np.asarray(words).view(np.uint32)
        self.ram.write(base - 4 * GUARD_WORDS, g)
        self.ram.write(base, data.tobytes())
        self.ram.write(base + 4 * data.size, g)

    def words_at(self, base: int, n: int) -> np.ndarray:
        return np.frombuffer(self.ram.read(base, 4 * n), np.uint32)

    async def program(self, cfg: dict) -> None:
        """Every CFG_* register, then interrupts cleared and enabled, then CTRL.start."""
        for reg, key in (("CFG_N", "n"), ("CFG_BLOCK_SIZE", "block_size"),
                         ("CFG_N_BLOCKS", "n_blocks"), ("CFG_K", "k"), ("CFG_M", "m"),
                         ("CFG_K_SHIFT", "k_shift"), ("CFG_RANGE_BITS", "range_bits"),
                         ("CFG_LAYER_ID", "layer_id"), ("CFG_LMAX_LOG2", "lmax_log2"),
                         ("CFG_M_FIX", "m_fix")):
            await self.write(reg, cfg[key])
        await self.write("CFG_FLAGS", self.pack("CFG_FLAGS", norm=cfg["norm"],
                                                momentum_en=cfg["momentum_en"],
                                                momentum_mask=cfg["momentum_mask"]))
        for reg, key in (("CFG_RES_BASE", "res_base"), ("CFG_VEL_BASE", "vel_base")):
            await self.write(f"{reg}_LO", cfg[key] & 0xFFFFFFFF)
            await self.write(f"{reg}_HI", cfg[key] >> 32)
        await self.start_layer()

    async def read_frame(self, limit: int, what: str) -> list[int]:
        words: list[int] = []
        for _ in range(POLL_LIMIT + limit):
            status = await self.read("STATUS")
            if not self.field("STATUS", "frame_valid", status):
                continue
            words.append(await self.read("FRAME_DATA"))
            if self.field("STATUS", "frame_last", status):
                return words
            assert len(words) < limit, f"{what}: no frame_last within {limit} words"
        raise AssertionError(f"{what}: frame incomplete after {len(words)} words")

    async def wait_done(self, what: str) -> dict:
        """INT_STATUS.done (irq checked), then STATUS's and the counters' fields."""
        ints = await self.await_done(what)
        status = await self.read("STATUS")
        out = {"err_code": self.field("STATUS", "err_code", status),
               "active": self.field("STATUS", "active", status),
               "error_int": self.field("INT_STATUS", "error", ints)}
        for key, reg in (("sat_quant", "SAT_QUANT"), ("sat_feedback", "SAT_FEEDBACK"),
                         ("nan", "NAN_COUNT"), ("sat_momentum", "SAT_MOMENTUM")):
            out[key] = await self.read(reg)
        return out

    async def run_case(self, case):
        cfg = config_of(case, BASE, self.vel_base)
        err = expected_error(cfg)
        n = case.meta["n"]
        self.load(BASE, case.arrays["residual_in"], GUARD)
        if cfg["momentum_en"]:
            self.load(self.vel_base, case.arrays["velocity_in"], VEL_GUARD)
        await self.program(cfg)
        if err:
            st = await self.wait_done(f"case {case.name} (refused)")
            tb_util.check_value(case.name, "STATUS.err_code", err, st["err_code"])
            tb_util.check_value(case.name, "INT_STATUS.error", 1, st["error_int"])
            tb_util.check_words(case.name, "residual memory (refused)",
                                case.arrays["residual_in"].view(np.uint32), self.words_at(BASE, n))
            return tb_util.Refused(f"refused as it must be: err_code {err}")
        for word in case.arrays["grad_bits"].view(np.uint32).tolist():
            await self.write("GRAD_DATA", word)
        frame = await self.read_frame(case.meta["frame_words"] + 2 * n + 8,
                                      f"case {case.name}: frame")
        st = await self.wait_done(f"case {case.name}")
        a = case.arrays
        tb_util.check_words(case.name, "frame (FRAME_DATA)", a["frame"], frame)
        tb_util.check_value(case.name, "STATUS.err_code", 0, st["err_code"])
        tb_util.check_value(case.name, "INT_STATUS.error", 0, st["error_int"])
        tb_util.check_value(case.name, "STATUS.active after done", 0, st["active"])
        self.check_region(case, "residual", a["residual_out"], BASE, GUARD)
        tb_util.check_value(case.name, "SAT_QUANT", case.meta["sat_quant"], st["sat_quant"])
        tb_util.check_value(case.name, "SAT_FEEDBACK", case.meta["sat_feedback"],
                            st["sat_feedback"])
        tb_util.check_value(case.name, "NAN_COUNT", int(a["quant_nan"].sum()), st["nan"])
        if cfg["momentum_en"]:
            self.check_region(case, "velocity", a["velocity_out"], self.vel_base, VEL_GUARD)
            tb_util.check_value(case.name, "SAT_MOMENTUM", case.meta["sat_momentum"],
                                st["sat_momentum"])
        else:
            tb_util.check_value(case.name, "SAT_MOMENTUM (momentum off)", 0, st["sat_momentum"])
        return "momentum" if is_momentum(case) else ""

    def check_region(self, case, what: str, expected, base: int, guard: int) -> None:
        n = case.meta["n"]
        tb_util.check_words(case.name, f"{what} memory", np.asarray(expected).view(np.uint32),
                            self.words_at(base, n))
        for where, addr in (("before", base - 4 * GUARD_WORDS), ("after", base + 4 * n)):
            tb_util.check_words(case.name, f"memory {where} the {what}", [guard] * GUARD_WORDS,
                                self.words_at(addr, GUARD_WORDS))


@cocotb.test()
async def golden_cases(dut):
    """Every golden case of the "top" and "momentum" stages, layer after layer without reset,
    programmed and fed through AXI4-Lite only."""
    cases = load_engine_cases()
    tb = AxilEngine(dut, cases)
    await tb_util.start_streams(dut)     # clock, reset
    tb_util.check_value("-", "ID.magic", tb.pack("ID", magic=0x47424345), await tb.read("ID"))
    await tb_util.golden_loop(dut, MODULE, cases, tb.run_case, [], [], (0.0, 0.0))


@cocotb.test()
async def bus_rules(dut):
    """The register block's own behaviour: reset values, a read-only register refuses a write
    (SLVERR) and keeps its value, an unmapped address answers SLVERR, a GRAD_DATA write with
    no layer running is dropped and answered, a FRAME_DATA read with no word waiting returns
    0, and a start while a layer runs is ignored (one done, one frame)."""
    from cocotbext.axi.constants import AxiResp
    cases = load_engine_cases()
    tb = AxilEngine(dut, cases)
    await tb_util.start_streams(dut)     # clock, reset
    for reg in ("CTRL", "INT_STATUS", "INT_ENABLE", "CFG_N", "CFG_FLAGS", "CFG_RES_BASE_HI"):
        tb_util.check_value("-", f"{reg} after reset", 0, await tb.read(reg))
    resp = (await tb.bus.write(tb.addr("ID"), b"\0\0\0\0")).resp
    tb_util.check_value("-", "write to ID: response", AxiResp.SLVERR, resp)
    tb_util.check_value("-", "ID after a write", 0x47424345, await tb.read("ID"))
    resp = (await tb.bus.read(0x7C, 4)).resp
    tb_util.check_value("-", "read of unmapped 0x7C: response", AxiResp.SLVERR, resp)
    await tb.write("GRAD_DATA", 0x3F800000)            # no layer: dropped, answered
    tb_util.check_value("-", "FRAME_DATA with no frame", 0, await tb.read("FRAME_DATA"))
    tb_util.check_value("-", "STATUS idle", 0, await tb.read("STATUS") & 0xF)
    # a start during a layer: the layer's results are exact and only one done is seen
    case = tb_util.medium_case([c for c in cases if expected_error(
        config_of(c, BASE, tb.vel_base)) == 0 and c.meta["n"] > 0], 256)
    cfg = config_of(case, BASE, tb.vel_base)
    tb.load(BASE, case.arrays["residual_in"], GUARD)
    if cfg["momentum_en"]:
        tb.load(tb.vel_base, case.arrays["velocity_in"], VEL_GUARD)
    await tb.program(cfg)
    assert tb.field("STATUS", "active", await tb.read("STATUS")), "STATUS.active after start"
    await tb.write("CTRL", tb.pack("CTRL", start=1))   # ignored: a layer is running
    for word in case.arrays["grad_bits"].view(np.uint32).tolist():
        await tb.write("GRAD_DATA", word)
    frame = await tb.read_frame(case.meta["frame_words"] + 8, case.name)
    tb_util.check_words(case.name, "frame", case.arrays["frame"], frame)
    await tb.wait_done(case.name)
    await ClockCycles(dut.clk, 200)
    tb_util.check_value(case.name, "INT_STATUS after the ignored start", 0,
                        await tb.read("INT_STATUS"))
    tb_util.check_value(case.name, "STATUS.frame_valid after the layer", 0,
                        tb.field("STATUS", "frame_valid", await tb.read("STATUS")))
