"""One rank of `gradblock netbench`, started by bench/netbench.py inside its worker's network
namespace with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; gloo bound
to the worker's veth by GLOO_SOCKET_IFNAME; one torch thread).

    python -m gradblock.bench.netbench_rank --plan PLAN.json --outdir DIR --warmup 5 --steps 30

PLAN.json lists the methods to run one after the other in this process, each as
{"name": ..., "args": [`gradblock train` options]} (parsed by train's own parser, so every
method and option `train --ddp` knows works here, torch's peers included); each run is `--ddp`,
timed, in a process group of its own (MASTER_PORT + its index in the plan); the dataset is
loaded once. Each method's report is written to DIR/<name>.rank<R>.json as soon as it ends, so a
failure later in the plan keeps what finished.

Step mode (default): `--warmup` steps, a barrier, the interface counters, `--steps` measured
steps (each timed with perf_counter around the exchange's step: forward, backward with the
hook, optimizer step), a barrier, the counters again; then `--compute-steps` forward+backward
passes under DDP's `no_sync()` on the same batches: the compute alone, with no communication.
Time-to-accuracy mode (`--tta-every E`): train `--steps` steps, evaluating on the test set every
E steps on rank 0 with the clock stopped; records (training seconds, step, accuracy).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="netbench_rank")
    ap.add_argument("--plan", required=True)
    ap.add_argument("--outdir", required=True)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--compute-steps", type=int, default=10)
    ap.add_argument("--tta-every", type=int, default=0)
    ap.add_argument("--shapes", default=None, choices=sorted(SHAPES))
    a = ap.parse_args(argv)

    import torch

    from gradblock.shim.training.arguments import build_parser, config_from_args
    from gradblock.shim.setup.data import load_dataset

    torch.set_num_threads(1)
    plan = json.loads(Path(a.plan).read_text())
    base_port = int(os.environ["MASTER_PORT"])
    dataset = None
    for i, item in enumerate(plan):
        os.environ["MASTER_PORT"] = str(base_port + i)
        args = build_parser().parse_args(item["args"])
        cfg = config_from_args(args, ddp=True, progress=False, time_phases=True, threads=1,
                               device="cpu", out=None, max_steps=None)
        if a.shapes:
            report = run_shapes(a, cfg, item["args"])
        else:
            if dataset is None:
                dataset = load_dataset(cfg.data, cfg.data_dir)
            report = run_one(a, cfg, item["args"], dataset)
        out = Path(a.outdir) / f"{item['name']}.rank{report['rank']}.json"
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report))
        tmp.replace(out)
    return 0


def resnet50_shapes() -> list[tuple[int, ...]]:
    """torchvision's resnet50 parameter shapes, in its order (25.6 M parameters)."""
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7), (64,), (64,)]
    cin = 64
    for width, blocks in zip((64, 128, 256, 512), (3, 4, 6, 3)):
        for b in range(blocks):
            shapes += [(width, cin, 1, 1), (width,), (width,), (width, width, 3, 3), (width,),
                       (width,), (4 * width, width, 1, 1), (4 * width,), (4 * width,)]
            if b == 0:
                shapes += [(4 * width, cin, 1, 1), (4 * width,), (4 * width,)]
            cin = 4 * width
    return shapes + [(1000, 2048), (1000,)]


def resnet20_shapes() -> list[tuple[int, ...]]:
    from gradblock.shim.setup.models import build_model
    m = build_model("resnet20", 10, (3, 32, 32))
    return [tuple(p.shape) for p in m.parameters() if p.requires_grad]


SHAPES = {"resnet20": resnet20_shapes, "resnet50": resnet50_shapes}


