"""What the two engine testbenches share: an AXI4 master DUT with its memory in a cocotbext-axi
AxiRam (pauses on all five channels come from the traffic profile), a cycle counter, the cycles
of every `done` pulse, AXI handshakes per channel, and the configuration handshake."""
from __future__ import annotations

import cocotb
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiBus, AxiRam

from gradblock.sim import tb_util


class AxiEngineBench:
    """Subclasses add their streams to `self.inputs` (sources paused by the traffic profile)
    and may extend `on_cycle` (called once per rising edge, after the common counts)."""

    def __init__(self, dut, mem_bytes: int):
        self.dut = dut
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=mem_bytes)
        self.mem_channels = [self.ram.read_if.ar_channel, self.ram.read_if.r_channel,
                             self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                             self.ram.write_if.b_channel]
        tb_util.quiet(self.ram.read_if, self.ram.write_if, *self.mem_channels)
        self.inputs = list(self.mem_channels)
        dut.cfg_valid.value = 0
        self.done_seen = self.done_cycle = self.cycle = 0
        # AXI handshakes per channel (valid & ready at a rising edge), for the throughput records
        self.beats = dict.fromkeys(("ar", "r", "aw", "w"), 0)
        self._handshakes = [(ch, getattr(dut, f"m_axi_{ch}valid"), getattr(dut, f"m_axi_{ch}ready"))
                            for ch in self.beats]
        cocotb.start_soon(self._count())

    async def _count(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.cycle += 1
            if self.dut.done.value == 1:
                self.done_seen += 1
                self.done_cycle = self.cycle
            for ch, valid, ready in self._handshakes:
                if valid.value == 1 and ready.value == 1:
                    self.beats[ch] += 1
            self.on_cycle()

    def on_cycle(self) -> None:
        """Per-cycle checks of a subclass (none here)."""

    async def present_config(self, fields: dict[str, int], limit: int = 1000) -> int:
        """Drive cfg_<name> = value for every field, hold cfg_valid until the DUT takes it;
        returns the cycle of the handshake."""
        d = self.dut
        for name, value in fields.items():
            getattr(d, f"cfg_{name}").value = value
        d.cfg_valid.value = 1
        for _ in range(limit):
            await RisingEdge(d.clk)
            if d.cfg_ready.value == 1:
                break
        else:
            raise AssertionError(f"cfg_ready did not rise within {limit} cycles")
        taken = self.cycle
        d.cfg_valid.value = 0
        return taken

    async def wait_done(self, before: int, cycles: int, what: str) -> None:
        """Until `done` has pulsed more than `before` times, at most `cycles` cycles."""
        for _ in range(cycles):
            if self.done_seen > before:
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"{what}: done did not pulse within {cycles} cycles")
