"""Layer-to-engine split (paper 003): the exact planners against exhaustive search, the paper's
algorithms never better than the optimum, Algorithm 1's rule, and `gradblock split`."""
from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradblock.bench import engine_split as es


@st.composite
def costs(draw, max_layers=7, max_engines=3):
    E = draw(st.integers(1, max_engines))
    L = draw(st.integers(1, max_layers))
    base = draw(st.lists(st.floats(0.01, 10), min_size=L, max_size=L))
    speed = draw(st.lists(st.floats(0.2, 5), min_size=E, max_size=E))
    return [[b / s for b in base] for s in speed], speed


def _all_contiguous(E, L):
    for cuts in itertools.combinations_with_replacement(range(L + 1), E - 1):
        yield [0, *cuts]


@given(costs())
def test_optimal_contiguous_is_exhaustive_minimum(case):
    cost, _ = case
    E, L = len(cost), len(cost[0])
    best = min(max(es.engine_times(cost, s)) for s in _all_contiguous(E, L))
    assert max(es.engine_times(cost, es.optimal_contiguous(cost))) == pytest.approx(best)


@given(costs(max_layers=6))
def test_optimal_any_is_exhaustive_minimum(case):
    cost, _ = case
    E, L = len(cost), len(cost[0])
    best = min(max(es.assignment_times(cost, o)) for o in itertools.product(range(E), repeat=L))
    assert max(es.assignment_times(cost, es.optimal_any(cost))) == pytest.approx(best)


@given(costs())
def test_paper_split_is_a_valid_split_no_better_than_optimum(case):
    cost, speed = case
    E, L = len(cost), len(cost[0])
    engines = [es.Engine(f"e{i}", s) for i, s in enumerate(speed)]
    starts = es.paper_split([1.0] * L, engines, cost, tau=0.01)
    assert len(starts) == E and starts[0] == 0 and starts == sorted(starts) and starts[-1] <= L
    opt = max(es.engine_times(cost, es.optimal_contiguous(cost)))
    assert max(es.engine_times(cost, starts)) >= opt - 1e-9
    rr = max(es.assignment_times(cost, es.round_robin(L, E)))
    anyopt = max(es.assignment_times(cost, es.optimal_any(cost)))
    assert rr >= anyopt - 1e-9 and opt >= anyopt - 1e-9


def test_split_compare_is_algorithm_1():
    assert es.split_compare([1, 1], [2, 2], tau=0.5) == 1          # same spread: smaller mean
    assert es.split_compare([0, 4], [2.5, 2.5], tau=0.5) == 2      # spread differs: smaller std
    assert es.split_compare([0, 4], [2.5, 2.5], tau=10) == 1       # within tau: smaller mean


def test_hw_costs_follow_the_cycle_budget():
    # 4 filters of 9 elements, k = 1: 36 + 2*9 + 64 cycles at 100 MHz
    assert es.hw_layer_costs([(4, 1, 3, 3)], 100.0) == [pytest.approx((36 + 18 + 64) / 1e5)]


@pytest.mark.parametrize("spec", ["gpu:2", "numba:0", "hw:1", "hw:1@-5", "numba:20"])
def test_bad_engine_spec_is_named(spec, capsys):
    from gradblock import cli
    assert cli.main(["split", "--engines", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gradblock split: ") and "\n" not in err


def test_cli_measures_and_writes_json(tmp_path):
    out = tmp_path / "split.json"
    assert es.split_main(["--model", "resnet20", "--layers", "10", "--engines", "numba:1,hw:1@150",
                          "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    plans = rep["plans"]
    assert set(plans) == {"paper", "optimal_contiguous", "round_robin", "optimal_any"}
    assert plans["optimal_any"]["makespan_ms"] <= plans["optimal_contiguous"]["makespan_ms"] + 1e-12
    assert plans["optimal_contiguous"]["makespan_ms"] <= plans["paper"]["makespan_ms"] + 1e-12
