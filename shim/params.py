"""Every training parameter, declared once (scikit-learn's parameter constraints, done small).

`PARAMS` maps each field of `TrainConfig` to what it may hold -- its type, its range or its
choices -- and `RULES` holds the rules between fields (allreduce needs the coarse compressor
and L1; elastic needs --ddp and a checkpoint; ...). Three readers, no copies:

* `TrainConfig.check()` (shim/setup/config.py) runs `check(cfg)`: every field, then every rule;
* the argparse options (shim/training/arguments.py) take `arg_type(name)` and the lists below,
  so a bad value on the command line is refused with the same words before a run is built;
* the compressors' constructors (shim/compress/compressors.py) run `check_values(...)` on what
  they are given, with the rules among those names, so a library caller gets the same refusal;
  everything below them (the step, the hooks, the fast path) then trusts its caller.

One error class for a bad setting: `ConfigError` naming the field. The five parameters the
numeric contract defines (k, block_size, lmax_log2, range, norm) are checked by the contract's
own functions (refmodel/validation.py) and raise its named errors (KError, BlockSizeError,
LmaxError, RangeError, NormError), the ones every entry point of every backend raises.

The names lists live here once: `COMPRESSORS` (gradblock's methods), `PEERS` (torch's own DDP
hooks), `EXCHANGES`, `DATASETS`, `LR_SCHEDULES`; the norm names are the contract's
(`refmodel.validation.NORMS`)."""
from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gradblock.refmodel.momentum import MomentumConfig, check_momentum_pair
from gradblock.refmodel.validation import (NORMS, check_block_size, check_k, check_lmax_log2,
                                             check_norm, check_range, parse_k)

from .errors import ConfigError

COMPRESSORS = ("dense", "topk", "dlgs", "coarse")
PEERS = ("allreduce", "fp16", "powersgd")          # torch's DDP hooks in the harness (exchange/peers.py)
EXCHANGES = ("allgather", "allreduce")              # allreduce: global block selection (spec §8)
DATASETS = ("fashion-mnist", "digits", "mnist", "cifar10")
LR_SCHEDULES = ("constant", "step", "cosine")
__all__ = ["COMPRESSORS", "PEERS", "EXCHANGES", "DATASETS", "LR_SCHEDULES", "NORMS", "PARAMS",
           "RULES", "check", "check_values", "arg_type"]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class Param:
    """What one field may hold: `ok(value)` and the words for it (`what`), or a contract check
    that raises its own named error; `parse` turns command-line text into a value."""
    what: str
    ok: Callable[[Any], bool] | None = None
    contract: Callable[[Any], Any] | None = None
    parse: Callable[[str], Any] = str
    item: "Param | None" = None                         # a list's element, for argparse nargs

    def check(self, name: str, value) -> None:
        if self.contract is not None:
            self.contract(value)                        # the contract's named error
        elif not self.ok(value):
            raise ConfigError(f"{name} must be {self.what}, got {value!r}")


