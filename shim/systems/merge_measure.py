"""Measured inputs of the DLGS merge model (shim/systems/merge_plan.py) and `gradblock merge-plan`.

- backward time per layer: post-accumulate-grad hooks on every parameter record when its
  gradient is ready; a layer's t_b is the gap to the previous ready time (median of repeats);
- sparsify time as a function of size: the coarse compress step (numba, k = 1) timed on each
  layer's shape, fitted as a + b * n by least squares; each layer's frame bytes from the same run;
- communication: alpha + beta * bytes fitted from all_gather runs over a gloo process group
  (one process per rank on this machine), or every input from a JSON file (--times).

`--execute` runs every plan for real over gloo and reports its measured iteration beside the
model: `hooks` (the default) with this module's own post-accumulate-grad hooks, the numba
step and worst-case-sized collectives; `ddp` through DistributedDataParallel and the merged
communication hook (shim/systems/merge_hook.py), the training path, whose compress fit and frame
bytes then replace the numba step's in the model.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gradblock.codec import fileio
from gradblock.codec.errors import UsageError, UsageParser

from ..setup.models import build_model
from ..exchange.process_group import end_process_group
from .merge_apply import measure_comm  # noqa: F401  (re-exported: merge-plan's measurement)
from .merge_plan import PLANNERS, LayerTimes, fit_line, iteration_time, timeline

IN_SHAPES = {"lenet5": (1, 28, 28), "digits-cnn": (1, 8, 8), "resnet20": (3, 32, 32), "conv64": (3, 32, 32)}


def measure_backward(model: torch.nn.Module, in_shape, batch: int, repeats: int, seed: int = 0):
    """(names, sizes, backward_ms, forward_ms), layers in the order backward produces them."""
    params = dict(model.named_parameters())
    stamps: dict[str, float] = {}
    handles = [p.register_post_accumulate_grad_hook(lambda _p, n=n: stamps.__setitem__(n, time.perf_counter()))
               for n, p in params.items()]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((batch, *in_shape), generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    runs, forwards = [], []
    try:
        for i in range(repeats + 1):                     # the first run warms up
            stamps.clear()
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            t1 = time.perf_counter()
            loss.backward()
            if i:
                forwards.append((t1 - t0) * 1e3)
                order = sorted(stamps, key=stamps.get)
                prev, gaps = t1, {}
                for n in order:
                    gaps[n] = (stamps[n] - prev) * 1e3
                    prev = stamps[n]
                runs.append((order, gaps))
    finally:
        for h in handles:
            h.remove()
    order = runs[-1][0]
    backward = tuple(statistics.median(r[1][n] for r in runs) for n in order)
    return tuple(order), tuple(params[n].numel() for n in order), backward, statistics.median(forwards)


def measure_sparsify(model: torch.nn.Module, order, repeats: int, seed: int = 0):
    """Fit t_s(n) = a + b*n (ms) from the numba coarse step on each layer's shape; frame bytes."""
    from gradblock.fastpath import fast
    from gradblock.refmodel.quantiser import QuantConfig
    params = dict(model.named_parameters())
    cfg = QuantConfig.from_range(10.0)
    rng = np.random.default_rng(seed)
    sizes, times, nbytes = [], [], []
    for name in order:
        shape = tuple(params[name].shape)
        g = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        words = np.zeros(fast.max_step_words(g.size, int(np.prod(shape[1:])) if len(shape) > 1 else 1, 1) + 64,
                         np.uint32)
        samples = []
        for i in range(repeats + 1):
            r = np.zeros(g.size, np.int32)
            t0 = time.perf_counter()
            info = fast.compress_step(g, r, cfg, 1, None, 0, 8, words)
            if i:
                samples.append((time.perf_counter() - t0) * 1e3)
        sizes.append(g.size)
        times.append(statistics.median(samples))
        nbytes.append(4 * int(info.n_words))
    a, b = fit_line(sizes, times)
    return a, b, tuple(nbytes)


def measure(model_name: str, batch: int, repeats: int, comm_workers: int) -> tuple[LayerTimes, dict]:
    shape = IN_SHAPES[model_name]
    torch.set_num_threads(1)
    model = build_model(model_name, 10, shape, seed=0)
    names, sizes, backward, forward = measure_backward(model, shape, batch, repeats)
    a, b, nbytes = measure_sparsify(model, names, repeats)
    alpha, beta, points = measure_comm(comm_workers, repeats)
    times = LayerTimes(names, sizes, backward, forward, a, b, alpha, beta, nbytes)
    return times, {"comm_points": points, "batch": batch, "comm_workers": comm_workers}


# ------------------------------------------------------------- executing a plan for real

