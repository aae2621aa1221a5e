"""The checks of scripts/gpu-check.sh (docs/gpu.md), one subcommand per phase:

    python -m gradblock.bench.gpu_check codec --device cuda --model resnet50 --json F
    python -m torch.distributed.run --nproc-per-node N -m gradblock.bench.gpu_check ddp ...
    python -m torch.distributed.run --nproc-per-node N -m gradblock.bench.gpu_check selfcheck ...
    python -m gradblock.bench.gpu_check sim --device cuda --json F

* `codec`: the device codec bit for bit against the numpy reference on the model's real
  gradients (digits images scaled to 3x32x32), several steps with the residuals (and
  velocities) carried, N simulated workers through the simulation's own entry points
  (`encode_for` / `decode_for`, what every DDP rank runs): per configuration (k = 1 and a
  fraction, L1 and L2, momentum correction off and on, the all_gather and the allreduce
  exchange) every frame word, every average, residual and velocity compared with
  refmodel.compress / refmodel.momentum / refmodel.exchange / refmodel.global_select. The
  gradients are the same float32 values on both sides, so the codec must agree exactly.
* `hook`: the DDP hook's own codec (what DDP runs: on CUDA the device codec, encode into the
  all_gather slot, decode and average on the device) against the same reference, at world
  size 1, on the model's real gradients replayed exactly through DDP (a module of the same
  parameters whose loss has those gradients), the state carried over the steps.
* `ddp` (under torchrun): the shim's hook (`register`, what gradblock.ddp's state runs)
  through DistributedDataParallel with tiny buckets, for the all_gather and
  allreduce exchanges with and without momentum correction: parameters equal on every rank and
  equal to the single-process simulation on the same device, bytes counted by the hook.
* `selfcheck` (under torchrun): the shim's own DDP self-check (every compressor, a corrupted
  frame named on every rank), forwarded unchanged.
* `warm`: numba's kernels compiled (or loaded from its cache) once, before any rank starts.
* `sim`: the simulated-worker path for N > 1 on the device: SimulatedCluster steps with the
  workers reduced in two different orders give the same bits (the int64 sums make the result
  independent of the order), and the parameters move.

Every subcommand prints one line `RESULT pass|FAIL <detail>` and exits 0 only on a pass.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
import traceback

import numpy as np
import torch
import torch.nn.functional as F

from gradblock.refmodel.validation import NORMS
from gradblock.shim.params import EXCHANGES


def _shim():
    """The shim's modules, imported in one place (the structure work moves them)."""
    from gradblock.shim.compress import compressors
    from gradblock.shim.exchange import global_step, hook, optim, workers
    from gradblock.shim.setup import data, models
    return compressors, global_step, hook, optim, workers, data, models


def _result(ok: bool, detail: str) -> int:
    print(f"RESULT {'pass' if ok else 'FAIL'} {detail}", flush=True)
    return 0 if ok else 1


def _device(name: str, deterministic: bool = True) -> torch.device:
    """The device; on CUDA with torch's deterministic kernels when the check compares two
    trainings (DDP against the simulation), off when both sides see the same gradients."""
    dev = torch.device(name)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(_result(False, "torch sees no CUDA device"))
        from gradblock.shim.setup.problem import deterministic_cuda
        deterministic_cuda(deterministic)
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _write_json(path: str | None, payload) -> None:
    if path:
        from gradblock.codec.fileio import write_text
        write_text(path, json.dumps(payload, indent=2) + "\n")


