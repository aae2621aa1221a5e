"""hw/momentum.sv (docs/spec.md §7.2) in cocotb on Icarus Verilog and Verilator against the
numpy reference: corner and random vectors with m_fix changing between layers, four traffic
profiles, a mid-stream reset, and one element per cycle at full rate (sim/benches/tb_momentum.py).
Verilator builds take about a minute, so its run is marked slow."""
from __future__ import annotations

import json

import pytest

from gradblock.sim.duts import DUTS
from gradblock.sim.harness import simulator_available

pytestmark = pytest.mark.sim

TESTS = {"vector_cases", "reset_mid_stream", "throughput"}
TRAFFIC = "0:0,0.3:0,0:0.5,0.6:0.7"


def run_momentum(sim: str, tmp_path):
    reason = simulator_available(sim)
    if reason:
        pytest.skip(f"{sim} unavailable: {reason}")
    results, metrics = tmp_path / "cases.json", tmp_path / "metrics.json"
    res = DUTS["momentum"].run(sim, env={"TB_TRAFFIC": TRAFFIC, "TB_CASE_RESULTS": results,
                                         "TB_METRICS": metrics})
    assert res.passed, res.report()
    ran = [t.name for t in res.tests]
    assert TESTS <= {name.split("/")[0] for name in ran}, ran     # vector_cases/traffic=...
    assert sum(name.startswith("vector_cases/") for name in ran) == len(TRAFFIC.split(",")), ran
    records = json.loads(results.read_text())
    assert records and all(v["status"] == "pass" for v in records), records
    names = {v["case"] for v in records}
    assert {f"corners_m{m}" for m in (0, 1, 32768, 58982, 65535)} <= names, names
    assert sum(name.startswith("random") for name in names) == 5, names
    recs = json.loads(metrics.read_text())
    assert {r["stream"] for r in recs} == {"in", "out"}
    for r in recs:
        assert r["cycles"] == r["words"], r


def test_momentum_icarus(tmp_path):
    run_momentum("icarus", tmp_path)


@pytest.mark.slow
def test_momentum_verilator(tmp_path):
    run_momentum("verilator", tmp_path)
