"""RTL of the codec side (hw/crc32_word.sv, hw/zrle_encoder.sv, hw/zrle_decoder.sv) in cocotb,
on Icarus Verilog and Verilator, against codec.zrle (synthetic cases made in the testbench)
and against a `gradblock golden --quick` directory.

Quick subset: Icarus with one parameter set each. Everything else (Verilator, whose builds
take about a minute each; the other parameter sets; the golden set on both simulators) is
marked slow. Icarus runs two traffic profiles, Verilator all four. A failing run writes a
waveform and names it in the assertion message.
"""
from __future__ import annotations

import json
import re

import pytest

from gradblock.sim.duts import DUTS
from gradblock.sim.harness import simulator_available
from gradblock.sim.verify import merge_case_records

pytestmark = pytest.mark.sim

CRC, ENCODER, DECODER = DUTS["crc32_word"], DUTS["zrle_encoder"], DUTS["zrle_decoder"]

QUICK_TRAFFIC = "0:0,0.5:0.6"
FULL_TRAFFIC = "0:0,0.3:0,0:0.5,0.6:0.7"


def need(sim: str) -> None:
    reason = simulator_available(sim)
    if reason:
        pytest.skip(f"{sim} unavailable: {reason}")


def check(result) -> None:
    assert result.passed, result.report()


def base_names(result) -> set[str]:
    """cocotb test names without the traffic profile: `encode_cases/traffic=...` -> encode_cases."""
    return {t.name.split("/")[0] for t in result.tests}


def slow_unless(condition: bool):
    return [] if condition else [pytest.mark.slow]


# Build variations. Parameters change widths and buffer sizes, not the simulator's job, so the
# second parameter set of each block runs on Icarus only (a Verilator build costs a minute).
# (simulator, LMAX_LOG2_MAX): Icarus with the small build is the quick one
ENCODER_BUILDS = [pytest.param(sim, lg, id=f"{sim}-LMAX_LOG2_MAX{lg}",
                               marks=slow_unless(sim == "icarus" and lg == 3))
                  for sim, lg in (("icarus", 3), ("icarus", 8), ("verilator", 8))]
# (simulator, QUEUE_AW): the default queue, and a 2-entry queue that stalls the parse side often
DECODER_BUILDS = [pytest.param(sim, aw, id=f"{sim}-QUEUE_AW{aw}",
                               marks=slow_unless(sim == "icarus" and aw == 4))
                  for sim, aw in (("icarus", 4), ("icarus", 1), ("verilator", 4))]
SIMS = [pytest.param(s, id=s, marks=slow_unless(s == "icarus")) for s in ("icarus", "verilator")]
GOLDEN_SIMS = [pytest.param(s, id=s, marks=[pytest.mark.slow]) for s in ("icarus", "verilator")]


def traffic_for(sim: str) -> str:
    """All four traffic profiles on Verilator (fast), two on Icarus."""
    return FULL_TRAFFIC if sim == "verilator" else QUICK_TRAFFIC


# ------------------------------------------------------------------ CRC-32
@pytest.mark.parametrize("sim", SIMS)
def test_crc32_matches_zlib(sim):
    need(sim)
    check(CRC.run(sim))


# ------------------------------------------------------------------ encoder
@pytest.mark.parametrize("sim,lmax_max", ENCODER_BUILDS)
def test_encoder_synthetic(sim, lmax_max, tmp_path):
    """Edge cases of the token grammar for lmax_log2 1, 2, 3, 8 (those above the build's
    LMAX_LOG2_MAX are skipped by the testbench), backpressure, resets, throughput."""
    need(sim)
    metrics = tmp_path / "metrics.json"
    res = ENCODER.run(sim, parameters={"LMAX_LOG2_MAX": lmax_max},
                  env={"TB_TRAFFIC": traffic_for(sim),
                       "TB_METRICS": metrics, "TB_CASE_RESULTS": tmp_path / "cases.json"})
    check(res)
    assert base_names(res) == {"encode_cases", "reset_mid_frame", "config_clamp", "ready_paths",
                               "throughput"}
    profiles = traffic_for(sim).count(",") + 1
    assert sum(t.name.startswith("encode_cases/traffic=") for t in res.tests) == profiles
    cases = json.loads((tmp_path / "cases.json").read_text())
    skipped = [c for c in cases if c["status"] == "skip"]
    assert all(c["status"] in ("pass", "skip") for c in cases)
    # the synthetic set has lmax_log2 8 cases: a LMAX_LOG2_MAX 3 build must skip exactly those
    assert bool(skipped) == (lmax_max < 8)
    assert all("lmax_log2 8 >" in c["detail"] for c in skipped)
    rec = {r["pattern"]: r for r in json.loads(metrics.read_text())}
    assert rec["dense_lg1"]["cycles_per_out_word_after_first_token"] == 1.0
    assert rec["all_zero"]["cycles_per_in_word"] == 1.0


