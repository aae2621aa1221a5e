"""What the two engine testbenches share: an AXI4 master DUT with its memory in a cocotbext-axi
AxiRam (pauses on all five channels come from the traffic profile), a cycle counter, the cycles
of every `done` pulse, AXI handshakes per channel, and the configuration handshake.

A DUT with more than one master port (compress_engine's m_axi_vel for the velocity) names the
others in `extra_ports`, prefix -> memory size, or None to share the first port's memory (one
address space, as two masters behind an interconnect): each gets an AxiRam in `self.rams` (its
own AXI slave: channels, pauses and counts are per port), its channels paused like
the first port's, its handshakes counted in `self.port_beats[prefix]`, and the cycles on which it
asked for anything (arvalid, awvalid or wvalid high) in `self.requests[prefix]`."""
from __future__ import annotations

import cocotb
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiBus, AxiRam

from gradblock.sim import tb_util


class AxiEngineBench:
    """Subclasses add their streams to `self.inputs` (sources paused by the traffic profile)
    and may extend `on_cycle` (called once per rising edge, after the common counts)."""

    def __init__(self, dut, mem_bytes: int, extra_ports: dict[str, int | None] | None = None):
        self.dut = dut
        self.rams: dict[str, AxiRam] = {}
        self.mem_channels = []
        for prefix, size in {"m_axi": mem_bytes, **(extra_ports or {})}.items():
            shared = {"mem": self.rams["m_axi"].mem} if size is None else {"size": size}
            ram = AxiRam(AxiBus.from_prefix(dut, prefix), dut.clk, dut.rst, **shared)
            channels = [ram.read_if.ar_channel, ram.read_if.r_channel,
                        ram.write_if.aw_channel, ram.write_if.w_channel,
                        ram.write_if.b_channel]
            tb_util.quiet(ram.read_if, ram.write_if, *channels)
            self.rams[prefix] = ram
            self.mem_channels += channels
        self.ram = self.rams["m_axi"]
        self.inputs = list(self.mem_channels)
        dut.cfg_valid.value = 0
        self.done_seen = self.done_cycle = self.cycle = 0
        # AXI handshakes per channel (valid & ready at a rising edge), for the throughput records
        self.port_beats = {prefix: dict.fromkeys(("ar", "r", "aw", "w"), 0)
                           for prefix in self.rams}
        self.requests = dict.fromkeys(self.rams, 0)     # counted for the extra ports only
        self._handshakes = [(prefix, ch, getattr(dut, f"{prefix}_{ch}valid"),
                             getattr(dut, f"{prefix}_{ch}ready"))
                            for prefix in self.rams for ch in ("ar", "r", "aw", "w")]
        self._requests = [(prefix, [getattr(dut, f"{prefix}_{ch}valid") for ch in ("ar", "aw", "w")])
                          for prefix in self.rams if prefix != "m_axi"]
        cocotb.start_soon(self._count())

    @property
    def beats(self) -> dict[str, int]:
        """Handshakes per channel of the first port (m_axi)."""
        return self.port_beats["m_axi"]

    @beats.setter
    def beats(self, value: dict[str, int]) -> None:
        self.port_beats["m_axi"] = value

    def clear_counts(self) -> None:
        """Zero the handshake and request counts of every port."""
        for prefix in self.rams:
            self.port_beats[prefix] = dict.fromkeys(self.port_beats[prefix], 0)
            self.requests[prefix] = 0

    async def _count(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.cycle += 1
            if self.dut.done.value == 1:
                self.done_seen += 1
                self.done_cycle = self.cycle
            for prefix, ch, valid, ready in self._handshakes:
                if valid.value == 1 and ready.value == 1:
                    self.port_beats[prefix][ch] += 1
            for prefix, valids in self._requests:
                if any(v.value == 1 for v in valids):
                    self.requests[prefix] += 1
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