def digits_images(hw: int = 32, channels: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's digits (bundled with the package: no download), scaled to hw x hw and
    repeated to `channels`: real images for the models' real gradients."""
    data = _shim()[5]
    ds = data.load_dataset("digits")
    x = torch.from_numpy(ds.x_train)
    x = F.interpolate(x, size=(hw, hw), mode="nearest").repeat(1, channels, 1, 1)
    return x.contiguous(), torch.from_numpy(ds.y_train)


# ------------------------------------------------------------------------------ codec

# (exchange, k, norm, local momentum): every axis of the issue; L2 is the all_gather path's
# alone (global selection sums L1 norms)
CONFIGS = [(ex, k, norm, m)
           for ex in EXCHANGES
           for k in (1, 0.01)
           for norm in (NORMS if ex == "allgather" else ("l1",))
           for m in (0.0, 0.9)]


def _range_for(m: float) -> float:
    return 100.0 if m else 10.0       # docs/training.md: correction's velocity needs R = 100


def _bits(t) -> np.ndarray:
    a = t.detach().cpu().contiguous().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    a = np.ascontiguousarray(a).reshape(-1)
    return a.view(np.int32) if a.dtype.itemsize == 4 else a


def _same(a, b) -> bool:
    x, y = _bits(a), _bits(b)
    return x.shape == y.shape and bool(np.array_equal(x, y))


def _digest(a) -> str:
    """The exact bits of a tensor or array (dtype width and shape included)."""
    import hashlib
    b = _bits(a)
    return hashlib.sha256(f"{b.dtype}{b.shape}".encode() + b.tobytes()).hexdigest()[:24]


def _reference_allgather(grads_np, res, vel, layers, cfg):
    """One step of the reference for every worker: frames (uint32 message), new residuals
    and velocities, then the averages of the summed messages."""
    from gradblock.refmodel.compress import compress_layer
    from gradblock.refmodel.exchange import average_layers, sum_messages
    from gradblock.refmodel.momentum import momentum_layer
    _, k, norm, m, R = cfg
    messages = []
    for w, g_w in enumerate(grads_np):
        frames = []
        for j, (lay, g) in enumerate(zip(layers, g_w)):
            if m:
                st = momentum_layer(g, res[w][j], vel[w][j], m, R=R, k=k, layer_id=lay.index,
                                    norm=norm)
                vel[w][j] = st.velocity_out
            else:
                st = compress_layer(g, res[w][j], R=R, k=k, layer_id=lay.index, norm=norm)
            res[w][j] = st.residual_out
            frames.append(np.asarray(st.frame, dtype=np.uint32))
        messages.append(np.concatenate(frames))
    sums = sum_messages(messages, [lay.numel for lay in layers])
    averaged = [a.reshape(lay.shape) for a, lay in
                zip(average_layers(sums, len(grads_np), R), layers)]
    return messages, averaged


def _reference_allreduce(grads_np, res, vel, layers, cfg):
    from gradblock.refmodel.global_select import global_step, plan_layers
    _, k, _, m, R = cfg
    plan = plan_layers([lay.shape for lay in layers], k=k, layer_ids=[lay.index for lay in layers],
                       names=[lay.name for lay in layers])
    step = global_step(grads_np, res, vel if m else None, plan, R=R, momentum=m or None)
    for w in range(len(grads_np)):
        res[w] = list(step.residuals[w])
        if m:
            vel[w] = list(step.velocities[w])
    return None, step.averaged


def _step_digests(s, messages, averaged, residual, velocity, layers, workers, m) -> dict:
    """(step, what, worker, layer) -> digest of every output the device and the reference
    must agree on; `residual(w, j)` / `velocity(w, j)` read a worker's state."""
    out = {}
    if messages is not None:
        for w in range(workers):
            out[(s, "message", w, -1)] = _digest(messages[w])
    for j in range(len(layers)):
        out[(s, "average", -1, j)] = _digest(averaged[j])
        for w in range(workers):
            out[(s, "residual", w, j)] = _digest(residual(w, j))
            if m:
                out[(s, "velocity", w, j)] = _digest(velocity(w, j))
    return out


_REF_INPUT: dict = {}      # what the forked reference processes read (copy-on-write)


def _reference_run(cfg) -> dict:
    """Every step of one configuration in the numpy reference -> its digests."""
    grads_np, layers = _REF_INPUT["grads"], _REF_INPUT["layers"]
    workers = len(grads_np[0])
    res = [[None] * len(layers) for _ in range(workers)]
    vel = [[None] * len(layers) for _ in range(workers)]
    ref = _reference_allgather if cfg[0] == "allgather" else _reference_allreduce
    out = {}
    for s, g in enumerate(grads_np):
        msgs, avg = ref(g, res, vel, layers, cfg)
        out |= _step_digests(s, msgs, avg, lambda w, j: res[w][j], lambda w, j: vel[w][j],
                             layers, workers, cfg[3])
    return out


def _device_run(compressors, global_step, layers, grads, cfg, cpu: bool) -> dict:
    """Every step of one configuration through the simulation's entry points -> digests."""
    ex, k, norm, m, R = cfg
    workers = len(grads[0])
    comp = compressors.build_compressor("coarse", layers, workers, k=k, norm=norm,
                                        local_momentum=m, exchange=ex, R=R)
    if cpu:
        comp.host_fast = False         # the torch ops, what a GPU runs, on CPU tensors too
    states = {w: comp.new_worker_state() for w in range(workers)}
    out = {}
    for s, g in enumerate(grads):
        stats = [compressors.StepStats() for _ in range(workers)]
        sent = [global_step.encode_for(comp, layers, g[w], states[w]) for w in range(workers)]
        got = global_step.decode_for(comp, layers, [msg for msg, _ in sent],
                                     list(range(workers)), states, stats)
        out |= _step_digests(s, [msg for msg, _ in sent] if ex == "allgather" else None, got,
                             lambda w, j: states[w].layers[layers[j].index]["residual"],
                             lambda w, j: states[w].layers[layers[j].index]["velocity"],
                             layers, workers, m)
    return out


def _first_difference(dev: dict, ref: dict, layers) -> str | None:
    for key in sorted(set(dev) | set(ref)):
        if dev.get(key) != ref.get(key):
            s, what, w, j = key
            where = f"step {s} {what}" + (f" worker {w}" if w >= 0 else "") + \
                (f" layer {layers[j].index} {layers[j].name}" if j >= 0 else "")
            if key not in dev or key not in ref:
                return f"{where}: missing on the {'device' if key not in dev else 'reference'} side"
            return f"{where}: bits differ"
    return None


def check_codec(device: torch.device, model_name: str, steps: int, workers: int, batch: int,
                configs=CONFIGS, log=print, jobs: int | None = None) -> dict:
    """The device codec against the reference for every configuration; the references run
    in `jobs` forked processes (default: one per CPU core) while the device works."""
    import concurrent.futures as cf
    import multiprocessing as mp
    compressors, global_step, *_rest = _shim()
    models = _rest[-1]
    model = models.build_model(model_name, num_classes=10, in_shape=(3, 32, 32), seed=0).to(device)
    layers = compressors.layers_of(model)
    params = [p for p in model.parameters() if p.requires_grad]
    x, y = digits_images()
    need = steps * workers * batch
    if need > len(y):
        raise ValueError(f"{need} images needed, digits has {len(y)}")
    # every worker's real gradient of every step, computed once on the device
    grads = []
    model.train()
    for s in range(steps):
        per_step = []
        for w in range(workers):
            lo = (s * workers + w) * batch
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[lo:lo + batch].to(device)),
                            y[lo:lo + batch].to(device)).backward()
            per_step.append([p.grad.detach().clone() for p in params])
        grads.append(per_step)
    _REF_INPUT.clear()
    _REF_INPUT.update({"grads": [[[g.cpu().numpy() for g in gw] for gw in gs] for gs in grads],
                   "layers": layers})
    report = {"device": str(device), "model": model_name, "layers": len(layers),
              "parameters": int(sum(lay.numel for lay in layers)), "steps": steps,
              "workers": workers, "configs": []}
    cfgs = [(ex, k, norm, m, _range_for(m)) for ex, k, norm, m in configs]
    jobs = min(len(cfgs), os.cpu_count() or 1) if jobs is None else jobs
    t0 = time.perf_counter()
    # jobs 0: the references in this process, one after the other (tests)
    pool = cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork")) if jobs else \
        cf.ThreadPoolExecutor(1)
    with pool:
        pending = [pool.submit(_reference_run, cfg) for cfg in cfgs]
        for cfg, fut in zip(cfgs, pending):
            ex, k, norm, m, R = cfg
            entry = {"config": f"{ex} k={k} {norm} m={m} R={R:g}", "ok": False}
            t1 = time.perf_counter()
            try:
                dev = _device_run(compressors, global_step, layers, grads, cfg,
                                  device.type == "cpu")
                entry["device_seconds"] = round(time.perf_counter() - t1, 2)
                ref = fut.result()
                diff = _first_difference(dev, ref, layers)
                entry["compared"] = len(ref)
                entry["ok"] = diff is None
                if diff:
                    entry["mismatch"] = diff
            except Exception as e:  # noqa: BLE001 - a crash is this configuration's failure
                entry["error"] = f"{type(e).__name__}: {e}"
                entry["traceback"] = traceback.format_exc()
            report["configs"].append(entry)
            log(f"  {'ok  ' if entry['ok'] else 'FAIL'} {entry['config']}"
                + ("" if entry["ok"] else f" -- {entry.get('mismatch') or entry.get('error')}"),
                flush=True)
    _REF_INPUT.clear()
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["ok"] = all(c["ok"] for c in report["configs"])
    return report


