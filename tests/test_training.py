"""`gradblock train` / `gradblock validate` in single-process mode (digits: small and bundled)."""
from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch", reason="training needs torch")

from gradblock.shim.report import format_table  # noqa: E402
from gradblock.shim.errors import ConfigError  # noqa: E402
from gradblock.shim.train import TrainConfig, run_training, train_main  # noqa: E402

pytestmark = pytest.mark.torch

# digits: 1438 training samples; 4 workers x 32 -> 11 steps per epoch
BASE = dict(data="digits", epochs=2, batch_size=32, workers=4, threads=1, progress=False,
            eval_every=4)


def exit_status(main, argv) -> int:
    """A CLI entry's exit status, whether it returns it or argparse raises SystemExit."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("compressor,stops,extra", [
    ("coarse", (7,), {}),
    ("dlgs", (5, 15), {}),
    ("topk", (13,), {}),
    # dense warm-up epoch, then coarse; the lr ramp spans the stops
    ("coarse", (5, 14), {"warmup_epochs": 1, "lr_warmup_epochs": 1.5}),
])
def test_stopped_and_resumed_run_is_bit_identical(tmp_path, compressor, stops, extra):
    """Stop at the given steps (mid-epoch, and across an epoch boundary), resume from the
    checkpoint each time: same parameters, momentum, residuals and curves as one run."""
    cfg = dict(BASE, compressor=compressor, k=1, dlgs_interval=3, **extra)
    whole = run_training(TrainConfig(**cfg, out=str(tmp_path / "whole")))
    ckpt = str(tmp_path / "ck.pt")
    resume = None
    for stop in stops:
        part = run_training(TrainConfig(**cfg, max_steps=stop, checkpoint=ckpt, resume=resume))
        assert part["steps"] == stop and part["stopped_early"]
        resume = ckpt
    rest = run_training(TrainConfig(**cfg, resume=ckpt, out=str(tmp_path / "rest")))
    a = torch.load(tmp_path / "whole" / "model.pt", weights_only=True)
    b = torch.load(tmp_path / "rest" / "model.pt", weights_only=True)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    for key in ("curves", "bytes_sent", "elements_sent", "sat_quant", "sat_feedback", "steps",
                "final_test_acc"):
        assert whole[key] == rest[key], key


def test_lr_warmup_and_dense_warmup(tmp_path):
    from gradblock.shim.train import Trainer
    cfg = TrainConfig(**dict(BASE, lr=0.05, lr_warmup_epochs=1.0))
    trainer = Trainer(cfg)
    assert trainer.problem.steps_per_epoch == 11
    assert [trainer.lr_at(s) for s in (0, 4, 10, 11, 50)] == \
        [0.05 / 11, 0.05 * 5 / 11, 0.05, 0.05, 0.05]
    # one dense warm-up epoch: that epoch's bytes are exactly dense, then coarse takes over
    both = run_training(TrainConfig(**dict(BASE, compressor="coarse", warmup_epochs=1)))
    n_params = sum(math.prod(lay["shape"]) for lay in both["layers"])
    dense_epoch = 11 * 4 * 4 * n_params
    coarse_only = run_training(TrainConfig(**dict(BASE, compressor="coarse", epochs=1)))
    assert dense_epoch < both["bytes_sent"] < dense_epoch + 2 * coarse_only["bytes_sent"]
    assert both["final_test_acc"] is not None


def test_train_cli_writes_result_and_model(tmp_path, capsys):
    out = tmp_path / "run"
    assert train_main(["--data", "digits", "--compressor", "coarse", "--k", "2", "--epochs", "1",
                       "--threads", "1", "--no-progress", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "coarse: 11 steps, test accuracy" in printed
    r = json.loads((out / "result.json").read_text())
    assert (out / "model.pt").exists()
    assert r["mode"] == "simulated" and r["config"]["model"] == "digits-cnn"
    assert r["steps"] == 11 and len(r["curves"]) == 1
    assert 0.0 <= r["final_test_acc"] <= 1.0
    # honest bytes: at least the frames' fixed words, far less than dense
    n_layers = len(r["layers"])
    assert r["bytes_sent"] >= 11 * 4 * n_layers * 4 * 7
    assert r["compression_ratio"] == pytest.approx(r["dense_bytes"] / r["bytes_sent"])
    assert r["compression_ratio"] > 5


def test_resume_with_other_settings_is_refused(tmp_path, capsys):
    ck = str(tmp_path / "ck.pt")
    args = ["--data", "digits", "--epochs", "1", "--threads", "1", "--no-progress",
            "--max-steps", "2", "--checkpoint", ck]
    assert train_main(args) == 0
    assert train_main(args[:-4] + ["--lr", "0.2", "--resume", ck]) == 2
    err = capsys.readouterr().err
    assert "different settings" in err and "lr=0.05 (now 0.2)" in err


@pytest.mark.parametrize("bad", [["--k", "0"], ["--k", "1.5"], ["--density", "2"],
                                 ["--workers", "0"], ["--lr", "-1"], ["--compressor", "zip"],
                                 ["--data", "imagenet"]])
def test_bad_arguments_are_rejected(bad, capsys):
    assert exit_status(train_main, ["--no-progress", *bad]) == 2
    assert "error" in capsys.readouterr().err.lower()


def test_too_few_samples_is_a_clear_error():
    with pytest.raises(ConfigError, match="cannot give 4 workers one batch of 1000"):
        run_training(TrainConfig(data="digits", batch_size=1000, workers=4, progress=False))


def test_missing_dataset_is_a_clear_error(tmp_path, capsys):
    assert train_main(["--data", "mnist", "--data-dir", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "mnist" in err and len(err.strip().splitlines()) == 1


def fake_result(name, acc, bytes_sent, **cc):
    return {"compressor_config": {"name": name, "dense_below": 0, **cc}, "final_test_acc": acc,
            "bytes_sent": bytes_sent, "steps": 10, "config": {"workers": 2},
            "compression_ratio": 8000 / bytes_sent,
            "ms_per_step": {"compute_ms": 1.0, "compress_ms": 2.0, "exchange_ms": 3.0},
            "sat_quant": 4, "sat_feedback": 5}


def test_report_table_rows_and_deltas():
    table = format_table([fake_result("dense", 0.9, 8000),
                          fake_result("coarse", 0.885, 100, k=1),
                          fake_result("topk", 0.8, 200, density="match", match_k=1)])
    lines = table.splitlines()
    assert len(lines) == 5 and lines[1].startswith("|---|")
    assert "| coarse | k=1 | 0.8850 | -1.50 | 80.0x |" in lines[3]
    assert "| 4 / 5 |" in lines[3] and lines[4].endswith("| – |")
    assert "as coarse k=1" in lines[4] and "| 2.00 | 1.0 / 2.0 / 3.0 |" in lines[4]


@pytest.mark.slow
def test_validate_matrix_writes_table_json_and_png(tmp_path, capsys):
    from gradblock.shim.validate import validate_main
    out = tmp_path / "val"
    assert validate_main(["--data", "digits", "--epochs", "1", "--threads", "1", "--no-progress",
                          "--k-large", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 6                        # header + dense, topk, dlgs, coarse k=1, k=3
    assert "| coarse | k=3 |" in printed and "| dlgs | as coarse k=1, every 10 steps |" in printed
    data = json.loads((out / "validate.json").read_text())
    assert [r["compressor_config"]["name"] for r in data["runs"]] == \
        ["dense", "topk", "dlgs", "coarse", "coarse"]
    assert len({r["steps"] for r in data["runs"]}) == 1
    assert (out / "validate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "validate.md").read_text().count("\n| ") == 6     # header + 5 rows
