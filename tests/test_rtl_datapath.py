"""RTL of the compress datapath (hw/quantiser.sv, ef_add.sv, block_l1.sv, topk_select.sv,
compress_top.sv) in cocotb on Icarus Verilog and Verilator, against golden vectors: the shared
`gradblock golden --quick` set plus the datapath corner cases of golden/datapath.py, both
computed with the numpy reference.

Quick subset (`-m "not slow"`): Icarus, one parameter set per block, cases up to 300 elements,
two traffic profiles. Slow: Verilator builds (about a minute each) with every case, other
parameter sets, compress_top on every golden case under four traffic profiles, a 64x64x3x3
layer through compress_top. A failing run
writes a waveform and names it (with the case, word index and values) in the assertion message.
"""
from __future__ import annotations

import json
import os

import pytest

from gradblock.golden.datapath import write_cases
from gradblock.sim.duts import DUTS, stage_of
from gradblock.sim.harness import simulator_available
from gradblock.sim.verify import merge_case_records

pytestmark = pytest.mark.sim

QUICK_TRAFFIC = "0:0,0.5:0.6"
FULL_TRAFFIC = "0:0,0.3:0,0:0.5,0.6:0.7"
QUICK_MAX_N = 300
# the blocks this file runs; each one's full list of cocotb tests is the DUT table's
BLOCKS = ("quantiser", "ef_add", "block_l1", "topk_select", "compress_top")


def need(sim: str) -> None:
    reason = simulator_available(sim)
    if reason:
        pytest.skip(f"{sim} unavailable: {reason}")


# ------------------------------------------------------------------ vectors
@pytest.fixture(scope="session")
def edge_vectors(tmp_path_factory):
    out = tmp_path_factory.mktemp("datapath") / "edge"
    write_cases(out, "edge")
    return out


@pytest.fixture(scope="session")
def sweep_vectors(tmp_path_factory):
    out = tmp_path_factory.mktemp("datapath") / "sweep"
    write_cases(out, "sweep")
    return out


@pytest.fixture(scope="session")
def layer_vectors(tmp_path_factory):
    out = tmp_path_factory.mktemp("datapath") / "layer"
    write_cases(out, "layer")
    return out


def manifest_cases(*dirs) -> list[dict]:
    return [c for d in dirs for c in json.loads((d / "manifest.json").read_text())["cases"]]


# ------------------------------------------------------------------ running
def run_block(top: str, sim: str, dirs, tmp_path, parameters=None, env=None, testcase=None,
              quick: bool = False, run_name: str | None = None):
    """Run sim/benches/tb_<top>; return (per-case verdicts, metrics). Asserts the run passed.
    quick: cases up to QUICK_MAX_N elements. Two traffic profiles unless env says otherwise."""
    tag = run_name or top
    results, metrics = tmp_path / f"{tag}-cases.json", tmp_path / f"{tag}-metrics.json"
    full_env = {"TB_GOLDEN_DIRS": os.pathsep.join(str(d) for d in dirs),
                "TB_TRAFFIC": QUICK_TRAFFIC,
                "TB_CASE_RESULTS": results, "TB_METRICS": metrics, **(env or {})}
    if quick:
        full_env.setdefault("TB_MAX_N", QUICK_MAX_N)
    res = DUTS[top].run(sim, parameters=parameters or {}, env=full_env, testcase=testcase,
                        run_name=run_name)
    assert res.passed, res.report()
    ran = {t.name.split("/")[0] for t in res.tests}     # golden_cases/traffic=... -> golden_cases
    wanted = set(testcase.split(",")) if testcase else set(DUTS[top].tests)
    assert wanted <= ran, f"tests missing from the run: {sorted(wanted - ran)}"
    profiles = (env or {}).get("TB_TRAFFIC", QUICK_TRAFFIC).count(",") + 1
    if "golden_cases" in wanted:
        per_profile = [t for t in res.tests if t.name.startswith("golden_cases/traffic=")]
        assert len(per_profile) == profiles, [t.name for t in res.tests]
    records = json.loads(results.read_text()) if results.is_file() else []
    verdicts = merge_case_records(records)
    recs = json.loads(metrics.read_text()) if metrics.is_file() else []
    return verdicts, recs


