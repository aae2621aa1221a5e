"""Faults during `gradblock train --ddp` (issue 24, docs/reliability.md): a rank killed,
stopped, or sending a corrupted frame is recovered by torchrun's restart from the newest
checkpoint every rank holds, ending bit-identical to the uninterrupted run; a replica that
diverges is named by the cross-rank checksum. The torchrun cases share bench/faults.py with
`gradblock faults` (the 20-per-kind matrix)."""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="training needs torch")
import torch.distributed as dist  # noqa: E402

from gradblock.bench import faults  # noqa: E402
from gradblock.shim.exchange import resilience as R  # noqa: E402
from gradblock.shim.setup.config import TrainConfig  # noqa: E402
from gradblock.shim.errors import ConfigError  # noqa: E402
from gradblock.shim.exchange.state import rank_path, save_checkpoint  # noqa: E402

pytestmark = [pytest.mark.torch]
needs_gloo = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")
STEPS, NPROC = 24, 2


# ------------------------------------------------------------------------------ units

def test_fault_spec_parses_and_refuses():
    assert R.parse_faults("kill:1:12,flip:0:3") == [R.Fault("kill", 1, 12), R.Fault("flip", 0, 3)]
    assert R.parse_faults("") == []
    for bad in ("kill:1", "explode:0:1", "stop:x:3", "kill:1:2:3"):
        with pytest.raises(ConfigError, match="GRADBLOCK_FAULT"):
            R.parse_faults(bad)


