"""`gradblock formal` (hw/formal.py) and the SymbiYosys property sets in hw/formal/.

Quick: the .sby files name exactly the sources hw/deps.py resolves; the unbounded proofs and
covers of the small blocks pass; a planted handshake bug in a copy of axis_skid_buffer fails
its proof; unknown sets and missing tools are named errors (exit 2). The whole run
(`gradblock formal`, every set and task) is marked slow.

compress_engine, aggregate_engine (slow): both engines' AXI4 master ports keep the AXI4 rules
(axi4_master_checker, in the engines) for any config, input stream and AXI4 slave, bounded;
`reach` witnesses (and the aggregate engine's covers) show bursts on every port; a checker
tightened by one beat (MAX_BURST - 1) fails the aggregate engine's bmc, so the port check is
not vacuous.

zrle_roundtrip (slow): zrle_encoder -> zrle_decoder gives back exactly the inputs, in order,
no error, for any frame of n <= 4 values, bounded (CRC units cut); a reach witness shows a
frame reported in that model; a harness that expects the wrong value fails (not vacuous).

zrle_decoder: its harness covers every error code of gradblock_pkg (FRAME_ERR_*) and a frame
that decodes (checked quickly against the package; reached in the slow cover run); its proof
and the bounded no-hang (every frame reported within HANG_BOUND cycles of its last word,
output ready) pass (slow); a bound that is too tight fails, so the no-hang property is not
vacuous (quick: one short bmc)."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from gradblock import cli
from gradblock.hw import deps, formal

from formal_helpers import copy_set, need_formal_tools, plant

pytestmark = pytest.mark.formal


# property sets that are not one module's: the tops whose sources they read
SET_TOPS = {"zrle_roundtrip": ["zrle_encoder", "zrle_decoder"]}


def _sources(tops: list[str]) -> list[str]:
    out: list[str] = []
    for top in tops:
        out += [p.name for p in deps.sources(top) if p.name not in out]
    return out


@pytest.mark.parametrize("name", list(formal.property_sets()))
def test_property_set_reads_what_deps_resolves(name):
    sby = formal.property_sets()[name]
    files = formal.files_of(sby)
    rtl = [f[3:] for f in files if f.startswith("../")]
    assert rtl == _sources(SET_TOPS.get(name, [name])), (name, files)
    assert f"fv_{name}.sv" in files
    text = formal.sby_text(sby)
    read = re.findall(r"read_verilog -sv -formal (?:-D\w+ )*(\w+\.sv)", text)
    assert set(read) == {f.split("/")[-1] for f in files}, (name, read)
    tasks = formal.tasks_of(sby)
    modes = {t["mode"] for t in tasks}
    witness = "cover" in modes or any(t["task"].startswith("reach") for t in tasks)
    assert witness and modes & {"prove", "bmc"}, tasks


def test_deps_lines_expand_to_the_resolved_sources():
    text = ("[script]\n@read_deps zrle_encoder\nnohang: @read_deps zrle_decoder -DX\n"
            "[files]\n@deps zrle_encoder zrle_decoder\nfv_x.sv\n")
    out = formal.expand(text, deps.HW_DIR).splitlines()
    enc = [p.name for p in deps.sources("zrle_encoder")]
    dec = [p.name for p in deps.sources("zrle_decoder")]
    assert out[1:1 + len(enc)] == [f"read_verilog -sv -formal {f}" for f in enc]
    assert out[1 + len(enc):1 + len(enc) + len(dec)] == \
        [f"nohang: read_verilog -sv -formal -DX {f}" for f in dec]
    files = out[out.index("[files]") + 1:]
    assert files == [f"../{f}" for f in _sources(["zrle_encoder", "zrle_decoder"])] + ["fv_x.sv"]


def test_slow_tasks_are_named_tasks():
    sets = formal.property_sets()
    for name, slow in formal.SLOW.items():
        assert name in sets, name
        assert slow <= {t["task"] for t in formal.tasks_of(sets[name])}, (name, slow)


def test_modes_and_depths_are_read():
    tasks = {t["task"]: t for t in formal.tasks_of(formal.property_sets()["burst_walker"])}
    assert tasks["prove"]["mode"] == "prove" and tasks["prove"]["depth"] == 4   # k-induction
    assert tasks["cover"]["mode"] == "cover" and tasks["cover"]["depth"] >= 20
    skid = formal.tasks_of(formal.property_sets()["axis_skid_buffer"])
    assert [t["depth"] for t in skid if t["mode"] == "prove"] == [None]        # IC3: unbounded


@pytest.mark.parametrize("name", ["axis_skid_buffer", "pipe_reg", "arrival_count"])
def test_small_block_proofs_pass(name):
    need_formal_tools()
    results = formal.run([name], log=lambda *_: None)
    assert results and all(r.result == "PASS" for r in results), \
        [(r.task, r.result, r.detail) for r in results]


def test_planted_bug_fails_the_proof(tmp_path):
    """The skid buffer's output register reloaded while stalled: the proof must fail."""
    need_formal_tools()
    fdir = tmp_path / "formal"
    fdir.mkdir()
    for f in ("axis_skid_buffer.sby", "fv_axis_skid_buffer.sv"):
        shutil.copy(formal.FORMAL_DIR / f, fdir / f)
    text = (deps.HW_DIR / "axis_skid_buffer.sv").read_text()
    stall_load = "        if (main_free) begin\n            m_tdata <="
    assert stall_load in text
    (tmp_path / "axis_skid_buffer.sv").write_text(
        text.replace(stall_load, "        begin\n            m_tdata <=", 1))
    results = formal.run(["axis_skid_buffer"], formal_dir=fdir, tasks=["prove"],
                         log=lambda *_: None)
    assert [r.result for r in results] == ["FAIL"], [(r.result, r.detail) for r in results]