def expect_verdicts(verdicts: dict, cases: list[dict], stage: str, max_n: int | None) -> None:
    """Every applicable case got a verdict, every verdict is a pass, or a skip for a reason
    the testbench states: an empty layer at a single stage, or a refusal by compress_top
    (checked separately: which cases, which code)."""
    want = {c["name"] for c in cases if stage in c["stages"] and (max_n is None or c["n"] <= max_n)}
    assert want <= set(verdicts), sorted(want - set(verdicts))
    # beside the golden cases, only the testbench's own (e.g. tb_quantiser's config_extremes)
    extra = set(verdicts) - want
    assert not extra & {c["name"] for c in cases}, sorted(extra & {c["name"] for c in cases})
    for name, v in verdicts.items():
        ok = v["status"] == "pass" or (v["status"] == "skip" and (
            "empty layer" in v["detail"] or v["detail"].startswith("refused as it must be")))
        assert ok, f"{name}: {v}"


def full_rate(recs: list[dict], module: str, streams: set[str]) -> None:
    seen = {r["stream"] for r in recs if r["module"] == module}
    assert streams <= seen, f"{module}: no throughput record for {sorted(streams - seen)}"
    for r in recs:
        if r["module"] == module and r["stream"] in streams:
            assert r["cycles"] == r["words"], f"{module} {r['stream']}: {r}"


def slow_unless(condition: bool):
    return [] if condition else [pytest.mark.slow]


SIMS = [pytest.param(s, id=s, marks=slow_unless(s == "icarus")) for s in ("icarus", "verilator")]


# ------------------------------------------------------------------ the four stages
@pytest.mark.parametrize("sim", SIMS)
def test_quantiser(sim, golden_quick, edge_vectors, tmp_path, request):
    """grad_bits -> quantised + sat + nan flags on every case; Verilator with the 32-bit
    passthrough compress_top uses, Icarus with a 1-bit one. Verilator also runs 5 x 4096 random
    bit patterns (every class of float32) at five ranges."""
    need(sim)
    quick = sim == "icarus"
    dirs = (golden_quick, edge_vectors)
    if not quick:
        dirs += (request.getfixturevalue("sweep_vectors"),)
    verdicts, recs = run_block("quantiser", sim, dirs, tmp_path, quick=quick,
                               parameters=DUTS["quantiser"].build("uw1" if quick else "uw32"))
    expect_verdicts(verdicts, manifest_cases(*dirs), stage_of("quantiser"), QUICK_MAX_N if quick else None)
    full_rate(recs, "quantiser", {"in", "out"})


@pytest.mark.parametrize("sim", SIMS)
def test_ef_add(sim, golden_quick, edge_vectors, tmp_path):
    need(sim)
    quick = sim == "icarus"
    dirs = (golden_quick, edge_vectors)
    verdicts, recs = run_block("ef_add", sim, dirs, tmp_path, quick=quick)
    expect_verdicts(verdicts, manifest_cases(*dirs), stage_of("ef_add"), QUICK_MAX_N if quick else None)
    full_rate(recs, "ef_add", {"in", "out"})


@pytest.mark.parametrize("sim", SIMS)
def test_block_l1(sim, golden_quick, edge_vectors, tmp_path):
    need(sim)
    quick = sim == "icarus"
    dirs = (golden_quick, edge_vectors)
    verdicts, recs = run_block("block_l1", sim, dirs, tmp_path, quick=quick)
    expect_verdicts(verdicts, manifest_cases(*dirs), stage_of("block_l1"), QUICK_MAX_N if quick else None)
    full_rate(recs, "block_l1", {"in", "out (block_size 1)"})


TOPK = DUTS["topk_select"]
# (sim, build variant of the DUT table; None: the reference build, K_MAX 128)
TOPK_BUILDS = [pytest.param(sim, b, id=f"{sim}-K_MAX{TOPK.build(b)['K_MAX'] if b else 128}",
                            marks=slow_unless(sim == "icarus" and b == "k16"))
               for sim, b in (("icarus", "k16"), ("verilator", "k16"), ("icarus", "k1"),
                              ("icarus", None))]


