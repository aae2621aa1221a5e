"""Shared-device interference (paper 002): the co-location formula and criterion, and one
measured pair through `gradblock interfere` (real processes; figures are machine-dependent,
so the test checks the bookkeeping, not speeds)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradblock.bench.interference import colocated_time, colocation_pays, interfere_main

r = st.floats(1.0, 5.0)
t = st.floats(0.1, 100.0)


@given(t, t, r, r)
def test_criterion_agrees_with_the_timeline(ta, tb, rab, rba):
    together = colocated_time(ta, tb, rab, rba)
    assert together >= max(ta, tb) - 1e-9          # sharing never beats the longer job alone
    if abs(rab * rba - (rab + rba)) > 1e-6:
        assert colocation_pays(rab, rba) == (together < ta + tb)


def test_no_interference_halves_the_time_and_full_interference_gains_nothing():
    assert colocated_time(1.0, 1.0, 1.0, 1.0) == 1.0
    assert colocated_time(1.0, 1.0, 2.0, 2.0) == pytest.approx(2.0)
    assert not colocation_pays(2.0, 2.0) and colocation_pays(1.5, 1.5)


def test_bad_pair_is_named(capsys):
    from gradblock import cli
    assert cli.main(["interfere", "--pairs", "lenet5-dense:vgg"]) == 2
    assert capsys.readouterr().err.startswith("gradblock interfere: ")


@pytest.mark.slow
def test_measured_pair(tmp_path):
    pytest.importorskip("torch", reason="the jobs train with torch")
    out = tmp_path / "i.json"
    assert interfere_main(["--pairs", "lenet5-dense:lenet5-coarse", "--seconds", "1.5", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["r_ab"] > 0 and row["r_ba"] > 0
    assert row["colocation_pays"] == colocation_pays(row["r_ab"], row["r_ba"])
