"""DLGS merge plans applied (shim/systems/merge_apply.py, shim/systems/merge_hook.py, the
simulated cluster): merging changes the call structure only, never the bits."""
from __future__ import annotations

import json
import os
import random

import pytest

torch = pytest.importorskip("torch", reason="merge plans run in the torch shim")
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from gradblock.shim.compress.compressors import build_compressor, layers_of  # noqa: E402
from gradblock.shim.exchange.ddp_check import batches, compressor_for, make_model  # noqa: E402
from gradblock.shim.exchange.optim import GlobalMomentumSGD  # noqa: E402
from gradblock.shim.systems.merge_apply import (MergePlanError, backward_order,  # noqa: E402
                                                check_groups, groups_from_names, read_plan_file)
from gradblock.shim.systems.merge_plan import PLANNERS, LayerTimes  # noqa: E402
from gradblock.shim.exchange.workers import SimulatedCluster  # noqa: E402

from cli_helpers import run  # noqa: E402
from own_process import one_rank_gloo_group, run_in_own_process  # noqa: E402

pytestmark = [pytest.mark.torch]

COMPRESSORS = ("dense", "topk", "dlgs", "coarse")


def _order(model):
    x, y = batches(2, "cpu")[0][0]
    return backward_order(model, x, y)


def _planned(kind: str, model) -> list[list[int]]:
    """Groups from the merge_plan planners on synthetic times for this model's layers."""
    layers = layers_of(model)
    order = _order(model)
    by_name = {lay.name: lay for lay in layers}
    sizes = tuple(by_name[n].numel for n in order)
    times = LayerTimes(tuple(order), sizes, tuple(0.01 * s ** 0.5 for s in sizes), 1.0,
                       0.02, 1e-5, 0.5, 1e-5, tuple(4 * s // 8 + 12 for s in sizes))
    plan = PLANNERS[kind](times)
    return groups_from_names([list(order[a:b]) for a, b in plan], layers, order)


def _random_groups(n: int, seed: int) -> list[list[int]]:
    """A random partition of the layers in a random order (the executors accept any)."""
    rng = random.Random(seed)
    idx = list(range(n))
    rng.shuffle(idx)
    cuts = sorted(rng.sample(range(1, n), rng.randint(0, n - 1)))
    return [idx[a:b] for a, b in zip([0, *cuts], [*cuts, n])]


def _simulate(name, groups, steps=None):
    model = make_model("cpu")
    cluster = SimulatedCluster(model, compressor_for(name, model, 2), layers_of(model),
                               F.cross_entropy, "cpu", groups=groups, timed=False)
    opt = GlobalMomentumSGD(model.parameters(), lr=0.1, momentum=0.9)
    sent = 0
    for step in batches(2, "cpu")[:steps]:
        res = cluster.step(step, opt)
        sent += sum(s.bytes_sent for s in res.stats)
    return [p.detach().clone() for p in model.parameters()], sent


# ------------------------------------------------------------------------------ plans and checks

def test_backward_order_leaves_model_and_rng_alone():
    model = make_model("cpu")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    order = _order(model)
    assert sorted(order) == sorted(n for n, _ in model.named_parameters())
    assert order[0].startswith("fc2")                          # the output layer finishes first
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_plan_checks_name_the_problem():
    model = make_model("cpu")
    layers, order = layers_of(model), _order(model)
    good = [order[:3], order[3:]]
    assert [i for g in groups_from_names(good, layers, order) for i in g] == \
        [next(lay.index for lay in layers if lay.name == n) for n in order]
    with pytest.raises(MergePlanError, match="does not have, the first 'nope'"):
        groups_from_names([order[:3] + ["nope"], order[3:]], layers, order)
    with pytest.raises(MergePlanError, match="leaves out 1 parameter"):
        groups_from_names([order[:-1]], layers, order)
    with pytest.raises(MergePlanError, match=f"{order[2]!r} more than once"):
        groups_from_names([order[:3], [order[2]], order[3:]], layers, order)
    with pytest.raises(MergePlanError, match="not in backward order: position 0"):
        groups_from_names([order[3:], order[:3]], layers, order)
    with pytest.raises(MergePlanError, match="exactly once"):
        check_groups([[0, 1], [1, 2]], 3)


def test_plan_file_forms(tmp_path):
    report = {"iteration_ms": {}, "groups": [{"layers": ["a", "b"]}, {"layers": ["c"]}]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert read_plan_file(tmp_path / "r.json") == [["a", "b"], ["c"]]
    (tmp_path / "l.json").write_text(json.dumps([["a"], ["b", "c"]]))
    assert read_plan_file(tmp_path / "l.json") == [["a"], ["b", "c"]]
    for bad in ("{", "[]", "[[]]", '[["a", 3]]', '{"groups": 5}', "[" * 100000 + "]" * 100000,
                "\udcff"):
        (tmp_path / "b.json").write_bytes(bad.encode("utf-8", "surrogateescape"))
        with pytest.raises(MergePlanError, match="merge plan"):
            read_plan_file(tmp_path / "b.json")
    with pytest.raises(MergePlanError, match="not a regular file"):
        read_plan_file(tmp_path / "missing.json")
    os.mkfifo(tmp_path / "fifo")                    # would block a plain read for ever
    with pytest.raises(MergePlanError, match="not a regular file"):
        read_plan_file(tmp_path / "fifo")


# ------------------------------------------------------------------------------ simulation

@pytest.mark.parametrize("name", COMPRESSORS)
def test_simulated_plans_give_the_bits_of_no_plan(name):
    """greedy, exact, layer-wise, one group and random groupings: the same parameters and the
    same bytes as the whole model in one call."""
    model = make_model("cpu")
    n = len(layers_of(model))
    plans = {k: _planned(k, model) for k in ("none", "dlgs_greedy", "exact")}
    assert len(plans["none"]) == n and len(plans["exact"]) < n    # the planners do merge here
    plans |= {f"random{s}": _random_groups(n, s) for s in range(3)}
    base, base_sent = _simulate(name, None)
    for plan_name, groups in plans.items():
        params, sent = _simulate(name, groups)
        assert sent == base_sent, plan_name
        assert all(torch.equal(a, b) for a, b in zip(params, base)), plan_name


def test_simulated_cluster_encodes_once_per_group(monkeypatch):
    import gradblock.shim.exchange.global_step as step     # the simulation's encode goes through it
    calls = []
    real = step.encode_group
    monkeypatch.setattr(step, "encode_group",
                        lambda c, layers, g, ws: calls.append(len(layers)) or real(c, layers, g, ws))
    _simulate("coarse", [[7, 6, 5], [4, 3, 2, 1, 0]], steps=1)
    assert calls == [3, 5, 3, 5]                        # 2 workers x 2 groups, one call each


def test_trainer_merge_plan_changes_no_bits(tmp_path):
    """`gradblock train --merge-plan FILE` (a merge-plan style report) ends with the bits of a
    run without a plan, and records the groups."""
    from gradblock.shim.setup.problem import build_problem
    from gradblock.shim.setup.config import TrainConfig
    from gradblock.shim.training.trainer import run_training
    base = dict(data="digits", compressor="coarse", k=2, epochs=1, batch_size=32, workers=2,
                threads=1, max_steps=6, progress=False)
    cfg = TrainConfig(**base)
    p = build_problem(cfg, 2, torch.device("cpu"))
    order = backward_order(p.model, p.x_train[:8], p.y_train[:8])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"groups": [{"layers": order[:2]}, {"layers": order[2:5]},
                                           {"layers": order[5:]}]}))
    plain = run_training(TrainConfig(**base, out=str(tmp_path / "plain")))
    merged = run_training(TrainConfig(**base, merge_plan=str(plan), out=str(tmp_path / "merged")))
    assert plain["merge_groups"] is None and len(merged["merge_groups"]) == 3
    a = torch.load(tmp_path / "plain" / "model.pt", weights_only=True)
    b = torch.load(tmp_path / "merged" / "model.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert plain["curves"] == merged["curves"] and plain["bytes_sent"] == merged["bytes_sent"]


@pytest.mark.slow
def test_trainer_measured_exact_plan_changes_no_bits(tmp_path):
    """--merge-plan exact measures this run (backward, compressor, a 2-rank gloo all_gather)."""
    from gradblock.shim.setup.config import TrainConfig
    from gradblock.shim.training.trainer import run_training
    base = dict(data="digits", compressor="coarse", k=2, epochs=1, batch_size=32, workers=2,
                threads=1, max_steps=4, progress=False)
    plain = run_training(TrainConfig(**base, out=str(tmp_path / "plain")))
    merged = run_training(TrainConfig(**base, merge_plan="exact", out=str(tmp_path / "merged")))
    assert sorted(n for g in merged["merge_groups"] for n in g) == \
        sorted(lay["name"] for lay in merged["layers"])
    a = torch.load(tmp_path / "plain" / "model.pt", weights_only=True)
    b = torch.load(tmp_path / "merged" / "model.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------------------ CLI refusals

@pytest.mark.parametrize("mangle, message", [
    (lambda o: [o[:3] + ["ghost.weight"], o[3:]], "does not have, the first 'ghost.weight'"),
    (lambda o: [o[:-1]], "leaves out 1 parameter"),
    (lambda o: [o, o[:1]], "more than once"),
    (lambda o: [o[2:], o[:2]], "not in backward order"),
    (lambda o: "not a plan", "expected a non-empty list"),
])
def test_cli_refuses_a_bad_plan_file(tmp_path, capsys, mangle, message):
    from gradblock.shim.setup.config import TrainConfig
    from gradblock.shim.setup.problem import build_problem
    p = build_problem(TrainConfig(data="digits"), 2, torch.device("cpu"))
    order = backward_order(p.model, p.x_train[:8], p.y_train[:8])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(mangle(order)))
    rc, out, err = run(capsys, "train", "--data", "digits", "--workers", "2", "--epochs", "1",
                       "--max-steps", "1", "--no-progress", "--threads", "1",
                       "--merge-plan", plan)
    assert rc == 2
    assert err.startswith("gradblock train: MergePlanError: ") and message in err, err
    assert len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------ the DDP hook

# In a one-rank gloo group, each case in its own interpreter (tests/own_process.py): gloo's
# threads must not outlive it inside the pytest worker.
IN_ONE_PROCESS = [("merged_equals_plain", "0.001"), ("merged_equals_plain", "25.0"),
                  ("merged_state_dict_resumes",), ("merged_decode_error_keeps_its_class",)]


@pytest.mark.parametrize("case", IN_ONE_PROCESS, ids=lambda c: "-".join(c))
def test_merged_hook_in_a_one_rank_group(case):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    run_in_own_process("test_merge_apply", f"case_{case[0]}", *case[1:])


def _ddp_run(groups, seeds, cap=0.001, name="coarse", state_in=None, filt=None):
    from gradblock.shim.exchange.hook import register
    from gradblock.shim.systems.merge_hook import register_merged
    model = make_model("cpu")
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap)
    comp = build_compressor(name, layers_of(model), 1, k=2)
    kw = {} if filt is None else {"outgoing_filter": filt}
    state = register(ddp, comp, **kw) if groups is None else register_merged(ddp, comp, groups, **kw)
    if state_in is not None:
        model.load_state_dict(state_in[0])
        if state_in[1] is not None:
            state.load_state_dict(state_in[1])
    opt = GlobalMomentumSGD(model.parameters(), lr=0.1, momentum=0.9)
    for s in seeds:
        g = torch.Generator().manual_seed(s)
        x, y = torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)
        opt.zero_grad(set_to_none=True)
        state.reset_step()
        state.backward(F.cross_entropy(ddp(x), y))
        state.last_grads = [p.grad.clone() for p in model.parameters()]
        opt.step()
    return model, state


