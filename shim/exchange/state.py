"""Training checkpoints that include the compressor state.

Everything that decides the next step's bits is saved: model weights and buffers, the
optimizer's global momentum, every worker's compressor state (int32 / float32 residuals, dlgs
thresholds, per-layer step counters), the position in the data order (epoch, step in epoch),
torch's RNG state and the curves recorded so far. In DDP each rank writes its own file
(`path.rank{r}.pt`, its own residuals); the single-process simulation writes one file holding
all N workers. A resumed run therefore continues bit for bit like the uninterrupted one.

Files are written atomically (temporary file in the same directory + os.replace) and read
with `weights_only=True`. A file is then checked field by field against the run that
resumes it (`check_checkpoint`): a malformed one raises `CheckpointError` naming the field,
before any of it is loaded, instead of a traceback or a silent resume without its residuals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

import torch

from gradblock.codec.fileio import write_own

from ..compress.compressors import Compressor, LayerInfo, StepStats, WorkerState
from ..errors import CheckpointError
from .workers import StepTimes

FORMAT = "gradblock-train-checkpoint-v1"
CURVE_KEYS = ("step", "epoch", "train_loss", "test_loss", "test_acc")
FIELDS = ("format", "run_config", "epoch", "step_in_epoch", "global_step", "model", "optimizer",
          "compressor", "rng", "history")

__all__ = ["FORMAT", "CheckpointError", "CheckpointExpectation", "rank_path", "compressor_state",
           "restore_compressor_state", "check_compressor_state", "rng_state", "set_rng_state",
           "save_checkpoint", "load_checkpoint", "check_checkpoint"]


def rank_path(path: str | Path, rank: int | None) -> Path:
    """The file one rank uses: `ckpt.pt` -> `ckpt.rank1.pt` in DDP, unchanged otherwise."""
    path = Path(path)
    if rank is None:
        return path
    suffix = path.suffix or ".pt"
    return path.with_name(f"{path.stem}.rank{rank}{suffix}")


# ------------------------------------------------------------------------------ field checks

def _fail(field: str, problem: str) -> CheckpointError:
    return CheckpointError(f"field {field!r}: {problem}")


def _plain(value: Any) -> bool:
    """None, bool, int, float or str: what settings are made of (a tensor in their place would
    make `==` elementwise)."""
    return value is None or isinstance(value, (bool, int, float, str))


def _same_plain(saved: Any, expected: dict) -> bool:
    """`saved == expected` for a settings dict, False (not an exception) for anything that is
    not a dict of plain values."""
    return (isinstance(saved, dict) and all(isinstance(k, str) and _plain(v) for k, v in saved.items())
            and saved == expected)


def _mapping(value: Any, field: str) -> dict:
    if not isinstance(value, dict):
        raise _fail(field, f"expected a mapping, got {type(value).__name__}")
    return value


def _integer(value: Any, field: str, lowest: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field, f"expected an integer, got {type(value).__name__}")
    if value < lowest:
        raise _fail(field, f"must be >= {lowest}, got {value}")
    return value


def _tensor(value: Any, field: str, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise _fail(field, f"expected a tensor, got {type(value).__name__}")
    if value.dtype != dtype:
        raise _fail(field, f"dtype {value.dtype}, expected {dtype}")
    if tuple(value.shape) != tuple(shape):
        raise _fail(field, f"shape {tuple(value.shape)}, expected {tuple(shape)}")
    return value


def _keys(d: dict, field: str, expected: Sequence, exact: bool = True) -> None:
    missing = [k for k in expected if k not in d]
    if missing:
        raise _fail(field, f"missing key(s) {missing}")
    extra = [k for k in d if k not in expected]
    if exact and extra:
        raise _fail(field, f"unexpected key(s) {extra}")


# ------------------------------------------------------------------------------ compressor state

def compressor_state(compressor: Compressor, workers: dict[int, WorkerState]) -> dict:
    return {"config": compressor.config(),
            "workers": {int(w): ws.state_dict() for w, ws in workers.items()}}


def check_compressor_state(compressor: Compressor, layers: Sequence[LayerInfo], saved: Any,
                           worker_ids: Sequence[int], compressed_steps: int | None = None,
                           field: str = "compressor") -> None:
    """Refuse a saved compressor state that this compressor cannot continue from: another
    configuration, missing or extra workers, a worker state whose per-layer tensors are
    missing or of the wrong dtype / shape (`Compressor.state_spec`), or, with
    `compressed_steps`, step counters that do not match the steps taken (a worker state
    without its layers would silently drop error feedback)."""
    saved = _mapping(saved, field)
    _keys(saved, field, ("config", "workers"))
    if not _same_plain(saved["config"], compressor.config()):
        shown = saved["config"] if _same_plain(saved["config"], saved["config"]) \
            else f"<malformed {type(saved['config']).__name__}>"
        raise CheckpointError(f"checkpoint compressor {shown} differs from this run's "
                              f"{compressor.config()}")
    workers = _mapping(saved["workers"], f"{field}.workers")
    missing = [w for w in worker_ids if w not in workers]
    if missing:
        raise CheckpointError(f"checkpoint has no compressor state for worker(s) {missing}")
    extra = sorted(w for w in workers if w not in worker_ids)
    if extra:
        raise _fail(f"{field}.workers", f"holds worker(s) {extra} that this run does not have "
                                        f"(it has {sorted(worker_ids)})")
    compressed = {lay.index: lay for lay in layers if not compressor.sends_dense(lay)}
    # layers with per-worker tensors: the compressed ones, and with momentum correction also
    # the dense ones (their velocity)
    stateful = {lay.index: lay for lay in layers if compressor.state_spec(lay)}
    for w in worker_ids:
        at = f"{field}.workers.{w}"
        ws = _mapping(workers[w], at)
        _keys(ws, at, ("layers", "steps"))
        per_layer = _mapping(ws["layers"], f"{at}.layers")
        steps = _mapping(ws["steps"], f"{at}.steps")
        for i, tensors in per_layer.items():
            lay = stateful.get(i)
            if lay is None:
                raise _fail(f"{at}.layers", f"state for layer {i!r}, which this run does not "
                                            f"compress (compressed: {sorted(compressed)})")
            spec = compressor.state_spec(lay)
            tensors = _mapping(tensors, f"{at}.layers.{i}")
            _keys(tensors, f"{at}.layers.{i}", tuple(spec))
            for name, (dtype, shape) in spec.items():
                _tensor(tensors[name], f"{at}.layers.{i}.{name}", dtype, shape)
        for i, count in steps.items():
            if i not in per_layer:
                raise _fail(f"{at}.layers", f"no state for layer {i!r} although "
                                            f"{at}.steps counts it (error feedback would be lost)")
            _integer(count, f"{at}.steps.{i}", 1)
        if compressed_steps is not None:
            for i, lay in compressed.items():
                done = steps.get(i, 0)
                if done != compressed_steps:
                    raise _fail(f"{at}.steps.{i}", f"layer {lay.name!r} was compressed {done} "
                                                   f"times, the run took {compressed_steps} "
                                                   f"compressed steps")


def restore_compressor_state(compressor: Compressor, saved: dict, worker_ids: list[int],
                             device: torch.device | str, layers: Sequence[LayerInfo] | None = None,
                             compressed_steps: int | None = None) -> dict[int, WorkerState]:
    """Worker states from a checkpoint, checked first (`check_compressor_state`; the layers
    default to the compressor's own)."""
    check_compressor_state(compressor, compressor.layers if layers is None else layers, saved,
                           worker_ids, compressed_steps)
    return {w: WorkerState.from_state_dict(saved["workers"][w], device) for w in worker_ids}


# ------------------------------------------------------------------------------ rng

def rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _check_rng(saved: Any) -> None:
    saved = _mapping(saved, "rng")
    _keys(saved, "rng", ("torch",), exact=False)
    _tensor(saved["torch"], "rng.torch", torch.uint8, tuple(torch.get_rng_state().shape))
    if "cuda" in saved and not (isinstance(saved["cuda"], list)
                                and all(isinstance(t, torch.Tensor) for t in saved["cuda"])):
        raise _fail("rng.cuda", "expected a list of tensors")


# ------------------------------------------------------------------------------ whole file

@dataclass
class CheckpointExpectation:
    """What the resuming run needs a checkpoint to hold."""
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    compressor: Compressor
    layers: Sequence[LayerInfo]
    worker_ids: Sequence[int]
    steps_per_epoch: int
    warmup_epochs: int
    loss_slots: int               # loss sums the history keeps in this process
    history_fields: Sequence[str]


def _check_model(saved: Any, model: torch.nn.Module) -> None:
    saved = _mapping(saved, "model")
    own = model.state_dict()
    _keys(saved, "model", tuple(own))
    for name, ref in own.items():
        _tensor(saved[name], f"model.{name}", ref.dtype, tuple(ref.shape))


def _check_optimizer(saved: Any, optimizer: torch.optim.Optimizer, steps_taken: int) -> None:
    saved = _mapping(saved, "optimizer")
    _keys(saved, "optimizer", ("state", "param_groups"))
    groups = saved["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(optimizer.param_groups):
        raise _fail("optimizer.param_groups", f"expected a list of {len(optimizer.param_groups)} "
                                               f"group(s)")
    params = [p for g in optimizer.param_groups for p in g["params"]]
    ids: list = []
    for j, (g, own) in enumerate(zip(groups, optimizer.param_groups)):
        g = _mapping(g, f"optimizer.param_groups.{j}")
        _keys(g, f"optimizer.param_groups.{j}", ("params", "lr", "momentum"), exact=False)
        if not isinstance(g["params"], list) or len(g["params"]) != len(own["params"]):
            raise _fail(f"optimizer.param_groups.{j}.params",
                        f"expected {len(own['params'])} parameter ids")
        for key, lowest, below in (("lr", 0.0, math.inf), ("momentum", 0.0, 1.0)):
            v = g[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or not (lowest <= v < below) or (key == "lr" and v == 0):
                raise _fail(f"optimizer.param_groups.{j}.{key}",
                            f"expected a finite number in {'(0, inf)' if key == 'lr' else '[0, 1)'}, "
                            f"got {v!r}")
        ids += g["params"]
    if sorted(ids) != list(range(len(params))):
        raise _fail("optimizer.param_groups", f"parameter ids {ids}, expected 0..{len(params) - 1}")
    state = _mapping(saved["state"], "optimizer.state")
    by_id = dict(zip(ids, params))
    for pid, entry in state.items():
        if pid not in by_id:
            raise _fail("optimizer.state", f"state for unknown parameter id {pid!r}")
        entry = _mapping(entry, f"optimizer.state.{pid}")
        _keys(entry, f"optimizer.state.{pid}", ("momentum_buffer",))
        p = by_id[pid]
        _tensor(entry["momentum_buffer"], f"optimizer.state.{pid}.momentum_buffer", p.dtype,
                tuple(p.shape))
    # every step updates every parameter's momentum: after one, a missing buffer is lost state
    missing = [pid for pid in ids if pid not in state]
    if steps_taken > 0 and missing:
        raise _fail("optimizer.state", f"no momentum buffer for parameter id(s) {missing} after "
                                       f"{steps_taken} steps")


def _check_history(saved: Any, slots: int, names: Sequence[str]) -> None:
    saved = _mapping(saved, "history")
    _keys(saved, "history", tuple(names))
    if not isinstance(saved["curves"], list):
        raise _fail("history.curves", "expected a list of curve points")
    for j, point in enumerate(saved["curves"]):
        point = _mapping(point, f"history.curves.{j}")
        _keys(point, f"history.curves.{j}", CURVE_KEYS)
        _integer(point["step"], f"history.curves.{j}.step")
        for key in CURVE_KEYS[1:]:
            if isinstance(point[key], bool) or not isinstance(point[key], (int, float)):
                raise _fail(f"history.curves.{j}.{key}", f"expected a number, got {point[key]!r}")
    for key in ("loss_sums", "loss_counts"):
        v = saved[key]
        if not isinstance(v, list) or len(v) != slots:
            raise _fail(f"history.{key}", f"expected a list of {slots} entries (one per worker "
                                          f"this process runs)")
    for j, v in enumerate(saved["loss_sums"]):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _fail(f"history.loss_sums.{j}", f"expected a number, got {v!r}")
    for j, v in enumerate(saved["loss_counts"]):
        _integer(v, f"history.loss_counts.{j}")
    totals = _mapping(saved["totals"], "history.totals")
    _keys(totals, "history.totals", tuple(f.name for f in fields(StepStats)))
    for k, v in totals.items():
        _integer(v, f"history.totals.{k}")
    times = _mapping(saved["times"], "history.times")
    _keys(times, "history.times", tuple(f.name for f in fields(StepTimes)))
    for k, v in times.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _fail(f"history.times.{k}", f"expected a number, got {v!r}")
    _integer(saved["padded_bytes"], "history.padded_bytes")
    if isinstance(saved["step_s"], bool) or not isinstance(saved["step_s"], (int, float)):
        raise _fail("history.step_s", f"expected a number, got {saved['step_s']!r}")


def check_checkpoint(ckpt: dict, expect: CheckpointExpectation, where: str | Path = "") -> None:
    """Every field of a loaded checkpoint against the run resuming it; `CheckpointError`
    naming the file and the field on the first mismatch."""
    try:
        _keys(ckpt, "<top level>", FIELDS)
        epoch = _integer(ckpt["epoch"], "epoch")
        step = _integer(ckpt["step_in_epoch"], "step_in_epoch")
        if step >= expect.steps_per_epoch:
            raise _fail("step_in_epoch", f"{step} is past the epoch's {expect.steps_per_epoch} steps")
        global_step = _integer(ckpt["global_step"], "global_step")
        if global_step != epoch * expect.steps_per_epoch + step:
            raise _fail("global_step", f"{global_step}, but epoch {epoch} step {step} of "
                                       f"{expect.steps_per_epoch} is step "
                                       f"{epoch * expect.steps_per_epoch + step}")
        _check_model(ckpt["model"], expect.model)
        _check_optimizer(ckpt["optimizer"], expect.optimizer, global_step)
        warm_steps = min(global_step, expect.warmup_epochs * expect.steps_per_epoch)
        check_compressor_state(expect.compressor, expect.layers, ckpt["compressor"],
                               expect.worker_ids, global_step - warm_steps)
        _check_rng(ckpt["rng"])
        _check_history(ckpt["history"], expect.loss_slots, expect.history_fields)
    except CheckpointError as e:
        raise CheckpointError(f"checkpoint {where}: {e}" if where else str(e)) from None


# ------------------------------------------------------------------------------ files

def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> Path:
    """Atomically, recorded as gradblock's (a later save may replace it; codec/fileio.py)."""
    return write_own(path, lambda tmp: torch.save({"format": FORMAT, **payload}, tmp))


def load_checkpoint(path: str | Path, run_config: dict | None = None) -> dict[str, Any]:
    """Read a checkpoint; with `run_config`, refuse one from a run with other settings."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist"
                              + (" (it is a directory)" if path.is_dir() else ""))
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several unrelated types for a bad file
        raise CheckpointError(f"checkpoint {path} is unreadable: {type(e).__name__}: {e}") from None
    fmt = ckpt.get("format") if isinstance(ckpt, dict) else None
    if not isinstance(fmt, str) or fmt != FORMAT:
        raise CheckpointError(f"{path} is not a {FORMAT} file")
    if run_config is not None and not _same_plain(ckpt.get("run_config"), run_config):
        saved = ckpt.get("run_config")
        saved = ({k: v for k, v in saved.items() if isinstance(k, str) and _plain(v)}
                 if isinstance(saved, dict) else {})
        diff = sorted(k for k in set(saved) | set(run_config) if saved.get(k) != run_config.get(k))
        raise CheckpointError(f"checkpoint {path} was written by a run with different settings: "
                              + ", ".join(f"{k}={saved.get(k)!r} (now {run_config.get(k)!r})"
                                          for k in diff))
    return ckpt
