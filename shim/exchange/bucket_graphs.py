"""A bucket's device encode and decode as CUDA graphs: one launch each instead of hundreds.

Why: the device codec (device_codec.py) is about 350 small kernels per bucket each way, and on
a GPU a step with it is bound by the host launching them (docs/gpu.md, H200: a ResNet-50 step
of 4,787 launches took 120 ms while the GPU was busy 31 ms). The codec has no host sync and
every shape in it is fixed by the bucket (its layout, k and slot width), which is what CUDA
graph capture needs: each (bucket, k, width) is captured once, after one eager run on a side
stream that fills the layout's and the CRC's device tables, and replayed every step after.

A graph reads and writes fixed addresses. Its inputs are copied into the graph's own input
tensors before each replay (one device copy each: the bucket's gradients, the residuals, the
velocities, the gathered slots); its outputs are the graph's own tensors, valid until its next
replay. That is what the hook needs: a slot until its collective is done (this step), the
residuals until the next step copies them in. The compressor state therefore points into the
graph's output tensors, and the state before a step into its input tensors (the rollback of a
NaN restores those). One graph per worker state: simulated workers in one process never share
one.

On the CPU (no graphs there) `Graphed` runs the same function eagerly on the same static
tensors and copies its results into the same output tensors, so the test suite checks the
plumbing bit for bit against the plain path on every run; only the capture itself is CUDA's.
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch

__all__ = ["Graphed", "graphed"]

MAX_GRAPHS = 64          # per worker state: buckets x k schedules x widths in use


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
            and a.dtype == b.dtype)


class Graphed:
    """`fn(*inputs) -> tuple of tensors (or None)`, replayed on static tensors: on CUDA a
    captured graph, on the CPU the function itself. `keep` holds objects whose identity the
    caller's key relies on (so an id() in the key is never reused while this lives)."""

    def __init__(self, fn: Callable, inputs: tuple, keep=None):
        self.fn, self.keep = fn, keep
        self.memo: dict = {}         # the caller's per-graph derived objects (views of outputs)
        self.static_in = tuple(None if x is None else x.detach().clone() for x in inputs)
        self.static_out = None
        self.graph = None
        dev = next(x.device for x in inputs if x is not None)
        if dev.type == "cuda":
            self._capture(dev)

    def _capture(self, dev: torch.device) -> None:
        with torch.cuda.device(dev):
            side = torch.cuda.Stream(dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):       # warm-up: device tables built, not captured
                self.fn(*self.static_in)
            torch.cuda.current_stream(dev).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: NCCL's watchdog thread keeps polling its events meanwhile
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.static_out = self.fn(*self.static_in)
            self.graph = graph

    def __call__(self, *inputs) -> tuple:
        for s, x in zip(self.static_in, inputs):
            if s is not None and not _same(s, x):
                s.copy_(x)
        if self.graph is not None:
            self.graph.replay()
            return self.static_out
        out = self.fn(*self.static_in)
        if self.static_out is None:
            self.static_out = tuple(None if o is None else o.clone() for o in out)
        else:
            for s, o in zip(self.static_out, out):
                if s is not None:
                    s.copy_(o)
        return self.static_out


_WARNED: set = set()


def graphed(cache: dict, key: tuple, fn: Callable, inputs: tuple, keep=None):
    """`fn(*inputs)` through the Graphed of `key` in `cache` (captured at first use) ->
    (outputs, the Graphed, or None where it ran eagerly). A capture that CUDA refuses runs
    `fn` eagerly for this key from then on, with one warning naming the reason (the results
    are the same; only the launches differ)."""
    g = cache.get(key)
    if g is None:
        if len(cache) >= MAX_GRAPHS:
            cache.clear()       # state views keep their tensors alive; the graphs go
        try:
            g = Graphed(fn, inputs, keep)
        except RuntimeError as e:
            if str(e) not in _WARNED:
                _WARNED.add(str(e))
                warnings.warn(f"gradblock: a bucket's codec could not be captured as a CUDA "
                              f"graph, it runs without one: {e}", RuntimeWarning, stacklevel=3)
            g = False
        cache[key] = g
    if g is False:
        return fn(*inputs), None
    return g(*inputs), g
