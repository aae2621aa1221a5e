"""cocotb testbench of hw/csr/aggregate_engine_axil.sv: aggregate_engine programmed only through
its AXI4-Lite register block (cocotbext-axi's AxiLiteMaster), against the golden exchange cases.

Every layer: CFG_N, CFG_WORKERS, CFG_SUM_BASE, CFG_FLAGS.clear written, CTRL.start, each worker's
frame written word by word (FRAME_DATA, its last word to FRAME_LAST), INT_STATUS.done awaited
(irq high, then low after the write-1-to-clear), then STATUS.err_code and the status registers
read. The n int64 sums sit in a cocotbext-axi AxiRam (64-bit data) behind the engine's master,
guard words around them checked untouched; layers alternate between clear (garbage first) and
adding onto random start values, as sim/benches/tb_aggregate_engine.py does, whose case loading
and literal count this bench reuses. A hostile case must set INT_STATUS.error and report the
reference's error (its FRAME_ERR_* / AGG_ERR_* code, worker and word); a clean layer follows it.
"""
from __future__ import annotations

import numpy as np

import cocotb
from cocotbext.axi import AxiBus, AxiRam

from gradblock.hw.csr import generate as csr
from gradblock.sim.benches import tb_util
from gradblock.sim.benches.tb_aggregate_engine import (
    BASE, GUARD, GUARD_WORDS, error_code, literals, load_exchange_cases, mem_bytes_for,
    worker_frames)
from gradblock.sim.benches.tb_compress_engine_axil import AxilRegs

MODULE = "aggregate_engine_axil"
RDL = csr.HERE / "aggregate_engine_csr.rdl"
STATUS_REGS = {"err_word": "ERR_WORD", "err_worker": "ERR_WORKER", "frames_done": "FRAMES_DONE",
               "hdr_layer_id": "HDR_LAYER_ID", "hdr_range_bits": "HDR_RANGE_BITS",
               "lit_count": "LIT_COUNT", "rd_beats": "RD_BEATS", "wr_beats": "WR_BEATS"}


class AxilAggregate(AxilRegs):
    def __init__(self, dut, cases):
        super().__init__(dut, RDL)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst,
                          size=mem_bytes_for(cases))
        tb_util.quiet(self.ram.read_if, self.ram.write_if)
        self.rng = np.random.default_rng(7)

    def prepare(self, base: int, n: int, clear: bool) -> np.ndarray:
        """Guards around the region and its start values (garbage when the engine clears);
        returns what the region must hold before the frames add to it."""
        guard = np.full(GUARD_WORDS, GUARD, np.uint64).tobytes()
        self.ram.write(base - 8 * GUARD_WORDS, guard)
        self.ram.write(base + 8 * n, guard)
        start = self.rng.integers(-2**62, 2**62, n, dtype=np.int64)
        self.ram.write(base, start.tobytes())
        return np.zeros(n, np.int64) if clear else start

    async def run_layer(self, case, clear: bool, base: int = BASE) -> tuple[np.ndarray, dict]:
        n = case.meta["n"]
        start_vals = self.prepare(base, n, clear)
        await self.write("CFG_N", n)
        await self.write("CFG_WORKERS", case.meta["n_workers"])
        await self.write("CFG_SUM_BASE_LO", base & 0xFFFFFFFF)
        await self.write("CFG_SUM_BASE_HI", base >> 32)
        await self.write("CFG_FLAGS", self.pack("CFG_FLAGS", clear=int(clear)))
        await self.start_layer()
        for frame in worker_frames(case):
            for i, word in enumerate(frame):
                await self.write("FRAME_LAST" if i == len(frame) - 1 else "FRAME_DATA", word)
        ints = await self.await_done(f"case {case.name}")
        status = {"err_code": self.field("STATUS", "err_code", await self.read("STATUS")),
                  "error_int": self.field("INT_STATUS", "error", ints)}
        for key, reg in STATUS_REGS.items():
            status[key] = await self.read(reg)
        return start_vals, status

    def check(self, case, start_vals, status, clear: bool, base: int = BASE) -> None:
        name, n, err = case.name, case.meta["n"], case.meta["error"]
        for where, addr in (("before", base - 8 * GUARD_WORDS), ("after", base + 8 * n)):
            tb_util.check_words(name, f"memory {where} the sums", [GUARD] * GUARD_WORDS,
                                np.frombuffer(self.ram.read(addr, 8 * GUARD_WORDS), np.uint64),
                                width=64)
        tb_util.check_value(name, "FRAMES_DONE", case.meta["n_workers"], status["frames_done"])
        tb_util.check_value(name, "INT_STATUS.error", int(err is not None), status["error_int"])
        if err is None:
            tb_util.check_value(name, "STATUS.err_code", 0, status["err_code"])
            sums = np.frombuffer(self.ram.read(base, 8 * n), np.int64)
            tb_util.check_words(name, "sums", (start_vals + case.arrays["sums"]).view(np.uint64),
                                sums.view(np.uint64), width=64)
            lit = literals(case)
            tb_util.check_value(name, "LIT_COUNT", lit, status["lit_count"])
            tb_util.check_value(name, "RD_BEATS", lit, status["rd_beats"])
            tb_util.check_value(name, "WR_BEATS", lit + (n if clear else 0), status["wr_beats"])
            tb_util.check_value(name, "HDR_LAYER_ID", case.meta["layer_id"],
                                status["hdr_layer_id"])
            tb_util.check_value(name, "HDR_RANGE_BITS", case.meta["range_bits"],
                                status["hdr_range_bits"])
        else:
            tb_util.check_value(name, f"STATUS.err_code ({err['name']})", error_code(err["name"]),
                                status["err_code"])
            tb_util.check_value(name, "ERR_WORKER", err["worker"], status["err_worker"])
            tb_util.check_value(name, "ERR_WORD", err["word"], status["err_word"])