def test_unknown_set_is_a_named_error(capsys):
    assert cli.main(["formal", "--modules", "no_such_block"]) == 2
    err = capsys.readouterr().err
    assert "no_such_block" in err and "Traceback" not in err


def test_missing_tool_is_a_named_error(monkeypatch, capsys):
    monkeypatch.setattr(formal, "_which", lambda name: None if name == "z3" else "/bin/true")
    assert cli.main(["formal", "--modules", "pipe_reg"]) == 2
    err = capsys.readouterr().err
    assert "z3" in err and "Traceback" not in err


@pytest.mark.slow
def test_gradblock_formal_all(tmp_path):
    """`gradblock formal --quick`: every set's tasks but the slow ones (each slow task has its
    own test below, so the suite runs none twice); the JSON lists each with mode, depth,
    result and seconds."""
    need_formal_tools()
    out = tmp_path / "formal.json"
    rc = cli.main(["formal", "--quick", "--json", str(out)])
    doc = json.loads(out.read_text())
    rows = doc["results"]
    quick_sets = {name for name, sby in formal.property_sets().items()
                  if {t["task"] for t in formal.tasks_of(sby)} - formal.SLOW.get(name, set())}
    assert {r["module"] for r in rows} == quick_sets
    assert not any((r["module"], r["task"]) in {(m, t) for m, ts in formal.SLOW.items()
                                                  for t in ts} for r in rows)
    assert all({"file", "mode", "depth", "result", "seconds"} <= set(r) for r in rows)
    assert rc == 0 and doc["passed"], [(r["module"], r["task"], r["result"]) for r in rows
                                       if r["result"] != "PASS"]


# ------------------------------------------------------------------ zrle_decoder
DECODER_SOURCES = ["gradblock_pkg.sv", "zrle_decoder.sv", "axis_skid_buffer.sv", "sync_fifo.sv",
                   "crc32_word.sv"]


def _frame_error_names() -> list[str]:
    text = (deps.HW_DIR / "gradblock_pkg.sv").read_text()
    return re.findall(r"\b(FRAME_ERR_\w+)\s*=", text)


