"""Training checkpoints that include the compressor state.

Everything that decides the next step's bits is saved: model weights and buffers, the
optimizer's global momentum, every worker's compressor state (int32 / float32 residuals, dlgs
thresholds, per-layer step counters), the position in the data order (epoch, step in epoch),
torch's RNG state and the curves recorded so far. In DDP each rank writes its own file
(`path.rank{r}.pt`, its own residuals); the single-process simulation writes one file holding
all N workers. A resumed run therefore continues bit for bit like the uninterrupted one.

Files are written atomically (temporary file + rename) and read with `weights_only=True`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from .compressors import Compressor, WorkerState

FORMAT = "gradblock-train-checkpoint-v1"


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, or belongs to a different run configuration."""


def rank_path(path: str | Path, rank: int | None) -> Path:
    """The file one rank uses: `ckpt.pt` -> `ckpt.rank1.pt` in DDP, unchanged otherwise."""
    path = Path(path)
    if rank is None:
        return path
    suffix = path.suffix or ".pt"
    return path.with_name(f"{path.stem}.rank{rank}{suffix}")


def compressor_state(compressor: Compressor, workers: dict[int, WorkerState]) -> dict:
    return {"config": compressor.config(),
            "workers": {int(w): ws.state_dict() for w, ws in workers.items()}}


def restore_compressor_state(compressor: Compressor, saved: dict, worker_ids: list[int],
                             device: torch.device | str) -> dict[int, WorkerState]:
    """Worker states from a checkpoint; refuses one written by a differently configured
    compressor or missing a worker."""
    if saved.get("config") != compressor.config():
        raise CheckpointError(f"checkpoint compressor {saved.get('config')} differs from this run's "
                              f"{compressor.config()}")
    workers = saved.get("workers", {})
    missing = [w for w in worker_ids if w not in workers]
    if missing:
        raise CheckpointError(f"checkpoint has no compressor state for worker(s) {missing}")
    return {w: WorkerState.from_state_dict(workers[w], device) for w in worker_ids}


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"format": FORMAT, **payload}, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | Path, run_config: dict | None = None) -> dict[str, Any]:
    """Read a checkpoint; with `run_config`, refuse one from a run with other settings."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several unrelated types for a bad file
        raise CheckpointError(f"checkpoint {path} is unreadable: {type(e).__name__}: {e}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a {FORMAT} file")
    if run_config is not None and ckpt.get("run_config") != run_config:
        saved = ckpt.get("run_config") or {}
        diff = sorted(k for k in set(saved) | set(run_config) if saved.get(k) != run_config.get(k))
        raise CheckpointError(f"checkpoint {path} was written by a run with different settings: "
                              + ", ".join(f"{k}={saved.get(k)!r} (now {run_config.get(k)!r})"
                                          for k in diff))
    return ckpt