@cocotb.test()
async def golden_cases(dut):
    """Every exchange case, layer after layer without reset, through AXI4-Lite only; an error
    case is followed by a clean layer (with clear) that must be exact."""
    cases = load_exchange_cases()
    tb = AxilAggregate(dut, cases)
    await tb_util.start_streams(dut)     # clock, reset
    tb_util.check_value("-", "ID.magic", 0x47424145, await tb.read("ID"))
    clean = min([c for c in cases if c.meta["error"] is None and c.meta["n"]] or cases,
                key=lambda c: c.meta["n"])
    layer = 0

    async def run_case(case):
        nonlocal layer
        layer += 1
        clear = layer % 2 == 1
        start_vals, status = await tb.run_layer(case, clear)
        tb.check(case, start_vals, status, clear)
        if case.meta["error"] is not None and clean.meta["error"] is None:
            start_vals, status = await tb.run_layer(clean, True)
            tb.check(clean, start_vals, status, True)
            return f"{case.meta['error']['name']} reported, then {clean.name} exact"
        return ""

    await tb_util.golden_loop(dut, MODULE, cases, run_case, [], [], (0.0, 0.0))


@cocotb.test()
async def refused_config(dut):
    """A sum base that is not 8-aligned: AGG_ERR_CONFIG through STATUS and INT_STATUS.error,
    memory untouched, the frame writes dropped and answered; then an exact layer."""
    cases = [c for c in load_exchange_cases() if c.meta["error"] is None and c.meta["n"]]
    tb = AxilAggregate(dut, cases)
    await tb_util.start_streams(dut)
    case = tb_util.medium_case(cases, 256)
    n = case.meta["n"]
    start_vals = tb.prepare(BASE, n, False)
    await tb.write("CFG_N", n)
    await tb.write("CFG_WORKERS", case.meta["n_workers"])
    await tb.write("CFG_SUM_BASE_LO", BASE + 4)
    await tb.write("CFG_FLAGS", tb.pack("CFG_FLAGS", clear=1))
    await tb.start_layer()
    ints = await tb.await_done(f"{case.name} (refused)")
    tb_util.check_value(case.name, "INT_STATUS.error", 1, tb.field("INT_STATUS", "error", ints))
    tb_util.check_value(case.name, "STATUS.err_code", error_code("CONFIG"),
                        tb.field("STATUS", "err_code", await tb.read("STATUS")))
    await tb.write("FRAME_LAST", 0x5A524C45)           # no layer: dropped, answered
    tb_util.check_words(case.name, "sums after a refused layer", start_vals.view(np.uint64),
                        np.frombuffer(tb.ram.read(BASE, 8 * n), np.uint64), width=64)
    await tb.write("CFG_SUM_BASE_LO", BASE)
    start_vals, status = await tb.run_layer(case, True)
    tb.check(case, start_vals, status, True)
