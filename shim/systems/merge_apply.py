"""A DLGS merge plan (shim/systems/merge_plan.py) turned into groups of a model's layers, for the DDP
hook (shim/systems/merge_hook.py) and the simulated cluster (shim/exchange/workers.py).

A plan lists groups of parameter names in backward order: the order autograd finishes the
gradients, which `backward_order` records with post-accumulate-grad hooks on a copy of the
model (the engine's order is deterministic for a given graph). A plan is refused with a
`MergePlanError` naming the problem if it names an unknown parameter, leaves one out, names
one twice, or does not follow that order.

Where a plan comes from (`--merge-plan` of `gradblock train`):
* `none`: every layer its own group;
* `greedy` / `exact`: the planners of shim/systems/merge_plan.py on inputs measured for this run:
  backward time per layer on a copy of the model with the run's first batch, this run's
  compressor timed on every layer's shape (fitted a + b * n, frame bytes from the same run),
  and alpha + beta * bytes from all_gather over the run's process group (DDP) or over a
  2-rank gloo group started for the measurement (simulation); under DDP rank 0 plans and
  broadcasts, so every rank uses the same groups;
* a file: `gradblock merge-plan --json` output (its exact plan, `"groups"`), or a JSON list
  of lists of names.
Merging changes the call structure only: every layer's packet and sum are the same bits.
"""
from __future__ import annotations

import copy
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from ..compress.compressors import Compressor, LayerInfo, WorkerState
from ..exchange.device import sync_device
from ..errors import ConfigError
from ..exchange.process_group import end_process_group
from .merge_plan import PLANNERS, LayerTimes, fit_line

PLAN_KINDS = ("none", "greedy", "exact")
_PLANNER_OF = {"none": "none", "greedy": "dlgs_greedy", "exact": "exact"}
MAX_PLAN_FILE_BYTES = 16 << 20          # a plan file for any model is far smaller


class MergePlanError(ConfigError):
    """A merge plan that does not fit the model: unknown or missing parameter, a parameter
    twice, groups out of backward order, or an unreadable plan file."""


Groups = list[list[int]]                 # layer indices (LayerInfo.index) per group