def test_decoder_covers_every_error_code():
    names = _frame_error_names()
    assert len(names) == 14, names
    text = (formal.FORMAL_DIR / "fv_zrle_decoder.sv").read_text()
    covered = re.findall(r"cover \(err_valid && err_code == gradblock_pkg::(FRAME_ERR_\w+)\)", text)
    assert sorted(covered) == sorted(names), set(names) ^ set(covered)
    assert re.search(r"cover \(done\b", text)
    tasks = {t["task"]: t for t in formal.tasks_of(formal.property_sets()["zrle_decoder"])}
    assert tasks["prove"]["depth"] is None and tasks["cover"]["mode"] == "cover"
    assert tasks["nohang"]["mode"] == tasks["nohang_runs"]["mode"] == "bmc"


@pytest.mark.slow
@pytest.mark.parametrize("task", ["prove", "cover", "nohang", "nohang_runs"])
def test_decoder_property_set_passes(task):
    need_formal_tools()
    results = formal.run(["zrle_decoder"], tasks=[task], log=lambda *_: None)
    assert [r.result for r in results] == ["PASS"], [(r.result, r.detail) for r in results]


def test_decoder_hang_bound_is_not_vacuous(tmp_path):
    """HANG_BOUND 2 (RUN_OUT = 1): a frame cannot always be reported that soon, so the bmc
    finds a trace; the committed bound passes (test above)."""
    need_formal_tools()
    fdir = tmp_path / "formal"
    fdir.mkdir()
    shutil.copy(formal.FORMAL_DIR / "zrle_decoder.sby", fdir)
    for f in DECODER_SOURCES:
        shutil.copy(deps.HW_DIR / f, tmp_path / f)
    harness = (formal.FORMAL_DIR / "fv_zrle_decoder.sv").read_text()
    bound = re.search(r"localparam int HANG_BOUND = \d+;", harness)
    assert bound, "fv_zrle_decoder.sv changed: update the planted bound"
    (fdir / "fv_zrle_decoder.sv").write_text(
        harness.replace(bound.group(0), "localparam int HANG_BOUND = 2;"))
    results = formal.run(["zrle_decoder"], formal_dir=fdir, tasks=["nohang_runs"],
                         log=lambda *_: None)
    assert [r.result for r in results] == ["FAIL"], [(r.result, r.detail) for r in results]


# ------------------------------------------------------------------ burst_walker at W = 4 lanes
def test_burst_walker_w4_proof_and_cover_pass():
    """Issue 31: the walk in beats of four elements keeps the AXI4 burst rules (k-induction)
    and reaches a full burst and a short one at a 4 KiB boundary."""
    need_formal_tools()
    results = formal.run(["burst_walker"], tasks=["prove_w4", "cover_w4"], log=lambda *_: None)
    assert [r.result for r in results] == ["PASS", "PASS"], \
        [(r.task, r.result, r.detail) for r in results]


@pytest.mark.slow
def test_burst_walker_w4_walk_is_exact():
    """Every burst starts where the last ended, in beats; each range covers exactly its beats."""
    need_formal_tools()
    results = formal.run(["burst_walker"], tasks=["bmc_w4"], log=lambda *_: None)
    assert [r.result for r in results] == ["PASS"], [(r.result, r.detail) for r in results]


@pytest.mark.slow
def test_burst_walker_w4_lane_bug_fails(tmp_path):
    """A range's beat count without its partial last beat (end / W - start / W): the exact walk
    at W = 4 must fail (W = 1 cannot see it)."""
    need_formal_tools()
    fdir = copy_set(tmp_path, "burst_walker")
    plant(tmp_path / "burst_walker.sv",
          "else remaining <= ((end_r - 32'd1) >> L) + 32'd1 - (start_r >> L);",
          "else remaining <= (end_r >> L) - (start_r >> L) + 32'(end_r == start_r + 1);")
    results = formal.run(["burst_walker"], formal_dir=fdir, tasks=["bmc_w4"], log=lambda *_: None)
    assert [r.result for r in results] == ["FAIL"], [(r.result, r.detail) for r in results]


