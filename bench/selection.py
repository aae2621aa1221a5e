"""Table 1: coarse block selection against fine-grained top-k at the same density.

Coarse selection (numpy reference, numba, torch) goes from each layer's int32 error-feedback
accumulator to the ranked indices of its top-k blocks: exact L1 norm per block, then a stable
sort. Fine-grained top-k (torch.topk, numpy argpartition) goes from the layer's fp32 values to
the indices of its top-k elements by magnitude, with k per layer = the elements in the blocks
coarse selection keeps, so both keep the same number of elements. torch.topk runs with
sorted=False (its fastest setting), so the speed-ups are conservative.
"""
from __future__ import annotations

import numpy as np

from gradblock.refmodel.selection import block_norms, select_blocks

from .compress_step import NumbaLayers, NumbaMessage, NumbaStep
from .compress_step import check_frames as _check_step_frames
from .context import BenchContext, Prepared, optional_module, require
from .tables import Table, not_available
from .timing import measure, threads

BASELINE = "fine: torch.topk"
NUMBA_COARSE = "coarse: numba"


def _coarse_numpy(prep: Prepared):
    work = [(s.acc, s.layout, s.k_eff) for s in prep.steps]

    def run():
        return [select_blocks(block_norms(a, lay), k) for a, lay, k in work]
    return run


def _coarse_numba(prep: Prepared):
    fast = optional_module("gradblock.fastpath.fast")
    norms_fn, select_fn = require(fast, "block_norms", "select_blocks")
    work = [(s.acc, s.layout, s.k_eff) for s in prep.steps]

    def run():
        return [select_fn(norms_fn(a, lay), k) for a, lay, k in work]
    return run


def _torch_tensors(arrays, device):
    import torch
    return [torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in arrays]


def _coarse_torch(prep: Prepared, device: str):
    tc = optional_module("gradblock.torchstep")
    norms_fn, select_fn = require(tc, "block_norms", "select_blocks")
    accs = _torch_tensors([s.acc for s in prep.steps], device)
    work = [(a, s.layout, s.k_eff) for a, s in zip(accs, prep.steps)]

    def run():
        return [select_fn(norms_fn(a, lay), k) for a, lay, k in work]
    return run


def _fine_torch_topk(prep: Prepared, device: str):
    import torch
    xs = [x.reshape(-1) for x in _torch_tensors(prep.workload.grads, device)]
    work = list(zip(xs, prep.selected_elements()))

    def run():
        return [torch.topk(x.abs(), k, sorted=False).indices for x, k in work]
    return run


def _fine_numpy_argpartition(prep: Prepared):
    work = [(g.reshape(-1), k) for g, k in zip(prep.workload.grads, prep.selected_elements())]

    def run():
        return [np.argpartition(np.abs(x), x.size - k)[x.size - k:] for x, k in work]
    return run


def _check_coarse(prep: Prepared, result) -> None:
    """Every coarse implementation must pick the reference's blocks in the reference's order."""
    for i, (got, ref) in enumerate(zip(result, prep.steps)):
        got = got.cpu().numpy() if hasattr(got, "cpu") else np.asarray(got)
        if not np.array_equal(got.astype(np.int64), ref.selected):
            raise AssertionError(f"layer {i}: selected blocks differ from the reference")


def _check_fine(prep: Prepared, result) -> None:
    for i, (got, k) in enumerate(zip(result, prep.selected_elements())):
        if len(got) != k:
            raise AssertionError(f"layer {i}: fine top-k returned {len(got)} indices, wanted {k}")


def _whole_step(cls):
    """A whole numba compress step (table 2's implementation) timed against the selections:
    the issue's target compares the full step with torch.topk selection alone."""
    def factory(prep: Prepared):
        impl = cls(prep)
        impl.setup()
        impl.fn()
        _check_step_frames(prep, impl.frames())
        return impl.fn, impl.setup
    return factory