def test_encoder_default_parameter_read_from_dut(tmp_path):
    """No parameters given: the testbench reads LMAX_LOG2_MAX (8) from the DUT handle
    (tb_util.hdl_parameter's fallback) and checks the clamp against it."""
    need("icarus")
    res = ENCODER.run("icarus", parameters={}, testcase="config_clamp",
                      run_name="default-params-config_clamp")
    check(res)
    assert base_names(res) == {"config_clamp"}


# ------------------------------------------------------------------ decoder
@pytest.mark.parametrize("sim,queue_aw", DECODER_BUILDS)
def test_decoder(sim, queue_aw, tmp_path):
    """Valid frames under backpressure, every error code, random corruptions, resets and (with
    the default queue) throughput against an ideal decoder."""
    need(sim)
    default = queue_aw == DECODER.parameters["QUEUE_AW"]
    tests = None if default else "decode_cases,decode_errors,reset_mid_frame,ready_paths"
    metrics = tmp_path / "metrics.json"
    res = DECODER.run(sim, parameters={"QUEUE_AW": queue_aw}, testcase=tests,
                  env={"TB_TRAFFIC": traffic_for(sim),
                       "TB_FUZZ": 200 if sim == "verilator" else 100,
                       "TB_METRICS": metrics})
    check(res)
    assert {"decode_cases", "decode_errors", "reset_mid_frame", "ready_paths"} <= base_names(res)
    profiles = traffic_for(sim).count(",") + 1
    assert sum(t.name.startswith("decode_cases/traffic=") for t in res.tests) == profiles
    if default:
        rec = {r["pattern"]: r for r in json.loads(metrics.read_text())}
        assert rec["all_zero"]["cycles_per_value"] == 1.0
        assert rec["dense_lg8"]["cycles_per_frame_word"] == 1.0


@pytest.mark.parametrize("sim", SIMS)
def test_decoder_run_out(sim, tmp_path):
    """RUN_OUT = 1 (a zero run is one beat with its length on m_tcount): the same tests, with
    the beats expanded by their counts, must give codec.zrle's values, m_tlast, errors and
    prefixes exactly under backpressure; and a frame then costs its words, not n values."""
    need(sim)
    metrics = tmp_path / "metrics.json"
    res = DECODER.run(sim, parameters={**DECODER.parameters, "RUN_OUT": 1},
                      run_name=f"run_out-{sim}",
                  env={"TB_TRAFFIC": traffic_for(sim),
                       "TB_FUZZ": 200 if sim == "verilator" else 100,
                       "TB_METRICS": metrics})
    check(res)
    assert {"decode_cases", "decode_errors", "reset_mid_frame", "ready_paths",
            "throughput"} <= base_names(res)
    rec = {r["pattern"]: r for r in json.loads(metrics.read_text())}
    assert all(r["run_out"] == 1 for r in rec.values())
    # an all-zero frame is one beat; a sparse one is read at a word per cycle, not n cycles
    assert rec["all_zero"]["beats"] == 1
    assert rec["all_zero"]["cycles"] <= rec["all_zero"]["frame_words"] + 8
    assert rec["sparse_1pct"]["cycles"] <= rec["sparse_1pct"]["frame_words"] + 8
    assert rec["dense_lg8"]["cycles_per_frame_word"] == 1.0


# ------------------------------------------------------------------ layer-sized frames
@pytest.mark.slow
def test_long_layers_on_verilator(tmp_path):
    """A 64x64x3x3 = 36864-element layer, block-sparse as coarse selection leaves it, through
    encoder and decoder under backpressure (on Verilator: Icarus would take minutes)."""
    need("verilator")
    env = {"TB_SYNTHETIC": "long", "TB_TRAFFIC": "0.3:0.3"}
    check(ENCODER.run("verilator", testcase=ENCODER.testcase,
                      run_name="long-encode_cases", env=env))
    check(DECODER.run("verilator", testcase=DECODER.testcase,
                      run_name="long-decode_cases", env=env))


# ------------------------------------------------------------------ golden vectors
def golden_results(path) -> dict:
    """One verdict per case over the per-profile tests (the worst wins)."""
    return merge_case_records(json.loads(path.read_text()))