def _bound_words(shape) -> int:
    from gradblock.fastpath import fast
    n = int(np.prod(shape))
    return fast.max_step_words(n, n // shape[0] if len(shape) > 1 else 1, 1)


def _execute_worker(rank: int, world: int, init_file: str, model_name: str, batch: int, repeats: int,
                    plans: dict, out: str) -> None:
    """One rank: every plan's groups are compressed (one numba call per group) and all-gathered
    (one collective per group, async on gloo's thread) as soon as the group's last gradient is
    ready, overlapping the rest of backward, as the model assumes."""
    from gradblock.fastpath import fast
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        shape = IN_SHAPES[model_name]
        model = build_model(model_name, 10, shape, seed=0)
        params = dict(model.named_parameters())
        gen = torch.Generator().manual_seed(rank)
        x, y = torch.randn((batch, *shape), generator=gen), torch.randint(0, 10, (batch,), generator=gen)
        residual = {n: np.zeros(p.numel(), np.int32) for n, p in params.items()}
        result = {}
        for name, groups in plans.items():
            last = {g[-1]: g for g in groups}
            bound = {g[-1]: sum(_bound_words(tuple(params[n].shape)) for n in g) for g in groups}
            pending = []

            def on_ready(_p, n):
                g = last.get(n)
                if g is None:
                    return
                msg, _ = fast.compress_layers([params[m].grad.numpy() for m in g], [residual[m] for m in g],
                                              R=10.0, k=1, n_threads=1)
                buf = torch.zeros(bound[n], dtype=torch.int32)
                buf[:msg.size] = torch.from_numpy(msg.view(np.int32))
                outs = [torch.empty_like(buf) for _ in range(world)]
                pending.append(dist.all_gather(outs, buf, async_op=True))

            handles = [p.register_post_accumulate_grad_hook(lambda p, n=n: on_ready(p, n))
                       for n, p in params.items()]
            samples = []
            try:
                for i in range(repeats + 1):
                    dist.barrier()
                    model.zero_grad(set_to_none=True)
                    pending.clear()
                    t0 = time.perf_counter()
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    for h in pending:
                        h.wait()
                    if i:
                        samples.append((time.perf_counter() - t0) * 1e3)
            finally:
                for h in handles:
                    h.remove()
            result[name] = statistics.median(samples)
        if rank == 0:
            Path(out).write_text(json.dumps(result))
    finally:
        end_process_group()


def _ddp_compressor(layers, world: int):
    """What `--execute ddp` runs: the training path's coarse compressor, k = 1, R = 10."""
    from ..compress.compressors import build_compressor
    return build_compressor("coarse", layers, world, k=1, R=10.0)


def _execute_ddp_worker(rank: int, world: int, init_file: str, model_name: str, batch: int,
                        repeats: int, plans: dict, out: str) -> None:
    """One rank: every plan through DistributedDataParallel and the merged communication hook
    (shim/systems/merge_hook.py; one encode call and one all_gather per group), DDP buckets of about
    one parameter so the plan, not DDP's bucketing, decides what travels together. An
    iteration is forward + backward, which returns once every bucket's future is complete;
    the plans take turns iteration by iteration. A plan of None is the baseline: the plain hook (shim/exchange/hook.py) on DDP's default buckets."""
    from ..compress.compressors import layers_of
    from ..exchange.modes import MERGE_BUCKET_CAP_MB
    from ..exchange.hook import register
    from .merge_hook import register_merged
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        shape = IN_SHAPES[model_name]
        gen = torch.Generator().manual_seed(rank)
        x, y = torch.randn((batch, *shape), generator=gen), torch.randint(0, 10, (batch,), generator=gen)
        runs = {}
        for name, named in plans.items():
            model = build_model(model_name, 10, shape, seed=0)
            layers = layers_of(model)
            index = {lay.name: lay.index for lay in layers}
            if named is None:             # the baseline: the plain hook on DDP's own buckets
                ddp = torch.nn.parallel.DistributedDataParallel(model)
                state = register(ddp, _ddp_compressor(layers, world))
            else:
                ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=MERGE_BUCKET_CAP_MB)
                state = register_merged(ddp, _ddp_compressor(layers, world),
                                        [[index[n] for n in g] for g in named])
            runs[name] = (model, ddp, state)
        samples: dict[str, list[float]] = {name: [] for name in runs}
        # plans take turns, one iteration each, so a change in the machine's load over the
        # run hits every plan alike; two warm-up rounds (DDP rebuilds its buckets)
        for i in range(repeats + 2):
            for name, (model, ddp, state) in runs.items():
                dist.barrier()
                model.zero_grad(set_to_none=True)
                state.reset_step()
                t0 = time.perf_counter()
                state.backward(torch.nn.functional.cross_entropy(ddp(x), y))
                if i >= 2:
                    samples[name].append((time.perf_counter() - t0) * 1e3)
        result = {name: statistics.median(v) for name, v in samples.items()}
        # DDP's reducer holds the process group: free it before the group goes away
        del runs, model, ddp, state
        gc.collect()
        if rank == 0:
            Path(out).write_text(json.dumps(result))
        dist.barrier()
    finally:
        end_process_group()


