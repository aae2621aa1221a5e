"""CSSGD coded exchange: every worker recovers every block bit for bit; load against the paper's 1/r."""
from __future__ import annotations

import json
from math import comb

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradblock.refmodel import coded


@st.composite
def exchanges(draw):
    n = draw(st.integers(2, 6))
    r = draw(st.integers(1, n - 1))
    d = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    return n, r, d, seed


@given(exchanges())
def test_every_worker_recovers_every_block_exactly(case):
    n, r, d, seed = case
    rng = np.random.default_rng(seed)
    blocks = coded.assign_blocks(n, r)
    # full int32 range: the packet sums overflow and must still decode exactly (mod 2**32)
    codes = {b: rng.integers(-2**31, 2**31, d, dtype=np.int64).astype(np.int32) for b in blocks}
    res = coded.coded_exchange(codes, n, r)
    reference = coded.global_sum(codes, blocks)
    for w in range(n):
        assert set(res.recovered[w]) == set(blocks)
        for b in blocks:
            np.testing.assert_array_equal(res.recovered[w][b], codes[b])
        np.testing.assert_array_equal(coded.global_sum(res.recovered[w], blocks), reference)
    assert res.words_sent == coded.coded_words(n, r, d)
    assert res.messages == n * comb(n - 1, r)


def test_assignment_is_algorithm_2():
    blocks = coded.assign_blocks(4, 2)
    assert len(blocks) == comb(4, 2) and len(set(blocks)) == len(blocks)
    for w in range(4):                      # every worker holds C(n-1, r-1) blocks ...
        assert len(coded.blocks_of(w, blocks)) == comb(3, 1)
    for pair in blocks:                     # ... and every r-subset shares exactly one block
        assert sum(1 for b in blocks if set(pair) <= set(b)) == 1


@pytest.mark.parametrize("n,r", [(3, 1), (4, 2), (5, 2), (6, 3), (5, 4)])
def test_load_ratio_matches_the_paper_when_r_divides_d(n, r):
    d = 12 * r
    assert coded.coded_words(n, r, d) / coded.uncoded_words(n, r, d) == pytest.approx(1 / r)


def test_r1_is_the_plain_all_to_all():
    assert coded.coded_words(5, 1, 7) == coded.uncoded_words(5, 1, 7) == 5 * 4 * 7


@pytest.mark.parametrize("n,r", [(1, 1), (4, 0), (4, 4), (17, 2), (True, 1), (4, 2.0)])
def test_bad_configuration_is_named(n, r):
    with pytest.raises(coded.CodedConfigError):
        coded.assign_blocks(n, r)


def test_codes_validated():
    blocks = coded.assign_blocks(3, 1)
    codes = {b: np.zeros(4, np.int32) for b in blocks}
    codes[blocks[0]] = np.zeros(4, np.int64)
    with pytest.raises(coded.CodedConfigError, match="int32"):
        coded.coded_exchange(codes, 3, 1)


torch = pytest.importorskip("torch", reason="the training driver needs torch")


def _run(tmp_path, *extra):
    from gradblock.shim.systems.coded import coded_main
    out = tmp_path / "coded.json"
    rc = coded_main(["--workers", "3", "--redundancy", "2", "--steps", "2", "--dataset", "digits",
                     "--model", "digits_cnn", "--block-samples", "4", "--json", str(out), *extra])
    return rc, json.loads(out.read_text())


def test_training_steps_in_simulation_are_exact(tmp_path):
    rc, res = _run(tmp_path)
    assert rc == 0 and res["exact"] is True
    assert res["load_ratio_formula"] == 0.5
    assert res["words_coded"] < res["words_uncoded"]


def test_training_steps_over_gloo_are_exact_and_match_simulation(tmp_path):
    rc, sim = _run(tmp_path)
    rc2, res = _run(tmp_path, "--backend", "gloo")
    assert rc2 == 0 and res["exact"] is True and res["backend"] == "gloo"
    assert res["words_coded"] == sim["words_coded"]
    assert res["final_loss"] == sim["final_loss"]       # same bits: same model after each step


def test_cli_refuses_bad_redundancy(tmp_path, capsys):
    from gradblock import cli
    assert cli.main(["coded", "--workers", "3", "--redundancy", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gradblock coded: CodedConfigError") and "\n" not in err


def test_paper_systems_are_subcommands():
    """`gradblock coded|merge-plan|split|interfere` resolve to their entry points."""
    import importlib

    from gradblock.cli import COMMANDS
    for name in ("coded", "merge-plan", "split", "interfere"):
        module, func, _ = COMMANDS[name]
        assert callable(getattr(importlib.import_module(module), func)), name