@pytest.mark.parametrize("sim", GOLDEN_SIMS)
def test_encoder_golden(sim, golden_quick, tmp_path):
    """Each golden case's payload must encode to its frame, word for word."""
    need(sim)
    out = tmp_path / "cases.json"
    check(ENCODER.run(sim, testcase=ENCODER.testcase, run_name="golden-encode_cases",
                  env={"TB_GOLDEN_DIR": golden_quick, "TB_TRAFFIC": "0:0,0.4:0.4",
                       "TB_CASE_RESULTS": out}))
    results = golden_results(out)
    assert results and all(r["status"] == "pass" for r in results.values()), results


@pytest.mark.parametrize("sim", GOLDEN_SIMS)
def test_decoder_golden(sim, golden_quick, tmp_path):
    """Each golden case's frame must decode to its payload with a clean status."""
    need(sim)
    out = tmp_path / "cases.json"
    check(DECODER.run(sim, testcase=DECODER.testcase, run_name="golden-decode_cases",
                  env={"TB_GOLDEN_DIR": golden_quick, "TB_TRAFFIC": "0:0,0.4:0.4",
                       "TB_CASE_RESULTS": out}))
    results = golden_results(out)
    assert results and all(r["status"] == "pass" for r in results.values()), results


def test_encoder_skips_lmax_above_build(golden_quick, tmp_path):
    """A LMAX_LOG2_MAX 3 build skips (and names) the golden cases with lmax_log2 8 and still
    encodes the lmax_log2 2 and 3 ones exactly."""
    need("icarus")
    out = tmp_path / "cases.json"
    check(ENCODER.run("icarus", parameters={"LMAX_LOG2_MAX": 3}, testcase=ENCODER.testcase,
                      run_name="golden-small-encode_cases",
                  env={"TB_GOLDEN_DIR": golden_quick, "TB_TRAFFIC": "0.3:0.3",
                       "TB_CASE_RESULTS": out}))
    results = golden_results(out)
    passed = {n for n, r in results.items() if r["status"] == "pass"}
    skipped = {n: r["detail"] for n, r in results.items() if r["status"] == "skip"}
    assert passed and skipped and not set(results) - passed - set(skipped)
    assert all("LMAX_LOG2_MAX 3" in why for why in skipped.values())


# ------------------------------------------------------------------ gradblock verify
def test_verify_runs_golden_cases(golden_quick, capsys):
    """`gradblock verify` on two golden cases of the codec blocks: a table row per
    (module, case), exit 0."""
    need("icarus")
    from gradblock.sim.verify import verify_main
    rc = verify_main(["--sim", "icarus", "--vectors", str(golden_quick),
                      "--modules", "zrle_encoder", "zrle_decoder",
                      "--cases", "one_element", "lmax2_runs", "--traffic", "0.3:0.3"])
    out = capsys.readouterr().out
    assert rc == 0, out
    for module in ("zrle_encoder", "zrle_decoder"):
        for case in ("one_element", "lmax2_runs"):
            assert any(line.split()[:3] == [module, case, "PASS"] for line in out.splitlines()), out
    assert re.search(r"^4 pass, 0 fail, 0 skip, 0 error \(icarus\)$", out, re.M), out


def test_verify_rejects_bad_arguments(tmp_path, capsys):
    from gradblock import cli

    def verify_main(argv):
        return cli.main(["verify", *argv])
    assert verify_main(["--sim", "icarus", "--modules", "no_such_block"]) == 2
    assert "unknown module" in capsys.readouterr().err
    assert verify_main(["--sim", "icarus", "--vectors", str(tmp_path / "missing")]) == 2
    assert "gradblock verify:" in capsys.readouterr().err
    assert verify_main(["--sim", "questa"]) == 2          # argparse: invalid choice


def test_verify_without_torch_for_its_default_vectors_is_a_named_error(monkeypatch, capsys):
    """No --vectors: the quick set's real-gradient cases need torch; without it, one line and
    exit 2 that says to pass --vectors, not a traceback."""
    from gradblock import cli, golden_cli
    if simulator_available("icarus"):
        pytest.skip(f"icarus unavailable: {simulator_available('icarus')}")

    def no_torch(*_a, **_k):
        raise ImportError("No module named 'torch'")

    monkeypatch.setattr(golden_cli, "generate", no_torch)
    assert cli.main(["verify", "--sim", "icarus", "--modules", "ef_add"]) == 2
    err = capsys.readouterr().err
    assert "need torch" in err and "--vectors" in err and "Traceback" not in err
