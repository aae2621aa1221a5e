"""RTL of the W-lane ZRLE decoder (hw/zrle_lane_decoder.sv, issue 31) in cocotb, on Icarus
Verilog and Verilator, against codec.zrle: valid frames (exact beat sequence), every error code
with its word index, truncations at every lane, fixed-seed corruptions, resets, the ready path,
throughput (frame words per cycle), and the frames of a `gradblock golden --quick` directory.

Quick subset: Icarus at W = 4 with two traffic profiles. W = 1 and 16, Verilator, W = 2 and 8,
the smallest queue and the golden set are slow (a Verilator build costs about a minute, W = 16
on Icarus a few).
"""
from __future__ import annotations

import json

import pytest

from gradblock.sim.duts import DUTS
from gradblock.sim.harness import simulator_available
from gradblock.sim.verify import merge_case_records

pytestmark = pytest.mark.sim

DECODER = DUTS["zrle_lane_decoder"]
QUICK_TRAFFIC = "0:0,0.5:0.6"
FULL_TRAFFIC = "0:0,0.3:0,0:0.5,0.6:0.7"
ALL_TESTS = {"decode_cases", "decode_errors", "reset_mid_frame", "ready_paths", "throughput"}


def need(sim: str) -> None:
    reason = simulator_available(sim)
    if reason:
        pytest.skip(f"{sim} unavailable: {reason}")


def check(result) -> None:
    assert result.passed, result.report()


def base_names(result) -> set[str]:
    return {t.name.split("/")[0] for t in result.tests}


# (simulator, W): Icarus at W = 4 is the quick one
BUILDS = [pytest.param(sim, w, id=f"{sim}-W{w}",
                       marks=[] if (sim, w) == ("icarus", 4) else
                       # W = 16 sweeps: sign-off runs (the suite keeps W = 4)
                       [pytest.mark.slow] + ([pytest.mark.signoff] if w == 16 else []))
          for sim, w in (("icarus", 4), ("icarus", 1), ("icarus", 16), ("verilator", 1),
                         ("verilator", 4), ("verilator", 16))]


@pytest.mark.parametrize("sim,w", BUILDS)
def test_lane_decoder(sim, w, tmp_path):
    """Every test of the bench at this W: exact beats and values, errors as codec.zrle names
    them, resets, the ready path; and long dense LMAX-256 frames at >= 0.9·W words a cycle."""
    need(sim)
    quick = (sim, w) == ("icarus", 4)
    metrics = tmp_path / "metrics.json"
    res = DECODER.run(sim, parameters=DECODER.build(f"w{w}"), run_name=f"lanes-W{w}",
                      env={"TB_TRAFFIC": QUICK_TRAFFIC if sim == "icarus" else FULL_TRAFFIC,
                           "TB_FUZZ": 60 if quick else 300, "TB_METRICS": metrics})
    check(res)
    assert base_names(res) == ALL_TESTS
    rec = {r["pattern"]: r for r in json.loads(metrics.read_text())}
    assert all(r["W"] == w for r in rec.values())
    assert rec["dense_lg8"]["words_per_cycle"] >= 0.9 * w, rec["dense_lg8"]
    # a run beat per token with zeros: an all-zero frame is one beat, read at the input's rate
    assert rec["all_zero"]["beats"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("w,queue_aw", [(2, 4), (8, 4), (4, 1)], ids=["W2", "W8", "W4-QUEUE_AW1"])
def test_lane_decoder_other_builds(w, queue_aw, tmp_path):
    """The widths the DUT table has no build for (W = 2, 8) and the smallest queue (QUEUE_AW = 1:
    four entries inside, a step issued while three more fit), every bench test on Icarus."""
    need("icarus")
    metrics = tmp_path / "metrics.json"
    res = DECODER.run("icarus", parameters={"W": w, "QUEUE_AW": queue_aw},
                      run_name=f"lanes-W{w}-q{queue_aw}",
                      env={"TB_TRAFFIC": FULL_TRAFFIC, "TB_FUZZ": 200, "TB_METRICS": metrics})
    check(res)
    assert base_names(res) == ALL_TESTS
    rec = {r["pattern"]: r for r in json.loads(metrics.read_text())}
    assert rec["dense_lg8"]["words_per_cycle"] >= 0.9 * w, rec["dense_lg8"]


@pytest.mark.slow
@pytest.mark.parametrize("sim,w", [pytest.param(s, w, id=f"{s}-W{w}")
                                   for s in ("icarus", "verilator") for w in (1, 4, 16)])
def test_lane_decoder_golden(sim, w, golden_quick, tmp_path):
    """Each golden case's frame decodes to its payload, beat for beat, with a clean status."""
    need(sim)
    out = tmp_path / "cases.json"
    check(DECODER.run(sim, parameters=DECODER.build(f"w{w}"), testcase=DECODER.testcase,
                      run_name=f"golden-W{w}",
                      env={"TB_GOLDEN_DIR": golden_quick, "TB_TRAFFIC": "0:0,0.4:0.4",
                           "TB_CASE_RESULTS": out}))
    results = merge_case_records(json.loads(out.read_text()))
    assert results and all(r["status"] == "pass" for r in results.values()), results


@pytest.mark.slow
def test_lane_decoder_long_layer(tmp_path):
    """A 36864-element block-sparse layer at W = 16 under backpressure on Verilator."""
    need("verilator")
    check(DECODER.run("verilator", parameters=DECODER.build("w16"), testcase=DECODER.testcase,
                      run_name="long-W16", env={"TB_SYNTHETIC": "long", "TB_TRAFFIC": "0.3:0.3"}))