def _methods(devices: list[str]):
    """(label, device, factory): a factory takes a Prepared, checks its implementation
    against the reference and returns (callable, per-repetition setup or None)."""
    out = [("coarse: numpy reference", "cpu", _checked(_coarse_numpy, _check_coarse)),
           (NUMBA_COARSE, "cpu", _checked(_coarse_numba, _check_coarse))]
    for dev in devices:
        out += [("coarse: torch", dev, _checked(lambda p, d=dev: _coarse_torch(p, d), _check_coarse)),
                (BASELINE, dev, _checked(lambda p, d=dev: _fine_torch_topk(p, d), _check_fine))]
    out += [("fine: numpy argpartition", "cpu", _checked(_fine_numpy_argpartition, _check_fine)),
            ("whole step: numba compress_step", "cpu", _whole_step(NumbaStep)),
            ("whole step: numba compress_layers", "cpu", _whole_step(NumbaLayers)),
            ("whole step: numba compress_message", "cpu", _whole_step(NumbaMessage))]
    return out


def _checked(make, check):
    def factory(prep: Prepared):
        fn = make(prep)
        check(prep, fn())
        return fn, None
    return factory


def _cuda_devices() -> list[str]:
    try:
        import torch
    except ImportError:
        return []
    return ["cuda"] if torch.cuda.is_available() else []


def run(ctx: BenchContext) -> Table:
    table = Table("selection", "1. Selection: coarse blocks vs fine-grained top-k",
                  ["workload", "threads", "device", "method", "time (ms)",
                   "speed-up vs torch.topk"])
    try:
        import torch
    except ImportError:
        torch = None
    cuda = _cuda_devices()
    for w in ctx.workloads:
        prep = ctx.prepared(w)
        table.notes.append(
            f"{w.name}: {len(prep.steps)} layers, {w.n_params:,} elements; k = {ctx.k} of each "
            f"layer's blocks keeps {prep.density:.2%} of the elements; fine top-k keeps the same "
            f"count per layer")
        for n_threads in ctx.thread_counts:
            # GPU rows once per workload (host threads barely matter there), with the last group
            devices = ["cpu"] + (cuda if n_threads == ctx.thread_counts[-1] else [])
            rows = []
            with threads(n_threads):
                for label, dev, factory in _methods(devices):
                    if torch is None and "torch" in label:
                        rows.append((label, dev, None, not_available("torch not installed")))
                        continue
                    sync = torch.cuda.synchronize if dev == "cuda" else None

                    def timed(factory=factory, sync=sync):
                        fn, setup = factory(prep)
                        return measure(fn, ctx.reps, ctx.warmup, setup=setup, sync=sync).median
                    t, cell = ctx.attempt(f"selection {w.name} x{n_threads} {label} ({dev})", timed)
                    rows.append((label, dev, t, cell))
                    if t is not None:
                        ctx.log(f"selection {w.name} x{n_threads} {label} ({dev}): "
                                f"{t * 1e3:.3f} ms")
            base = {dev: t for label, dev, t, _ in rows if label == BASELINE and t}
            for label, dev, t, cell in rows:
                labels = [w.name, str(n_threads), dev, label]
                if t is None:
                    table.unmeasured(labels, cell)
                else:
                    speedup = base[dev] / t if dev in base else None
                    table.add(*labels, t * 1e3, speedup if speedup else "no baseline")
    table.notes.append("coarse: exact L1 norm per block (int64/uint64) + stable ranking, from "
                       "the int32 accumulator; fine: top-k of |x| over single elements from the "
                       "fp32 values, torch.topk(sorted=False) / np.argpartition; both per layer, "
                       "Python loop over layers included")
    table.notes.append("whole step: the complete numba compress step of table 2 (quantise, error "
                       "feedback, norms, selection, encode), timed here against selection alone "
                       "for the target")
    table.notes.append("every coarse implementation is checked to select the reference's blocks "
                       "in the reference's rank order before it is timed")
    return table