def test_faults_act_on_the_first_attempt_only(monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert R.FaultInjector(1, "kill:1:5,stop:0:2").faults == [R.Fault("kill", 1, 5)]
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert R.FaultInjector(1, "kill:1:5").faults == []


def test_elastic_settings_are_checked():
    base = dict(ddp=True, checkpoint="ck.pt", checkpoint_every=5)
    TrainConfig(elastic=True, **base).check()
    for bad, field in ((dict(base, ddp=False), "elastic"), (dict(base, checkpoint=None), "elastic"),
                       (dict(base, checkpoint_every=0), "elastic"),
                       (dict(base, resume="x.pt"), "elastic")):
        with pytest.raises(ConfigError, match=field):
            TrainConfig(elastic=True, **bad).check()
    with pytest.raises(ConfigError, match="timeout"):
        TrainConfig(timeout=0).check()
    with pytest.raises(ConfigError, match="check_every"):
        TrainConfig(check_every=3).check()


class _Ranks:
    """gather_floats of several ranks, each holding its own list (no process group)."""

    def __init__(self, per_rank):
        self.per_rank, self.rank = per_rank, 0

    def gather_floats(self, values):
        width = len(values)
        out = []
        for vals in self.per_rank:
            out += (list(vals) + [-1.0] * width)[:width]
        return out


def _ckpt(path: Path, step: int):
    save_checkpoint(path, {"global_step": step})


def test_common_step_is_the_newest_every_rank_holds(tmp_path):
    base = tmp_path / "c.pt"
    for rank, steps in ((0, (5, 10, 15)), (1, (5, 10))):
        for s in steps:
            _ckpt(rank_path(R.step_path(base, s), rank), s)
    assert R.local_steps(base, 0) == [15, 10, 5]
    ex = _Ranks([[15.0, 10.0, 5.0, -1.0], [10.0, 5.0, -1.0, -1.0]])
    assert R.common_step(ex, base) == 10
    assert R.common_step(_Ranks([[15.0, -1, -1, -1], [10.0, -1, -1, -1]]), base) is None


def test_prune_keeps_the_newest_and_only_removes_its_own_files(tmp_path):
    base = tmp_path / "c.pt"
    for s in (5, 10, 15):
        _ckpt(rank_path(R.step_path(base, s), 0), s)
    foreign = rank_path(R.step_path(base, 1), 0)          # matches the pattern, not ours
    foreign.write_text("a user's file")
    R.prune(base, 0)
    assert R.local_steps(base, 0) == [15, 10, 1]
    assert foreign.read_text() == "a user's file"


def test_replica_check_names_the_odd_rank():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    good = R.replica_checksum(model, opt)
    ex = SimpleNamespace(gather_floats=lambda v: [float(x) for x in good] * 2 + list(v))
    with torch.no_grad():
        model.weight[0, 0] += 1e-3
    with pytest.raises(R.ReplicaDivergenceError, match=r"rank 2 \(parameters\)"):
        R.check_replicas(ex, model, opt, step=7)


def test_a_comm_failure_is_told_from_a_named_error():
    assert R.is_comm_failure(RuntimeError("[gloo] Timed out waiting 10000ms for recv"))
    assert R.is_comm_failure(RuntimeError("Connection closed by peer [127.0.0.1]:4000"))
    assert not R.is_comm_failure(ValueError("CRC_MISMATCH at word 3"))
    assert not R.is_comm_failure(RuntimeError("shape mismatch"))


# ------------------------------------------------------------------------------ under torchrun

@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("faults")


def _check(run: faults.FaultRun, named: str):
    log = "\n".join(run.lines[-30:])
    assert not run.hang, log
    assert run.returncode == 0, log
    assert named in run.named or any(named in line for line in run.lines), log
    assert run.resumed_from is not None and run.resumed_from < run.step + 5, log
    assert run.bit_identical, log


@needs_gloo
@pytest.mark.slow
def test_killed_rank_is_recovered_bit_identical(workdir):
    run = faults.inject(workdir, "kill", 1, 12, seed=0, steps=STEPS, nproc=NPROC, hard_limit_s=300)
    _check(run, "exitcode: -9")


@needs_gloo
@pytest.mark.slow
def test_stopped_rank_is_named_within_the_timeout_and_recovered(workdir):
    run = faults.inject(workdir, "stop", 1, 9, seed=0, steps=STEPS, nproc=NPROC, timeout_s=5,
                        hard_limit_s=300)
    _check(run, "PeerLostError")
    assert any("rank 1 did not answer" in line for line in run.lines), run.lines[-20:]
    assert run.detect_s is not None and run.detect_s < 5 + 15 + 10   # timeout + roll call + slack


@needs_gloo
@pytest.mark.slow
def test_flipped_bit_is_refused_by_every_rank_and_recovered(workdir):
    run = faults.inject(workdir, "flip", 0, 16, seed=0, steps=STEPS, nproc=NPROC, hard_limit_s=300)
    _check(run, "CRC_MISMATCH")
    # the ranks that decoded the frame name the sender and the layer; torchrun stops the rest
    # of the group as soon as one rank exits, so a slower rank may be stopped before it reports
    # (every rank's refusal is shown deterministically by test_ddp_hook's corrupt-rank check)
    reports = [line for line in run.lines if "CRC_MISMATCH" in line and "peer rank 0" in line]
    assert reports, run.lines[-20:]
    assert all("layer" in line for line in reports), reports


@needs_gloo
@pytest.mark.slow
def test_divergent_replica_is_named(workdir):
    rc, _, hung, lines = faults.torchrun(
        ["train", "--ddp", *faults.train_args(0, 12), "--check-every", "4"], 3,
        env={"GRADBLOCK_FAULT": "perturb:2:5"}, hard_limit_s=300)
    text = "\n".join(line for _, line in lines)
    assert not hung and rc != 0, text
    assert "ReplicaDivergenceError: replicas differ after step 8: rank 2 (parameters)" in text, text


def _testbed_possible() -> str | None:
    """Why the namespace testbed cannot run here, or None."""
    import shutil
    if os.geteuid() != 0:
        return "the network testbed needs root (ip netns, veth, tc)"
    if not shutil.which("ip"):
        return "iproute2's `ip` is not installed"
    return None


@needs_gloo
@pytest.mark.slow
@pytest.mark.skipif(_testbed_possible() is not None, reason=str(_testbed_possible()))
def test_link_down_is_named_and_recovered(workdir):
    """Three ranks in their own namespaces; rank 2's cable is pulled at step 10: the others
    name rank 2 within the timeout, and the restarted group ends bit-identical."""
    from gradblock.bench.netns import own_namespaces
    before = set(own_namespaces())
    run = faults.inject_link_down(workdir, rank=2, step=10, seed=0, steps=STEPS, nproc=3,
                                  timeout_s=8, hard_limit_s=400)
    _check(run, "PeerLostError")
    assert any("rank 2 did not answer" in line for line in run.lines), run.lines[-20:]
    assert run.detect_s is not None and run.detect_s < 8 + 15 + 10
    assert set(own_namespaces()) <= before                 # the bed removed what it made
