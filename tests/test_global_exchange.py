"""Global block selection, the allreduce exchange (docs/spec.md §8): the numpy reference
(refmodel/global_select.py) against the torch step (torchstep/global_select.py), the spec's
worked example, the named errors, and DDP (2 and 3 gloo ranks) against the single-process
simulation (shim/exchange/global_exchange.py, tests/global_ddp_case.py)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradblock.refmodel.global_select import (NormBoundError, PeerNonFiniteError,
                                              RankMismatchError, check_bound, check_digits,
                                              check_sums, global_step, norm_shift, plan_layers,
                                              value_shift)
from gradblock.refmodel.momentum import MomentumConfig
from gradblock.refmodel.quantiser import QMAX, NonFiniteError, QuantConfig

torch = pytest.importorskip("torch", reason="the torch step needs torch")
from gradblock.torchstep import global_select as tg  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.torch]


def torch_step(grads, residuals, velocities, shapes, *, k, block_size, R, momentum, mask,
               device="cpu", method="auto"):
    """global_step through the torch functions, the collectives as sums in rank order."""
    n = len(grads)
    m_fix = None if momentum is None else MomentumConfig.from_float(momentum).m_fix
    plan = tg.plan_global(shapes, k=k, block_size=block_size, R=R, m_fix=m_fix, mask=mask,
                          n_workers=n, device=device)
    t = lambda a: None if a is None else torch.from_numpy(np.array(a)).to(device)  # noqa: E731
    preps = [tg.prepare(plan, [t(g) for g in grads[w]],
                        None if residuals is None else [t(r) for r in residuals[w]],
                        None if velocities is None else [t(u) for u in velocities[w]],
                        method=method)
             for w in range(n)]
    summed = preps[0].vector.clone()
    for p in preps[1:]:
        summed += p.vector
    for w, p in enumerate(preps):
        tg.own_nan(plan, p, where=f"worker {w} ")
    for w, p in enumerate(preps):
        tg.check(plan, p, summed, where=f"worker {w} ")
    fins = [tg.finish(plan, p, summed) for p in preps]
    vsum = fins[0].values.clone()
    for f in fins[1:]:
        vsum += f.values
    return preps, fins, tg.average(plan, fins[0], vsum), vsum


def assert_same(ref, preps, fins, avg, vsum):
    for w, (p, f) in enumerate(zip(preps, fins)):
        assert np.array_equal(p.vector.cpu().numpy(), ref.norm_vectors[w])
        assert np.array_equal(f.values.cpu().numpy(), ref.value_vectors[w])
        for j, r in enumerate(f.residuals):
            assert np.array_equal(r.cpu().numpy(), ref.residuals[w][j]), (w, j)
            if ref.velocities is not None:
                assert np.array_equal(f.velocities[j].cpu().numpy(), ref.velocities[w][j]), (w, j)
    assert np.array_equal(vsum.cpu().numpy(), ref.value_sum)
    for j, a in enumerate(avg):
        assert a.cpu().numpy().tobytes() == ref.averaged[j].tobytes(), j


SHAPES = st.lists(st.one_of(
    st.tuples(st.integers(1, 6), st.integers(1, 5)),
    st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3)),
    st.tuples(st.integers(1, 9)),
    st.just(())), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(shapes=SHAPES, n=st.integers(1, 4), k=st.sampled_from([1, 2, 3, 0.3, 0.75]),
       block_size=st.sampled_from([None, None, 1, 2, 4, 7]),
       momentum=st.sampled_from([None, None, 0.9, 0.5]), mask=st.booleans(),
       ties=st.booleans(), big=st.booleans(), seed=st.integers(0, 2**31 - 1),
       R=st.sampled_from([10.0, 1.0, 0.1]), method=st.sampled_from(["torch", "numba"]))
def test_torch_equals_reference(shapes, n, k, block_size, momentum, mask, ties, big, seed, R,
                                method):
    """Bit for bit: vectors of both collectives, residuals, velocities and the averages; with
    `ties` the gradients take few distinct values, so many summed norms tie and the lower
    index must win; with `big` the residuals / velocities reach the saturation."""
    rng = np.random.default_rng(seed)

    def grad(s):
        if ties:
            return rng.choice(np.float32([0, 0.5, -0.5, 1.0]), size=s).astype(np.float32)
        return (rng.standard_normal(s) * R).astype(np.float32)

    lim = QMAX if big else 10**6
    grads = [[grad(s) for s in shapes] for _ in range(n)]
    res = [[rng.integers(-lim, lim, size=s, endpoint=True).astype(np.int32) for s in shapes]
           for _ in range(n)]
    vel = None if momentum is None else [
        [rng.integers(-lim, lim, size=s, endpoint=True).astype(np.int32) for s in shapes]
        for _ in range(n)]
    layers = plan_layers(shapes, k=k, block_size=block_size)
    ref = global_step(grads, res, vel, layers, R=R, momentum=momentum, mask=mask)
    got = torch_step(grads, res, vel, shapes, k=k, block_size=block_size, R=R,
                     momentum=momentum, mask=mask, method=method)
    assert_same(ref, *got)
    for sel, lay in zip(ref.selected, layers):           # the same k_eff blocks, ascending
        assert len(sel) == lay.k_eff and list(sel) == sorted(set(sel.tolist()))


def test_ties_go_to_the_lower_block_on_every_worker():
    """Two workers whose own largest blocks differ, equal summed norms: block 0 wins, and
    both send it (worker 1 its zeros there); values travel as a >> 1 (N = 2), the remainder
    stays in the residual."""
    g = [[np.float32([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])],
         [np.float32([[0.0, 0.0], [0.0, 0.0], [0.5, 0.5]])]]
    layers = plan_layers([(3, 2)], k=1)
    ref = global_step(g, None, None, layers)
    assert ref.selected[0].tolist() == [0]
    assert [v.tolist() for v in ref.value_vectors] == [[107374182, 0], [0, 0]]
    assert ref.residuals[0][0].tolist() == [[1, 0], [0, 0], [0, 0]]
    assert ref.residuals[1][0].tolist() == [[0, 0], [0, 0], [107374182, 107374182]]
    assert_same(ref, *torch_step(g, None, None, [(3, 2)], k=1, block_size=None, R=10.0,
                                 momentum=None, mask=True))


def test_spec_worked_example():
    """docs/spec.md §8.7, number for number."""
    g = [[np.float32([[0.5, -0.25], [1.0, 0.001], [0.0, 0.0]]), np.float32([0.25, -1.0, 0.5])],
         [np.float32([[0.5, 0.25], [0.0, 0.0], [2.0, 0.0]]), np.float32([0.0, 1.0, 0.5])]]
    layers = plan_layers([(3, 2), (3,)], k=1)
    assert [norm_shift(lay.width, 2) for lay in layers] == [2, 1] and value_shift(2) == 1
    ref = global_step(g, None, None, layers)
    head = [0, 215, 215**2, 84, 84**2, 156, 156**2, 60, 60**2, 241, 241**2, 58, 58**2]
    assert check_digits(10245335) == head[1:7] and check_digits(3862844) == head[7:]
    assert ref.norm_vectors[0].tolist() == head + [40265318, 53740778, 0,
                                                   26843545, 107374182, 53687091]
    assert ref.norm_vectors[1].tolist() == head + [40265318, 0, 107374182,
                                                   0, 107374182, 53687091]
    assert [s.tolist() for s in ref.summed_norms] == [[80530636, 53740778, 107374182],
                                                      [26843545, 214748364, 107374182]]
    assert [s.tolist() for s in ref.selected] == [[2], [1]]
    assert ref.value_vectors[0].tolist() == [0, 0, -107374183]
    assert ref.value_vectors[1].tolist() == [214748365, 0, 107374182]
    assert ref.value_sum.tolist() == [214748365, 0, -1]
    assert ref.averaged[0].tolist() == [[0, 0], [0, 0], [1.0, 0.0]]
    assert ref.averaged[1].view(np.uint32).tolist() == [0, 0xB1A00000, 0]
    assert ref.residuals[0][0].tolist() == [[107374182, -53687091], [214748365, 214748], [0, 0]]
    assert ref.residuals[0][1].tolist() == [53687091, 1, 107374182]
    assert ref.residuals[1][0].tolist() == [[107374182, 53687091], [0, 0], [0, 0]]
    assert ref.residuals[1][1].tolist() == [0, 1, 107374182]
    assert_same(ref, *torch_step(g, None, None, [(3, 2), (3,)], k=1, block_size=None, R=10.0,
                                 momentum=None, mask=True))


def test_norm_bound_is_checked_before_anything_is_allocated():
    huge = plan_layers([(2**31,)], block_size=2**31, names=["wide"])
    check_bound(huge, 2)                                   # 2 * 2**31 * QMAX < 2**63
    with pytest.raises(NormBoundError, match="layer 0 'wide'"):
        check_bound(huge, 3)
    with pytest.raises(NormBoundError, match="layer 0 'wide'"):
        tg.plan_global([(2**31,)], block_size=2**31, names=["wide"], n_workers=3)
    with pytest.raises(NormBoundError):
        check_bound(plan_layers([(4,)]), 2**15)


def test_header_errors():
    layers = plan_layers([(2, 2), (3,)], names=["a", "b"])
    ok = np.array([0] + check_digits(0x050607) + check_digits(0x0A0B0C) + [0] * 5) * 2
    check_sums(ok, layers, 2)
    bad = ok.copy()
    bad[9], bad[10] = 11 + 12, 121 + 144      # layer 1's middle digit: the ranks sent 11 and 12
    with pytest.raises(RankMismatchError, match="layer 1 'b'"):
        check_sums(bad, layers, 2)
    nan = ok.copy()
    nan[0] = 1
    with pytest.raises(PeerNonFiniteError, match="1 worker"):
        check_sums(nan, layers, 2)


@pytest.mark.parametrize("method", ["torch", "numba"])
def test_nan_is_the_reference_error_on_the_worker_that_has_it(method):
    shapes = [(2, 3)]
    g = [[np.ones(s, np.float32) for s in shapes] for _ in range(2)]
    g[1][0][1, 2] = np.nan
    layers = plan_layers(shapes)
    with pytest.raises(NonFiniteError) as ref:
        global_step(g, None, None, layers)
    with pytest.raises(NonFiniteError) as got:
        torch_step(g, None, None, shapes, k=1, block_size=None, R=10.0, momentum=None, mask=True,
                   method=method)
    assert str(ref.value) == str(got.value) and "worker 1 layer 0" in str(got.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_equals_reference():
    rng = np.random.default_rng(1)
    shapes = [(6, 1, 5, 5), (6,), (10, 84)]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)]
    layers = plan_layers(shapes, k=2)
    ref = global_step(grads, None, None, layers, momentum=0.9)
    assert_same(ref, *torch_step(grads, None, None, shapes, k=2, block_size=None, R=10.0,
                                 momentum=0.9, mask=True, device="cuda"))


# ------------------------------------------------------------------------------ shim

def test_simulation_checkpoint_carries_the_exchange(tmp_path):
    """A run with --exchange allreduce records it (compressor config and run config); a
    resume under the default exchange is refused by name."""
    from gradblock.shim.errors import CheckpointError
    from gradblock.shim.training.train import TrainConfig, run_training
    common = dict(data="digits", compressor="coarse", k=1, epochs=1, batch_size=16, workers=3,
                  threads=1, progress=False, local_momentum=0.9, momentum=0.0)
    ck = tmp_path / "ck.pt"
    r = run_training(TrainConfig(exchange="allreduce", max_steps=3, checkpoint=str(ck), **common))
    assert r["compressor_config"]["exchange"] == "allreduce" and r["steps"] == 3
    assert r["bytes_sent"] > 0
    with pytest.raises(CheckpointError, match="exchange"):
        run_training(TrainConfig(max_steps=5, resume=str(ck), **common))
    again = run_training(TrainConfig(exchange="allreduce", max_steps=5, resume=str(ck), **common))
    assert again["steps"] == 5


def test_allreduce_needs_coarse(capsys):
    from gradblock import cli
    assert cli.main(["train", "--compressor", "topk", "--exchange", "allreduce",
                     "--data", "digits", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "exchange" in err and "Traceback" not in err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args: list[str], nproc: int, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT),
                                           os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), "-m", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module", params=[2, pytest.param(3, marks=pytest.mark.slow)])
def ddp_reports(request, tmp_path_factory):
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available")
    world = request.param
    out = tmp_path_factory.mktemp(f"global_ddp{world}")
    proc = torchrun(["global_ddp_case", str(out)], world)
    reports = {}
    for r in range(world):
        path = out / f"rank{r}.json"
        if not path.exists():
            pytest.fail(f"rank {r} wrote no report; torchrun said:\n{proc.stdout}\n{proc.stderr}")
        reports[r] = json.loads(path.read_text())
        assert "error" not in reports[r], reports[r]["error"]
    return world, reports


def test_ddp_equals_simulation(ddp_reports):
    world, reports = ddp_reports
    for r, rep in reports.items():
        assert rep["configs"], rep
        for name, c in rep["configs"].items():
            assert c["hook"] == "GlobalHookState", (r, name)
            assert c["equal_to_simulation"] and c["equal_on_all_ranks"], (r, name, c)
            assert c["bytes"] > 0 and c["timed"], (r, name, c)


def test_ddp_rank_mismatch_and_nan_raise_on_every_rank(ddp_reports):
    world, reports = ddp_reports
    for r, rep in reports.items():
        assert rep["mismatch"]["raised"] == "RankMismatchError", rep["mismatch"]
        assert "layer 0 'conv.weight'" in rep["mismatch"]["message"]
        assert rep["length_mismatch"]["raised"] == "RankMismatchError", rep["length_mismatch"]
        assert "norm-vector words differ" in rep["length_mismatch"]["message"]
        want = "NonFiniteError" if r == world - 1 else "PeerNonFiniteError"
        assert rep["nan"]["raised"] == want, (r, rep["nan"])
    assert f"rank {world - 1} layer 0" in reports[world - 1]["nan"]["message"]


@pytest.mark.slow
def test_train_ddp_allreduce_equals_simulation(tmp_path):
    """`gradblock train --ddp --exchange allreduce` ends with the simulation's parameters; the
    first epoch (22 steps) runs the dense warm-up compressor through the same hook."""
    from test_ddp_hook import simulated_run
    common = ["--data", "digits", "--compressor", "coarse", "--k", "2", "--epochs", "2",
              "--warmup-epochs", "1",
              "--batch-size", "32", "--threads", "1", "--no-progress", "--max-steps", "27",
              "--exchange", "allreduce", "--local-momentum", "0.9", "--momentum", "0"]
    proc = torchrun(["gradblock.cli", "train", "--ddp", *common, "--out", str(tmp_path / "ddp")],
                    2)
    assert proc.returncode == 0, proc.stderr
    simulated_run(common, tmp_path / "sim")
    sim = torch.load(tmp_path / "sim" / "model.pt", weights_only=True)
    for r in (0, 1):
        state = torch.load(tmp_path / "ddp" / f"model.rank{r}.pt", weights_only=True)
        for k, v in sim.items():
            assert torch.equal(state[k], v), (r, k)


@pytest.mark.parametrize("method", ["torch", "numba"])
@pytest.mark.parametrize("n", [1, 2, 3, 8, 9])
def test_extremes_fit_the_int32_sums(n, method):
    """Every worker at -QMAX (and at +QMAX) on the same blocks: the shifted values and norms
    sum without overflow, and the torch step agrees with the reference."""
    shapes = [(3, 4), (5,)]
    for sign in (-1, 1):
        g = [[np.full(s, sign * 20.0, np.float32) for s in shapes] for _ in range(n)]
        r = [[np.full(s, sign * QMAX, np.int32) for s in shapes] for _ in range(n)]
        layers = plan_layers(shapes, k=2)
        ref = global_step(g, r, None, layers)
        assert_same(ref, *torch_step(g, r, None, shapes, k=2, block_size=None, R=10.0,
                                     momentum=None, mask=True, method=method))
        sv = value_shift(n)
        assert ref.value_sum.tolist()[0] == n * ((sign * QMAX) >> sv)
        assert ref.averaged[0][0, 0] == np.float32(float(n * ((sign * QMAX) >> sv) << sv)
                                                   * (10.0 / (QMAX * n)))


def test_validate_applies_the_exchange_to_the_coarse_rows_only():
    from gradblock.shim.setup.config import TrainConfig
    from gradblock.shim.training.validate import matrix
    base = TrainConfig(exchange="allreduce", local_momentum=0.9, momentum=0.0)
    rows = matrix(base, 4, None, uncorrected=True)
    for name, cfg in rows:
        cfg.check()
        assert cfg.exchange == ("allreduce" if cfg.compressor == "coarse" else "allgather"), name
    assert {name for name, cfg in rows if cfg.exchange == "allreduce"} == {
        "coarse1", "coarseK", "coarse1_plain", "coarseK_plain"}


def test_one_worker_trains_exactly_as_the_framed_path(tmp_path):
    """With N = 1 the summed norms are the worker's own (shifted: the ranking can only differ
    on norms within 2**s_n of each other) and s_v = 0: both exchanges give the same bits."""
    from gradblock.shim.training.train import TrainConfig, run_training
    common = dict(data="digits", compressor="coarse", k=1, epochs=1, batch_size=16, workers=1,
                  threads=1, progress=False, local_momentum=0.9, momentum=0.0, max_steps=12)
    for ex in ("allgather", "allreduce"):
        run_training(TrainConfig(exchange=ex, out=str(tmp_path / ex), **common))
    a = torch.load(tmp_path / "allgather" / "model.pt", weights_only=True)
    b = torch.load(tmp_path / "allreduce" / "model.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
