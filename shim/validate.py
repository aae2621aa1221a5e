"""`gradblock validate`: dense vs topk vs dlgs vs coarse, side by side.

Every run shares the dataset, model, seed, epochs, workers, batch size and optimiser; only
the compressor differs. The matrix: dense; topk and dlgs keeping per layer as many elements
as coarse k=1 sends; coarse k=1; coarse at a larger k. Prints a markdown table and writes
validate.json, validate.md and validate.png (accuracy / loss curves) to --out.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from .report import describe_run, format_table, plot_curves, write_json
from .train import TrainConfig, add_common_arguments, parse_k, run_training

QUICK = {"epochs": 2, "train_subset": 6000, "test_subset": 2000}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gradblock validate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_common_arguments(p)
    p.add_argument("--k-large", type=parse_k, default=4, help="the larger coarse k")
    p.add_argument("--compressors", nargs="+", default=None,
                   choices=["dense", "topk", "dlgs", "coarse1", "coarseK"],
                   help="run only these rows (None: all five)")
    p.add_argument("--quick", action="store_true",
                   help=f"short run: {QUICK['epochs']} epochs on a {QUICK['train_subset']}-sample "
                        f"training subset, {QUICK['test_subset']} test samples (explicit options win)")
    p.add_argument("--out", default="validate_out", help="output directory")
    p.set_defaults(epochs=None)
    return p


def matrix(base: TrainConfig, k_large, rows: list[str] | None) -> list[tuple[str, TrainConfig]]:
    runs = [("dense", replace(base, compressor="dense")),
            ("topk", replace(base, compressor="topk", k=1, density="match")),
            ("dlgs", replace(base, compressor="dlgs", k=1, density="match")),
            ("coarse1", replace(base, compressor="coarse", k=1)),
            ("coarseK", replace(base, compressor="coarse", k=k_large))]
    return [(name, cfg) for name, cfg in runs if rows is None or name in rows]


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

    from tqdm import tqdm

    from .data import DatasetError, load_dataset
    try:
        dataset = load_dataset(base.data, base.data_dir)
    except DatasetError as e:
        print(f"gradblock validate: {e}", file=sys.stderr)
        return 1
    n_train = min(len(dataset.y_train), base.train_subset or len(dataset.y_train))
    steps = (n_train // base.workers) // base.batch_size * base.epochs
    runs = matrix(base, args.k_large, args.compressors)
    results = []
    bar = tqdm(total=steps * len(runs), unit="step", file=sys.stderr, disable=not base.progress)
    try:
        for name, cfg in runs:
            bar.set_description(name)
            cfg.progress = False
            results.append(run_training(cfg, progress=bar, dataset=dataset))
    except ValueError as e:          # a model that does not fit the data, a diverged run (NaN)
        print(f"gradblock validate: {name}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        bar.close()

    out = Path(args.out)
    table = format_table(results)
    header = describe_run(results)
    print(f"\n{header}\n\n{table}\n")
    write_json(out / "validate.json", {"description": header, "runs": results})
    (out / "validate.md").write_text(f"{header}\n\n{table}\n")
    plot_curves(results, out / "validate.png", title=header)
    print(f"wrote {out / 'validate.json'}, {out / 'validate.md'}, {out / 'validate.png'}")
    return 0
