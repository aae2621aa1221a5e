"""Exchange and update: the numpy reference of docs/spec.md §5, plus a numba summing path.

Every worker decodes all N messages, sums each layer's payloads exactly in int64, turns the
sum into a float32 mean with `refmodel.quantiser.average` (cN = R / (QMAX * N)), and applies
global-momentum SGD one IEEE float32 operation at a time:

    V = float32(m * V) ; V = float32(V + U)
    w = float32(w - float32(lr * V))
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from gradblock.codec import errors as E
from gradblock.codec import zrle, zrle_numba

from .quantiser import DEFAULT_RANGE, QMAX, QuantConfig, average
from .validation import check_expected_n

# float64(s) of an int64 sum is exact while N * QMAX < 2**53 (spec §1.3).
MAX_WORKERS = 2**22 - 1


def _check_sizes(expected_sizes) -> list[int]:
    """Every expected layer size an integer in 0..2**32-1 (ExpectedSizeError otherwise)."""
    return [check_expected_n(s) for s in expected_sizes]


def _check_workers(n: int) -> None:
    if n < 1:
        raise ValueError("need at least one worker message")


def sum_messages(messages: Sequence[np.ndarray], expected_sizes: Sequence[int]) -> list[np.ndarray]:
    """Decode every worker's message (numpy reference decoder, sizes checked) and sum each
    layer's payloads in int64. Returns one flat int64 array per layer.

    All workers must use the same R and layer ids per layer; a mismatch raises ValueError
    naming the worker and layer (averaging a sum of differently scaled codes is meaningless)."""
    sizes = _check_sizes(expected_sizes)
    _check_workers(len(messages))
    sums = [np.zeros(n, dtype=np.int64) for n in sizes]
    first_frames = None
    for w, msg in enumerate(messages):
        try:
            frames = zrle.decode_message(msg, sizes)
        except E.FrameError as err:
            raise type(err)(f"worker {w}: {err.detail}", err.word) from err
        if first_frames is None:
            first_frames = frames
        _check_consistent(frames, first_frames, w)
        for acc, f in zip(sums, frames):
            acc += f.values
    return sums


def _check_consistent(frames, first, worker: int) -> None:
    for i, (f, f0) in enumerate(zip(frames, first)):
        if f.range_bits != f0.range_bits:
            raise ValueError(f"worker {worker} layer {i}: R = {f.range!r}, worker 0 used {f0.range!r}")
        if f.layer_id != f0.layer_id:
            raise ValueError(f"worker {worker} layer {i}: layer id {f.layer_id}, "
                             f"worker 0 sent {f0.layer_id}")


def sum_messages_fast(messages: Sequence[np.ndarray], expected_sizes: Sequence[int]) -> list[np.ndarray]:
    """sum_messages with the numba decoder adding every frame's literals straight into the
    int64 sums (zero runs cost nothing). Same result and errors as sum_messages."""
    sizes = _check_sizes(expected_sizes)
    _check_workers(len(messages))
    sums = [np.zeros(n, dtype=np.int64) for n in sizes]
    first = None
    for w, msg in enumerate(messages):
        words = zrle_numba.as_words(msg)
        frames, at = [], 0
        try:
            while at < words.size:
                i = len(frames)
                if i >= len(sizes):
                    raise E.SizeMismatchError(f"message has more than {len(sizes)} frames", at)
                frames.append(zrle_numba.decode_add(words, sums[i], sizes[i], at))
                at += frames[-1].n_words
            if len(frames) != len(sizes):
                raise E.SizeMismatchError(f"message has {len(frames)} frames, expected {len(sizes)}")
        except E.FrameError as err:
            raise type(err)(f"worker {w}: {err.detail}", err.word) from err
        if first is None:
            first = frames
        _check_consistent(frames, first, w)
    return sums


def average_layers(sums: Sequence[np.ndarray], n_workers: int,
                   cfgs: QuantConfig | float | Sequence[QuantConfig | float] = DEFAULT_RANGE
                   ) -> list[np.ndarray]:
    """int64 sums -> float32 means, float32(float64(s) * R / (QMAX * N)), per layer.
    `cfgs` is one range / QuantConfig for every layer or one per layer."""
    if isinstance(cfgs, (list, tuple)):
        if len(cfgs) != len(sums):
            raise ValueError(f"{len(cfgs)} range configs for {len(sums)} layers")
        per_layer = list(cfgs)
    else:
        per_layer = [cfgs] * len(sums)
    if not 1 <= int(n_workers) <= MAX_WORKERS:
        raise ValueError(f"n_workers must be in 1..{MAX_WORKERS}, got {n_workers}")
    out = []
    for s, cfg in zip(sums, per_layer):
        s = np.asarray(s)
        if s.dtype != np.int64:
            raise TypeError(f"sums must be int64, got {s.dtype}")
        bound = int(n_workers) * QMAX
        if s.size and int(np.abs(s).max()) > bound:
            raise ValueError(f"a sum exceeds N * QMAX = {bound}: not a sum of {n_workers} payloads")
        out.append(average(s, int(n_workers), cfg))
    return out


class GlobalMomentumSGD:
    """Global-momentum SGD over float32 parameters, spec §5, in the spec's operation order:
    V = float32(m*V); V = float32(V + U); w = float32(w - float32(lr*V)). No fused multiply-add:
    every numpy operation below rounds to float32 before the next one."""

    def __init__(self, params: Sequence[np.ndarray], lr: float, momentum: float = 0.9):
        self.params = list(params)
        for i, p in enumerate(self.params):
            if not isinstance(p, np.ndarray) or p.dtype != np.float32:
                raise TypeError(f"parameter {i} must be a float32 numpy array")
            if not p.flags.writeable:
                raise ValueError(f"parameter {i} must be writeable (updated in place)")
        self.lr = np.float32(lr)
        self.momentum = np.float32(momentum)
        if not (np.isfinite(self.lr) and np.isfinite(self.momentum)):
            raise ValueError(f"lr and momentum must be finite, got {lr!r}, {momentum!r}")
        self.velocity = [np.zeros_like(p) for p in self.params]

    def step(self, updates: Sequence[np.ndarray]) -> None:
        """Apply one averaged update U per parameter (float32, same number of elements)."""
        updates = list(updates)
        if len(updates) != len(self.params):
            raise ValueError(f"{len(updates)} updates for {len(self.params)} parameters")
        for i, u in enumerate(updates):
            u = np.asarray(u)
            if u.dtype != np.float32:
                raise TypeError(f"update {i} must be float32, got {u.dtype}")
            if u.size != self.params[i].size:
                raise ValueError(f"update {i} has {u.size} elements, parameter {self.params[i].size}")
        for p, v, u in zip(self.params, self.velocity, updates):
            u = np.asarray(u).reshape(p.shape)
            np.multiply(self.momentum, v, out=v)            # V = float32(m * V)
            np.add(v, u, out=v)                             # V = float32(V + U)
            step = np.multiply(self.lr, v)                  # float32(lr * V)
            np.subtract(p, step, out=p)                     # w = float32(w - step)
