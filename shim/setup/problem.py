"""What a run trains on: the device, the data on it, the model, the shape of an epoch, the
per-worker data order and the evaluation.

Data: each epoch is one permutation of the training set seeded by (seed, epoch); worker w
takes every N-th sample starting at w, in batches of `batch_size` (per worker); the partial
last batch is dropped so every worker runs the same number of steps.
"""
from __future__ import annotations

import os
import re

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .config import TrainConfig
from ..errors import ConfigError

EVAL_BATCH = 1000


class NondeterministicModelError(ConfigError):
    """Determinism is on and the model's backward calls an op that has no deterministic CUDA
    kernel: its gradients, and so the codec's bits, could differ from run to run."""


def deterministic_cuda(deterministic: bool = True) -> None:
    """CUDA's numerics for training. On (the default, what `validate` and the bit-exact tests
    need: DDP vs simulation, resume): cuDNN's deterministic algorithms without autotuning, no
    TF32 in convolutions or matmuls, cuBLAS's fixed workspace, and torch's deterministic mode
    in its strict form -- an op without a deterministic CUDA kernel raises, and
    `check_deterministic_backward` turns that into a refusal naming the op. A 1-ulp
    difference in a gradient flips about 2% of codes at R = 10. Off (for speed): torch's
    defaults (cuDNN autotuning, TF32 as torch sets it); runs are then not bit-reproducible."""
    if not deterministic:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
        torch.backends.cudnn.benchmark = True
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.use_deterministic_algorithms(True, warn_only=False)


_NO_DETERMINISTIC = re.compile(r"(\S+) does not have a deterministic implementation")


def check_deterministic_backward(model: torch.nn.Module, x: torch.Tensor, name: str = "") -> None:
    """With torch's deterministic mode on, run one forward and backward of a copy of `model`
    on `x` and refuse the model by name (NondeterministicModelError naming the op) if an op
    has no deterministic kernel, instead of a warning or a failure in the middle of a run.
    The model itself is untouched (its copy takes the gradients and the BatchNorm updates)."""
    if not torch.are_deterministic_algorithms_enabled():
        return
    import copy
    probe = copy.deepcopy(model)
    try:
        out = probe(x)
        out.float().sum().backward()
    except RuntimeError as e:
        m = _NO_DETERMINISTIC.search(str(e))
        if m is None:
            raise
        what = f"model {name!r}" if name else "the model"
        raise NondeterministicModelError(
            f"{what}: {m.group(1)} has no deterministic CUDA kernel, so its gradients are not "
            f"bit-reproducible and determinism is on (the bit-exact default); turn determinism "
            f"off to train it without that guarantee") from None


def resolve_device(name: str, local_rank: int | None = None,
                   deterministic: bool = True) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {name!r} requested but torch sees no CUDA device")
        if dev.index is None:
            dev = torch.device("cuda", local_rank or 0)
        if dev.index >= torch.cuda.device_count():
            raise ConfigError(f"device {name!r}: torch sees {torch.cuda.device_count()} CUDA devices")
        deterministic_cuda(deterministic)
    elif dev.type != "cpu":
        raise ConfigError(f"device {name!r}: only cpu and cuda are supported")
    return dev


def _subset(n: int, size: int | None, seed: int, salt: int) -> np.ndarray | None:
    if size is None or size >= n:
        return None
    return np.sort(np.random.default_rng([seed, salt]).choice(n, size, replace=False))


@dataclass
class Problem:
    """The data on the device, the model, and the shape of an epoch."""
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    model: torch.nn.Module
    model_name: str
    steps_per_epoch: int


def build_problem(cfg: TrainConfig, n_workers: int, device: torch.device, dataset=None) -> Problem:
    """`dataset`: an already loaded shim.setup.data.Dataset for cfg.data (validate loads it once)."""
    from .data import load_dataset
    from .models import DEFAULT_MODEL, build_model, canonical_model_name

    ds = dataset if dataset is not None else load_dataset(cfg.data, cfg.data_dir)
    xtr, ytr, xte, yte = ds.x_train, ds.y_train, ds.x_test, ds.y_test
    pick = _subset(len(ytr), cfg.train_subset, cfg.seed, 1)
    if pick is not None:
        xtr, ytr = xtr[pick], ytr[pick]
    pick = _subset(len(yte), cfg.test_subset, cfg.seed, 2)
    if pick is not None:
        xte, yte = xte[pick], yte[pick]
    steps = (len(ytr) // n_workers) // cfg.batch_size
    if steps < 1:
        raise ConfigError(f"{len(ytr)} training samples cannot give {n_workers} workers one batch "
                          f"of {cfg.batch_size} each; lower --batch-size or --workers")
    name = canonical_model_name(cfg.model or DEFAULT_MODEL[ds.name])
    model = build_model(name, ds.num_classes, ds.in_shape, seed=cfg.seed).to(device)
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    problem = Problem(as_t(xtr), as_t(ytr), as_t(xte), as_t(yte), model, name, steps)
    if device.type == "cuda":           # refused by name before the run, not mid-way
        check_deterministic_backward(model, problem.x_train[:2], name)
    return problem


def epoch_shards(n: int, n_workers: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Worker w's sample order for `epoch`: every N-th index of a (seed, epoch) permutation."""
    perm = np.random.default_rng([seed, epoch, 7]).permutation(n)
    return [perm[w::n_workers] for w in range(n_workers)]


def worker_batch(p: Problem, shard: np.ndarray, step: int, batch: int):
    idx = torch.from_numpy(shard[step * batch:(step + 1) * batch]).to(p.x_train.device)
    return p.x_train[idx], p.y_train[idx]


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) on a test set."""
    model.eval()
    correct, loss_sum = 0, 0.0
    for i in range(0, len(y), EVAL_BATCH):
        out = model(x[i:i + EVAL_BATCH])
        loss_sum += float(F.cross_entropy(out, y[i:i + EVAL_BATCH], reduction="sum").double())
        correct += int((out.argmax(1) == y[i:i + EVAL_BATCH]).sum())
    model.train()
    return correct / len(y), loss_sum / len(y)
