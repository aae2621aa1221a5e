"""The training loop: one configuration, one compressor, an exchange object for the mode.

Two modes share the data order, the model initialisation, the compressors and the
encode/decode path, so they produce the same bits:
* simulated (default): `workers` workers in one process (`SimulatedExchange`);
* DDP under torchrun: one worker per process, gradients exchanged by the DDP communication
  hook (`DdpExchange`); gloo on CPU, NCCL on CUDA.

Everything that can be refused is refused before the first step: settings
(`TrainConfig.check`), output and checkpoint paths, the dataset, and a checkpoint to resume
(checked field by field). Errors are the named classes of shim/errors.py; only the CLI
turns them into an exit status.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from gradblock.codec.fileio import check_output_dir, check_replaceable, write_own, write_own_text

from ..compress.compressors import DenseCompressor, StepStats, WorkerState, build_compressor, layers_of
from ..setup.config import TrainConfig
from ..errors import CheckpointError
from ..exchange.modes import Exchange, StepOutcome, make_exchange
from ..exchange.optim import GlobalMomentumSGD
from ..exchange.peers import PEERS, build_peer, make_peer_exchange, run_peer_locally
from ..setup.problem import build_problem, epoch_shards, evaluate, worker_batch
from ..exchange.resilience import (FaultInjector, check_replicas, common_step, is_comm_failure, note,
                         peer_lost, prune, restart_count, step_path)
from ..compress.warmup import Warmup
from .schedule import lr_at, register_worker_grad_hooks, resolve_horizon
from ..exchange.state import (CheckpointExpectation, check_checkpoint, compressor_state,
                    load_checkpoint, rng_state, save_checkpoint, set_rng_state)
from ..exchange.workers import StepTimes

PHASES = tuple(f.name for f in fields(StepTimes))


@dataclass
class History:
    """Curves and running totals; saved in checkpoints so a resumed run reports the same."""
    curves: list[dict] = field(default_factory=list)
    loss_sums: list[float] = field(default_factory=list)      # per worker since the last eval
    loss_counts: list[int] = field(default_factory=list)
    totals: dict = field(default_factory=lambda: asdict(StepStats()))   # all workers
    times: dict = field(default_factory=lambda: asdict(StepTimes()))    # per-worker seconds (timed)
    padded_bytes: int = 0
    step_s: float = 0.0                                       # wall seconds inside steps


HISTORY_FIELDS = tuple(f.name for f in fields(History))


class Trainer:
    def __init__(self, cfg: TrainConfig, dataset=None, exchange: Exchange | None = None):
        cfg.check()
        self.cfg = cfg
        if cfg.out:
            check_output_dir(cfg.out, "--out")
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        if exchange is None and cfg.compressor in PEERS:    # torch's own DDP hooks (shim/exchange/peers.py)
            exchange = make_peer_exchange(cfg)
        self.exchange = exchange or make_exchange(cfg.ddp, cfg.workers, cfg.device, cfg.time_phases,
                                                  cfg.timeout, cfg.deterministic)
        try:
            self._setup(cfg, dataset)
        except BaseException as e:
            self.exchange.close()
            self._raise_named_if_peer_lost(e, step=0)
            raise

    def _raise_named_if_peer_lost(self, err: BaseException, step: int) -> None:
        """Under DDP a collective that failed for want of a peer (wherever it was: the elastic
        agreement, a step, an evaluation's gather, the replica check, the final sums) becomes
        `PeerLostError` naming the ranks that did not answer."""
        if isinstance(err, Exception) and self.exchange.mode == "ddp" and is_comm_failure(err):
            raise peer_lost(err, getattr(self, "rank", -1), getattr(self, "n", 0) or 0, step,
                            self.cfg.timeout) from err

    def _setup(self, cfg: TrainConfig, dataset) -> None:
        ex = self.exchange
        if cfg.checkpoint:
            check_replaceable(ex.checkpoint_path(cfg.checkpoint), "--checkpoint")
        if cfg.out:
            for name in (ex.model_file(), "result.json"):
                check_replaceable(Path(cfg.out) / name, "--out")
        cfg.workers = self.n = ex.n_workers
        self.device, self.rank = ex.device, ex.rank
        self.problem = build_problem(cfg, self.n, self.device, dataset)
        model = self.problem.model
        cfg.model = self.problem.model_name
        self.layers = layers_of(model)
        self.compressor = build_peer(cfg, self.layers, self.n) if cfg.compressor in PEERS \
            else build_compressor(
            cfg.compressor, self.layers, self.n, k=cfg.k, density=cfg.density,
            interval=cfg.dlgs_interval, R=cfg.range, block_size=cfg.block_size,
            lmax_log2=cfg.lmax_log2, dense_below=cfg.dense_below, norm=cfg.norm,
            exchange=cfg.exchange,
            local_momentum=cfg.local_momentum, momentum_mask=cfg.momentum_mask,
            warmup=Warmup(cfg.sparsity_warmup_steps, cfg.sparsity_warmup_fraction))
        self.optimizer = GlobalMomentumSGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        slots = len(ex.worker_ids)                   # loss sums this process holds
        self.history = History(loss_sums=[0.0] * slots, loss_counts=[0] * slots)
        self.epoch, self.step_in_epoch, self.global_step = 0, 0, 0
        # dense warm-up epochs: a stateless dense compressor stands in for the real one
        self.warm = DenseCompressor(self.layers, self.n, local_momentum=cfg.local_momentum) \
            if cfg.warmup_epochs else None
        resume = cfg.resume
        if cfg.elastic:             # the newest step every rank holds, agreed by a collective
            step = common_step(ex, cfg.checkpoint)
            resume = None if step is None else str(step_path(cfg.checkpoint, step))
        self.resumed_from = resume
        resolve_horizon(cfg, ex.checkpoint_path(resume) if resume else None)   # cosine's T
        self.faults = FaultInjector(self.rank) if ex.mode == "ddp" else None
        if cfg.elastic and self.rank == 0 and (resume or restart_count() > 0):
            note(f"elastic resume from step {step or 0} (restart {restart_count()}"
                 + ("" if resume else ", no checkpoint every rank holds: from the start") + ")")
        if resume:
            # per-rank files under DDP: every rank learns whether all of them could resume
            try:
                self.states = self._load(resume)
            except CheckpointError:
                ex.all_agree(False)
                raise
            if not ex.all_agree(True):
                raise CheckpointError("another rank refused its checkpoint (see its message); "
                                      "no rank resumes")
        else:
            self.states = {w: self.compressor.new_worker_state() for w in ex.worker_ids}
        self.merge_groups = self._merge_groups() if cfg.merge_plan else None
        # weight decay and local clipping on each worker's gradient (shim/training/schedule.py)
        self.grad_hooks = register_worker_grad_hooks(
            [p for p in model.parameters() if p.requires_grad], cfg, self.n)
        ex.bind(model, self.layers, self.compressor, self.states, self.merge_groups)

    def _merge_groups(self) -> list[list[int]]:
        """The `--merge-plan` groups (shim/systems/merge_apply.py), planned on this run's first
        batch."""
        from ..systems.merge_apply import plan_for_run
        p = self.problem
        shard = epoch_shards(len(p.y_train), self.n, self.cfg.seed, 0)[self.exchange.worker_ids[0]]
        x, y = worker_batch(p, shard, 0, self.cfg.batch_size)
        return plan_for_run(self.cfg.merge_plan, p.model, self.layers, self.compressor, x, y,
                            ddp=self.exchange.mode == "ddp")

    def _activate(self, epoch: int) -> None:
        """Use the dense warm-up compressor during the warm-up epochs, the real one after."""
        if self.warm is not None and epoch < self.cfg.warmup_epochs:
            self.exchange.use(self.warm, {w: WorkerState() for w in self.states})
        else:
            self.exchange.use(self.compressor, self.states)

    # -- checkpoints
    def checkpoint(self) -> Path:
        """Write --checkpoint (under --elastic: the step-tagged file, then prune old ones)."""
        if not self.cfg.elastic:
            return self.save(self.cfg.checkpoint)
        written = self.save(str(step_path(self.cfg.checkpoint, self.global_step)))
        prune(self.cfg.checkpoint, self.rank)
        return written

    def save(self, path: str) -> Path:
        return save_checkpoint(self.exchange.checkpoint_path(path), {
            "run_config": self.cfg.run_config(),
            "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
            "global_step": self.global_step,
            "model": self.problem.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "compressor": compressor_state(self.compressor, self.states),
            "rng": rng_state(),
            "history": asdict(self.history),
        })

    def _load(self, path: str) -> dict[int, WorkerState]:
        """Check every field against this run, then load; nothing is changed on a refusal."""
        where = self.exchange.checkpoint_path(path)
        ckpt = load_checkpoint(where, self.cfg.run_config())
        check_checkpoint(ckpt, CheckpointExpectation(
            model=self.problem.model, optimizer=self.optimizer, compressor=self.compressor,
            layers=self.layers, worker_ids=self.exchange.worker_ids,
            steps_per_epoch=self.problem.steps_per_epoch, warmup_epochs=self.cfg.warmup_epochs,
            loss_slots=len(self.history.loss_sums), history_fields=HISTORY_FIELDS), where)
        self.problem.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        set_rng_state(ckpt["rng"])
        self.epoch, self.step_in_epoch = ckpt["epoch"], ckpt["step_in_epoch"]
        self.global_step = ckpt["global_step"]
        self.history = History(**ckpt["history"])
        return {w: WorkerState.from_state_dict(ckpt["compressor"]["workers"][w], self.device)
                for w in self.exchange.worker_ids}

    # -- one step
    def lr_at(self, step: int) -> float:
        """The learning rate of global step `step` (0-based): the schedule, then the linear
        warm-up (shim/training/schedule.py). A function of the step alone, so a resumed run uses the
        same rates."""
        return lr_at(self.cfg, self.problem.steps_per_epoch, step)

    def _step(self, shards: list[np.ndarray]) -> None:
        h = self.history
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.global_step)
        ex = self.exchange
        if self.faults is not None:
            self.faults.before_step(self.global_step, getattr(ex, "hook", None))
        t0 = time.perf_counter()
        try:
            out: StepOutcome = ex.step(self.problem, shards, self.step_in_epoch,
                                       self.cfg.batch_size, self.optimizer)
        except Exception as e:
            if ex.mode == "ddp" and is_comm_failure(e):
                raise peer_lost(e, self.rank, self.n, self.global_step, self.cfg.timeout) from e
            raise
        h.step_s += time.perf_counter() - t0
        if self.faults is not None:
            self.faults.after_step(self.global_step, self.problem.model)
        if out.times is not None:
            for k, v in asdict(out.times).items():
                h.times[k] += v
        h.padded_bytes += out.padded_bytes
        for st in out.stats:
            for k, v in asdict(st).items():
                h.totals[k] += v
        for slot, v in enumerate(out.losses):
            h.loss_sums[slot] += v
            h.loss_counts[slot] += 1

    def _record(self) -> dict:
        """Evaluate and append a curve point (every rank takes part in the loss gather)."""
        h = self.history
        sums = self.exchange.gather_floats(h.loss_sums)
        counts = self.exchange.gather_floats([float(c) for c in h.loss_counts])
        total = 0.0
        for v in sums:                                   # worker order in both modes
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
        if progress is None and cfg.progress and self.exchange.is_main:
            from tqdm import tqdm
            own_bar = progress = tqdm(total=steps_total, initial=self.global_step,
                                      desc=f"{cfg.compressor}", unit="step", file=sys.stderr)
        t_start = time.perf_counter()
        try:
            stopped = self._loop(progress)
            wall = time.perf_counter() - t_start
            final = None
            last = self.history.curves[-1]["step"] if self.history.curves else None
            if last != self.global_step:
                # stopped between evaluations: measure the final model without adding a curve
                # point, so the history stays what an uninterrupted run records
                acc, loss = evaluate(p.model, p.x_test, p.y_test)
                final = {"test_acc": acc, "test_loss": loss}
            return self._result(stopped, wall, final)       # its sums are a collective too
        except Exception as e:
            self._raise_named_if_peer_lost(e, self.global_step)
            raise
        finally:
            if own_bar is not None:
                own_bar.close()

    def _loop(self, progress) -> bool:
        """The epochs and steps; True when --max-steps stopped it early."""
        cfg, p = self.cfg, self.problem
        stopped = False
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
                if cfg.check_every and self.global_step % cfg.check_every == 0:
                    check_replicas(self.exchange, p.model, self.optimizer, self.global_step)
                if cfg.checkpoint and cfg.checkpoint_every \
                        and self.global_step % cfg.checkpoint_every == 0:
                    self.checkpoint()
            if stopped:
                break
            self.epoch, self.step_in_epoch = self.epoch + 1, 0
            point = self._record()
            if progress is not None:
                progress.set_postfix(epoch=self.epoch, acc=f"{point['test_acc']:.4f}")
            if cfg.checkpoint:
                self.checkpoint()
        if stopped and cfg.checkpoint:
            self.checkpoint()
        if cfg.check_every:
            check_replicas(self.exchange, p.model, self.optimizer, self.global_step)
        return stopped

    def _ms_per_step(self) -> dict:
        """Wall ms per step (always); per-phase ms only when the run timed its phases."""
        h, steps = self.history, self.global_step
        per = (lambda s: 1000 * s / steps) if steps else (lambda s: 0.0)  # noqa: E731
        phases = {k.replace("_s", "_ms"): (per(h.times[k]) if self.cfg.time_phases else None)
                  for k in PHASES}
        return {"step_ms": per(h.step_s), **phases}

    def _result(self, stopped: bool, wall: float, final: dict | None) -> dict:
        h, p = self.history, self.problem
        keys = sorted(h.totals)
        summed = self.exchange.sum_ints([h.totals[k] for k in keys] + [h.padded_bytes])
        totals, padded = dict(zip(keys, summed[:-1])), summed[-1]
        n_params = sum(lay.numel for lay in self.layers)
        steps = self.global_step
        dense_bytes = 4 * n_params * steps * self.n
        if final is None:
            final = h.curves[-1] if h.curves else {}
        return {
            "config": asdict(self.cfg) | {"model": p.model_name, "workers": self.n},
            "compressor_config": self.compressor.config(),
            "mode": self.exchange.mode,
            "device": str(self.device),
            "params": n_params,
            "layers": [{"name": lay.name, "shape": list(lay.shape)} for lay in self.layers],
            "steps": steps, "steps_per_epoch": p.steps_per_epoch,
            "stopped_early": stopped,
            "final_test_acc": final.get("test_acc"),
            "final_test_loss": final.get("test_loss"),
            "curves": h.curves,
            "bytes_sent": totals["bytes_sent"],
            "bytes_sent_padded": padded if self.exchange.mode == "ddp" else None,
            "dense_bytes": dense_bytes,
            "compression_ratio": dense_bytes / totals["bytes_sent"] if totals["bytes_sent"] else None,
            "elements_sent": totals["elements_sent"],
            "sat_quant": totals["sat_quant"],
            "sat_feedback": totals["sat_feedback"],
            "sat_momentum": totals["sat_momentum"],
            "ms_per_step": self._ms_per_step(),
            "wall_s": wall,
            "merge_groups": None if self.merge_groups is None else
            [[self.layers[i].name for i in g] for g in self.merge_groups],
        }

    def write_outputs(self, result: dict, out: str | Path) -> None:
        """The final model (per rank under DDP) and, on the main process, result.json."""
        out = Path(out)
        state = self.problem.model.state_dict()
        write_own(out / self.exchange.model_file(), lambda tmp: torch.save(state, tmp))
        if self.exchange.is_main:
            write_own_text(out / "result.json", json.dumps(result, indent=2) + "\n")

    def close(self) -> None:
        self.exchange.close()


def run_training(cfg: TrainConfig, progress=None, dataset=None) -> dict:
    """Train one configuration; returns the result dict (also written to cfg.out).
    `progress`: a tqdm-like bar to advance per step; `dataset`: a preloaded Dataset."""
    if cfg.compressor in PEERS and not cfg.ddp:     # torch's hooks need a process group
        return run_peer_locally(cfg, progress)
    trainer = Trainer(cfg, dataset)
    try:
        result = trainer.run(progress)
        if cfg.out:
            trainer.write_outputs(result, cfg.out)
        return result
    finally:
        trainer.close()
