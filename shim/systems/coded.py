"""`gradblock coded`: CSSGD coded exchange (refmodel/coded.py) driving real training steps,
in one process (simulation) or over torch.distributed (gloo, one process per worker).

Each step: the batch is cut into C(n, r) equal sample blocks; every block's gradient (float32,
all layers flattened) is quantised to int32 codes; the coded exchange delivers every block to
every worker; each worker sums all blocks in int64 and the model takes an SGD step on the
contract's average. Every step checks, on every worker, that the coded exchange recovered
exactly the codes the uncoded exchange delivers (bit for bit) and counts the words sent.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gradblock.codec.errors import UsageParser
from gradblock.codec import fileio
from gradblock.refmodel import coded
from gradblock.refmodel.quantiser import QuantConfig, average, quantise

from ..setup.data import load_dataset
from ..setup.models import build_model
from ..exchange.process_group import end_process_group


@dataclass
class CodedRun:
    workers: int
    redundancy: int
    steps: int
    backend: str
    model: str
    dataset: str
    block_samples: int
    params: int
    exact: bool
    steps_checked: int
    words_coded: int
    words_uncoded: int
    words_plain_allgather: int
    load_ratio: float
    load_ratio_formula: float
    compute_factor: float          # samples per worker vs uncoded SGD without redundancy
    saturated: int
    final_loss: float


def _block_gradient(model, x, y) -> np.ndarray:
    model.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).detach().numpy().astype(np.float32)


def _apply(model, mean: np.ndarray, lr: float) -> None:
    """w = float32(w - float32(lr * g)), one IEEE operation at a time (spec §5 with m = 0)."""
    lr32 = np.float32(lr)
    off = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            g = mean[off:off + n].reshape(tuple(p.shape))
            w = p.detach().numpy()
            p.copy_(torch.from_numpy((w - (lr32 * g).astype(np.float32)).astype(np.float32)))
            off += n


def _batches(ds, n_blocks: int, block_samples: int, steps: int, seed: int):
    rng = np.random.default_rng(seed)
    x, y = ds.train
    per_step = n_blocks * block_samples
    for _ in range(steps):
        idx = rng.choice(x.shape[0], per_step, replace=False)
        yield torch.from_numpy(x[idx]), torch.from_numpy(y[idx])


def _setup(args):
    ds = load_dataset(args.dataset)
    model = build_model(args.model, ds.num_classes, ds.in_shape, seed=args.seed)
    return ds, model


def run_simulation(args) -> CodedRun:
    ds, model = _setup(args)
    n, r = args.workers, args.redundancy
    blocks = coded.assign_blocks(n, r)
    cfg = QuantConfig.from_range(args.range)
    exact, words, sat, loss = True, 0, 0, float("nan")
    d = sum(p.numel() for p in model.parameters())
    for x, y in _batches(ds, len(blocks), args.block_samples, args.steps, args.seed):
        codes = {}
        for i, b in enumerate(blocks):
            sl = slice(i * args.block_samples, (i + 1) * args.block_samples)
            q = quantise(_block_gradient(model, x[sl], y[sl]), cfg)
            codes[b], sat = q.q, sat + q.saturated
        res = coded.coded_exchange(codes, n, r)
        words += res.words_sent
        reference = coded.global_sum(codes, blocks)          # the uncoded exchange's sum
        for w in range(n):
            exact &= all(np.array_equal(res.recovered[w][b], codes[b]) for b in blocks)
            exact &= np.array_equal(coded.global_sum(res.recovered[w], blocks), reference)
        _apply(model, average(reference, len(blocks), cfg), args.lr)
        with torch.no_grad():
            loss = float(torch.nn.functional.cross_entropy(model(x), y))
    return _result(args, "simulation", d, exact, args.steps, words, sat, loss)


def _result(args, backend, d, exact, steps_checked, words, sat, loss) -> CodedRun:
    n, r = args.workers, args.redundancy
    unc = coded.uncoded_words(n, r, d) * args.steps
    return CodedRun(n, r, args.steps, backend, args.model, args.dataset, args.block_samples, d, bool(exact),
                    steps_checked, int(words), int(unc), n * (n - 1) * d * args.steps,
                    words / unc if unc else float("nan"), coded.load_ratio_formula(r), float(r),
                    int(sat), loss)


# ------------------------------------------------------------------------ torch.distributed

def _worker(rank: int, args, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=args.workers)
    try:
        _worker_steps(rank, args, out_dir)
    finally:
        end_process_group()


def _worker_steps(rank: int, args, out_dir: str) -> None:
    torch.set_num_threads(1)
    ds, model = _setup(args)
    n, r = args.workers, args.redundancy
    blocks = coded.assign_blocks(n, r)
    mine = coded.blocks_of(rank, blocks)
    groups = coded.multicast_groups(n, r)
    # every rank creates every group in the same order (torch.distributed's rule)
    handles = {g: dist.new_group(list(g)) for g in groups}
    cfg = QuantConfig.from_range(args.range)
    d = sum(p.numel() for p in model.parameters())
    width = coded.packet_words(d, r)
    exact, words, sat, loss = True, 0, 0, float("nan")
    for x, y in _batches(ds, len(blocks), args.block_samples, args.steps, args.seed):
        known = {}
        for i, b in enumerate(blocks):
            if b in mine:
                sl = slice(i * args.block_samples, (i + 1) * args.block_samples)
                q = quantise(_block_gradient(model, x[sl], y[sl]), cfg)
                known[b], sat = q.q, sat + q.saturated
        parts: dict = {}
        for g in groups:
            if rank not in g:
                continue
            for sender in g:
                buf = (torch.from_numpy(coded.encode_packet(g, sender, known, d)) if sender == rank
                       else torch.empty(width, dtype=torch.int32))
                dist.broadcast(buf, src=sender, group=handles[g])
                if sender == rank:
                    words += width
                else:
                    block, pos, seg = coded.decode_packet(g, sender, rank, buf.numpy(), known, d)
                    parts.setdefault(block, {})[pos] = seg
        recovered = dict(known)
        for block, segs in parts.items():
            recovered[block] = np.concatenate([segs[p] for p in range(r)]).astype(np.int32)
        total = coded.global_sum(recovered, blocks)
        # the uncoded exchange: each block sent whole by its lowest-ranked holder
        owned = [b for b in mine if b[0] == rank]
        gathered = [None] * n
        dist.all_gather_object(gathered, {b: known[b] for b in owned})
        uncoded = {b: a for part in gathered for b, a in part.items()}
        exact &= all(np.array_equal(recovered[b], uncoded[b]) for b in blocks)
        exact &= np.array_equal(total, coded.global_sum(uncoded, blocks))
        _apply(model, average(total, len(blocks), cfg), args.lr)
        with torch.no_grad():
            loss = float(torch.nn.functional.cross_entropy(model(x), y))
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(
        {"exact": bool(exact), "words": int(words), "saturated": int(sat), "loss": loss, "d": d}))


def run_gloo(args) -> CodedRun:
    with tempfile.TemporaryDirectory(prefix="gradblock-coded-") as tmp:
        init_file = os.path.join(tmp, "init")
        mp.start_processes(_worker, args=(args, init_file, tmp), nprocs=args.workers, join=True,
                           start_method="spawn")
        ranks = [json.loads(Path(tmp, f"rank{k}.json").read_text()) for k in range(args.workers)]
    exact = all(rk["exact"] for rk in ranks)
    words = sum(rk["words"] for rk in ranks)
    # every holder computed a block, so a block's saturations are counted once per holder
    sat = sum(rk["saturated"] for rk in ranks) // args.redundancy
    return _result(args, "gloo", ranks[0]["d"], exact, args.steps, words, sat, ranks[0]["loss"])


# ------------------------------------------------------------------------------------- CLI

def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="gradblock coded", description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=_positive, default=4)
    p.add_argument("--redundancy", type=_positive, default=2)
    p.add_argument("--steps", type=_positive, default=5)
    p.add_argument("--backend", choices=("simulation", "gloo"), default="simulation")
    p.add_argument("--model", default="lenet5")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--block-samples", type=_positive, default=8, help="samples per sample block")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--range", type=float, default=10.0, help="quantiser range R (the paper's [-10, 10])")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", dest="json_out", help="write the result here")
    return p


def coded_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    coded.check_config(args.workers, args.redundancy)      # named errors: one line, exit 2
    QuantConfig.from_range(args.range)
    # a worker process that dies (mp.ProcessException) is not the user's input: exit 1
    run = run_gloo(args) if args.backend == "gloo" else run_simulation(args)
    out = asdict(run)
    print(f"coded exchange, {run.workers} workers, redundancy {run.redundancy}, {run.steps} steps "
          f"({run.backend}): exact={run.exact}, load {run.load_ratio:.4f} of uncoded "
          f"(paper: {run.load_ratio_formula:.4f}), {run.compute_factor:.0f}x compute per worker")
    if args.json_out:
        _write_json(Path(args.json_out), out)
    return 0 if run.exact else 1


def _write_json(path: Path, obj) -> None:
    fileio.write_text(path, json.dumps(obj, indent=2))
