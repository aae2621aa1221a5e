"""Merge plans over a real gloo group: the DDP hook with a plan gives the bits of the plain hook
and of the single-process simulation (shim/exchange/ddp_check.py's model, data and compressors).

    check_merged(world=2, plans={"name": groups, ...}, out_dir)   # spawns `world` ranks

Each rank trains ddp_check's CheckNet for its few steps through DistributedDataParallel once
with the plain hook and once per plan with the merged hook (several bucket sizes, so buckets
spanning groups and groups spanning buckets both occur), then compares parameters bit for
bit with the plain-hook run and with the simulation (with and without the plan). Each rank
writes rank{r}.json; `check_merged` returns rank 0's report.
"""
from __future__ import annotations

import json
import os
import tempfile
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from ..compress.compressors import layers_of
from ..exchange.ddp_check import batches, compressor_for, make_model, same_on_all_ranks
from ..exchange.hook import register
from ..exchange.optim import GlobalMomentumSGD
from ..exchange.process_group import end_process_group
from ..exchange.workers import SimulatedCluster
from .merge_hook import register_merged

BUCKET_CAPS_MB = (0.001, 0.002, 25.0)     # ~one parameter per bucket, a few, all in one


def _train_ddp(name, rank, world, data, groups, bucket_cap_mb):
    model = make_model("cpu")
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    compressor = compressor_for(name, model, world)
    state = register(ddp, compressor) if groups is None else register_merged(ddp, compressor, groups)
    opt = GlobalMomentumSGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in data:
        x, y = step[rank]
        opt.zero_grad(set_to_none=True)
        state.reset_step()
        state.backward(F.cross_entropy(ddp(x), y))
        opt.step()
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    layout = (getattr(state, "max_groups_per_bucket", 0), getattr(state, "max_buckets_per_group", 0))
    return params, layout


def _simulate(name, world, data, groups):
    model = make_model("cpu")
    cluster = SimulatedCluster(model, compressor_for(name, model, world), layers_of(model),
                               F.cross_entropy, "cpu", groups=groups, timed=False)
    opt = GlobalMomentumSGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in data:
        cluster.step(step, opt)
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def _worker(rank: int, world: int, init_file: str, compressors, plans: dict, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    report: dict = {"rank": rank, "results": {}}
    try:
        data = batches(world, "cpu")
        for name in compressors:
            plain, _ = _train_ddp(name, rank, world, data, None, 25.0)
            sim = _simulate(name, world, data, None)
            rows = {"plain_hook_equals_simulation": _same(plain, sim)}
            layouts = report.setdefault("layouts", {})   # (groups per bucket, buckets per group)
            for plan_name, groups in plans.items():
                sim_merged = _simulate(name, world, data, groups)
                rows[f"{plan_name}/simulation"] = _same(sim_merged, sim)
                for cap in BUCKET_CAPS_MB:
                    merged, layout = _train_ddp(name, rank, world, data, groups, cap)
                    rows[f"{plan_name}/ddp/bucket_cap_mb={cap}"] = (
                        _same(merged, plain) and same_on_all_ranks(merged))
                    layouts[f"{plan_name}/bucket_cap_mb={cap}"] = layout
            report["results"][name] = rows
    except Exception:  # noqa: BLE001 - the report carries the traceback
        report["error"] = traceback.format_exc()
    finally:
        Path(out, f"rank{rank}.json").write_text(json.dumps(report, indent=2))
        end_process_group()


def check_merged(world: int, plans: dict, compressors=("coarse",), out_dir: str | None = None
                 ) -> dict:
    """Spawn `world` gloo ranks running the comparison; rank 0's report (every rank's must
    agree; a rank's error is raised here with its traceback)."""
    with tempfile.TemporaryDirectory(prefix="gradblock-merge-check-") as tmp:
        out = out_dir or tmp
        mp.start_processes(_worker, args=(world, os.path.join(tmp, "init"), list(compressors),
                                          plans, out), nprocs=world, join=True, start_method="spawn")
        reports = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(world)]
    for rep in reports:
        if "error" in rep:
            raise RuntimeError(f"rank {rep['rank']} failed:\n{rep['error']}")
    return reports[0] | {"all_ranks": [rep["results"] for rep in reports]}