def case_merged_equals_plain(cap: str):
    """Tiny buckets (groups spanning buckets) and one big bucket (a bucket spanning every
    group): the bits of the plain hook; one compress call per group per step."""
    cap = float(cap)
    with one_rank_gloo_group():
        import gradblock.shim.exchange.hook as mh            # the hook state's send() makes the compress call
        plain, _ = _ddp_run(None, [1, 2, 3], cap)
        for seed in range(3):
            groups = _random_groups(8, seed)
            calls = []
            real = mh.encode_group
            mh.encode_group = lambda c, layers, g, ws: calls.append(len(layers)) or real(c, layers, g, ws)
            try:
                merged, state = _ddp_run(groups, [1, 2, 3], cap)
            finally:
                mh.encode_group = real
            assert sorted(calls) == sorted([len(g) for g in groups] * 3)
            assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), merged.parameters()))
            assert state.stats.bytes_sent > 0 and state.padded_bytes >= state.stats.bytes_sent
            if len(groups) > 1 and cap == 25.0:
                assert state.max_groups_per_bucket == len(groups)


def case_merged_state_dict_resumes():
    with one_rank_gloo_group():
        groups = [[7, 6, 5], [4, 3], [2, 1, 0]]
        model, state = _ddp_run(groups, [1, 2])
        saved = (model.state_dict(), state.state_dict())
        assert set(saved[1]["workers"][0]["layers"]) == set(range(8))       # residuals per layer
        _, cont = _ddp_run(groups, [1, 2, 3])
        _, resumed = _ddp_run(groups, [3], state_in=saved)      # the optimiser's momentum is not
        _, fresh = _ddp_run(groups, [3], state_in=(saved[0], None))   # in it: compare gradients
        assert all(torch.equal(a, b) for a, b in zip(cont.last_grads, resumed.last_grads))
        assert any(not torch.equal(a, b) for a, b in zip(cont.last_grads, fresh.last_grads))