def _int_text(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _float_text(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def integer(lowest: int | None = None, optional: bool = False) -> Param:
    what = "an integer" + (f" >= {lowest}" if lowest is not None else "")
    return Param(("None or " if optional else "") + what,
                 lambda v: (optional and v is None) or (_is_int(v) and (lowest is None or v >= lowest)),
                 parse=_int_text)


def number(low: float, high: float | None = None, *, low_open: bool, high_open: bool = True,
           optional: bool = False, what: str | None = None) -> Param:
    """A finite number in the interval; bools refused."""
    def ok(v) -> bool:
        if optional and v is None:
            return True
        return _is_number(v) and (v > low if low_open else v >= low) and (
            high is None or (v < high if high_open else v <= high))
    if what is None:
        if high is None:
            what = f"a finite number {'>' if low_open else '>='} {low:g}"
        else:
            what = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return Param(("None or " if optional else "") + what, ok, parse=_float_text)


def one_of(values: tuple) -> Param:
    return Param("one of " + ", ".join(values), lambda v: v in values)


def flag() -> Param:
    return Param("a bool", lambda v: isinstance(v, bool))


def text(optional: bool = True) -> Param:
    """A name or a path (str or os.PathLike)."""
    return Param("None or a string" if optional else "a string",
                 lambda v: (optional and v is None) or isinstance(v, (str, os.PathLike)))


def _density(v) -> bool:
    return v == "match" or (_is_number(v) and 0 < v <= 1)


def _density_text(t: str):
    return t if t == "match" else _float_text(t)


def _milestones(v) -> bool:
    return isinstance(v, (tuple, list)) and all(_is_number(e) and e > 0 for e in v) \
        and list(v) == sorted(v)


PARAMS: dict[str, Param] = {
    # what is trained
    "data": one_of(DATASETS),
    "data_dir": text(),
    "model": text(),                    # the names: shim/setup/models.py (ALIASES), checked there
    "train_subset": integer(1, optional=True),
    "test_subset": integer(1, optional=True),
    # the method
    "compressor": one_of(COMPRESSORS + PEERS),
    "k": Param("an integer >= 1 or a fraction in (0, 1]", contract=check_k, parse=parse_k),
    "density": Param("in (0, 1] or 'match'", _density, parse=_density_text),
    "dlgs_interval": integer(1),
    "dense_below": integer(0),
    "warmup_epochs": integer(0),
    "range": Param("a finite float32 > 0", contract=check_range, parse=_float_text),
    "block_size": Param("None or an integer >= 1", contract=check_block_size, parse=_int_text),
    "lmax_log2": Param("an integer in the frame's LMAX_LOG2 range", contract=check_lmax_log2,
                       parse=_int_text),
    "norm": Param("one of " + ", ".join(NORMS), contract=check_norm),
    "exchange": one_of(EXCHANGES),
    "merge_plan": Param("None, none, greedy, exact or a plan file",
                        lambda v: v is None or (isinstance(v, str) and v != "")),
    "powersgd_rank": integer(1),
    "local_momentum": number(0.0, 1.0, low_open=False),
    "momentum_mask": flag(),
    "sparsity_warmup_steps": integer(0),
    "sparsity_warmup_fraction": number(0.0, 1.0, low_open=True, high_open=False),
    # the optimiser and its schedule
    "epochs": integer(1),
    "batch_size": integer(1),
    "lr": number(0.0, low_open=True),
    "momentum": number(0.0, 1.0, low_open=False),
    "lr_warmup_epochs": number(0.0, low_open=False),
    "weight_decay": number(0.0, low_open=False),
    "clip_norm": number(0.0, low_open=False),
    "lr_schedule": one_of(LR_SCHEDULES),
    "lr_milestones": Param("increasing finite epochs > 0", _milestones,
                           item=number(0.0, low_open=True)),
    "lr_gamma": number(0.0, low_open=True),
    "lr_schedule_epochs": number(0.0, low_open=True, optional=True),
    "seed": integer(),
    # how it runs
    "workers": integer(1, optional=True),
    "ddp": flag(),
    "device": text(optional=False),     # auto | cpu | cuda | cuda:N: resolved (and refused) by torch
    "threads": integer(0),
    "max_steps": integer(1, optional=True),
    "eval_every": integer(0),
    "time_phases": flag(),
    "deterministic": flag(),
    "progress": flag(),
    # files and faults
    "out": text(),
    "checkpoint": text(),
    "checkpoint_every": integer(0),
    "resume": text(),
    "elastic": flag(),
    "timeout": number(0.0, low_open=True, what="a finite number of seconds > 0"),
    "check_every": integer(0),
}


# ---------------------------------------------------------------------- rules between fields
# Each rule reads the fields it names and raises ConfigError; check_values runs those whose
# fields were all given (a compressor's constructor knows its own few).

def _momentum_pair(c: Mapping) -> None:
    try:
        MomentumConfig.from_float(c["local_momentum"])
        check_momentum_pair(c["local_momentum"], c["momentum"])
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _need(ok: bool, name: str, value, what: str) -> None:
    if not ok:
        raise ConfigError(f"{name} must be {what}, got {value!r}")


def _allreduce(c: Mapping) -> None:
    """Global block selection (spec §8) sums L1 block norms of the coarse compressor's layers."""
    if c["exchange"] != "allreduce":
        return
    _need(c["compressor"] == "coarse", "exchange", c["exchange"], "allgather unless --compressor coarse")
    _need(c["norm"] == "l1", "exchange", c["exchange"], "allgather with --norm l2 (it sums L1 norms)")


def _allreduce_merge(c: Mapping) -> None:
    if c["exchange"] == "allreduce":
        _need(c["merge_plan"] in (None, "none"), "exchange", c["exchange"],
              "allgather with --merge-plan")


def _elastic(c: Mapping) -> None:
    if c["elastic"]:
        _need(c["ddp"], "elastic", True, "used with --ddp (under torchrun)")
        _need(bool(c["checkpoint"]), "elastic", True, "used with --checkpoint")
        _need(c["checkpoint_every"] >= 1, "elastic", True, "used with --checkpoint-every >= 1")
        _need(c["resume"] is None, "elastic", True, "used without --resume (it finds its checkpoint)")


def _check_every(c: Mapping) -> None:
    _need(c["check_every"] == 0 or c["ddp"], "check_every", c["check_every"], "0 outside --ddp")


def _schedule(c: Mapping) -> None:
    _need(bool(c["lr_milestones"]) == (c["lr_schedule"] == "step"), "lr_milestones",
          c["lr_milestones"], "given (and only given) with lr_schedule 'step'")
    _need(c["lr_schedule_epochs"] is None or c["lr_schedule"] == "cosine", "lr_schedule_epochs",
          c["lr_schedule_epochs"], "used with lr_schedule 'cosine' only")


def _peer(c: Mapping) -> None:
    """What a torch peer (exchange/peers.py) cannot honour."""
    if c["compressor"] not in PEERS:
        return
    refused = [(c["local_momentum"] > 0, "--local-momentum"), (c["warmup_epochs"] > 0, "--warmup-epochs"),
               (c["sparsity_warmup_steps"] > 0, "--sparsity-warmup-steps"),
               (c["merge_plan"] not in (None, "none"), "--merge-plan"),
               (bool(c["checkpoint"]), "--checkpoint"), (bool(c["resume"]), "--resume")]
    for bad, option in refused:
        if bad:
            raise ConfigError(f"{option} is not supported with the torch peer "
                              f"--compressor {c['compressor']}")


# (the fields a rule reads, the rule), in the order check() runs them
RULES: tuple[tuple[tuple[str, ...], Callable[[Mapping], None]], ...] = (
    (("compressor", "local_momentum", "warmup_epochs", "sparsity_warmup_steps", "merge_plan",
      "checkpoint", "resume"), _peer),
    (("local_momentum", "momentum"), _momentum_pair),
    (("elastic", "ddp", "checkpoint", "checkpoint_every", "resume"), _elastic),
    (("check_every", "ddp"), _check_every),
    (("lr_milestones", "lr_schedule", "lr_schedule_epochs"), _schedule),
    (("exchange", "compressor", "norm"), _allreduce),
    (("exchange", "merge_plan"), _allreduce_merge),
)

# the order TrainConfig.check() reports the first bad field in (the peers' refusals come right
# after the compressor's name, as they always did)
_ORDER = ("data", "compressor", "k", "block_size", "lmax_log2", "range", "norm", "powersgd_rank")


def check_values(values: Mapping[str, Any]) -> None:
    """Check each named value against PARAMS, then every rule whose fields are all named."""
    names = [n for n in _ORDER if n in values] + [n for n in values if n not in _ORDER]
    peer_fields, peer_rule = RULES[0]
    for name in names:
        if name not in PARAMS:
            raise KeyError(f"{name!r} is not a training parameter (shim/params.py PARAMS)")
        PARAMS[name].check(name, values[name])
        if name == "compressor" and all(f in values for f in peer_fields):
            peer_rule(values)                     # the peers' refusals, before the numbers
    for fields, rule in RULES[1:]:
        if all(f in values for f in fields):
            rule(values)


def check(cfg) -> None:
    """Every field of a TrainConfig, then the rules between them; ConfigError (or the
    contract's named error) for the first that fails."""
    check_values({name: getattr(cfg, name) for name in PARAMS})


def arg_type(name: str) -> Callable[[str], Any]:
    """The argparse `type=` of a field (of one element, for a list): the text parsed, then
    checked as `check` would; a refusal is argparse's ArgumentTypeError with the same words."""
    param = PARAMS[name].item or PARAMS[name]

    def parse(t: str):
        value = param.parse(t)
        try:
            param.check(name, value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return value
    parse.__name__ = name                          # argparse names the type in its message
    return parse