def ddp_inputs(times: LayerTimes, model_name: str, repeats: int, world: int) -> LayerTimes:
    """`times` with the sparsify fit and frame bytes of what `--execute ddp` runs (the torch
    codec's coarse compressor) instead of the numba step's."""
    from ..compress.compressors import layers_of
    from .merge_apply import measure_compress
    layers = {lay.name: lay for lay in layers_of(build_model(model_name, 10, IN_SHAPES[model_name]))}
    ordered = [layers[n] for n in times.names]
    a, b, nbytes = measure_compress(_ddp_compressor(ordered, world), ordered, "cpu", repeats)
    return replace(times, sparsify_a_ms=a, sparsify_b_ms=b, wire_bytes=tuple(nbytes))


EXECUTORS = {"hooks": _execute_worker, "ddp": _execute_ddp_worker}
PLAIN_HOOK = "plain_hook_ddp_buckets"     # --execute ddp's baseline run (no plan)


def execute_plans(model_name: str, plans: dict, batch: int, repeats: int, world: int,
                  mode: str = "hooks") -> dict:
    """Measured iteration time (ms, median) of each plan over a gloo group of `world` ranks:
    `hooks` with this module's own hooks and the numba step, `ddp` through DDP and the merged
    communication hook."""
    with tempfile.TemporaryDirectory(prefix="gradblock-merge-") as tmp:
        out = os.path.join(tmp, "measured.json")
        mp.start_processes(EXECUTORS[mode], args=(world, os.path.join(tmp, "init"), model_name, batch,
                                                  repeats, plans, out),
                           nprocs=world, join=True, start_method="spawn")
        return json.loads(Path(out).read_text())


def load_times(path: str) -> LayerTimes:
    try:
        raw = json.loads(Path(path).read_text())
        fields = LayerTimes.__dataclass_fields__
        missing = sorted(set(fields) - set(raw))
        if missing:
            raise UsageError(f"missing fields {missing}")
        return LayerTimes(**{k: tuple(raw[k]) if isinstance(raw[k], list) else raw[k] for k in fields})
    except (OSError, json.JSONDecodeError, TypeError) as err:
        raise UsageError(f"{path}: {err}") from None


def plan_report(times: LayerTimes) -> dict:
    plans = {name: fn(times) for name, fn in PLANNERS.items()}
    return {"iteration_ms": {name: iteration_time(times, p) for name, p in plans.items()},
            "groups": timeline(times, plans["exact"]),
            "plans": {name: [list(times.names[a:b]) for a, b in p] for name, p in plans.items()},
            "inputs": asdict(times)}


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="gradblock merge-plan",
                                description="DLGS layer merging: modelled iteration time per plan")
    p.add_argument("--model", choices=sorted(IN_SHAPES), default="resnet20")
    p.add_argument("--times", help="JSON with every LayerTimes field instead of measuring")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--comm-workers", type=int, default=2)
    p.add_argument("--execute", nargs="?", const="hooks", choices=sorted(EXECUTORS), default=None,
                   help="also run each plan for real over gloo and report its measured iteration "
                        "time: with the numba step in its own hooks (hooks, the default), or "
                        "through DistributedDataParallel and the merged communication hook (ddp; "
                        "the model then uses the torch codec's compress fit and frame bytes)")
    p.add_argument("--json", dest="json_out")
    return p


def merge_plan_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.batch < 1 or args.repeats < 1 or args.comm_workers < 2:
        raise UsageError("--batch and --repeats must be >= 1, --comm-workers >= 2")
    if args.times:
        times, extra = load_times(args.times), {"source": args.times}
    else:
        times, extra = measure(args.model, args.batch, args.repeats, args.comm_workers)
    if args.execute:
        if args.times:
            raise UsageError("--execute measures this machine: it cannot be combined with --times")
        if args.execute == "ddp":
            times = ddp_inputs(times, args.model, args.repeats, args.comm_workers)
        else:
            # the executor sends each group's worst-case frame size in one collective: model that
            shape = {n: tuple(p.shape) for n, p in build_model(args.model, 10, IN_SHAPES[args.model]).named_parameters()}
            times = replace(times, wire_bytes=tuple(4 * _bound_words(shape[n]) for n in times.names))
    report = plan_report(times) | {"measurement": extra}
    if args.execute:
        plans = report["plans"] | ({PLAIN_HOOK: None} if args.execute == "ddp" else {})
        measured = execute_plans(args.model, plans, args.batch, args.repeats, args.comm_workers,
                                 args.execute)
        if args.execute == "ddp":
            report["measured_plain_hook_ms"] = measured.pop(PLAIN_HOOK)
        report["measured_ms"] = measured
        report["execute"] = args.execute
    it = report["iteration_ms"]
    if "measured_ms" in report:
        m = report["measured_ms"]
        print(f"measured iteration ({args.execute}): " + ", ".join(f"{k} {v:.3f} ms" for k, v in m.items())
              + (f"; plain hook on DDP's buckets {report['measured_plain_hook_ms']:.3f} ms"
                 if "measured_plain_hook_ms" in report else ""))
    print(f"{len(times.sizes)} layers; modelled iteration: none {it['none']:.3f} ms, "
          f"dlgs_greedy {it['dlgs_greedy']:.3f} ms, exact {it['exact']:.3f} ms "
          f"({len(report['groups'])} groups)")
    if args.json_out:
        fileio.write_text(args.json_out, json.dumps(report, indent=2))
    return 0
