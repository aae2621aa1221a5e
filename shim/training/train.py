"""`gradblock train`: train one configuration with one gradient compressor.

The command line only: parse, run (shim/training/trainer.py), print one line. Every refusal the
library raises (shim/errors.py, a missing dataset, a diverged run's NaN gradient, a
malformed peer frame) is a GradblockError, which gradblock/cli.py turns into one line on
stderr and exit status 2, as for the other commands; argparse's own errors exit 2 too. The modules behind it:

* config.py    - TrainConfig, the settings and their ranges
* arguments.py - argparse types and options shared with `validate`
* problem.py   - device, data, model, data order, evaluation
* exchange.py  - simulated workers or DDP, one object per mode
* trainer.py   - the loop, checkpoints, results
"""
from __future__ import annotations

import os

from .arguments import build_parser, config_from_args, parse_k  # noqa: F401  (re-exported)
from ..setup.config import TrainConfig  # noqa: F401  (re-exported)
from ..setup.data import DatasetError
from ..errors import CheckpointError, ConfigError, TrainingError  # noqa: F401
from .trainer import Trainer, run_training  # noqa: F401  (re-exported)

# what a row of `gradblock validate` records and goes on after (run_matrix); every named error
# is a GradblockError, so a ValueError.
USER_ERRORS = (DatasetError, ValueError)
def train_main(argv: list[str]) -> int:
    args = build_parser(__doc__.split("\n\n")[0].split(": ", 1)[1]).parse_args(argv)
    cfg = config_from_args(args)
    result = run_training(cfg)     # a named error becomes one line, exit 2, in gradblock.cli
    if not cfg.ddp or int(os.environ.get("RANK", "0")) == 0:
        acc = result["final_test_acc"]
        ratio = result["compression_ratio"]
        print(f"{cfg.compressor}: {result['steps']} steps, test accuracy "
              f"{'n/a' if acc is None else f'{acc:.4f}'}, compression "
              f"{'n/a' if ratio is None else f'{ratio:.1f}x'}, "
              f"{result['bytes_sent'] / 1e6:.3f} MB sent"
              + (f"; wrote {cfg.out}/result.json" if cfg.out else ""))
    return 0