def case_merged_decode_error_keeps_its_class():
    """The first group's CRC error fails DDP's backward while the second group's collective
    can still be on gloo's thread: the error leaves backward() with its own class, and every
    collective and decode the step started has finished by then (drained: the race itself is
    too short to show here; tests/test_ddp_hook.py tests drain() directly)."""
    with one_rank_gloo_group():
        from gradblock.codec import errors as E
        from gradblock.shim.exchange.hook import GradblockHookState
        from test_ddp_hook import flip_last_crc
        started = []
        track = GradblockHookState.track

        def recording(self, fut):
            started.append(fut)
            return track(self, fut)

        GradblockHookState.track = recording
        try:
            with pytest.raises(E.CrcMismatchError, match="peer rank 0, layer"):
                _ddp_run([[7, 6, 5], [4, 3, 2, 1, 0]], [1], filt=flip_last_crc)
        finally:
            GradblockHookState.track = track
        # two groups: two collectives and two decodes
        assert len(started) == 4 and all(f.done() for f in started), \
            [f.done() for f in started]


def test_plans_over_gloo_equal_no_plan_and_simulation():
    """2 ranks (torch.multiprocessing spawn): for greedy, exact and a random grouping, under
    three bucket sizes, DDP with the merged hook ends with the plain hook's parameters on every
    rank, and the simulation with the plan with the simulation's without (which the plain hook
    also equals)."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    from gradblock.shim.systems.merge_check import check_merged
    model = make_model("cpu")
    plans = {"greedy": _planned("dlgs_greedy", model), "exact": _planned("exact", model),
             "random": _random_groups(8, 7)}
    report = check_merged(2, plans, compressors=("coarse", "topk"))
    for rank_rows in report["all_ranks"]:
        for name, rows in rank_rows.items():
            assert all(rows.values()), (name, rows)
    layouts = report["layouts"]
    assert any(g > 1 for g, _ in layouts.values()) and any(b > 1 for _, b in layouts.values())


@pytest.mark.slow
def test_train_ddp_with_measured_plan_equals_simulation(tmp_path):
    """`gradblock train --ddp --merge-plan exact` under torchrun (2 ranks): rank 0 measures and
    plans, both ranks use its groups, and both end with the simulation's parameters (no plan)."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    from test_ddp_hook import simulated_run, torchrun
    common = ["--data", "digits", "--compressor", "coarse", "--k", "2", "--epochs", "1",
              "--device", "cpu",              # a GPU machine's "auto" would pick CUDA
              "--batch-size", "32", "--threads", "1", "--no-progress", "--max-steps", "5"]
    proc = torchrun(["gradblock.cli", "train", "--ddp", *common, "--merge-plan", "exact",
                     "--out", str(tmp_path / "ddp")])
    assert proc.returncode == 0, proc.stderr
    sim = simulated_run(common, tmp_path / "sim")         # no plan: merging never changes bits
    result = json.loads((tmp_path / "ddp" / "result.json").read_text())
    assert sorted(n for g in result["merge_groups"] for n in g) == \
        sorted(lay["name"] for lay in result["layers"])
    sim_params = torch.load(tmp_path / "sim" / "model.pt", weights_only=True)
    for r in (0, 1):
        state = torch.load(tmp_path / "ddp" / f"model.rank{r}.pt", weights_only=True)
        assert all(torch.equal(state[k], v) for k, v in sim_params.items()), r
    assert result["bytes_sent"] == sim["bytes_sent"]


@pytest.mark.slow
def test_merge_plan_executes_through_the_ddp_hook(tmp_path):
    """`gradblock merge-plan --execute ddp`: every plan measured through DDP and the merged hook,
    beside the modelled times (the model's inputs from the torch codec's compressor)."""
    from gradblock.shim.systems.merge_measure import merge_plan_main
    out = tmp_path / "m.json"
    assert merge_plan_main(["--model", "digits-cnn", "--repeats", "1", "--execute", "ddp",
                            "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["execute"] == "ddp" and set(r["measured_ms"]) == set(r["iteration_ms"])
    assert all(v > 0 for v in r["measured_ms"].values()) and r["measured_plain_hook_ms"] > 0
    assert sum(r["inputs"]["wire_bytes"]) < sum(r["inputs"]["sizes"])    # k = 1 frames, not bounds
