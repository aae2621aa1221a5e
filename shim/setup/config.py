"""The settings of one training run (`TrainConfig`) and their validation.

`TrainConfig.check()` refuses out-of-range values with a `ConfigError` before anything is
loaded, so library callers get the same named error the CLI's argparse types give.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from gradblock.refmodel.momentum import MomentumConfig, check_momentum_pair
from gradblock.refmodel.validation import (check_block_size, check_k, check_lmax_log2, check_norm,
                                             check_range)

from ..errors import ConfigError

DATASETS = ("fashion-mnist", "digits", "mnist", "cifar10")


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
    norm: str = "l1"                    # coarse: block norm kind, l1 | l2 (docs/spec.md §2.3)
    workers: int | None = None          # None: 4 simulated, or the torchrun world size
    epochs: int = 3
    batch_size: int = 32                # per worker
    lr: float = 0.05
    momentum: float = 0.9               # global momentum (the optimiser's)
    local_momentum: float = 0.0         # momentum correction (docs/spec.md §7); needs momentum 0
    momentum_mask: bool = True          # factor masking of the local velocity
    sparsity_warmup_steps: int = 0      # DGC's exponential sparsity warm-up (shim/compress/warmup.py)
    sparsity_warmup_fraction: float = 0.25
    seed: int = 0
    train_subset: int | None = None
    test_subset: int | None = None
    ddp: bool = False
    device: str = "auto"
    threads: int = 0                    # 0: torch's default
    max_steps: int | None = None        # stop (and checkpoint) after this many steps in total
    eval_every: int = 0                 # extra evaluations every this many steps (0: per epoch)
    time_phases: bool = False           # time compute / compress / exchange (forces CUDA syncs)
    out: str | None = None
    checkpoint: str | None = None
    checkpoint_every: int = 0
    resume: str | None = None
    elastic: bool = False               # step-tagged checkpoints, resumed by themselves (resilience.py)
    timeout: float = 300.0              # seconds a collective may wait under --ddp
    check_every: int = 0                # cross-rank checksum every this many steps (--ddp)
    progress: bool = True
    merge_plan: str | None = None       # none | greedy | exact | a plan file (shim/systems/merge_apply.py)
    exchange: str = "allgather"         # allreduce: global block selection (shim/exchange/global_exchange.py)
    powersgd_rank: int = 1              # --compressor powersgd: matrix approximation rank (shim/exchange/peers.py)
    # the worker's gradient before compression (DGC), and the learning-rate schedule
    # (docs/training.md "Weight decay, clipping, schedules"); defaults: off / constant
    weight_decay: float = 0.0           # g = float32(g + float32(wd * w)) on every worker
    clip_norm: float = 0.0              # per-layer L2 clip at clip_norm / sqrt(N); 0: off
    lr_schedule: str = "constant"       # constant | step | cosine
    lr_milestones: tuple = ()           # step: epochs at which lr is multiplied by lr_gamma
    lr_gamma: float = 0.1
    lr_schedule_epochs: float | None = None   # cosine horizon; None: --epochs at the start

    # settings that decide the bits; a checkpoint is only resumed under the same ones
    # (not `epochs`: the data order depends on (seed, epoch) only, so a run may be extended)
    BIT_KEYS = ("data", "model", "compressor", "k", "density", "dlgs_interval", "dense_below",
                "warmup_epochs", "lr_warmup_epochs",
                "range", "block_size", "lmax_log2", "workers", "batch_size", "lr",
                "momentum", "local_momentum", "momentum_mask", "sparsity_warmup_steps",
                "sparsity_warmup_fraction", "seed", "train_subset", "test_subset", "ddp")

    def run_config(self) -> dict:
        d = asdict(self)
        bits = {k: d[k] for k in self.BIT_KEYS}
        if self.norm != "l1":       # a checkpoint without "norm" (written before it existed) is l1
            bits["norm"] = self.norm
        if self.exchange != "allgather":    # likewise: a checkpoint without it is allgather
            bits["exchange"] = self.exchange
        for k, default in self.OPTIONAL_BIT_KEYS.items():
            v = tuple(d[k]) if k == "lr_milestones" else d[k]
            if v != default:    # only when used: checkpoints written before them still resume
                bits[k] = ",".join(repr(float(e)) for e in v) if k == "lr_milestones" else v
        return bits

    # decide the bits too, recorded only when not at their default
    OPTIONAL_BIT_KEYS = {"weight_decay": 0.0, "clip_norm": 0.0, "lr_schedule": "constant",
                         "lr_milestones": (), "lr_gamma": 0.1, "lr_schedule_epochs": None}
    LR_SCHEDULES = ("constant", "step", "cosine")

    def check(self) -> "TrainConfig":
        """Refuse values no run can use (ConfigError naming the field); returns self."""
        from ..compress.compressors import COMPRESSORS

        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                raise ConfigError(f"{name} must be {what}, got {getattr(self, name)!r}")

        def is_int(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        need(self.data in DATASETS, "data", "one of " + ", ".join(DATASETS))
        from .peer_config import PEERS, check_peer_config
        need(self.compressor in COMPRESSORS + PEERS, "compressor",
             "one of " + ", ".join(COMPRESSORS + PEERS))
        check_peer_config(self)
        # the contract's parameters: refmodel.validation's checks and named errors (KError,
        # BlockSizeError, LmaxError, RangeError, NormError), as every entry point raises them
        check_k(self.k)
        check_block_size(self.block_size)
        check_lmax_log2(self.lmax_log2)
        check_range(self.range)
        check_norm(self.norm)
        if self.density != "match":
            need(isinstance(self.density, (int, float)) and 0 < self.density <= 1,
                 "density", "in (0, 1] or 'match'")
        for name in ("dlgs_interval", "epochs", "batch_size"):
            need(is_int(getattr(self, name)) and getattr(self, name) >= 1, name, "an integer >= 1")
        for name in ("dense_below", "warmup_epochs", "threads", "eval_every", "checkpoint_every",
                     "check_every"):
            need(is_int(getattr(self, name)) and getattr(self, name) >= 0, name, "an integer >= 0")
        for name in ("workers", "train_subset", "test_subset", "max_steps"):
            v = getattr(self, name)
            need(v is None or (is_int(v) and v >= 1), name, "None or an integer >= 1")
        need(is_int(self.seed), "seed", "an integer")
        for name in ("lr",):
            v = getattr(self, name)
            need(isinstance(v, (int, float)) and math.isfinite(v) and v > 0, name,
                 "a finite number > 0")
        need(isinstance(self.momentum, (int, float)) and 0 <= self.momentum < 1, "momentum",
             "in [0, 1)")
        need(isinstance(self.local_momentum, (int, float)) and 0 <= self.local_momentum < 1,
             "local_momentum", "in [0, 1)")
        try:
            MomentumConfig.from_float(self.local_momentum)
            check_momentum_pair(self.local_momentum, self.momentum)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        need(isinstance(self.momentum_mask, bool), "momentum_mask", "a bool")
        need(is_int(self.sparsity_warmup_steps) and self.sparsity_warmup_steps >= 0,
             "sparsity_warmup_steps", "an integer >= 0")
        f = self.sparsity_warmup_fraction
        need(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f <= 1,
             "sparsity_warmup_fraction", "in (0, 1]")
        need(self.merge_plan is None or (isinstance(self.merge_plan, str) and self.merge_plan != ""),
             "merge_plan", "None, none, greedy, exact or a plan file")
        need(isinstance(self.timeout, (int, float)) and math.isfinite(self.timeout)
             and self.timeout > 0, "timeout", "a finite number of seconds > 0")
        if self.elastic:
            need(self.ddp, "elastic", "used with --ddp (under torchrun)")
            need(bool(self.checkpoint), "elastic", "used with --checkpoint")
            need(self.checkpoint_every >= 1, "elastic", "used with --checkpoint-every >= 1")
            need(self.resume is None, "elastic", "used without --resume (it finds its checkpoint)")
        need(self.check_every == 0 or self.ddp, "check_every", "0 outside --ddp")
        need(isinstance(self.lr_warmup_epochs, (int, float)) and math.isfinite(self.lr_warmup_epochs)
             and self.lr_warmup_epochs >= 0, "lr_warmup_epochs", "a finite number >= 0")
        self._check_schedule(need)
        need(self.exchange in ("allgather", "allreduce"), "exchange", "allgather or allreduce")
        if self.exchange == "allreduce":    # global block selection: coarse, L1, no merge plan
            need(self.compressor == "coarse", "exchange", "allgather unless --compressor coarse")
            need(self.norm == "l1", "exchange", "allgather with --norm l2 (it sums L1 norms)")
            need(self.merge_plan in (None, "none"), "exchange", "allgather with --merge-plan")
        return self

    def _check_schedule(self, need) -> None:
        """Weight decay, clipping and the learning-rate schedule (ConfigError by name)."""
        def number(v) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        for name in ("weight_decay", "clip_norm"):
            need(number(getattr(self, name)) and getattr(self, name) >= 0, name,
                 "a finite number >= 0")
        need(self.lr_schedule in self.LR_SCHEDULES, "lr_schedule",
             "one of " + ", ".join(self.LR_SCHEDULES))
        ms = self.lr_milestones
        need(isinstance(ms, (tuple, list)) and all(number(e) and e > 0 for e in ms)
             and list(ms) == sorted(ms), "lr_milestones", "increasing finite epochs > 0")
        need(bool(ms) == (self.lr_schedule == "step"), "lr_milestones",
             "given (and only given) with lr_schedule 'step'")
        need(number(self.lr_gamma) and self.lr_gamma > 0, "lr_gamma", "a finite number > 0")
        need(self.lr_schedule_epochs is None or (number(self.lr_schedule_epochs)
                                                 and self.lr_schedule_epochs > 0),
             "lr_schedule_epochs", "None or a finite number > 0")
        need(self.lr_schedule_epochs is None or self.lr_schedule == "cosine",
             "lr_schedule_epochs", "used with lr_schedule 'cosine' only")
        self.lr_milestones = tuple(float(e) for e in ms)