# ------------------------------------------------------------------------------ the hook's codec

class _GradientReplay(torch.nn.Module):
    """Parameters of a model's shapes and names whose loss sum((p * G).sum()) has exactly the
    given gradients G: the DDP hook then sees a real model's gradients bit for bit, with that
    model's buckets (same shapes, same order)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.ps = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros_like(p)) for _, p in model.named_parameters()
             if p.requires_grad])

    def forward(self, grads):
        return sum((p * g).sum() for p, g in zip(self.ps, grads))


def _hook_run(compressors, hook, model, grads, cfg, codec, device, graphs=False) -> dict:
    """Every step of one configuration through the DDP hook at world size 1 -> digests of the
    averages the hook wrote into the gradients and of the compressor state it kept."""
    ex, k, norm, m, R = cfg
    replay = _GradientReplay(model).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(
        replay, device_ids=[device.index] if device.type == "cuda" else None)
    layers = compressors.layers_of(replay)
    comp = compressors.build_compressor("coarse", layers, 1, k=k, norm=norm, local_momentum=m,
                                        exchange=ex, R=R)
    if codec:
        comp.codec = codec
    comp.graphs = graphs
    state = hook.register(ddp, comp)
    out = {}
    for s, g in enumerate(grads):
        ddp.zero_grad(set_to_none=True)
        state.backward(ddp(g[0]))
        out |= _step_digests(s, None, [p.grad for p in replay.ps],
                             lambda w, j: state.worker_state.layers[layers[j].index]["residual"],
                             lambda w, j: state.worker_state.layers[layers[j].index]["velocity"],
                             layers, 1, m)
    return out


def check_hook(device: torch.device, model_name: str, steps: int, batch: int, codec: str | None,
               configs=CONFIGS, log=print, jobs: int | None = None, graphs: str = "off") -> dict:
    """The DDP hook's own codec (on CUDA the device codec: encode into the all_gather slot,
    decode and average on the device) against the numpy reference, at world size 1 (a
    one-process group: NCCL on a GPU, gloo on the CPU), on a real model's gradients replayed
    exactly, several steps with the state carried. `codec` forces the compressor's codec
    ("device" runs the GPU's code on CPU tensors); `graphs` "on" / "both" runs the device
    codec as CUDA graphs (shim/exchange/bucket_graphs.py), "both" each configuration twice."""
    import concurrent.futures as cf
    import multiprocessing as mp
    import torch.distributed as dist
    compressors, _, hook, *_rest = _shim()
    models = _rest[-1]
    model = models.build_model(model_name, num_classes=10, in_shape=(3, 32, 32), seed=0).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    x, y = digits_images()
    grads = []
    for s in range(steps):
        model.zero_grad(set_to_none=True)
        lo = s * batch
        F.cross_entropy(model(x[lo:lo + batch].to(device)), y[lo:lo + batch].to(device)).backward()
        grads.append([[p.grad.detach().clone() for p in params]])       # one worker
    layers = compressors.layers_of(model)
    _REF_INPUT.clear()
    _REF_INPUT.update({"grads": [[[g.cpu().numpy() for g in gw] for gw in gs] for gs in grads],
                       "layers": layers})
    own_group = not dist.is_initialized()
    if own_group:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                store=dist.HashStore(), rank=0, world_size=1)
    report = {"device": str(device), "model": model_name, "layers": len(layers), "steps": steps,
              "codec": codec or "auto", "graphs": graphs, "configs": []}
    modes = {"off": (False,), "on": (True,), "both": (False, True)}[graphs]
    cfgs = [(ex, k, norm, m, _range_for(m)) for ex, k, norm, m in configs]
    jobs = min(len(cfgs), os.cpu_count() or 1) if jobs is None else jobs
    t0 = time.perf_counter()
    pool = cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork")) if jobs else \
        cf.ThreadPoolExecutor(1)
    try:
        with pool:
            pending = [pool.submit(_reference_run, cfg) for cfg in cfgs]
            for (cfg, fut), graphed in itertools.product(zip(cfgs, pending), modes):
                ex, k, norm, m, R = cfg
                entry = {"config": f"{ex} k={k} {norm} m={m} R={R:g}"
                         + (" graphs" if graphed else ""), "ok": False}
                try:
                    dev = _hook_run(compressors, hook, model, grads, cfg, codec, device, graphed)
                    ref = {key: v for key, v in fut.result().items() if key[1] != "message"}
                    diff = _first_difference(dev, ref, layers)
                    entry["compared"] = len(ref)
                    entry["ok"] = diff is None
                    if diff:
                        entry["mismatch"] = diff
                except Exception as e:  # noqa: BLE001 - a crash is this configuration's failure
                    entry["error"] = f"{type(e).__name__}: {e}"
                    entry["traceback"] = traceback.format_exc()
                report["configs"].append(entry)
                log(f"  {'ok  ' if entry['ok'] else 'FAIL'} hook {entry['config']}"
                    + ("" if entry["ok"] else f" -- {entry.get('mismatch') or entry.get('error')}"),
                    flush=True)
    finally:
        if own_group:
            dist.destroy_process_group()
        _REF_INPUT.clear()
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["ok"] = all(c["ok"] for c in report["configs"])
    return report


# ------------------------------------------------------------------------------ DDP

DDP_CONFIGS = [  # (name, build_compressor keywords)
    ("coarse k=1 allgather", dict(k=1)),
    ("coarse k=0.1 l2 m=0.9 R=100 allgather", dict(k=0.1, norm="l2", local_momentum=0.9, R=100.0)),
    ("coarse k=1 allreduce", dict(k=1, exchange="allreduce")),
    ("coarse k=0.1 m=0.9 R=100 allreduce", dict(k=0.1, exchange="allreduce", local_momentum=0.9,
                                              R=100.0)),
]


def _register(ddp, kw: dict):
    """The shim's register (gradblock.ddp's state delegates to it; the public API itself runs
    on the device in gpu-check.sh's phase 2 through examples/ddp_torchrun.py: bench/ may not
    import the gradblock package, docs/architecture.md)."""
    compressors, _, hook, *_ = _shim()
    return hook.register(ddp, compressors.build_compressor(
        "coarse", compressors.layers_of(ddp.module), ddp.process_group.size(), **kw))


def check_ddp(device: torch.device, steps: int = 4) -> dict:
    import torch.distributed as dist
    compressors, _, _, optim, workers, _, models = _shim()
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(7)
    data = [[(torch.randn(8, 1, 28, 28, generator=g).to(device),
              torch.randint(0, 10, (8,), generator=g).to(device)) for _ in range(world)]
            for _ in range(steps)]
    out = {"rank": rank, "world": world, "device": str(device), "configs": []}
    for name, kw in DDP_CONFIGS:
        entry = {"config": name}
        try:
            model = models.build_model("lenet5", seed=0).to(device)
            ddp = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=0.01)
            state = _register(ddp, kw)
            momentum = 0.0 if kw.get("local_momentum") else 0.9
            opt = optim.GlobalMomentumSGD(model.parameters(), lr=0.05, momentum=momentum)
            sent = 0
            for step in data:
                xb, yb = step[rank]
                state.reset_step()
                opt.zero_grad(set_to_none=True)
                state.backward(F.cross_entropy(ddp(xb), yb))
                sent += state.stats.bytes_sent
                opt.step()
            sim_model = models.build_model("lenet5", seed=0).to(device)
            sim_layers = compressors.layers_of(sim_model)
            cluster = workers.SimulatedCluster(
                sim_model, compressors.build_compressor("coarse", sim_layers, world, **kw),
                sim_layers, F.cross_entropy, device, timed=False)
            sim_opt = optim.GlobalMomentumSGD(sim_model.parameters(), lr=0.05, momentum=momentum)
            for step in data:
                cluster.step(step, sim_opt)
            mine = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            sim = torch.cat([p.detach().reshape(-1) for p in sim_model.parameters()])
            gathered = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(gathered, mine)
            entry |= {"equal_to_simulation": _same(mine, sim),
                      "equal_on_all_ranks": all(_same(t, gathered[0]) for t in gathered),
                      "bytes_sent": int(sent)}
            entry["ok"] = bool(entry["equal_to_simulation"] and entry["equal_on_all_ranks"]
                               and sent > 0)
        except Exception as e:  # noqa: BLE001 - the report carries it
            entry |= {"ok": False, "error": f"{type(e).__name__}: {e}",
                      "traceback": traceback.format_exc()}
        out["configs"].append(entry)
    out["ok"] = all(c["ok"] for c in out["configs"])
    return out


# ------------------------------------------------------------------------------ simulation

def check_sim(device: torch.device, workers_n: int = 3, steps: int = 3) -> dict:
    compressors, _, _, optim, workers, _, models = _shim()
    g = torch.Generator().manual_seed(11)
    data = [[(torch.randn(8, 1, 28, 28, generator=g).to(device),
              torch.randint(0, 10, (8,), generator=g).to(device)) for _ in range(workers_n)]
            for _ in range(steps)]
    out = {"device": str(device), "workers": workers_n, "steps": steps, "configs": []}
    for name, kw in DDP_CONFIGS:
        entry = {"config": name}
        try:
            finals, sent = [], []
            for order in (list(range(workers_n)), list(range(workers_n))[::-1]):
                model = models.build_model("lenet5", seed=0).to(device)
                start = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
                layers = compressors.layers_of(model)
                cluster = workers.SimulatedCluster(
                    model, compressors.build_compressor("coarse", layers, workers_n, **kw),
                    layers, F.cross_entropy, device, timed=False)
                opt = optim.GlobalMomentumSGD(model.parameters(), lr=0.05,
                                              momentum=0.0 if kw.get("local_momentum") else 0.9)
                total = 0
                for step in data:
                    r = cluster.step(step, opt, order=order)
                    total += sum(s.bytes_sent for s in r.stats)
                finals.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
                sent.append(total)
            entry |= {"order_independent": _same(finals[0], finals[1]),
                      "moved": not _same(finals[0], start), "bytes_sent": sent[0]}
            entry["ok"] = bool(entry["order_independent"] and entry["moved"] and sent[0] > 0)
        except Exception as e:  # noqa: BLE001
            entry |= {"ok": False, "error": f"{type(e).__name__}: {e}",
                      "traceback": traceback.format_exc()}
        out["configs"].append(entry)
    out["ok"] = all(c["ok"] for c in out["configs"])
    return out


# ------------------------------------------------------------------------------ entry

def _init_group(device_arg: str) -> torch.device:
    import torch.distributed as dist
    if "RANK" not in os.environ:
        raise SystemExit(_result(False, "this subcommand must be started by torchrun"))
    torch.set_num_threads(1)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device_arg.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit(_result(False, "torch sees no CUDA device"))
        torch.cuda.set_device(local)
    dev = _device(f"cuda:{local}" if device_arg.startswith("cuda") else "cpu")
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo",
                            device_id=dev if dev.type == "cuda" else None)
    return dev


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gradblock.bench.gpu_check",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("codec")
    c.add_argument("--device", default="cuda")
    c.add_argument("--model", default="resnet50")
    c.add_argument("--steps", type=int, default=3)
    c.add_argument("--workers", type=int, default=2)
    c.add_argument("--batch", type=int, default=4)
    c.add_argument("--json", default=None)
    h = sub.add_parser("hook", help="the DDP hook's codec against the reference (world size 1)")
    h.add_argument("--device", default="cuda")
    h.add_argument("--model", default="resnet50")
    h.add_argument("--steps", type=int, default=3)
    h.add_argument("--batch", type=int, default=4)
    h.add_argument("--codec", default=None, choices=["auto", "device", "host"],
                   help="the compressor's codec (None: auto, the device codec on a GPU)")
    h.add_argument("--graphs", default="off", choices=["off", "on", "both"],
                   help="the device codec as CUDA graphs (both: every configuration twice)")
    h.add_argument("--json", default=None)
    d = sub.add_parser("ddp")
    d.add_argument("--device", default="cuda")
    d.add_argument("--json", default=None, help="rank 0 writes every rank's report here")
    sub.add_parser("selfcheck", help="python -m gradblock.shim.exchange.ddp_check's options")
    wm = sub.add_parser("warm", help="compile (or load) numba's kernels once, before the "
                                     "ranks start")
    wm.add_argument("--json", default=None)
    m = sub.add_parser("sim")
    m.add_argument("--device", default="cuda")
    m.add_argument("--workers", type=int, default=3)
    m.add_argument("--json", default=None)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["selfcheck"]:            # every option is the self-check's own
        from gradblock.shim.exchange import ddp_check
        rc = ddp_check.main(argv[1:])
        if rc or os.environ.get("RANK") == "0":      # one line for the row, each failure's own
            print(f"RESULT {'pass' if rc == 0 else 'FAIL'} the shim's ddp self-check"
                  + ("" if rc == 0 else f" (rank {os.environ.get('RANK')}: exit {rc})"), flush=True)
        return rc
    a = p.parse_args(argv)
    if a.cmd == "codec":
        # the reference and the device get the same gradients: their bits need no determinism
        # (and ResNet-50's adaptive pooling has no deterministic CUDA backward)
        dev = _device(a.device, deterministic=False)
        rep = check_codec(dev, a.model, a.steps, a.workers, a.batch)
        _write_json(a.json, rep)
        n_ok = sum(c["ok"] for c in rep["configs"])
        return _result(rep["ok"], f"{n_ok}/{len(rep['configs'])} configurations bit-exact "
                                  f"({rep['model']}, {rep['layers']} layers, {rep['steps']} steps, "
                                  f"{rep['workers']} workers, {dev})")
    if a.cmd == "hook":
        dev = _device(a.device, deterministic=False)     # the replayed gradients are fixed
        rep = check_hook(dev, a.model, a.steps, a.batch, a.codec, graphs=a.graphs)
        _write_json(a.json, rep)
        n_ok = sum(c["ok"] for c in rep["configs"])
        return _result(rep["ok"], f"hook: {n_ok}/{len(rep['configs'])} configurations bit-exact "
                                  f"({rep['model']}, {rep['layers']} layers, {rep['steps']} steps, "
                                  f"codec {rep['codec']}, graphs {rep['graphs']}, {dev})")
    if a.cmd == "warm":
        # the simulation of every DDP configuration on the CPU runs every host kernel (the
        # codec, momentum correction, global selection): numba's cache is filled here once,
        # not by every rank of phase 2 at the same time
        t0 = time.perf_counter()
        rep = check_sim(torch.device("cpu"), workers_n=2, steps=1)
        rep["seconds"] = round(time.perf_counter() - t0, 1)
        _write_json(a.json, rep)
        return _result(rep["ok"], f"numba kernels ready in {rep['seconds']} s")
    if a.cmd == "sim":
        dev = _device(a.device)
        rep = check_sim(dev, a.workers)
        _write_json(a.json, rep)
        bad = [c["config"] for c in rep["configs"] if not c["ok"]]
        return _result(rep["ok"], f"{len(rep['configs']) - len(bad)}/{len(rep['configs'])} "
                                  f"order-independent ({rep['workers']} workers, {dev})"
                       + (f"; failed: {bad}" if bad else ""))
    # ddp
    import torch.distributed as dist
    dev = _init_group(a.device)
    rep = check_ddp(dev)
    reports = [None] * dist.get_world_size()
    dist.all_gather_object(reports, rep)
    ok = all(r["ok"] for r in reports)
    if dist.get_rank() == 0:
        _write_json(a.json, reports)
        backend = dist.get_backend()
        n_ok = sum(c["ok"] for c in rep["configs"])
        bad = [c["config"] + ": " + c.get("error", "results differ")
               for r in reports for c in r["configs"] if not c["ok"]]
        _result(ok, f"{n_ok}/{len(rep['configs'])} configurations, {backend}, world "
                    f"{dist.get_world_size()}" + (f"; failed: {bad}" if bad else ""))
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