def backward_order(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[str]:
    """Trainable parameter names in the order one backward pass finishes their gradients.
    Runs on a deep copy under a forked RNG: the model, its buffers and the RNG are untouched."""
    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        probe = copy.deepcopy(model)
        done: list[str] = []
        handles = [p.register_post_accumulate_grad_hook(lambda _p, n=n: done.append(n))
                   for n, p in probe.named_parameters() if p.requires_grad]
        try:
            F.cross_entropy(probe(x), y).backward()
        finally:
            for h in handles:
                h.remove()
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    return done + [n for n in reversed(names) if n not in set(done)]    # unused ones last


def read_plan_file(path: str | Path) -> list[list[str]]:
    """Groups of names from a `merge-plan --json` report (`groups`: its exact plan) or a JSON
    list of lists of names."""
    path = Path(path)
    try:
        if not path.is_file():                 # a FIFO or a device would block or never end
            raise MergePlanError(f"merge plan {path}: not a regular file (or does not exist); "
                                 f"give a JSON file or one of {', '.join(PLAN_KINDS)}")
        if path.stat().st_size > MAX_PLAN_FILE_BYTES:
            raise MergePlanError(f"merge plan {path}: larger than {MAX_PLAN_FILE_BYTES} bytes")
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise MergePlanError(f"merge plan {path}: {type(err).__name__}: {err}") from None
    groups = raw.get("groups") if isinstance(raw, dict) else raw
    if isinstance(groups, list):
        groups = [g.get("layers") if isinstance(g, dict) else g for g in groups]
    if not (isinstance(groups, list) and groups and all(
            isinstance(g, list) and g and all(isinstance(n, str) for n in g) for g in groups)):
        raise MergePlanError(f"merge plan {path}: expected a non-empty list of non-empty lists of "
                             f"parameter names, or a merge-plan report with 'groups'")
    return groups


def groups_from_names(named: Sequence[Sequence[str]], layers: Sequence[LayerInfo],
                      order: Sequence[str]) -> Groups:
    """Named groups -> layer indices, checked against the model: every trainable parameter
    exactly once, groups contiguous and in backward order (`order`)."""
    index = {lay.name: lay.index for lay in layers}
    flat = [n for g in named for n in g]
    unknown = [n for n in flat if n not in index]
    if unknown:
        raise MergePlanError(f"merge plan names {len(unknown)} parameter(s) the model does not "
                             f"have, the first {unknown[0]!r}")
    seen: set[str] = set()
    for n in flat:
        if n in seen:
            raise MergePlanError(f"merge plan names parameter {n!r} more than once")
        seen.add(n)
    missing = [n for n in order if n not in seen]
    if missing:
        raise MergePlanError(f"merge plan leaves out {len(missing)} parameter(s), the first "
                             f"{missing[0]!r}: every parameter must be in exactly one group")
    for pos, (got, want) in enumerate(zip(flat, order)):
        if got != want:
            raise MergePlanError(f"merge plan is not in backward order: position {pos} is {got!r}, "
                                 f"backward produces {want!r} there")
    return [[index[n] for n in g] for g in named]


def check_groups(groups: Groups, n_layers: int) -> Groups:
    """Layer-index groups covering 0..n_layers-1 exactly once (any order)."""
    flat = sorted(i for g in groups for i in g)
    if any(not g for g in groups) or flat != list(range(n_layers)):
        raise MergePlanError(f"merge groups must cover layers 0..{n_layers - 1} exactly once, "
                             f"none empty")
    return [list(g) for g in groups]


# ---------------------------------------------------------------- planning from measurements

def measure_backward(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, repeats: int
                     ) -> tuple[list[str], list[float], float]:
    """(names in backward order, backward ms per layer, forward ms), medians over repeats, on
    a deep copy under a forked RNG (the run's model, buffers and RNG are untouched)."""
    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        probe = copy.deepcopy(model)
        params = {n: p for n, p in probe.named_parameters() if p.requires_grad}
        stamps: dict[str, float] = {}

        def stamp(_p, n):
            sync_device(x)                # the kernels are queued, not done: wait for them
            stamps[n] = time.perf_counter()

        handles = [p.register_post_accumulate_grad_hook(lambda _p, n=n: stamp(_p, n))
                   for n, p in params.items()]
        runs, forwards = [], []
        try:
            for i in range(repeats + 1):                    # the first run warms up
                stamps.clear()
                probe.zero_grad(set_to_none=True)
                sync_device(x)
                t0 = time.perf_counter()
                loss = F.cross_entropy(probe(x), y)
                sync_device(x)
                t1 = time.perf_counter()
                loss.backward()
                if i:
                    forwards.append((t1 - t0) * 1e3)
                    prev, gaps = t1, {}
                    for n in sorted(stamps, key=stamps.get):
                        gaps[n], prev = (stamps[n] - prev) * 1e3, stamps[n]
                    runs.append(gaps)
        finally:
            for h in handles:
                h.remove()
    order = backward_order(model, x, y)
    return order, [statistics.median(r.get(n, 0.0) for r in runs) for n in order], \
        statistics.median(forwards)


def measure_compress(compressor: Compressor, layers: Sequence[LayerInfo], device, repeats: int
                     ) -> tuple[float, float, list[int]]:
    """This run's compressor timed on every layer's shape (a scratch worker state, gradients
    N(0, 0.05)): the fit a + b * n in ms, and each layer's packet bytes."""
    gen = torch.Generator().manual_seed(0)
    sizes, times, nbytes = [], [], []
    for lay in layers:
        g = (torch.randn(lay.shape, generator=gen) * 0.05).to(device)
        samples = []
        for i in range(repeats + 1):
            ws = WorkerState()
            t0 = time.perf_counter()
            ((packet, _),) = compressor.encode_many([lay], [g], ws)
            sync_device(g)
            if i:
                samples.append((time.perf_counter() - t0) * 1e3)
        sizes.append(lay.numel)
        times.append(statistics.median(samples))
        nbytes.append(4 * packet.numel())
    a, b = fit_line(sizes, times)
    return a, b, nbytes


def _comm_worker(rank: int, world: int, init_file: str, sizes, repeats: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        res = []
        for n in sizes:
            t = torch.zeros(n, dtype=torch.uint8)
            bufs = [torch.empty_like(t) for _ in range(world)]
            samples = []
            for i in range(repeats + 1):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_gather(bufs, t)
                if i:
                    samples.append((time.perf_counter() - t0) * 1e3)
            res.append(statistics.median(samples))
        if rank == 0:
            Path(out).write_text(json.dumps(res))
    finally:
        end_process_group()


def measure_comm(world: int, repeats: int) -> tuple[float, float, list[tuple[int, float]]]:
    """alpha (ms) and beta (ms per byte) from all_gather over gloo on this machine."""
    sizes = [2**k for k in range(10, 23, 2)]
    with tempfile.TemporaryDirectory(prefix="gradblock-comm-") as tmp:
        out = os.path.join(tmp, "times.json")
        mp.start_processes(_comm_worker, args=(world, os.path.join(tmp, "init"), sizes, repeats, out),
                           nprocs=world, join=True, start_method="spawn")
        times = json.loads(Path(out).read_text())
    a, b = fit_line(sizes, times)
    return a, b, list(zip(sizes, times))


def measure_comm_on_group(repeats: int, group=None, device=None) -> tuple[float, float]:
    """alpha (ms), beta (ms per byte) from all_gather over an initialised process group (every
    rank calls this; the fit is rank 0's). `device`: where the run's tensors live (NCCL takes
    CUDA tensors only); CUDA timings wait for the collective."""
    world = dist.get_world_size(group)
    device = torch.device("cpu") if device is None else torch.device(device)
    sizes, times = [2**k for k in range(10, 21, 2)], []
    for n in sizes:
        t = torch.zeros(n // 4, dtype=torch.int32, device=device)
        bufs = [torch.empty_like(t) for _ in range(world)]
        samples = []
        for i in range(repeats + 1):
            dist.barrier(group)
            sync_device(device)
            t0 = time.perf_counter()
            dist.all_gather(bufs, t, group=group)
            sync_device(device)
            if i:
                samples.append((time.perf_counter() - t0) * 1e3)
        times.append(statistics.median(samples))
    return fit_line(sizes, times)


def plan_for_run(kind: str, model: torch.nn.Module, layers: Sequence[LayerInfo],
                 compressor: Compressor, x: torch.Tensor, y: torch.Tensor, *, ddp: bool,
                 repeats: int = 3) -> Groups:
    """The groups of `--merge-plan KIND|FILE` for this run's model (see the module doc).
    Under DDP every rank must call it (collectives); all ranks get rank 0's groups."""
    order = backward_order(model, x, y)
    if kind not in PLAN_KINDS:
        return groups_from_names(read_plan_file(kind), layers, order)
    by_name = {lay.name: lay for lay in layers}
    if kind == "none":
        return [[by_name[n].index] for n in order]
    if ddp:
        alpha, beta = measure_comm_on_group(repeats, device=x.device)
    else:
        alpha, beta, _ = measure_comm(2, repeats)
    chosen: list = [None]
    if not ddp or dist.get_rank() == 0:
        names, backward, forward = measure_backward(model, x, y, repeats)
        ordered = [by_name[n] for n in names]
        a, b, nbytes = measure_compress(compressor, ordered, x.device, repeats)
        times = LayerTimes(tuple(names), tuple(lay.numel for lay in ordered), tuple(backward),
                           forward, a, b, alpha, beta, tuple(nbytes))
        chosen[0] = [list(names[s:e]) for s, e in PLANNERS[_PLANNER_OF[kind]](times)]
    if ddp:
        dist.broadcast_object_list(chosen, src=0)
    return groups_from_names(chosen[0], layers, order)


def describe(groups: Groups, layers: Sequence[LayerInfo]) -> list[list[str]]:
    """Groups as parameter names (for result.json)."""
    return [[layers[i].name for i in g] for g in groups]


__all__ = ["MergePlanError", "PLAN_KINDS", "backward_order", "read_plan_file", "groups_from_names",
           "check_groups", "plan_for_run", "describe", "measure_backward", "measure_compress",
           "measure_comm_on_group"]
