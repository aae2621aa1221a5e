"""The settings of one training run (`TrainConfig`): each field's name and default here, what it
may hold in shim/params.py (the one declaration `check()`, the argparse options and the
compressors' constructors read).

`TrainConfig.check()` refuses out-of-range values with a `ConfigError` before anything is
loaded, so library callers get the same named error the CLI's argparse types give.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .. import params
from ..params import DATASETS, LR_SCHEDULES  # noqa: F401  (the names' one list)


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
    deterministic: bool = True          # CUDA: deterministic kernels, no TF32 (problem.deterministic_cuda)
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
    LR_SCHEDULES = LR_SCHEDULES

    def check(self) -> "TrainConfig":
        """Refuse values no run can use: every field and the rules between them as
        shim/params.py declares them (ConfigError naming the field, or the contract's named
        error for k, block_size, lmax_log2, range, norm); returns self."""
        params.check(self)
        self.lr_milestones = tuple(float(e) for e in self.lr_milestones)
        return self
