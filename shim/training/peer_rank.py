"""One rank of `shim.exchange.peers.run_peer_locally` (started as `python -m gradblock.shim.training.peer_rank
CONFIG.json RESULT.json` with torchrun's environment): trains the peer and, on rank 0, writes
the result. A module of its own: it imports the trainer, which imports shim/exchange/peers.py."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from gradblock.codec.fileio import write_text

from ..setup.config import TrainConfig
from .trainer import run_training


def _rank_main(config_path: str, result_path: str) -> int:
    """One rank of `run_peer_locally`."""
    cfg = TrainConfig(**json.loads(Path(config_path).read_text()))
    torch.set_num_threads(cfg.threads or 1)
    result = run_training(cfg)
    if int(os.environ["RANK"]) == 0:
        write_text(result_path, json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_rank_main(*sys.argv[1:3]))