@pytest.mark.parametrize("sim,build", TOPK_BUILDS)
def test_topk_select(sim, build, golden_quick, edge_vectors, tmp_path):
    """Rank order and ties on every case; cases with k_eff > K_MAX give the first K_MAX
    indices with cfg_err (K_MAX 1 makes that most of them, 128 none of the golden set)."""
    need(sim)
    quick = sim == "icarus" and build == "k16"
    params = TOPK.build(build) if build else dict(TOPK.parameters)
    k_max = params["K_MAX"]
    dirs = (golden_quick, edge_vectors)
    verdicts, recs = run_block("topk_select", sim, dirs, tmp_path, quick=quick,
                               parameters=params)
    cases = manifest_cases(*dirs)
    expect_verdicts(verdicts, cases, stage_of("topk_select"), QUICK_MAX_N if quick else None)
    over = {n for n, v in verdicts.items() if "> K_MAX" in v["detail"]}
    assert over == {c["name"] for c in cases if c["name"] in verdicts and c["k_eff"] > k_max}
    full_rate(recs, "topk_select", {"in", "out"})


# ------------------------------------------------------------------ compress_top
TOP = DUTS["compress_top"]
TOP_STAGE = stage_of("compress_top")


def top_params(build: str) -> dict:
    """compress_top's build variant `build` of the DUT table (the runner hands the parameters
    to the testbench itself)."""
    return TOP.build(build)


def refused(verdicts: dict) -> set[str]:
    return {n for n, v in verdicts.items()
            if v["status"] == "skip" and v["detail"].startswith("refused as it must be")}


def test_compress_top_quick(golden_quick, edge_vectors, tmp_path):
    """Icarus, a small build (N_MAX 4096, K_MAX 16): every small case end to end, layer after
    layer; cases with k_eff > 16 refused with err_code 5; config errors, n = 0, a misplaced
    tlast, resets in both passes, full-rate input and residual."""
    need("icarus")
    params = top_params("quick")
    dirs = (golden_quick, edge_vectors)
    verdicts, recs = run_block("compress_top", "icarus", dirs, tmp_path, parameters=params,
                               quick=True)
    cases = manifest_cases(*dirs)
    expect_verdicts(verdicts, cases, TOP_STAGE, QUICK_MAX_N)
    assert refused(verdicts) == {c["name"] for c in cases if c["name"] in verdicts
                                 and c["k_eff"] > params["K_MAX"]}
    full_rate(recs, "compress_top", {"in (pass 1)", "residual (pass 2)"})


@pytest.mark.slow
def test_compress_top_verilator(golden_quick, edge_vectors, layer_vectors, tmp_path):
    """Verilator, the default build (N_MAX 65536, K_MAX 32): every golden and corner case end to
    end with every test of the testbench; then a 64x64x3x3 layer (36864 elements) once under
    backpressure and once at full rate (2n + a few cycles)."""
    need("verilator")
    params = dict(TOP.parameters)
    dirs = (golden_quick, edge_vectors)
    verdicts, recs = run_block("compress_top", "verilator", dirs, tmp_path, parameters=params,
                               run_name="cases")
    cases = manifest_cases(*dirs)
    expect_verdicts(verdicts, cases, TOP_STAGE, None)
    assert refused(verdicts) == {c["name"] for c in cases if TOP_STAGE in c["stages"]
                                 and c["k_eff"] > params["K_MAX"]}
    full_rate(recs, "compress_top", {"in (pass 1)", "residual (pass 2)"})

    verdicts, recs = run_block("compress_top", "verilator", (layer_vectors,), tmp_path,
                               parameters=params, env={"TB_TRAFFIC": "0.3:0.3"},
                               testcase="golden_cases,throughput", run_name="layer")
    assert {n: v["status"] for n, v in verdicts.items()} == {"dp_conv64": "pass"}
    full_rate(recs, "compress_top", {"in (pass 1)", "residual (pass 2)"})
    layer = {r["stream"]: r for r in recs if r["case"] == "dp_conv64"}
    assert layer["layer (config to done)"]["cycles"] <= 2 * 36864 + 200, layer


@pytest.mark.slow
def test_compress_top_icarus_large_k(golden_quick, edge_vectors, tmp_path):
    """Icarus, K_MAX 128: no golden case is refused, so every one (k_eff up to 80) goes through
    the whole datapath under all four traffic profiles."""
    need("icarus")
    params = top_params("large_k")
    dirs = (golden_quick, edge_vectors)
    verdicts, _ = run_block("compress_top", "icarus", dirs, tmp_path, parameters=params,
                            env={"TB_TRAFFIC": FULL_TRAFFIC}, testcase="golden_cases")
    cases = manifest_cases(*dirs)
    expect_verdicts(verdicts, cases, TOP_STAGE, None)
    assert not refused(verdicts)


