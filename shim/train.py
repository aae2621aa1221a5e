"""`gradblock train`: train one configuration with one gradient compressor.

Two modes share the data order, the model initialisation, the compressors and the
encode/decode path, so they produce the same bits:
* single process (default): `--workers N` simulated workers (shim/workers.py);
* `--ddp` under torchrun: one worker per process, gradients exchanged by the DDP
  communication hook (shim/hook.py); gloo on CPU, NCCL on CUDA.

Data: each epoch is one permutation of the training set seeded by (seed, epoch); worker w
takes every N-th sample starting at w, in batches of `--batch-size` (per worker); the partial
last batch is dropped so every worker runs the same number of steps.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gradblock.codec.zrle import LMAX_LOG2_MAX, LMAX_LOG2_MIN

from .compressors import COMPRESSORS, DenseCompressor, StepStats, WorkerState, build_compressor, layers_of
from .optim import GlobalMomentumSGD
from .state import (compressor_state, load_checkpoint, rank_path,
                    restore_compressor_state, rng_state, save_checkpoint, set_rng_state)
from .models import ALIASES as MODEL_ALIASES
from .workers import SimulatedCluster, StepTimes

EVAL_BATCH = 1000


@dataclass
class TrainConfig:
    data: str = "fashion-mnist"
    data_dir: str | None = None
    model: str | None = None            # None: the dataset's default model
    compressor: str = "coarse"
    k: int | float = 1                  # coarse blocks per layer (or fraction); topk/dlgs 'match'
    density: float | str = "match"      # topk / dlgs: fraction per layer, or 'match' coarse k
    dlgs_interval: int = 10
    dense_below: int = 0
    warmup_epochs: int = 0              # epochs trained dense before the compressor takes over
    lr_warmup_epochs: float = 0.0       # lr ramps linearly from lr/steps to lr over these epochs
    range: float = 10.0
    block_size: int | None = None
    lmax_log2: int = 8
    workers: int | None = None          # None: 4 simulated, or the torchrun world size
    epochs: int = 3
    batch_size: int = 32                # per worker
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0
    train_subset: int | None = None
    test_subset: int | None = None
    ddp: bool = False
    device: str = "auto"
    threads: int = 0                    # 0: torch's default
    max_steps: int | None = None        # stop (and checkpoint) after this many steps in total
    eval_every: int = 0                 # extra evaluations every this many steps (0: per epoch)
    out: str | None = None
    checkpoint: str | None = None
    checkpoint_every: int = 0
    resume: str | None = None
    progress: bool = True

    # settings that decide the bits; a checkpoint is only resumed under the same ones
    # (not `epochs`: the data order depends on (seed, epoch) only, so a run may be extended)
    BIT_KEYS = ("data", "model", "compressor", "k", "density", "dlgs_interval", "dense_below",
                "warmup_epochs", "lr_warmup_epochs",
                "range", "block_size", "lmax_log2", "workers", "batch_size", "lr",
                "momentum", "seed", "train_subset", "test_subset", "ddp")

    def run_config(self) -> dict:
        d = asdict(self)
        return {k: d[k] for k in self.BIT_KEYS}


# ------------------------------------------------------------------------------ arguments

def parse_k(text: str) -> int | float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be an integer >= 1 or a fraction in (0, 1), "
                                         f"got {text!r}") from None
    if v >= 1 and v.is_integer():
        return int(v)
    if 0 < v < 1:
        return v
    raise argparse.ArgumentTypeError(f"k must be an integer >= 1 or a fraction in (0, 1), got {text!r}")


def parse_density(text: str) -> float | str:
    if text == "match":
        return text
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not (0 < v <= 1):
        raise argparse.ArgumentTypeError(f"density must be in (0, 1] or 'match', got {text!r}")
    return v


def _int_at_least(lowest: int):
    """argparse type: an integer >= lowest."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < lowest:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lowest}, got {v}")
        return v
    return parse


positive_int = _int_at_least(1)
nonneg_int = _int_at_least(0)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def positive_float(text: str) -> float:
    v = _number(text)
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return v


def nonneg_float(text: str) -> float:
    v = _number(text)
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return v


def momentum_value(text: str) -> float:
    v = _number(text)
    if not (0.0 <= v < 1.0):
        raise argparse.ArgumentTypeError(f"momentum must be in [0, 1), got {text!r}")
    return v