def run_shapes(a, cfg, train_args: list[str]) -> dict:
    """Gradients only: a module whose parameters have the network's shapes and whose loss is
    sum(p * G), so backward hands DDP exactly G (seeded random, two sets per rank used in turn);
    the method's hook (or torch's) exchanges them as in training. No optimizer step."""
    import torch
    import torch.distributed as dist

    from gradblock.shim.compress.compressors import build_compressor, layers_of
    from gradblock.shim.exchange.modes import make_exchange
    from gradblock.shim.exchange.peers import PEERS, build_peer, make_peer_exchange

    from .netns import read_counters

    class Shaped(torch.nn.Module):
        def __init__(self, shapes):
            super().__init__()
            self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(s)) for s in shapes])

        def forward(self, grads):
            total = None
            for p, g in zip(self.ps, grads):
                term = (p * g).sum()
                total = term if total is None else total + term
            return total

    shapes = SHAPES[a.shapes]()
    model = Shaped(shapes)
    ex = make_peer_exchange(cfg) if cfg.compressor in PEERS else \
        make_exchange(True, cfg.workers, "cpu", True)
    try:
        rank, n = ex.rank, ex.n_workers
        layers = layers_of(model)
        if cfg.compressor in PEERS:
            comp = build_peer(cfg, layers, n)
        else:
            comp = build_compressor(cfg.compressor, layers, n, k=cfg.k, density=cfg.density,
                                    interval=cfg.dlgs_interval, R=cfg.range,
                                    block_size=cfg.block_size, lmax_log2=cfg.lmax_log2,
                                    **({"exchange": cfg.exchange} if hasattr(cfg, "exchange") else {}))
        states = {rank: comp.new_worker_state()}
        ex.bind(model, layers, comp, states)
        ddp = ex.ddp_model
        gen = torch.Generator().manual_seed(1000 * cfg.seed + rank)
        sets = [[torch.randn(s, generator=gen) * 1e-2 for s in shapes] for _ in range(2)]
        hook = getattr(ex, "hook", None)
        timed = getattr(ex, "timed_state", None)

        def one(step):
            before = timed.compress_s if timed is not None else 0.0
            t0 = time.perf_counter()
            if hook is not None:
                hook.reset_step()
            ddp.zero_grad(set_to_none=True)
            loss = ddp(sets[step % 2])
            if hook is not None:
                hook.backward(loss)
                comp_s = hook.times.compress_s
                payload = hook.stats.bytes_sent
            else:
                loss.backward()
                comp_s = (timed.compress_s if timed is not None else 0.0) - before
                payload = comp.payload(step).bytes_sent
            return time.perf_counter() - t0, comp_s, payload

        for step in range(a.warmup):
            one(step)
        dist.barrier()
        ifname = os.environ.get("GRADBLOCK_NET_IF")
        c0 = read_counters(ifname) if ifname else None
        steps, compress, payload = [], [], 0
        for step in range(a.warmup, a.warmup + a.steps):
            dt, cs, pb = one(step)
            steps.append(dt)
            compress.append(cs)
            payload += pb
        dist.barrier()
        c1 = read_counters(ifname) if ifname else None
        compute = []
        for i in range(a.compute_steps):
            with ddp.no_sync():
                ddp.zero_grad(set_to_none=True)
                t0 = time.perf_counter()
                ddp(sets[i % 2]).backward()
                compute.append(time.perf_counter() - t0)
        return {"rank": rank, "world": n, "method_args": train_args, "shapes": a.shapes,
                "params": sum(int(torch.Size(s).numel()) for s in shapes),
                "compressor": comp.config(), "step_s": steps, "compress_s": compress,
                "exchange_s": [], "compute_s": compute, "payload_bytes": payload,
                "padded_bytes": 0, "counters_before": c0, "counters_after": c1}
    finally:
        ex.close()


def run_one(a, cfg, train_args: list[str], dataset) -> dict:
    import torch.distributed as dist
    import torch.nn.functional as F

    from gradblock.shim.setup.problem import epoch_shards, evaluate, worker_batch
    from gradblock.shim.training.trainer import Trainer

    from .netns import read_counters

    trainer = Trainer(cfg, dataset)
    try:
        ex, p = trainer.exchange, trainer.problem
        rank, n = ex.rank, ex.n_workers
        trainer._activate(0)
        per_epoch = p.steps_per_epoch
        ifname = os.environ.get("GRADBLOCK_NET_IF")
        opt = trainer.optimizer

        def batch_of(step: int):
            shards = epoch_shards(len(p.y_train), n, cfg.seed, step // per_epoch)
            return shards, step % per_epoch

        def one_step(step: int):
            for group in opt.param_groups:
                group["lr"] = trainer.lr_at(step)
            shards, s = batch_of(step)
            t0 = time.perf_counter()
            out = ex.step(p, shards, s, cfg.batch_size, opt)
            return time.perf_counter() - t0, out

        report: dict = {"rank": rank, "world": n, "method_args": train_args,
                        "compressor": trainer.compressor.config()}
        if a.tta_every:
            points, train_s = [], 0.0
            for step in range(a.steps):
                dt, _ = one_step(step)
                train_s += dt
                if (step + 1) % a.tta_every == 0 or step + 1 == a.steps:
                    dist.barrier()
                    if rank == 0:
                        acc, loss = evaluate(p.model, p.x_test, p.y_test)
                        points.append({"step": step + 1, "train_s": train_s, "test_acc": acc,
                                       "test_loss": loss})
                    dist.barrier()
            report["tta"] = points
        else:
            for step in range(a.warmup):
                one_step(step)
            dist.barrier()
            c0 = read_counters(ifname) if ifname else None
            steps, compress, exchange, payload, padded = [], [], [], 0, 0
            for step in range(a.warmup, a.warmup + a.steps):
                dt, out = one_step(step)
                steps.append(dt)
                if out.times is not None:
                    compress.append(out.times.compress_s)
                    exchange.append(out.times.exchange_s)
                payload += sum(st.bytes_sent for st in out.stats)
                padded += out.padded_bytes
            dist.barrier()
            c1 = read_counters(ifname) if ifname else None
            compute = []
            model = ex.ddp_model
            for i in range(a.compute_steps):
                shards, s = batch_of(i)
                x, y = worker_batch(p, shards[rank], s, cfg.batch_size)
                with model.no_sync():
                    opt.zero_grad(set_to_none=True)
                    t0 = time.perf_counter()
                    F.cross_entropy(model(x), y).backward()
                    compute.append(time.perf_counter() - t0)
            opt.zero_grad(set_to_none=True)
            report |= {"step_s": steps, "compress_s": compress, "exchange_s": exchange,
                       "compute_s": compute, "payload_bytes": payload, "padded_bytes": padded,
                       "counters_before": c0, "counters_after": c1}
        return report
    finally:
        trainer.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