@pytest.mark.slow
def test_compress_top_verilator_k_max_128(golden_quick, edge_vectors, tmp_path):
    """Verilator builds a large compress_top (K_MAX 128): big enough that Verilator splits the
    model into several C++ files, which the wheel's empty CFG_CXXFLAGS_PCH_I used to break
    (sim.harness.verilator_pch_make_args repairs it). Every golden case then runs end to end,
    none refused (k_eff <= 80)."""
    need("verilator")
    from gradblock.sim.harness import build_dir_for, verilator_pch_make_args
    params = top_params("split_model")
    dirs = (golden_quick, edge_vectors)
    verdicts, _ = run_block("compress_top", "verilator", dirs, tmp_path, parameters=params,
                            env={"TB_TRAFFIC": "0.3:0.3"}, testcase="golden_cases")
    expect_verdicts(verdicts, manifest_cases(*dirs), TOP_STAGE, None)
    assert not refused(verdicts)
    build = build_dir_for(TOP.toplevel, "verilator", params, False)
    split = sorted(p.name for p in build.glob("Vtop___024root__[0-9]*.cpp")
                   if "__Slow" not in p.name)
    assert len(split) >= 2, f"the model was not split into several C++ files: {split}"
    if verilator_pch_make_args():
        assert list(build.glob("*__pch.h.fast.gch")), "built without the precompiled header"


def test_lmax_above_build_is_refused(golden_quick, tmp_path):
    """A build with LMAX_LOG2_MAX 3 refuses the lmax_log2 8 layers (err_code 6) and still
    compresses the lmax_log2 2 and 3 ones exactly."""
    need("icarus")
    params = top_params("lmax3")
    names = ["lmax2_runs", "lmax3_runs", "one_element", "special_floats"]
    verdicts, _ = run_block("compress_top", "icarus", (golden_quick,), tmp_path,
                            parameters=params, testcase="golden_cases",
                            env={"TB_CASES": ",".join(names), "TB_TRAFFIC": "0.3:0.3"})
    assert set(verdicts) == set(names)
    assert refused(verdicts) == {"one_element", "special_floats"}
    assert all("err_code 6" in verdicts[n]["detail"] for n in refused(verdicts))
    assert all(verdicts[n]["status"] == "pass" for n in set(names) - refused(verdicts))


# ------------------------------------------------------------------ bookkeeping
def test_verify_registry_matches_sources():
    """`gradblock verify` can run each datapath block: its files resolve (hw/deps.py) with the
    shared package where the block uses it, its testbench exists and is the block's own, and
    no entry hands the testbench a copy of a build parameter (the runner does that)."""
    from gradblock.sim.verify import REGISTRY
    for top in BLOCKS:
        assert top in REGISTRY, f"{top} is not in the DUT table (sim/duts.py) with a stage"
        entry = REGISTRY[top]
        assert entry.missing() == [], (top, entry.missing())
        assert entry.sources[entry.sources.index(top):][0] == top
        assert entry.test_module == f"gradblock.sim.benches.tb_{top}"
        assert entry.testcase == "golden_cases" and entry.bench_path.is_file()
        assert not [k for k in entry.env if k.startswith("TB_") and k[3:] in entry.parameters]
    assert "gradblock_pkg" in REGISTRY["compress_top"].sources


def test_merge_case_records_keeps_the_worst():
    """Per-profile tests each write a verdict per case; one verdict per case comes out, the
    worst one with its own detail, so a failure under one profile is never masked."""
    recs = [{"module": "m", "case": "a", "status": "pass", "detail": ""},
            {"module": "m", "case": "a", "status": "fail", "detail": "traffic 0.3:0.3: word 4"},
            {"module": "m", "case": "a", "status": "pass", "detail": ""},
            {"module": "m", "case": "b", "status": "skip", "detail": "empty layer"},
            {"module": "m", "case": "b", "status": "pass", "detail": ""}]
    merged = merge_case_records(recs)
    assert {k: (v["status"], v["detail"]) for k, v in merged.items()} == {
        "a": ("fail", "traffic 0.3:0.3: word 4"), "b": ("skip", "empty layer")}
