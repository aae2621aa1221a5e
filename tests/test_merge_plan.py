"""DLGS layer merging: the exact planner against brute force, the greedy never better than exact,
the model's equations on a hand-worked case, and `gradblock merge-plan` from a times file."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradblock.shim.systems.merge_plan import (LayerTimes, brute_force, exact, greedy,
                                               groups_from_cuts, iteration_time, no_merge)

ms = st.floats(0, 5, allow_nan=False)


@st.composite
def layer_times(draw, max_layers=9):
    L = draw(st.integers(1, max_layers))
    return LayerTimes(tuple(f"l{i}" for i in range(L)),
                      tuple(draw(st.lists(st.integers(1, 10**6), min_size=L, max_size=L))),
                      tuple(draw(st.lists(ms, min_size=L, max_size=L))), draw(ms),
                      draw(st.floats(0, 2)), draw(st.floats(0, 1e-5)), draw(st.floats(0, 5)),
                      draw(st.floats(0, 1e-5)),
                      tuple(draw(st.lists(st.integers(0, 10**6), min_size=L, max_size=L))))


@given(layer_times())
def test_exact_equals_brute_force_and_beats_greedy(t):
    best = iteration_time(t, brute_force(t))
    assert iteration_time(t, exact(t)) == pytest.approx(best, rel=1e-12, abs=1e-12)
    assert iteration_time(t, greedy(t)) >= best - 1e-9
    assert iteration_time(t, no_merge(t)) >= best - 1e-9


def test_equations_on_a_hand_worked_case():
    # two layers (backward order), t_f = 1; t_s = 1 + 0*n; t_c = 2 + 1 ms/byte * bytes
    t = LayerTimes(("l2", "l1"), (10, 10), (1.0, 1.0), 1.0, 1.0, 0.0, 2.0, 1.0, (1, 1))
    # separate: l2 sparsified by 1+1+1=3, comm 3..6; l1 backward 3..4, sparsified 5, comm 6..9
    assert iteration_time(t, no_merge(t)) == 9.0
    # merged: backward 1..3, sparsify 3..4, one comm of 2 bytes 4..8
    assert iteration_time(t, groups_from_cuts(2, [])) == 8.0
    assert exact(t) == [(0, 2)]


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="one length"):
        LayerTimes(("a",), (1, 2), (1.0,), 0.0, 0.0, 0.0, 0.0, 0.0, (1,))
    with pytest.raises(ValueError, match="forward_ms"):
        LayerTimes(("a",), (1,), (1.0,), float("nan"), 0.0, 0.0, 0.0, 0.0, (1,))


pytest.importorskip("torch", reason="gradblock merge-plan measures with torch")


def test_cli_from_times_file(tmp_path, capsys):
    from gradblock.shim.systems.merge_measure import merge_plan_main
    times = {"names": ["fc2", "fc1", "conv"], "sizes": [850, 48000, 2400], "backward_ms": [0.1, 0.9, 2.0],
             "forward_ms": 3.0, "sparsify_a_ms": 0.05, "sparsify_b_ms": 1e-6, "comm_alpha_ms": 0.8,
             "comm_beta_ms": 2e-6, "wire_bytes": [200, 900, 300]}
    src, out = tmp_path / "t.json", tmp_path / "plan.json"
    src.write_text(json.dumps(times))
    assert merge_plan_main(["--times", str(src), "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    it = rep["iteration_ms"]
    assert set(it) == {"none", "dlgs_greedy", "exact"}
    assert it["exact"] <= it["dlgs_greedy"] + 1e-12 and it["exact"] <= it["none"] + 1e-12
    assert sum(len(g["layers"]) for g in rep["groups"]) == 3


def test_cli_bad_times_file(tmp_path, capsys):
    bad = tmp_path / "t.json"
    bad.write_text('{"names": ["a"]}')
    from gradblock import cli
    assert cli.main(["merge-plan", "--times", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gradblock merge-plan: ") and "missing fields" in err


def test_measured_plan_for_lenet5(tmp_path):
    """Measures backward hooks, the numba step and gloo all_gather on this machine."""
    from gradblock.shim.systems.merge_measure import merge_plan_main
    out = tmp_path / "plan.json"
    assert merge_plan_main(["--model", "lenet5", "--repeats", "2", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert len(rep["inputs"]["names"]) == 10 and rep["iteration_ms"]["exact"] > 0


@pytest.mark.slow
def test_plans_execute_over_gloo(tmp_path):
    """Each plan runs for real (grouped compress + one all_gather per group, overlapping backward)."""
    from gradblock.shim.systems.merge_measure import merge_plan_main
    out = tmp_path / "plan.json"
    assert merge_plan_main(["--model", "lenet5", "--repeats", "1", "--execute", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert set(rep["measured_ms"]) == {"none", "dlgs_greedy", "exact"}
    assert all(v > 0 for v in rep["measured_ms"].values())


def test_execute_refuses_a_times_file(tmp_path, capsys):
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"names": ["a"], "sizes": [1], "backward_ms": [1.0], "forward_ms": 1.0,
                               "sparsify_a_ms": 0.0, "sparsify_b_ms": 0.0, "comm_alpha_ms": 0.0,
                               "comm_beta_ms": 0.0, "wire_bytes": [4]}))
    from gradblock import cli
    assert cli.main(["merge-plan", "--times", str(src), "--execute"]) == 2
    assert "--execute" in capsys.readouterr().err
