"""RTL of the W-lane codec (issue 31): hw/crc32_lanes.sv against zlib and hw/zrle_lane_encoder.sv
(with hw/lane_packer.sv) against codec.zrle.encode_frame, in cocotb on Icarus Verilog and
Verilator, at W = 1, 4 and 16 (sim/duts.py builds w1, w4, w16).

Quick subset: Icarus at W = 4 (the encoder) and the CRC at W = 1, 4, 16 (seconds each).
Everything else (Verilator, whose builds take about a minute each; W = 1 and 16 of the encoder;
the golden frames at every W) is marked slow. Icarus prints a failing RTL assertion and goes
on, so its runs are also checked for assertion messages in the log.
"""
from __future__ import annotations

import json

import pytest

from gradblock.sim.duts import DUTS
from gradblock.sim.harness import simulator_available
from gradblock.sim.verify import merge_case_records

pytestmark = pytest.mark.sim

CRC, ENCODER = DUTS["crc32_lanes"], DUTS["zrle_lane_encoder"]
LANE_BUILDS = ("w1", "w4", "w16")


def need(sim: str) -> None:
    reason = simulator_available(sim)
    if reason:
        pytest.skip(f"{sim} unavailable: {reason}")


def check(result) -> None:
    assert result.passed, result.report()
    log = result.run_dir / "sim.log"
    if result.sim == "icarus" and log.is_file():
        errors = [line for line in log.read_text(errors="replace").splitlines()
                  if line.startswith("ERROR:")]
        assert not errors, f"RTL assertions failed ({result.run_dir}):\n" + "\n".join(errors[:10])


def base_names(result) -> set[str]:
    return {t.name.split("/")[0] for t in result.tests}


def builds(quick, names=LANE_BUILDS):
    """(sim, build) pairs: Icarus at the quick widths, the rest slow."""
    out = []
    for sim in ("icarus", "verilator"):
        for b in names:
            marks = [] if (sim == "icarus" and b in quick) else [pytest.mark.slow]
            if b.rstrip("r").endswith("16"):   # W = 16 sweeps: sign-off runs (the suite keeps W = 4)
                marks = [pytest.mark.slow, pytest.mark.signoff]
            out.append(pytest.param(sim, b, id=f"{sim}-{b}", marks=marks))
    return out


# ------------------------------------------------------------------ CRC-32, W words a cycle
# w*r: DATA_REG = 1 (the registered data term, one cycle later)
@pytest.mark.parametrize("sim,build", builds(quick=("w1", "w4", "w16", "w4r"),
                                             names=(*LANE_BUILDS, "w1r", "w4r", "w16r")))
def test_crc32_lanes_matches_zlib(sim, build):
    need(sim)
    res = CRC.run(sim, parameters=CRC.build(build), run_name=f"crc32_lanes-{build}")
    check(res)
    assert base_names(res) == set(CRC.tests)


# ------------------------------------------------------------------ encoder
@pytest.mark.parametrize("sim,build", builds(quick=("w4",)))
def test_lane_encoder_synthetic(sim, build, tmp_path):
    """The token grammar's edge cases for lmax_log2 1, 2, 3, 8, keep runs from every lane to
    every lane, random payloads and beat plans, under backpressure and input gaps; resets, the
    clamp, the ready paths; dense frames at 0.9 W words a cycle or more."""
    need(sim)
    params = ENCODER.build(build)
    w = params["W"]
    metrics = tmp_path / "metrics.json"
    traffic = "0:0,0.3:0,0:0.5,0.6:0.7" if sim == "verilator" else "0:0,0.5:0.6"
    res = ENCODER.run(sim, parameters=params, run_name=f"lane_encoder-{build}",
                      env={"TB_TRAFFIC": traffic, "TB_METRICS": metrics,
                           "TB_CASE_RESULTS": tmp_path / "cases.json"})
    check(res)
    assert base_names(res) == set(ENCODER.tests)
    assert sum(t.name.startswith("encode_cases/traffic=") for t in res.tests) == \
        traffic.count(",") + 1
    cases = json.loads((tmp_path / "cases.json").read_text())
    assert cases and all(c["status"] == "pass" for c in cases)
    rec = {r["pattern"]: r for r in json.loads(metrics.read_text())}
    assert all(r["W"] == w for r in rec.values())
    for name in ("dense", "dense_offset"):
        assert rec[name]["frame_words_per_cycle_after_first_token"] >= 0.9 * w, rec[name]
    assert rec["all_zero_counts"]["in_beats_per_cycle"] == 1.0
    assert rec["dense"]["in_beats_per_cycle"] >= 0.9


# ------------------------------------------------------------------ golden vectors
@pytest.mark.slow
@pytest.mark.parametrize("sim,build", [pytest.param(s, b, id=f"{s}-{b}")
                                       for s in ("icarus", "verilator") for b in LANE_BUILDS])
def test_lane_encoder_golden(sim, build, golden_quick, tmp_path):
    """Each golden case's payload must encode to its frame, word for word, at every W."""
    need(sim)
    out = tmp_path / "cases.json"
    res = ENCODER.run(sim, parameters=ENCODER.build(build), testcase=ENCODER.testcase,
                      run_name=f"golden-lane_encoder-{build}",
                      env={"TB_GOLDEN_DIR": golden_quick, "TB_TRAFFIC": "0:0,0.4:0.4",
                           "TB_CASE_RESULTS": out})
    check(res)
    results = merge_case_records(json.loads(out.read_text()))
    assert results and all(r["status"] == "pass" for r in results.values()), results


@pytest.mark.slow
def test_lane_encoder_long_layer_on_verilator():
    """A 36864-element block-sparse layer under backpressure at W = 16."""
    need("verilator")
    check(ENCODER.run("verilator", parameters=ENCODER.build("w16"), testcase=ENCODER.testcase,
                      run_name="long-lane_encoder-w16",
                      env={"TB_SYNTHETIC": "long", "TB_TRAFFIC": "0.3:0.3"}))
