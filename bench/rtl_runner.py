"""Running one testbench's `throughput` cocotb test for the RTL tables (4, 4b, 4c, 4d): the
harness call, the metrics file it writes (TB_METRICS) and the simulated time cocotb reports.

Builds are cached by content hash in the user cache (sim.harness.sim_build_root); a changed source builds anew.
"""
from __future__ import annotations

import importlib.util
import json
import re
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from .context import Unavailable, optional_module, require
from .tables import Table

from gradblock.sim.harness import SIMULATORS  # noqa: F401  (the one list; re-exported)
CLOCK_NS = 10          # the testbenches' clock period


@dataclass(frozen=True)
class RtlBench:
    toplevel: str
    test_module: str
    needs_vectors: bool                  # datapath testbenches read golden-format vectors
    sources: tuple[str, ...] = ()        # hw/ modules; empty: found from the instantiations
    parameters: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    golden_env: str = "TB_GOLDEN_DIRS"   # how a datapath testbench is told where vectors are


def read_metrics(path: Path) -> list[dict]:
    """TB_METRICS as written by either testbench helper: one JSON list, or JSON lines."""
    if not path.is_file():
        return []
    text = path.read_text().strip()
    if not text:
        return []
    try:
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def testcase_timing(results_xml: Path | None, testcase: str) -> tuple[float, float] | None:
    """(wall seconds, simulated ns) of one testcase from a cocotb results.xml (cocotb 2 keeps
    the simulated time in <property name="sim_time_duration"> with its unit beside it)."""
    if results_xml is None or not results_xml.is_file():
        return None
    scale = {"fs": 1e-6, "ps": 1e-3, "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    for case in ET.parse(results_xml).getroot().iter("testcase"):
        if case.get("name") != testcase:
            continue
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        sim_ns = float(case.get("sim_time_ns", 0) or 0)
        if not sim_ns and "sim_time_duration" in props:
            sim_ns = float(props["sim_time_duration"]) * scale.get(props.get("sim_time_unit", "ns"), 1.0)
        return float(case.get("time", 0) or 0), sim_ns
    return None


def run_throughput(bench: RtlBench, sim: str, vectors_dir: Path | None, work: Path):
    """Run `bench`'s `throughput` test on `sim`: (harness RunResult, its TB_METRICS records).
    Unavailable when the simulator or the testbench is missing; RuntimeError when it fails."""
    harness = optional_module("gradblock.sim.harness")
    run_rtl, available = require(harness, "run_rtl", "simulator_available")
    why = available(sim)
    if why:
        raise Unavailable(why)
    spec = importlib.util.find_spec(bench.test_module)
    tb_file = f"{bench.test_module.replace('.', '/')}.py"
    if spec is None or spec.origin is None:
        raise Unavailable(f"{tb_file} not present")
    if not re.search(r"^async def throughput\(|stage_tests\(", Path(spec.origin).read_text(), re.M):
        raise Unavailable(f"{tb_file} has no `throughput` test")
    # a fresh directory of our own per run, so no earlier file is ever read or removed
    metrics = Path(tempfile.mkdtemp(prefix=f"{bench.toplevel}-{sim}-", dir=work)) / "metrics.json"
    env = {**bench.env, "TB_METRICS": str(metrics)}
    if bench.needs_vectors:
        env[bench.golden_env] = str(vectors_dir)
    # sources None: the harness resolves the top and what it instantiates (hw/deps.py)
    result = run_rtl(bench.toplevel, None, bench.test_module, sim,
                     parameters=bench.parameters, env=env,
                     testcase="throughput", run_name="bench-throughput", waves_on_failure=False)
    if result.error:
        raise RuntimeError(result.error.splitlines()[0])
    if not result.passed:
        failed = "; ".join(t.message.splitlines()[0] for t in result.tests if not t.passed
                           and t.message)
        raise RuntimeError(f"throughput test failed: {failed or 'see ' + str(result.run_dir)}")
    records = read_metrics(metrics)
    if not records:
        raise RuntimeError("throughput test wrote no metrics")
    return result, records


def speed_table() -> Table:
    table = Table("rtl_speed", "4b. RTL simulation speed",
                  ["simulator", "module", "build + run (s)", "test (s)", "simulated cycles",
                   "cycles/s", "words", "words/s"])
    table.notes.append("test (s): wall time of the throughput test from cocotb's results.xml; "
                       "build + run includes compiling when the build is stale; words = payload "
                       "values (elements) through the block; simulated cycles at a "
                       f"{CLOCK_NS} ns clock")
    return table


def add_speed_row(table: Table, sim: str, module: str, result, words: int) -> None:
    """One row of table 4b from a run's results.xml: how fast the simulator went."""
    timing = testcase_timing(result.results_xml, "throughput")
    if timing and timing[0] > 0:
        wall, sim_ns = timing
        cycles = int(sim_ns / CLOCK_NS)
        table.add(sim, module, result.seconds, wall, cycles, cycles / wall, words, words / wall)
    else:
        table.skip([sim, module], "results.xml has no timing for throughput")
