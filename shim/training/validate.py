"""`gradblock validate`: dense vs topk vs dlgs vs coarse, side by side, over seeds.

Every run shares the dataset, model, epochs, workers, batch size and optimiser; only the
compressor differs. The matrix: dense; topk and dlgs keeping per layer as many elements as
coarse k=1 sends; coarse k=1; coarse at a larger k. Each row runs once per `--seeds` seed
(seed = data order and initial weights). Prints a markdown table per run and one of the rows
(mean ± sample std over the seeds, and each seed's accuracy), and writes validate.json
(`{"rows": [{"name", "setting", "accs", "acc_mean", "acc_std", "compression", ...}], ...}`),
validate.md, validate.png (accuracy / loss curves) and validate_acc_compression.png (accuracy
against compression with error bars) to --out.

With `--local-momentum M` (momentum correction, docs/spec.md §7) the compressed rows carry a
local velocity and the optimiser runs without momentum (`--momentum 0`); the dense row then
uses global momentum M instead: for float32 sums, averaging every worker's u = m*u + g is the
global momentum update up to rounding, so this is the same algorithm and the ordinary baseline.
`--uncorrected` adds coarse rows without correction (global momentum M) for comparison.

A row that fails (a diverged run's NaN gradient, say) is reported by name and the others
still run; the table holds the rows that finished, validate.json lists the failures, and
the exit status is then 2. Bad arguments, data or an unwritable --out stop it before any row.

`--require ROW:max_drop=PTS,min_compression=X` (repeatable) gives the run a verdict: the row's
seed-mean accuracy may be at most PTS points below dense's seed mean, and its compression (all
dense bytes / all bytes sent over its seeds) at least X. A missed requirement prints the row
and exits 1 (0 when all hold; 2 stays for a failed row or bad input); validate.json records
`"requirements": [{"row", "max_drop", "min_compression", "drop", "compression", "met"}]`.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from gradblock.codec.errors import UsageParser
from gradblock.codec.fileio import check_output_dir, check_replaceable, write_own_text

from ..errors import ConfigError
from ..setup.config import TrainConfig
from .arguments import add_common_arguments, parse_k
from .report import (NO_ROWS, describe_run, format_row_table, format_table, 
                     plot_acc_compression, plot_curves, summarise_rows, write_json)
from .train import USER_ERRORS
from .trainer import run_training

QUICK = {"epochs": 2, "train_subset": 6000, "test_subset": 2000}
ROWS = ("dense", "topk", "dlgs", "coarse1", "coarseK")
OUTPUTS = ("validate.json", "validate.md", "validate.png", "validate_acc_compression.png")
PLAIN_ROWS = ("coarse1_plain", "coarseK_plain")     # with --local-momentum: no correction
# torch's own DDP peers (shim/exchange/peers.py), run in N local gloo processes; only when asked
PEER_ROWS = ("allreduce", "fp16", "powersgd1", "powersgd2", "powersgd4")


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="gradblock validate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_common_arguments(p)
    p.add_argument("--k-large", type=parse_k, default=4, help="the larger coarse k")
    p.add_argument("--peers", action="store_true",
                   help="also run torch's DDP peers as rows: allreduce (no hook), fp16 "
                        "(fp16_compress_hook), powersgd1/2/4 (powerSGD_hook rank 1, 2, 4, error "
                        "feedback); each in --workers local gloo processes, global momentum as dense")
    p.add_argument("--compressors", nargs="+", default=None,
                   choices=list(ROWS + PLAIN_ROWS + PEER_ROWS),
                   help="run only these rows (None: all five); coarse1_plain / coarseK_plain: "
                        "coarse without correction, global momentum = --local-momentum")
    p.add_argument("--quick", action="store_true",
                   help=f"short run: {QUICK['epochs']} epochs on a {QUICK['train_subset']}-sample "
                        f"training subset, {QUICK['test_subset']} test samples (explicit options win)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, metavar="S",
                   help="run every row once per seed (None: --seed only)")
    p.add_argument("--uncorrected", action="store_true",
                   help="with --local-momentum: also run coarse k=1 and the larger k without "
                        "correction (global momentum M) as rows coarse1_plain / coarseK_plain")
    p.add_argument("--require", action="append", default=[], metavar="ROW:KEY=V[,KEY=V]",
                   help="a verdict: ROW:max_drop=PTS (seed-mean accuracy at most PTS points "
                        "below dense's) and/or min_compression=X (at least X times fewer bytes); "
                        "repeatable; exit status 1 naming each row that misses")
    p.add_argument("--out", default="validate_out", help="output directory")
    p.set_defaults(epochs=None)
    return p


class RequirementError(ConfigError):
    """A --require that cannot be read: unknown row or key, a value that is not a finite
    number, no key at all."""


REQUIRE_KEYS = ("max_drop", "min_compression")


def parse_requirement(text: str, rows: list[str]) -> dict:
    """`ROW:max_drop=PTS,min_compression=X` -> {"row", "max_drop", "min_compression"} (a key
    not given is None); RequirementError naming what is wrong."""
    import math
    row, sep, spec = text.partition(":")
    row = row.strip()
    if not sep or not row or not spec.strip():
        raise RequirementError(f"--require {text!r}: expected ROW:max_drop=PTS,min_compression=X")
    if row not in rows:
        raise RequirementError(f"--require {text!r}: row {row!r} is not run here (rows: "
                               f"{', '.join(rows)})")
    req = {"row": row, "max_drop": None, "min_compression": None}
    for item in spec.split(","):
        key, eq, value = (part.strip() for part in item.partition("="))
        if key not in REQUIRE_KEYS or not eq:
            raise RequirementError(f"--require {text!r}: {item.strip()!r} is not KEY=VALUE with "
                                   f"KEY one of {', '.join(REQUIRE_KEYS)}")
        if req[key] is not None:
            raise RequirementError(f"--require {text!r}: {key} given twice")
        try:
            v = float(value)
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or (key == "min_compression" and v <= 0):
            raise RequirementError(f"--require {text!r}: {key} must be a finite number"
                                   + (" > 0" if key == "min_compression" else "")
                                   + f", got {value!r}")
        req[key] = v
    return req


def judge(requirements: list[dict], row_stats: list[dict]) -> list[dict]:
    """Each requirement with its row's drop (points of the seed mean below dense's seed mean;
    None without both), compression and verdict. A row that did not finish misses."""
    by_name = {r["name"]: r for r in row_stats}
    out = []
    for req in requirements:
        r = by_name.get(req["row"])
        delta = None if r is None else r.get("delta_vs_dense_pts")
        drop = None if delta is None else (0.0 if req["row"] == "dense" else -delta)
        comp = None if r is None else r.get("compression")
        met = r is not None
        if req["max_drop"] is not None:
            met = met and drop is not None and drop <= req["max_drop"]
        if req["min_compression"] is not None:
            met = met and comp is not None and comp >= req["min_compression"]
        out.append(req | {"drop": drop, "compression": comp, "met": bool(met)})
    return out


def describe_requirement(v: dict) -> str:
    """One line: what was asked, what was measured, the verdict."""
    asked = [f"drop <= {v['max_drop']:g} pts" if v["max_drop"] is not None else None,
             f"compression >= {v['min_compression']:g}x" if v["min_compression"] is not None
             else None]
    got = ("drop " + ("n/a" if v["drop"] is None else f"{v['drop']:+.2f} pts") + ", compression "
           + ("n/a" if v["compression"] is None else f"{v['compression']:.1f}x"))
    return (f"{v['row']}: required {' and '.join(a for a in asked if a)}; measured {got}: "
            + ("met" if v["met"] else "MISSED"))


def matrix(base: TrainConfig, k_large, rows: list[str] | None, uncorrected: bool = False,
           peers: bool = False) -> list[tuple[str, TrainConfig]]:
    """(row name, config) pairs. With local momentum the dense row runs global momentum M
    (the same algorithm for float sums) and, with `uncorrected`, coarse rows without it."""
    m = base.local_momentum
    dense = replace(base, compressor="dense")
    if m > 0:
        dense = replace(dense, momentum=m, local_momentum=0.0)
    runs = [("dense", dense),
            ("topk", replace(base, compressor="topk", k=1, density="match")),
            ("dlgs", replace(base, compressor="dlgs", k=1, density="match")),
            ("coarse1", replace(base, compressor="coarse", k=1)),
            ("coarseK", replace(base, compressor="coarse", k=k_large))]
    if m > 0:
        for name, k in (("coarse1", 1), ("coarseK", k_large)):
            runs.append((f"{name}_plain", replace(base, compressor="coarse", k=k, momentum=m,
                                                  local_momentum=0.0)))
    peer = replace(dense, warmup_epochs=0, sparsity_warmup_steps=0, merge_plan=None)
    runs += [("allreduce", replace(peer, compressor="allreduce")),
             ("fp16", replace(peer, compressor="fp16"))]
    runs += [(f"powersgd{r}", replace(peer, compressor="powersgd", powersgd_rank=r)) for r in (1, 2, 4)]

    def wanted(name: str) -> bool:
        if name in PEER_ROWS:
            return peers or (rows is not None and name in rows)
        if not name.endswith("_plain"):
            return rows is None or name in rows
        return (rows is not None and name in rows) or (
            uncorrected and (rows is None or name.removesuffix("_plain") in rows))
    # --exchange allreduce (global block selection) applies to the coarse rows only
    return [(name, cfg if cfg.compressor == "coarse" else replace(cfg, exchange="allgather"))
            for name, cfg in runs if wanted(name)]


def with_seeds(runs: list[tuple[str, TrainConfig]], seeds: list[int]
               ) -> list[tuple[str, TrainConfig]]:
    """Every row once per seed, row by row."""
    return [(name, replace(cfg, seed=s)) for name, cfg in runs for s in seeds]


def run_matrix(runs: list[tuple[str, TrainConfig]], dataset, bar=None
               ) -> tuple[list[dict], list[dict]]:
    """Run every row; a row's named error is recorded and the next row runs.
    Returns (results of the rows that finished, failures as {row, error, message})."""
    results, failures = [], []
    for name, cfg in runs:
        if bar is not None:
            bar.set_description(f"{name} seed {cfg.seed}")
        try:
            result = run_training(replace(cfg, progress=False), progress=bar, dataset=dataset)
            results.append(result | {"row": name})
        except USER_ERRORS as e:
            failures.append({"row": name, "seed": cfg.seed, "error": type(e).__name__,
                             "message": str(e)})
            print(f"gradblock validate: {name}: {type(e).__name__}: {e}", file=sys.stderr)
    return results, failures


def validate_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    explicit = {k for k in QUICK if getattr(args, k) is not None}
    if args.quick:
        for k, v in QUICK.items():
            if k not in explicit:
                setattr(args, k, v)
    if args.epochs is None:
        args.epochs = TrainConfig().epochs
    fields = TrainConfig.__dataclass_fields__
    base = TrainConfig(**{k: v for k, v in vars(args).items() if k in fields and k != "out"})
    base.workers = base.workers or 4
    base.time_phases = True                  # the table reports compute / compress / exchange

    from tqdm import tqdm

    from ..setup.data import load_dataset
    out = Path(args.out)
    seeds = list(dict.fromkeys(args.seeds)) if args.seeds else [base.seed]
    rows = matrix(base, args.k_large, args.compressors, args.uncorrected, args.peers)
    runs = with_seeds(rows, seeds)
    # a named error here becomes one line and exit 2 in gradblock.cli, like every command's
    requirements = [parse_requirement(t, [name for name, _ in rows]) for t in args.require]
    for _, cfg in runs:
        cfg.check()
    check_output_dir(out, "--out")
    for name in OUTPUTS:
        check_replaceable(out / name, "--out")
    dataset = load_dataset(base.data, base.data_dir)
    n_train = min(len(dataset.y_train), base.train_subset or len(dataset.y_train))
    steps = (n_train // base.workers) // base.batch_size * base.epochs
    bar = tqdm(total=steps * len(runs), unit="step", file=sys.stderr, disable=not base.progress)
    try:
        results, failures = run_matrix(runs, dataset, bar)
    finally:
        bar.close()

    header = describe_run(results, seeds) if results else NO_ROWS
    table = format_table(results) if results else ""
    row_stats = summarise_rows(rows, results)
    seed_table = format_row_table(row_stats) if row_stats else ""
    print(f"\n{header}\n\n{seed_table}\n\nper run:\n\n{table}\n")
    if failures:
        print("failed rows: " + "; ".join(f"{f['row']} ({f['error']})" for f in failures))
    verdicts = judge(requirements, row_stats)
    if verdicts:
        print("requirements:\n" + "\n".join(f"  {describe_requirement(v)}" for v in verdicts))
    write_json(out / "validate.json", {"description": header, "seeds": seeds, "rows": row_stats,
                                       "runs": results, "failures": failures,
                                       "requirements": verdicts})
    write_own_text(out / "validate.md", f"{header}\n\n{seed_table}\n\nper run:\n\n{table}\n"
                      + "".join(f"\nfailed: {f['row']}: {f['error']}: {f['message']}\n"
                                for f in failures)
                      + "".join(f"\nrequirement {describe_requirement(v)}\n" for v in verdicts))
    written = [out / "validate.json", out / "validate.md"]
    import importlib.util
    if results and importlib.util.find_spec("matplotlib") is None:
        # matplotlib is the torch extra's; a bare GPU image (scripts/gpu-check.sh) lacks it
        print("gradblock validate: no matplotlib: the plots are not drawn")
    elif results:
        written.append(plot_curves(results, out / "validate.png", title=header))
        written.append(plot_acc_compression(row_stats, out / "validate_acc_compression.png",
                                            title=header))
    print("wrote " + ", ".join(str(p) for p in written))
    missed = [v for v in verdicts if not v["met"]]
    if missed:
        print("gradblock validate: requirement missed: "
              + "; ".join(describe_requirement(v) for v in missed), file=sys.stderr)
    return 2 if failures else (1 if missed else 0)
