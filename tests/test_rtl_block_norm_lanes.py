"""RTL of the norm stage at W elements a cycle, hw/block_norm_lanes.sv (issue 31), in cocotb
(sim/benches/tb_block_norm_lanes.py): the golden 'norms' cases (the shared `gradblock golden
--quick` set and golden/datapath.py's edge cases, computed with the numpy reference), the bench's
own cases of every block boundary position (B = 1 .. 2W + 1 for every n mod W, L1 and L2,
extreme values), a reset mid-layer and the rate, under random input gaps and output backpressure.

Quick (`-m "not slow"`): Icarus at W = 4, golden cases up to 300 elements, two traffic profiles;
the lane-convention assertion tripped by a planted beat; the parameter check. Slow: Icarus at
W = 1 and 16, Verilator (its --assert checks the RTL's assertions every cycle) at W = 1, 4 and 16
with every case under four traffic profiles.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from gradblock.golden.datapath import write_cases
from gradblock.hw import deps
from gradblock.sim.duts import DUTS, stage_of
from gradblock.sim.harness import setup_verilator, simulator_available
from gradblock.sim.verify import merge_case_records

pytestmark = pytest.mark.sim

DUT = DUTS["block_norm_lanes"]
QUICK_TRAFFIC = "0:0,0.5:0.6"
FULL_TRAFFIC = "0:0,0.3:0,0:0.5,0.6:0.7"
QUICK_MAX_N = 300
BOUNDARY = re.compile(r"b(\d+)_n(\d+)_(l1|l2)$")
# a failed RTL assertion: Icarus prints "ERROR: <file>:<line>:" and goes on, Verilator
# "Assertion failed" and stops
ASSERTION = re.compile(r"ERROR: \S+\.sv:\d+|Assertion failed")


def need(sim: str) -> None:
    reason = simulator_available(sim)
    if reason:
        pytest.skip(f"{sim} unavailable: {reason}")


@pytest.fixture(scope="module")
def edge_vectors(tmp_path_factory):
    out = tmp_path_factory.mktemp("norm_lanes") / "edge"
    write_cases(out, "edge")
    return out


def manifest_cases(*dirs) -> list[dict]:
    return [c for d in dirs for c in json.loads((d / "manifest.json").read_text())["cases"]]


def run(sim: str, build: str, dirs, tmp_path, quick: bool, testcase: str | None = None,
        env: dict | None = None):
    """One run of the bench on DUT build `build`; returns (run result, verdicts, metrics).
    Asserts it passed and that no RTL assertion failed (Icarus reports one in its log and
    goes on; Verilator's --assert stops the run)."""
    results, metrics = tmp_path / f"{build}-cases.json", tmp_path / f"{build}-metrics.json"
    full_env = {"TB_GOLDEN_DIRS": os.pathsep.join(str(d) for d in dirs),
                "TB_TRAFFIC": QUICK_TRAFFIC if quick else FULL_TRAFFIC,
                "TB_CASE_RESULTS": results, "TB_METRICS": metrics, **(env or {})}
    if quick:
        full_env["TB_MAX_N"] = QUICK_MAX_N
    res = DUT.run(sim, parameters=DUT.build(build), env=full_env, testcase=testcase,
                  run_name=f"norm-lanes-{build}-{testcase or 'all'}")
    assert res.passed, res.report()
    log = (res.run_dir / "sim.log").read_text(errors="replace")
    assert not ASSERTION.search(log), res.report()
    records = json.loads(results.read_text()) if results.is_file() else []
    recs = json.loads(metrics.read_text()) if metrics.is_file() else []
    return res, merge_case_records(records), recs


BUILDS = [pytest.param("icarus", "w4", id="icarus-W4"),
          pytest.param("icarus", "w1", id="icarus-W1", marks=pytest.mark.slow),
          pytest.param("icarus", "w16", id="icarus-W16",
                       marks=[pytest.mark.slow, pytest.mark.signoff]),   # minutes on Icarus
          pytest.param("verilator", "w1", id="verilator-W1", marks=pytest.mark.slow),
          pytest.param("verilator", "w4", id="verilator-W4", marks=pytest.mark.slow),
          pytest.param("verilator", "w16", id="verilator-W16", marks=pytest.mark.slow)]


@pytest.mark.parametrize("sim,build", BUILDS)
def test_block_norm_lanes(sim, build, golden_quick, edge_vectors, tmp_path):
    """Every golden norms case and every boundary case bit for bit, every cocotb test of the
    DUT table run (each traffic profile its own test), the boundary cases covering every
    n mod W for each B = 1 .. 2W + 1 in both norms, and the rate: one beat a cycle with B >= W
    (the last beat may close two blocks: one cycle more), one norm a cycle with B = 1."""
    need(sim)
    quick = sim == "icarus" and build == "w4"
    w = DUT.build(build)["W"]
    dirs = (golden_quick, edge_vectors)
    res, verdicts, recs = run(sim, build, dirs, tmp_path, quick)

    ran = [t.name for t in res.tests]
    assert set(DUT.tests) <= {t.split("/")[0] for t in ran}, ran
    profiles = (QUICK_TRAFFIC if quick else FULL_TRAFFIC).count(",") + 1
    for test in ("golden_cases", "boundary_cases"):
        assert sum(t.startswith(f"{test}/traffic=") for t in ran) == profiles, ran

    golden = {c["name"] for c in manifest_cases(*dirs)
              if stage_of("block_norm_lanes") in c["stages"] and (not quick or c["n"] <= QUICK_MAX_N)}
    assert golden <= set(verdicts), sorted(golden - set(verdicts))
    for name, v in verdicts.items():
        assert v["status"] == "pass" or (v["status"] == "skip" and "empty layer" in v["detail"]), \
            f"{name}: {v}"
    residues: dict[tuple[int, str], set[int]] = {}
    for name in verdicts:
        m = BOUNDARY.match(name)
        if m:
            residues.setdefault((int(m[1]), m[3]), set()).add(int(m[2]) % w)
    for bs in range(1, 2 * w + 2):
        for norm in ("l1", "l2"):
            assert residues.get((bs, norm)) == set(range(w)), (bs, norm, residues.get((bs, norm)))

    mine = [r for r in recs if r["module"] == "block_norm_lanes"]
    ins = [r for r in mine if r["stream"].startswith("in beats")]
    outs = [r for r in mine if r["stream"].startswith("out norms")]
    assert ins and outs, mine
    for r in ins:
        assert r["cycles"] <= r["words"] + 1 and r["words"] / r["cycles"] >= 0.99, r
        if w == 1:
            assert r["cycles"] == r["words"], r      # block_l1, cycle for cycle
    for r in outs:
        assert r["cycles"] == r["words"], r


def test_keep_rule_assertion_trips(edge_vectors, tmp_path):
    """A planted beat with lane 0 alone and no s_tlast trips the RTL's lane-convention
    assertion (Icarus prints it and goes on), so the clean runs' empty logs mean something."""
    need("icarus")
    res = DUT.run("icarus", parameters=DUT.build("w4"),
                  env={"TB_GOLDEN_DIRS": str(edge_vectors), "TB_PLANT_KEEP_VIOLATION": "1"},
                  testcase="keep_violation", run_name="norm-lanes-keep-violation")
    assert res.passed, res.report()
    assert [t.name for t in res.tests] == ["keep_violation"], res.report()
    log = (res.run_dir / "sim.log").read_text(errors="replace")
    assert re.search(r"ERROR: \S*block_norm_lanes\.sv:\d+", log), log[-3000:]


def test_lane_count_outside_the_legal_widths_is_refused(tmp_path):
    """W = 3 stops elaboration with the rule's text (Verilator, yosys) or the missing rule
    module (Icarus 11); W = 16 elaborates."""
    files = [str(p) for p in deps.sources("block_norm_lanes")]
    checked = 0
    if setup_verilator() is not None or shutil.which("verilator"):
        for w, ok in ((3, False), (16, True)):
            proc = subprocess.run(["verilator", "--lint-only", "-Wall", "--top-module",
                                   "block_norm_lanes", f"-GW={w}", *files],
                                  capture_output=True, text=True, timeout=300)
            out = proc.stdout + proc.stderr
            assert (proc.returncode == 0) == ok, out[-2000:]
            if not ok:
                assert "block_norm_lanes: W must be 1, 2, 4, 8 or 16" in out, out[-2000:]
        checked += 1
    if shutil.which("iverilog"):
        proc = subprocess.run(["iverilog", "-g2012", "-s", "block_norm_lanes",
                               "-Pblock_norm_lanes.W=3", "-o", str(tmp_path / "a.vvp"), *files],
                              capture_output=True, text=True, timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-2000:]
        assert "Unknown module type: block_norm_lanes__W_must_be_1_2_4_8_or_16" in out, out
        checked += 1
    if shutil.which("yosys"):
        script = (f"read_verilog -sv {' '.join(files)}; chparam -set W 3 block_norm_lanes; "
                  "hierarchy -check -top block_norm_lanes")
        proc = subprocess.run(["yosys", "-q", "-p", script], capture_output=True, text=True,
                              timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "W must be 1, 2, 4, 8 or 16" in out, out[-2000:]
        checked += 1
    if not checked:
        pytest.skip("none of verilator, iverilog, yosys is installed")