def lmax_log2_value(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not (LMAX_LOG2_MIN <= v <= LMAX_LOG2_MAX):
        raise argparse.ArgumentTypeError(f"LMAX_LOG2 must be in {LMAX_LOG2_MIN}..{LMAX_LOG2_MAX}, "
                                         f"got {v}")
    return v


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by `train` and `validate`."""
    d = TrainConfig()
    p.add_argument("--data", default=d.data, choices=["fashion-mnist", "digits", "mnist", "cifar10"],
                   help="dataset; Fashion-MNIST is read from /usr/share/datasets/fashion-mnist "
                        "unless --data-dir is given")
    p.add_argument("--data-dir", default=None, help="directory with the dataset files")
    p.add_argument("--model", default=None, choices=sorted(MODEL_ALIASES),
                   help="None: the dataset's own (lenet5 for Fashion-MNIST / MNIST, digits-cnn, "
                        "resnet20 for CIFAR-10)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="simulated workers (None: 4; under --ddp the torchrun world size)")
    p.add_argument("--epochs", type=positive_int, default=d.epochs)
    p.add_argument("--batch-size", type=positive_int, default=d.batch_size, help="per worker")
    p.add_argument("--lr", type=positive_float, default=d.lr)
    p.add_argument("--momentum", type=momentum_value, default=d.momentum,
                   help="global momentum, [0, 1)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--dense-below", type=nonneg_int, default=0, metavar="N",
                   help="send layers with fewer than N elements dense (0: none)")
    p.add_argument("--warmup-epochs", type=nonneg_int, default=0, metavar="E",
                   help="train the first E epochs dense, then switch to the compressor "
                        "(its residuals start at zero)")
    p.add_argument("--lr-warmup-epochs", type=nonneg_float, default=0.0, metavar="E",
                   help="ramp the learning rate linearly from lr/S to lr over the first E epochs "
                        "(S = their steps), then hold it")
    p.add_argument("--dlgs-interval", type=positive_int, default=d.dlgs_interval,
                   help="dlgs: steps between threshold recomputations")
    p.add_argument("--range", type=positive_float, default=d.range, help="quantiser range R")
    p.add_argument("--block-size", type=positive_int, default=None,
                   help="override the block size B (None: one filter / FC row)")
    p.add_argument("--lmax-log2", type=lmax_log2_value, default=d.lmax_log2,
                   help="ZRLE LMAX_LOG2 (1..24)")
    p.add_argument("--train-subset", type=positive_int, default=None, metavar="N",
                   help="train on a seeded random subset of N training samples")
    p.add_argument("--test-subset", type=positive_int, default=None, metavar="N",
                   help="evaluate on a seeded random subset of N test samples")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--threads", type=nonneg_int, default=0,
                   help="torch intra-op threads (0: torch's default); results are bit-reproducible "
                        "for a fixed thread count")
    p.add_argument("--eval-every", type=nonneg_int, default=0, metavar="STEPS",
                   help="also evaluate every STEPS steps (0: only at epoch ends)")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no tqdm progress bar")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gradblock train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_common_arguments(p)
    p.add_argument("--compressor", default="coarse", choices=COMPRESSORS)
    p.add_argument("--k", type=parse_k, default=1,
                   help="coarse: blocks per layer (integer) or fraction of blocks; topk/dlgs with "
                        "--density match: match coarse at this k")
    p.add_argument("--density", type=parse_density, default="match",
                   help="topk / dlgs: fraction of each layer kept, or 'match' (as many elements as "
                        "coarse at --k)")
    p.add_argument("--ddp", action="store_true",
                   help="one worker per process under torchrun (gloo on CPU, NCCL on CUDA)")
    p.add_argument("--max-steps", type=positive_int, default=None,
                   help="stop after this many steps in total (checkpointing if asked)")
    p.add_argument("--out", default=None, help="directory for result.json and the final model")
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint file, written every epoch, every --checkpoint-every steps and "
                        "at --max-steps (per rank under --ddp: NAME.rankR.pt)")
    p.add_argument("--checkpoint-every", type=nonneg_int, default=0, metavar="STEPS")
    p.add_argument("--resume", default=None, help="continue from this checkpoint")
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    fields = TrainConfig.__dataclass_fields__
    return TrainConfig(**{k: v for k, v in vars(args).items() if k in fields})


# ------------------------------------------------------------------------------ set-up

def resolve_device(name: str, local_rank: int | None = None) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(name)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(f"device {name!r} requested but torch sees no CUDA device")
        if dev.index is None:
            dev = torch.device("cuda", local_rank or 0)
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
    """`dataset`: an already loaded shim.data.Dataset for cfg.data (validate loads it once)."""
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
        raise SystemExit(f"{len(ytr)} training samples cannot give {n_workers} workers one batch "
                         f"of {cfg.batch_size} each; lower --batch-size or --workers")
    name = canonical_model_name(cfg.model or DEFAULT_MODEL[ds.name])
    model = build_model(name, ds.num_classes, ds.in_shape, seed=cfg.seed).to(device)
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    return Problem(as_t(xtr), as_t(ytr), as_t(xte), as_t(yte), model, name, steps)


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


# ------------------------------------------------------------------------------ the loop

@dataclass
class History:
    """Curves and running totals; saved in checkpoints so a resumed run reports the same."""
    curves: list[dict] = field(default_factory=list)
    loss_sums: list[float] = field(default_factory=list)      # per worker since the last eval
    loss_counts: list[int] = field(default_factory=list)
    totals: dict = field(default_factory=lambda: asdict(StepStats()))   # all workers
    times: dict = field(default_factory=lambda: asdict(StepTimes()))    # per-worker seconds
    padded_bytes: int = 0


def _gather_floats(values: list[float], ddp: bool, device: torch.device) -> list[float]:
    """In DDP each rank holds its own entry; gather them in rank order."""
    if not ddp:
        return values
    import torch.distributed as dist
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    out = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(out, mine)
    return [float(v) for t in out for v in t.tolist()]


class Trainer:
    def __init__(self, cfg: TrainConfig, dataset=None):
        self.cfg = cfg
        self.ddp = cfg.ddp
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        if self.ddp:
            import torch.distributed as dist
            if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
                raise SystemExit("--ddp needs torchrun (RANK / WORLD_SIZE are not set); see "
                                 "docs/training.md")
            local = int(os.environ.get("LOCAL_RANK", "0"))
            self.device = resolve_device(cfg.device, local)
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
            self.rank, world = dist.get_rank(), dist.get_world_size()
            if cfg.workers is not None and cfg.workers != world:
                raise SystemExit(f"--workers {cfg.workers} but torchrun started {world} processes")
            cfg.workers = world
        else:
            self.device = resolve_device(cfg.device)
            self.rank = 0
            cfg.workers = cfg.workers or 4
        self.n = cfg.workers
        self.problem = build_problem(cfg, self.n, self.device, dataset)
        model = self.problem.model
        cfg.model = self.problem.model_name
        self.layers = layers_of(model)
        self.compressor = build_compressor(
            cfg.compressor, self.layers, self.n, k=cfg.k, density=cfg.density,
            interval=cfg.dlgs_interval, R=cfg.range, block_size=cfg.block_size,
            lmax_log2=cfg.lmax_log2, dense_below=cfg.dense_below)
        self.optimizer = GlobalMomentumSGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        slots = 1 if self.ddp else self.n                  # loss sums this process holds
        self.history = History(loss_sums=[0.0] * slots, loss_counts=[0] * slots)
        self.epoch, self.step_in_epoch, self.global_step = 0, 0, 0
        # dense warm-up epochs: a stateless dense compressor stands in for the real one
        self.warm = DenseCompressor(self.layers, self.n) if cfg.warmup_epochs else None
        worker_ids = [self.rank] if self.ddp else list(range(self.n))
        if cfg.resume:
            self.states = self._load(cfg.resume, worker_ids)
        else:
            self.states = {w: self.compressor.new_worker_state() for w in worker_ids}
        if self.ddp:
            from .hook import register
            self.ddp_model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
            self.hook = register(self.ddp_model, self.compressor,
                                 worker_state=self.states[self.rank])
        else:
            self.cluster = SimulatedCluster(model, self.compressor, self.layers, F.cross_entropy,
                                            self.device, worker_states=self.states)

    def _activate(self, epoch: int) -> None:
        """Use the dense warm-up compressor during the warm-up epochs, the real one after."""
        warm = self.warm is not None and epoch < self.cfg.warmup_epochs
        comp = self.warm if warm else self.compressor
        states = {w: WorkerState() for w in self.states} if warm else self.states
        if self.ddp:
            self.hook.compressor, self.hook.worker_state = comp, states[self.rank]
        else:
            self.cluster.compressor, self.cluster.workers = comp, states

    # -- checkpoints
    def _ckpt_path(self, path: str) -> Path:
        return rank_path(path, self.rank if self.ddp else None)

    def save(self, path: str) -> Path:
        return save_checkpoint(self._ckpt_path(path), {
            "run_config": self.cfg.run_config(),
            "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
            "global_step": self.global_step,
            "model": self.problem.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "compressor": compressor_state(self.compressor, self.states),
            "rng": rng_state(),
            "history": asdict(self.history),
        })

    def _load(self, path: str, worker_ids: list[int]):
        ckpt = load_checkpoint(self._ckpt_path(path), self.cfg.run_config())
        self.problem.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        set_rng_state(ckpt["rng"])
        self.epoch, self.step_in_epoch = int(ckpt["epoch"]), int(ckpt["step_in_epoch"])
        self.global_step = int(ckpt["global_step"])
        self.history = History(**ckpt["history"])
        return restore_compressor_state(self.compressor, ckpt["compressor"], worker_ids, self.device)

    # -- one step
    def lr_at(self, step: int) -> float:
        """The learning rate of global step `step` (0-based): linear warm-up, then constant.
        A function of the step alone, so a resumed run uses the same rates."""
        ramp = round(self.cfg.lr_warmup_epochs * self.problem.steps_per_epoch)
        if ramp <= 0 or step >= ramp:
            return self.cfg.lr
        return self.cfg.lr * (step + 1) / ramp

    def _step(self, shards: list[np.ndarray]) -> None:
        p, b, s = self.problem, self.cfg.batch_size, self.step_in_epoch
        h = self.history
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.global_step)
        if self.ddp:
            x, y = worker_batch(p, shards[self.rank], s, b)
            self.hook.reset_step()
            t0 = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.ddp_model(x), y)
            loss.backward()
            self.optimizer.step()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            wall = time.perf_counter() - t0
            ht = self.hook.times
            h.times["compute_s"] += wall - ht.compress_s - ht.exchange_s
            h.times["compress_s"] += ht.compress_s
            h.times["exchange_s"] += ht.exchange_s
            h.padded_bytes += self.hook.padded_bytes
            stats = [self.hook.stats]
            losses = {self.rank: float(loss.item())}
        else:
            batches = [worker_batch(p, shards[w], s, b) for w in range(self.n)]
            res = self.cluster.step(batches, self.optimizer)
            for k, v in asdict(res.times).items():
                h.times[k] += v
            stats = res.stats
            losses = dict(enumerate(res.losses))
        for st in stats:
            for k, v in asdict(st).items():
                h.totals[k] += v
        for w, v in losses.items():
            slot = 0 if self.ddp else w
            h.loss_sums[slot] += v
            h.loss_counts[slot] += 1

    def _record(self) -> dict:
        """Evaluate and append a curve point (every rank takes part in the loss gather)."""
        h = self.history
        if self.ddp:
            sums = _gather_floats([h.loss_sums[0]], True, self.device)
            counts = _gather_floats([float(h.loss_counts[0])], True, self.device)
        else:
            sums, counts = h.loss_sums, [float(c) for c in h.loss_counts]
        total = 0.0
        for v in sums:                                   # rank order in both modes
            total += v
        train_loss = total / sum(counts) if sum(counts) else float("nan")
        acc, test_loss = evaluate(self.problem.model, self.problem.x_test, self.problem.y_test)
        point = {"step": self.global_step,
                 "epoch": self.global_step / self.problem.steps_per_epoch,
                 "train_loss": train_loss, "test_loss": test_loss, "test_acc": acc}
        h.curves.append(point)
        h.loss_sums = [0.0] * len(h.loss_sums)
        h.loss_counts = [0] * len(h.loss_counts)
        return point

    def run(self, progress=None) -> dict:
        cfg, p = self.cfg, self.problem
        steps_total = cfg.epochs * p.steps_per_epoch
        own_bar = None
        if progress is None and cfg.progress and self.rank == 0:
            from tqdm import tqdm
            own_bar = progress = tqdm(total=steps_total, initial=self.global_step,
                                      desc=f"{cfg.compressor}", unit="step", file=sys.stderr)
        stopped = False
        t_start = time.perf_counter()
        try:
            while self.epoch < cfg.epochs and not stopped:
                self._activate(self.epoch)
                shards = epoch_shards(len(p.y_train), self.n, cfg.seed, self.epoch)
                while self.step_in_epoch < p.steps_per_epoch:
                    if cfg.max_steps is not None and self.global_step >= cfg.max_steps:
                        stopped = True
                        break
                    self._step(shards)
                    self.step_in_epoch += 1
                    self.global_step += 1
                    if progress is not None:
                        progress.update(1)
                    if cfg.eval_every and self.global_step % cfg.eval_every == 0 \
                            and self.step_in_epoch < p.steps_per_epoch:
                        self._record()
                    if cfg.checkpoint and cfg.checkpoint_every \
                            and self.global_step % cfg.checkpoint_every == 0:
                        self.save(cfg.checkpoint)
                if stopped:
                    break
                self.epoch, self.step_in_epoch = self.epoch + 1, 0
                point = self._record()
                if progress is not None:
                    progress.set_postfix(epoch=self.epoch, acc=f"{point['test_acc']:.4f}")
                if cfg.checkpoint:
                    self.save(cfg.checkpoint)
            if stopped and cfg.checkpoint:
                self.save(cfg.checkpoint)
        finally:
            if own_bar is not None:
                own_bar.close()
        wall = time.perf_counter() - t_start
        final = None
        last = self.history.curves[-1]["step"] if self.history.curves else None
        if last != self.global_step:
            # stopped between evaluations: measure the final model without adding a curve
            # point, so the history stays what an uninterrupted run records
            acc, loss = evaluate(p.model, p.x_test, p.y_test)
            final = {"test_acc": acc, "test_loss": loss}
        return self._result(stopped, wall, final)

    def _result(self, stopped: bool, wall: float, final: dict | None) -> dict:
        h, p = self.history, self.problem
        totals = dict(h.totals)
        padded = h.padded_bytes
        if self.ddp:
            import torch.distributed as dist
            keys = sorted(totals)
            t = torch.tensor([totals[k] for k in keys] + [padded], dtype=torch.int64,
                             device=self.device)
            dist.all_reduce(t)
            vals = t.tolist()
            totals, padded = dict(zip(keys, vals[:-1])), vals[-1]
        n_params = sum(lay.numel for lay in self.layers)
        steps = self.global_step
        dense_bytes = 4 * n_params * steps * self.n
        per_step_ms = {k.replace("_s", "_ms"): (1000 * v / steps if steps else 0.0)
                       for k, v in h.times.items()}
        if final is None:
            final = h.curves[-1] if h.curves else {}
        return {
            "config": asdict(self.cfg) | {"model": p.model_name, "workers": self.n},
            "compressor_config": self.compressor.config(),
            "mode": "ddp" if self.ddp else "simulated",
            "device": str(self.device),
            "params": n_params,
            "layers": [{"name": lay.name, "shape": list(lay.shape)} for lay in self.layers],
            "steps": steps, "steps_per_epoch": p.steps_per_epoch,
            "stopped_early": stopped,
            "final_test_acc": final.get("test_acc"),
            "final_test_loss": final.get("test_loss"),
            "curves": h.curves,
            "bytes_sent": totals["bytes_sent"],
            "bytes_sent_padded": padded if self.ddp else None,
            "dense_bytes": dense_bytes,
            "compression_ratio": dense_bytes / totals["bytes_sent"] if totals["bytes_sent"] else None,
            "elements_sent": totals["elements_sent"],
            "sat_quant": totals["sat_quant"],
            "sat_feedback": totals["sat_feedback"],
            "ms_per_step": per_step_ms,
            "wall_s": wall,
        }

    def write_outputs(self, result: dict, out: str | Path) -> None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        name = f"model.rank{self.rank}.pt" if self.ddp else "model.pt"
        torch.save(self.problem.model.state_dict(), out / name)
        if self.rank == 0:
            (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")

    def close(self) -> None:
        if self.ddp:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()


def run_training(cfg: TrainConfig, progress=None, dataset=None) -> dict:
    """Train one configuration; returns the result dict (also written to cfg.out).
    `progress`: a tqdm-like bar to advance per step; `dataset`: a preloaded Dataset."""
    trainer = Trainer(cfg, dataset)
    try:
        result = trainer.run(progress)
        if cfg.out:
            trainer.write_outputs(result, cfg.out)
        return result
    finally:
        trainer.close()


def train_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    from .data import DatasetError
    try:
        result = run_training(cfg)
    except (DatasetError, ValueError) as e:
        # bad data or checkpoint, a model that does not fit the data, a NaN gradient (the
        # run diverged), a malformed peer frame: one line naming it, no traceback
        print(f"gradblock train: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not cfg.ddp or int(os.environ.get("RANK", "0")) == 0:
        acc = result["final_test_acc"]
        ratio = result["compression_ratio"]
        print(f"{cfg.compressor}: {result['steps']} steps, test accuracy "
              f"{'n/a' if acc is None else f'{acc:.4f}'}, compression "
              f"{'n/a' if ratio is None else f'{ratio:.1f}x'}, "
              f"{result['bytes_sent'] / 1e6:.3f} MB sent"
              + (f"; wrote {cfg.out}/result.json" if cfg.out else ""))
    return 0