# ------------------------------------------------------------------ engines, round trip
ENGINE_TASKS = [("compress_engine", "bmc"), ("compress_engine", "reach"),
                ("aggregate_engine", "bmc"), ("aggregate_engine", "cover"),
                ("aggregate_engine", "reach"), ("zrle_roundtrip", "bmc"),
                ("zrle_roundtrip", "reach")]


def test_engine_and_roundtrip_tasks_are_declared():
    sets = formal.property_sets()
    for name, task in ENGINE_TASKS:
        info = {t["task"]: t for t in formal.tasks_of(sets[name])}[task]
        assert info["depth"] and info["depth"] >= 14, (name, info)
        assert formal.is_slow(name, task)


@pytest.mark.slow
@pytest.mark.parametrize("name,task", ENGINE_TASKS)
def test_engine_and_roundtrip_tasks_pass(name, task):
    need_formal_tools()
    results = formal.run([name], tasks=[task], log=lambda *_: None)
    assert [r.result for r in results] == ["PASS"], [(r.result, r.detail) for r in results]


# compress_engine at W = 4 lanes (issue 31 item 4): about 13 minutes each on 2 shared cores,
# so sign-off runs (GRADBLOCK_SIGNOFF=1), declared and slow like the W = 1 tasks; and
# aggregate_engine's (bmc_w4 6 minutes, reach_w4 3.5)
ENGINE_LANE_TASKS = [("compress_engine", "bmc_w4"), ("compress_engine", "reach_w4"),
                     ("aggregate_engine", "bmc_w4"), ("aggregate_engine", "reach_w4")]


def test_engine_lane_tasks_are_declared():
    sets = formal.property_sets()
    for name, task in ENGINE_LANE_TASKS:
        info = {t["task"]: t for t in formal.tasks_of(sets[name])}[task]
        w1 = {t["task"]: t for t in formal.tasks_of(sets[name])}[task.removesuffix("_w4")]
        assert info["depth"] == w1["depth"] and info["engine"] == w1["engine"], (task, info)
        assert formal.is_slow(name, task)
    assert "chparam -set W 4 fv_compress_engine" in sets["compress_engine"].read_text()


@pytest.mark.slow
@pytest.mark.signoff
@pytest.mark.parametrize("name,task", ENGINE_LANE_TASKS)
def test_engine_lane_tasks_pass(name, task):
    need_formal_tools()
    results = formal.run([name], tasks=[task], log=lambda *_: None)
    assert [r.result for r in results] == ["PASS"], [(r.result, r.detail) for r in results]


@pytest.mark.slow
def test_aggregate_port_check_is_not_vacuous(tmp_path):
    """A checker allowing one beat less than MAX_BURST: the bmc finds the 4-beat burst."""
    need_formal_tools()
    fdir = copy_set(tmp_path, "aggregate_engine")
    plant(tmp_path / "axi4_master_checker.sv", "assert ({1'b0, m_axi_awlen} < 9'(MAX_BURST)",
          "assert ({1'b0, m_axi_awlen} < 9'(MAX_BURST - 1)", 1)
    sby = fdir / "aggregate_engine.sby"
    sby.write_text(re.sub(r"bmc: depth \d+", "bmc: depth 16", sby.read_text()))
    results = formal.run(["aggregate_engine"], formal_dir=fdir, tasks=["bmc"],
                         log=lambda *_: None)
    assert [r.result for r in results] == ["FAIL"], [(r.result, r.detail) for r in results]


@pytest.mark.slow
def test_roundtrip_is_not_vacuous(tmp_path):
    """A harness expecting the next input instead of this one: the bmc finds a frame."""
    need_formal_tools()
    fdir = copy_set(tmp_path, "zrle_roundtrip")
    plant(fdir / "fv_zrle_roundtrip.sv", "assert (m_tdata == vals[out_cnt[1:0]]);",
          "assert (m_tdata == vals[2'(out_cnt[1:0] + 2'd1)]);", 1)
    results = formal.run(["zrle_roundtrip"], formal_dir=fdir, tasks=["bmc"],
                         log=lambda *_: None)
    assert [r.result for r in results] == ["FAIL"], [(r.result, r.detail) for r in results]
