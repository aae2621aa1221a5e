"""Command-line arguments of `gradblock train` and `gradblock validate`: the options both
commands share, and the Namespace -> TrainConfig step.

Every option's type and choices come from the one declaration of the training parameters
(shim/params.py: `arg_type` and its names lists), so the command line refuses what `TrainConfig.check()`
refuses, in the same words; `--k` uses the project's one k parser (refmodel.validation).
"""
from __future__ import annotations

import argparse

from gradblock.codec.errors import UsageParser
from gradblock.refmodel.validation import parse_k   # the one k parser shared by every command

from ..params import COMPRESSORS, DATASETS, EXCHANGES, NORMS, PEERS, arg_type
from ..setup import recipe
from ..setup.config import TrainConfig
from ..setup.models import ALIASES as MODEL_ALIASES


__all__ = ["parse_k", "add_common_arguments", "build_parser", "config_from_args"]


def _with_recipe(p: argparse.ArgumentParser) -> None:
    """After parsing, the options left unset take the best measured recipe's values
    (shim/setup/recipe.py): momentum correction 0.9, range 100, the L2 block norm."""
    parse = p.parse_known_args

    def parse_known_args(args=None, namespace=None):
        ns, rest = parse(args, namespace)
        ns.local_momentum, ns.momentum, ns.range, ns.norm = recipe.resolve(
            ns.local_momentum, ns.momentum, ns.range, ns.norm, ns.exchange,
            peer=getattr(ns, "compressor", None) in PEERS)
        return ns, rest
    p.parse_known_args = parse_known_args


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by `train` and `validate`."""
    d = TrainConfig()
    _with_recipe(p)
    p.add_argument("--data", default=d.data, choices=list(DATASETS),
                   help="dataset; Fashion-MNIST is read from /usr/share/datasets/fashion-mnist "
                        "unless --data-dir is given")
    p.add_argument("--data-dir", default=None, help="directory with the dataset files")
    p.add_argument("--model", default=None, choices=sorted(MODEL_ALIASES),
                   help="None: the dataset's own (lenet5 for Fashion-MNIST / MNIST, digits-cnn, "
                        "resnet20 for CIFAR-10)")
    p.add_argument("--workers", type=arg_type("workers"), default=None,
                   help="simulated workers (None: 4; under --ddp the torchrun world size)")
    p.add_argument("--epochs", type=arg_type("epochs"), default=d.epochs)
    p.add_argument("--batch-size", type=arg_type("batch_size"), default=d.batch_size, help="per worker")
    p.add_argument("--lr", type=arg_type("lr"), default=d.lr)
    p.add_argument("--momentum", type=arg_type("momentum"), default=None,
                   help="global momentum, [0, 1) (None: 0 with momentum correction, else 0.9)")
    p.add_argument("--local-momentum", type=arg_type("local_momentum"), default=None, metavar="M",
                   help="momentum correction: each worker keeps a velocity u = m*u + g per layer "
                        "and compresses u (docs/spec.md §7); needs --momentum 0 (None: the "
                        "recipe's 0.9, or 0 when --momentum > 0 or a torch peer method is run)")
    p.add_argument("--no-momentum-mask", dest="momentum_mask", action="store_false",
                   help="with --local-momentum: keep the velocity on the blocks / elements that "
                        "were sent (no factor masking)")
    p.add_argument("--sparsity-warmup-steps", type=arg_type("sparsity_warmup_steps"), default=d.sparsity_warmup_steps,
                   metavar="N", help="compressed layers send a decaying larger share during their "
                                     "first N compressed steps (DGC's exponential warm-up)")
    p.add_argument("--sparsity-warmup-fraction", type=arg_type("sparsity_warmup_fraction"),
                   default=d.sparsity_warmup_fraction, metavar="F",
                   help="the share of blocks / elements sent at the warm-up's first step")
    p.add_argument("--seed", type=arg_type("seed"), default=d.seed)
    p.add_argument("--dense-below", type=arg_type("dense_below"), default=0, metavar="N",
                   help="send layers with fewer than N elements dense (0: none)")
    p.add_argument("--warmup-epochs", type=arg_type("warmup_epochs"), default=0, metavar="E",
                   help="train the first E epochs dense, then switch to the compressor "
                        "(its residuals start at zero)")
    p.add_argument("--lr-warmup-epochs", type=arg_type("lr_warmup_epochs"), default=0.0, metavar="E",
                   help="ramp the learning rate linearly from lr/S to lr over the first E epochs "
                        "(S = their steps), then hold it")
    p.add_argument("--weight-decay", type=arg_type("weight_decay"), default=d.weight_decay, metavar="WD",
                   help="each worker adds WD * w to its gradient before compression "
                        "(as DGC does: the decay travels with the gradient)")
    p.add_argument("--clip-norm", type=arg_type("clip_norm"), default=d.clip_norm, metavar="C",
                   help="DGC's local gradient clipping: each worker scales each layer's gradient "
                        "(after weight decay, before momentum correction) to an L2 norm of at "
                        "most C / sqrt(N); 0: off")
    p.add_argument("--lr-schedule", default=d.lr_schedule, choices=TrainConfig.LR_SCHEDULES,
                   help="step: lr times --lr-gamma at each of --lr-milestones; cosine: "
                        "lr * (1 + cos(pi * s / T)) / 2 over T steps (--lr-schedule-epochs)")
    p.add_argument("--lr-milestones", type=arg_type("lr_milestones"), nargs="+", default=(), metavar="E",
                   help="with --lr-schedule step: the epochs (fractions allowed) where lr drops")
    p.add_argument("--lr-gamma", type=arg_type("lr_gamma"), default=d.lr_gamma,
                   help="with --lr-schedule step: the factor at each milestone")
    p.add_argument("--lr-schedule-epochs", type=arg_type("lr_schedule_epochs"), default=None, metavar="E",
                   help="with --lr-schedule cosine: the horizon in epochs (None: --epochs of the "
                        "run that starts it; a checkpoint keeps it, so a resume with more epochs "
                        "stays on the same curve)")
    p.add_argument("--dlgs-interval", type=arg_type("dlgs_interval"), default=d.dlgs_interval,
                   help="dlgs: steps between threshold recomputations")
    p.add_argument("--range", type=arg_type("range"), default=None,
                   help="quantiser range R (None: 100 with momentum correction, else 10)")
    p.add_argument("--block-size", type=arg_type("block_size"), default=None,
                   help="override the block size B (None: one filter / FC row)")
    p.add_argument("--norm", choices=NORMS, default=None,
                   help="coarse: block norm that ranks blocks, l1 = sum |a| or l2 = sum of "
                        "(|a| >> s)^2 (docs/spec.md §2.3) (None: l2, l1 under --exchange "
                        "allreduce)")
    p.add_argument("--exchange", choices=EXCHANGES, default=d.exchange,
                   help="coarse: allgather = every worker's ZRLE frames to every worker; allreduce "
                        "= global block selection, the blocks chosen by the summed norms and "
                        "summed by two int64 allreduces, traffic flat in N (docs/spec.md §8)")
    p.add_argument("--lmax-log2", type=arg_type("lmax_log2"), default=d.lmax_log2,
                   help="ZRLE LMAX_LOG2 (1..24)")
    p.add_argument("--train-subset", type=arg_type("train_subset"), default=None, metavar="N",
                   help="train on a seeded random subset of N training samples")
    p.add_argument("--test-subset", type=arg_type("test_subset"), default=None, metavar="N",
                   help="evaluate on a seeded random subset of N test samples")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--threads", type=arg_type("threads"), default=0,
                   help="torch intra-op threads (0: torch's default); results are bit-reproducible "
                        "for a fixed thread count")
    p.add_argument("--eval-every", type=arg_type("eval_every"), default=0, metavar="STEPS",
                   help="also evaluate every STEPS steps (0: only at epoch ends)")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no tqdm progress bar")
    p.add_argument("--no-deterministic", dest="deterministic", action="store_false",
                   help="on CUDA, torch's fast defaults (TF32, autotuned cuDNN, non-deterministic "
                        "kernels) instead of deterministic kernels: faster, but runs no longer "
                        "repeat bit for bit and DDP no longer equals the simulation; a model "
                        "whose backward has no deterministic kernel is refused by name unless "
                        "this is given")


def build_parser(description: str = "train one configuration with one gradient compressor"
                 ) -> argparse.ArgumentParser:
    """The parser of `gradblock train`."""
    p = UsageParser(prog="gradblock train", description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_common_arguments(p)
    p.add_argument("--compressor", default="coarse", choices=COMPRESSORS + PEERS,
                   help="gradblock's methods, or a torch peer: allreduce (DDP, no hook), fp16 "
                        "(fp16_compress_hook), powersgd (powerSGD_hook; shim/exchange/peers.py)")
    p.add_argument("--rank", "--powersgd-rank", dest="powersgd_rank", type=arg_type("powersgd_rank"), default=1,
                   metavar="R", help="--compressor powersgd: matrix approximation rank")
    p.add_argument("--k", type=arg_type("k"), default=1,
                   help="coarse: blocks per layer (integer) or fraction of blocks; topk/dlgs with "
                        "--density match: match coarse at this k")
    p.add_argument("--density", type=arg_type("density"), default="match",
                   help="topk / dlgs: fraction of each layer kept, or 'match' (as many elements as "
                        "coarse at --k)")
    p.add_argument("--ddp", action="store_true",
                   help="one worker per process under torchrun (gloo on CPU, NCCL on CUDA)")
    p.add_argument("--max-steps", type=arg_type("max_steps"), default=None,
                   help="stop after this many steps in total (checkpointing if asked)")
    p.add_argument("--time-phases", action="store_true",
                   help="time compute / compress / exchange per step (synchronises CUDA inside "
                        "the step; off: only the whole step is timed)")
    p.add_argument("--out", default=None, help="directory for result.json and the final model")
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint file, written every epoch, every --checkpoint-every steps and "
                        "at --max-steps (per rank under --ddp: NAME.rankR.pt)")
    p.add_argument("--checkpoint-every", type=arg_type("checkpoint_every"), default=0, metavar="STEPS")
    p.add_argument("--resume", default=None, help="continue from this checkpoint")
    p.add_argument("--elastic", action="store_true",
                   help="--ddp under torchrun --max-restarts N: write step-tagged checkpoints every "
                        "--checkpoint-every steps (two kept per rank) and, when the group starts, "
                        "resume from the newest one every rank holds (docs/reliability.md)")
    p.add_argument("--timeout", type=arg_type("timeout"), default=300.0, metavar="SECONDS",
                   help="--ddp: bound on every collective; a rank that does not answer within it "
                        "ends the step on every rank with an error naming it")
    p.add_argument("--check-every", type=arg_type("check_every"), default=0, metavar="STEPS",
                   help="--ddp: compare a CRC-32 of every rank's parameters and optimizer state "
                        "every STEPS steps (and at the end); replicas that differ stop the job")
    p.add_argument("--merge-plan", default=None, metavar="FILE|greedy|exact|none",
                   help="DLGS layer merging: compress each group of layers in one call and "
                        "exchange it in one collective; greedy / exact plan from inputs measured "
                        "for this run, FILE from `gradblock merge-plan --json` (its exact groups) "
                        "or a JSON list of lists of parameter names in backward order. Changes "
                        "the call structure only, never the bits (docs/training.md)")
    return p


def config_from_args(args: argparse.Namespace, **override) -> TrainConfig:
    fields = TrainConfig.__dataclass_fields__
    values = {k: v for k, v in vars(args).items() if k in fields}
    if "lr_milestones" in values:
        values["lr_milestones"] = tuple(values["lr_milestones"])
    return TrainConfig(**(values | override))
