"""Gradient compressors for data-parallel training: one interface, four methods.

* `dense`  : the baseline, every float32 sent.
* `topk`   : fine-grained per-layer top-k by |value| with float32 error feedback.
* `dlgs`   : per-layer top-k whose threshold is recomputed every `interval` steps and reused in
             between (everything with |value| >= threshold is sent), float32 error feedback.
* `coarse` : the gradblock codec (docs/spec.md): int32 quantiser, integer error feedback, the k
             largest-L1 blocks per layer, one ZRLE v1 frame per layer, exact int64 sums.

A worker turns each layer's gradient into a *packet* (a 1-D int32 tensor, the wire words);
a group of layers (a DDP bucket, or the whole model) is one *message*, the packets
concatenated in layer order. Every worker then decodes every worker's message and reduces the
contributions to the averaged float32 gradient. `encode_group` / `decode_group` are that code
path, shared by the DDP hook (shim/exchange/hook.py) and the single-process simulation (shim/exchange/workers.py).

Packet formats (all 32-bit words, so one int32 collective carries every method):
* dense : n words, the float32 bit patterns.
* sparse (topk, dlgs): [count, idx_0 .. idx_{count-1}, val_0 .. val_{count-1}], indices strictly
  increasing int32, values float32 bit patterns.
* coarse: one ZRLE v1 frame (self-delimiting; header, tokens, trailer).
Byte counts are the packet lengths: headers, trailers, counts and indices included.

Layers with fewer than `dense_below` elements are sent dense by every method (no residual).

Momentum correction (Deep Gradient Compression's local momentum; docs/spec.md §7), option
`local_momentum=m`: each worker keeps a velocity u per layer and compresses u instead of the
gradient; factor masking (on unless `momentum_mask=False`) zeroes u where the layer was sent.
* coarse: u is int32 in the quantised domain, exactly §7 (torchstep.compress_group, bit-exact
  with refmodel.momentum.momentum_layer); m is rounded once to Q0.16.
* topk / dlgs (the float variant, so the comparison is fair): u = float32(m * u) + g in float32
  with the same Q0.16 m, accumulated into the float32 residual; masked on the sent elements.
* layers sent dense (dense_below, the dense compressor): u = float32(m * u) + g is sent,
  ordinary momentum carried by the worker.
The global optimiser must then run without momentum (the trainer refuses both).

Sparsity warm-up (`warmup=Warmup(steps, start_fraction)`, shim/compress/warmup.py): topk / dlgs / coarse
send more blocks / elements during their first compressed steps, decaying to the target.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from gradblock.codec import errors as frame_errors
from gradblock import torchstep as tc
from gradblock.codec import zrle_torch
from gradblock.codec.zrle import DEFAULT_LMAX_LOG2, frame_words_bound
from gradblock.refmodel.momentum import MomentumConfig
from gradblock.refmodel.quantiser import DEFAULT_RANGE, NonFiniteError
from gradblock.refmodel.selection import block_layout, resolve_k
from gradblock.refmodel.validation import check_block_size, check_k, check_lmax_log2, check_range

from .. import params
from ..errors import ConfigError
from ..params import COMPRESSORS  # noqa: F401  (the one list of the methods' names)
from .warmup import Warmup


class PacketError(frame_errors.GradblockError):
    """A peer's packet for a non-frame method (dense / sparse) or a message's framing is
    malformed: wrong length, index out of range or unsorted, wrong layer id."""


class NonFinitePacketError(PacketError):
    """A peer's float32 values (dense or sparse packet) hold NaN or Inf: averaging them would
    spread the damage into every worker's weights, so they are refused by name."""


@dataclass(frozen=True)
class LayerInfo:
    index: int                 # position among the model's trainable parameters (frame layer id)
    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)          # 1 for a scalar


def layers_of(model: torch.nn.Module) -> list[LayerInfo]:
    """One LayerInfo per trainable parameter, in `named_parameters()` order."""
    return [LayerInfo(i, name, tuple(p.shape))
            for i, (name, p) in enumerate((n, p) for n, p in model.named_parameters()
                                          if p.requires_grad)]


@dataclass
class StepStats:
    """What one worker sent in one step (summed over layers)."""
    bytes_sent: int = 0
    elements_sent: int = 0       # nonzero payload elements / floats sent
    sat_quant: int = 0
    sat_feedback: int = 0
    sat_momentum: int = 0        # coarse with momentum correction: |mul(m, u) + Q(g)| > QMAX

    def add(self, other: "StepStats") -> None:
        self.bytes_sent += other.bytes_sent
        self.elements_sent += other.elements_sent
        self.sat_quant += other.sat_quant
        self.sat_feedback += other.sat_feedback
        self.sat_momentum += other.sat_momentum


@dataclass
class WorkerState:
    """One worker's compressor state: per-layer tensors (residuals, thresholds) and counters."""
    layers: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    steps: dict[int, int] = field(default_factory=dict)   # compress calls per layer
    # the device codec's CUDA graphs of this worker (shim/exchange/bucket_graphs.py); not state
    graphs: dict = field(default_factory=dict, repr=False, compare=False)

    def state_dict(self) -> dict:
        return {"layers": {int(i): {k: v.detach().cpu().clone() for k, v in d.items()}
                           for i, d in self.layers.items()},
                "steps": {int(i): int(s) for i, s in self.steps.items()}}

    @classmethod
    def from_state_dict(cls, sd: dict, device: torch.device | str) -> "WorkerState":
        try:
            layers = {int(i): {str(k): v.to(device) for k, v in d.items()}
                      for i, d in sd["layers"].items()}
            steps = {int(i): int(s) for i, s in sd["steps"].items()}
        except (KeyError, AttributeError, TypeError) as e:
            raise ValueError(f"malformed compressor state: {e}") from None
        return cls(layers, steps)


def widen(g: torch.Tensor) -> torch.Tensor:
    """A bfloat16 / float16 gradient as float32 (every value of either is a float32 value, so
    the widening is exact and the contract runs as it is); other tensors unchanged."""
    return g.float() if g.dtype in (torch.bfloat16, torch.float16) else g


def _float_bits(x: torch.Tensor) -> torch.Tensor:
    return x.detach().reshape(-1).contiguous().view(torch.int32)


def _check_form(layer: LayerInfo, grad: torch.Tensor) -> None:
    """A gradient's dtype and shape, checked once for every layer by encode_many (the paths
    below it, the numba host path included, trust it)."""
    if grad.dtype != torch.float32:
        raise TypeError(f"layer {layer.name!r}: gradient must be float32, got {grad.dtype}")
    if tuple(grad.shape) != layer.shape:
        raise ValueError(f"layer {layer.name!r}: gradient shape {tuple(grad.shape)}, "
                         f"expected {layer.shape}")


def _check_grad(layer: LayerInfo, grad: torch.Tensor) -> None:
    """No NaN in a gradient the torch ops encode (the coarse kernels find NaN themselves)."""
    nan = torch.isnan(grad)
    count = int(nan.sum().item())
    if count:
        raise NonFiniteError(count, int(torch.argmax(nan.reshape(-1).to(torch.uint8)).item()),
                             layer.name)


class Compressor:
    """Base class: dense packets for small layers, the method's own packets otherwise."""

    name = "base"
    # CPU tensors go through the numba kernels (shim/compress/fastpath.py; bit-identical frames and
    # sums); False keeps the torch ops everywhere (tests compare the two)
    host_fast = True
    # messages are ZRLE v1 frames (spec §3): whole-message numba decoding and the host view of
    # a frame apply to them (decode_group, the hook's warm-up)
    frame_coded = False
    # where the DDP hook runs the codec (shim/exchange/device_codec.py): "auto" (the device
    # for gradients off the CPU, numba on it), "device" or "host"
    codec = "auto"
    # the device codec's encode and decode of a bucket each as one CUDA graph (on the CPU the
    # same static-buffer plumbing, eagerly): shim/exchange/bucket_graphs.py
    graphs = False
    # a non-finite gradient in the DDP hook: "raise" (the contract: a NaN is NonFiniteError on
    # its rank, PeerNonFiniteError on the others; an Inf saturates) or "skip" (mixed precision
    # with torch's GradScaler: a NaN or Inf on any rank makes the bucket's averages NaN on
    # every rank, so the scaler skips the step as it would without the hook, and no rank's
    # compressor state moves)
    nonfinite = "raise"

    def __init__(self, layers: Sequence[LayerInfo], n_workers: int, *, dense_below: int = 0,
                 local_momentum: float = 0.0, momentum_mask: bool = True,
                 warmup: Warmup | None = None):
        # the settings as shim/params.py declares them (ConfigError, the contract's named errors)
        params.check_values({"workers": n_workers, "dense_below": dense_below,
                             "local_momentum": local_momentum, "momentum_mask": momentum_mask})
        self.layers = list(layers)
        self.n_workers = int(n_workers)
        self.dense_below = int(dense_below)
        # momentum correction: m rounded once to Q0.16 (MomentumError if not in [0, 1))
        m = MomentumConfig.from_float(local_momentum)
        self.momentum = m if m.m_fix > 0 else None
        self.m_float = float(np.float32(m.value))       # exact: 16 fraction bits
        self.momentum_mask = bool(momentum_mask)
        self.warmup = warmup if warmup is not None else Warmup()

    # -- configuration, recorded in checkpoints so a resume with other settings is refused
    def config(self) -> dict:
        c = {"name": self.name, "n_workers": self.n_workers, "dense_below": self.dense_below}
        if self.momentum is not None:         # keys only when used: older checkpoints still match
            c |= {"local_momentum_fix": self.momentum.m_fix, "momentum_mask": self.momentum_mask}
        if self.warmup.active:
            c |= {"warmup_steps": self.warmup.steps,
                  "warmup_start_fraction": self.warmup.start_fraction}
        return c

    def sends_dense(self, layer: LayerInfo) -> bool:
        return layer.numel < self.dense_below

    def new_worker_state(self) -> WorkerState:
        return WorkerState()

    def state_spec(self, layer: LayerInfo) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        """What a worker keeps per layer: tensor name -> (dtype, shape). Checkpoints are
        validated against it. A layer sent dense keeps only its float32 velocity (with
        momentum correction); a compressed layer what the method keeps (`_state_spec`)."""
        if self.sends_dense(layer):
            return {"velocity": (torch.float32, layer.shape)} if self.momentum else {}
        return self._state_spec(layer)

    def _state_spec(self, layer: LayerInfo) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        return {}

    def compressed_step(self, layer: LayerInfo, ws: WorkerState) -> int:
        """How many times this worker has compressed `layer`: the warm-up schedule's step."""
        return ws.steps.get(layer.index, 0)

    def _float_velocity(self, layer: LayerInfo, grad: torch.Tensor, st: dict | None
                        ) -> torch.Tensor:
        """u = float32(m * u) + g, two float32 roundings (no fused multiply-add)."""
        u = None if st is None else st.get("velocity")
        if u is None:
            u = torch.zeros(layer.shape, dtype=torch.float32, device=grad.device)
        u = u * self.m_float
        return u + grad.reshape(layer.shape)

    # -- per layer
    def encode(self, layer: LayerInfo, grad: torch.Tensor, ws: WorkerState):
        """One layer -> (packet int32 1-D tensor, StepStats)."""
        return self.encode_many([layer], [grad], ws)[0]

    def encode_many(self, layers: Sequence[LayerInfo], grads: Sequence[torch.Tensor],
                    ws: WorkerState) -> list[tuple[torch.Tensor, StepStats]]:
        """Several layers at once -> [(packet, StepStats)] in the same order. `ws` changes
        only if every layer encodes (a NaN gradient leaves the state as it was). bfloat16 and
        float16 gradients are widened to float32 first (exact: docs/spec.md §1)."""
        grads = [widen(g) for g in grads]
        out: list = [None] * len(layers)
        compressed = []
        velocities = {}                 # dense layers' new velocities, kept once all succeed
        for layer, g in zip(layers, grads, strict=True):
            _check_form(layer, g)
        for j, (layer, g) in enumerate(zip(layers, grads)):
            if self.sends_dense(layer):
                _check_grad(layer, g)
                g = g.detach()
                if self.momentum is not None:       # ordinary momentum, carried locally
                    g = velocities[layer.index] = self._float_velocity(
                        layer, g, ws.layers.get(layer.index))
                words = _float_bits(g).clone()
                out[j] = (words, StepStats(4 * words.numel(), layer.numel))
            else:
                compressed.append(j)
        if compressed:
            sub = [layers[j] for j in compressed]
            results = self._encode_layers(sub, [grads[j].detach() for j in compressed], ws)
            for j, r in zip(compressed, results):
                out[j] = r
            for layer in sub:
                ws.steps[layer.index] = ws.steps.get(layer.index, 0) + 1
        for i, u in velocities.items():
            ws.layers[i] = {"velocity": u}
        return out

    # -- the exchange's fixed slot (shim/exchange/hook.py): every packet's size is known in advance
    def packet_bound(self, layer: LayerInfo, ws: WorkerState) -> int | None:
        """Most words `layer`'s next packet from this worker state can take, the same on
        every worker (layer shapes, the configuration and the step counters only); None when
        the method cannot bound it usefully (dlgs between threshold steps)."""
        if self.sends_dense(layer):
            return layer.numel
        return self._packet_bound(layer, ws)

    def _packet_bound(self, layer: LayerInfo, ws: WorkerState) -> int | None:
        return None

    def message_bound(self, layers: Sequence[LayerInfo], ws: WorkerState) -> int | None:
        """Most words of the message of `layers` (encode_group's), or None if unbounded."""
        total = 0
        for layer in layers:
            b = self.packet_bound(layer, ws)
            if b is None:
                return None
            total += b
        return total

    def _encode_layers(self, layers, grads, ws):
        """The method's packets for layers it compresses. Default: one layer at a time, the
        new states applied once all have succeeded."""
        staged = WorkerState(dict(ws.layers), dict(ws.steps))
        results = []
        for layer, g in zip(layers, grads):
            _check_grad(layer, g)
            results.append(self._encode(layer, g, staged))
        ws.layers.update(staged.layers)
        return results

    def decode(self, layer: LayerInfo, words: torch.Tensor, start: int,
               host: np.ndarray | None = None):
        """Parse one packet at words[start] -> (contribution, words consumed). `host`: the
        same message as uint32 words in host memory, if the caller already has it."""
        if self.sends_dense(layer):
            return _decode_dense(layer, words, start)
        return self._decode(layer, words, start, host)

    def reduce(self, layer: LayerInfo, contributions: list) -> torch.Tensor:
        """All workers' contributions (in rank order) -> the averaged float32 gradient."""
        if len(contributions) != self.n_workers:
            raise ValueError(f"layer {layer.name!r}: {len(contributions)} contributions for "
                             f"{self.n_workers} workers")
        if self.sends_dense(layer):
            return _mean_float(layer, contributions)
        return self._reduce(layer, contributions)

    def _encode(self, layer, grad, ws):
        raise NotImplementedError

    def _decode(self, layer, words, start, host=None):
        raise NotImplementedError

    def _reduce(self, layer, contributions):
        raise NotImplementedError


# ------------------------------------------------------------------------------ dense packets

def _need(layer: LayerInfo, words: torch.Tensor, start: int, count: int, what: str) -> None:
    if start + count > words.numel():
        raise PacketError(f"truncated {what} packet for layer {layer.name!r}: needs {count} words "
                          f"at word {start}, message has {words.numel() - start}")


def _refuse_non_finite(layer: LayerInfo, values: torch.Tensor, what: str) -> None:
    bad = ~torch.isfinite(values)
    count = int(bad.sum().item())
    if count:
        first = int(torch.argmax(bad.to(torch.uint8)).item())
        raise NonFinitePacketError(f"{what} packet for layer {layer.name!r} holds {count} NaN/Inf "
                                   f"value(s), the first at value {first}")


def _decode_dense(layer: LayerInfo, words: torch.Tensor, start: int):
    n = layer.numel
    _need(layer, words, start, n, "dense")
    values = words[start:start + n].view(torch.float32)
    _refuse_non_finite(layer, values, "dense")
    return values, n


def _mean_float(layer: LayerInfo, values: list[torch.Tensor]) -> torch.Tensor:
    """float32(sum_w float64(v_w) / N), summed in rank order."""
    total = values[0].to(torch.float64)
    for v in values[1:]:
        total = total + v.to(torch.float64)
    return (total / len(values)).to(torch.float32).reshape(layer.shape)


class DenseCompressor(Compressor):
    """Baseline: every layer sent as float32."""

    name = "dense"

    def sends_dense(self, layer: LayerInfo) -> bool:
        return True


# ------------------------------------------------------------------------------ sparse packets

def _sparse_packet(indices: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    count = torch.tensor([indices.numel()], dtype=torch.int32, device=values.device)
    return torch.cat([count, indices.to(torch.int32), _float_bits(values.to(torch.float32))])


def _decode_sparse(layer: LayerInfo, words: torch.Tensor, start: int):
    n = layer.numel
    _need(layer, words, start, 1, "sparse")
    count = int(words[start].item())
    if not (0 <= count <= n):
        raise PacketError(f"sparse packet for layer {layer.name!r} claims {count} elements of {n}")
    _need(layer, words, start, 1 + 2 * count, "sparse")
    idx = words[start + 1:start + 1 + count].to(torch.int64)
    vals = words[start + 1 + count:start + 1 + 2 * count].view(torch.float32)
    if count:
        bad_range = bool(((idx < 0) | (idx >= n)).any().item())
        bad_order = count > 1 and bool((idx[1:] <= idx[:-1]).any().item())
        if bad_range or bad_order:
            raise PacketError(f"sparse packet for layer {layer.name!r}: indices "
                              f"{'out of range 0..' + str(n - 1) if bad_range else 'not strictly increasing'}")
        _refuse_non_finite(layer, vals, "sparse")
    return (idx, vals), 1 + 2 * count


class _SparseFeedback(Compressor):
    """Shared by topk and dlgs: float32 error feedback, sparse packets, float64 sums."""

    def __init__(self, layers, n_workers, *, density: float | str = 0.01, match_k: int | float = 1,
                 block_size: int | None = None, dense_below: int = 0, **kw):
        super().__init__(layers, n_workers, dense_below=dense_below, **kw)
        params.check_values({"density": density, "k": match_k, "block_size": block_size})
        self.density = density if density == "match" else float(density)
        self.match_k = check_k(match_k)               # the contract's normal form (1.0 -> 1)
        self.block_size = check_block_size(block_size)

    def config(self) -> dict:
        return {**super().config(), "density": self.density, "match_k": self.match_k,
                "block_size": self.block_size}

    def _state_spec(self, layer: LayerInfo) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        spec = {"residual": (torch.float32, layer.shape)}
        if self.momentum is not None:
            spec["velocity"] = (torch.float32, layer.shape)
        return spec

    def k_elements(self, layer: LayerInfo, step: int = 0) -> int:
        """Elements kept at compressed step `step`: a density fraction, or, with density
        'match', the element count coarse selection with k = match_k sends for this layer
        (both raised during the sparsity warm-up, in blocks for 'match')."""
        n = layer.numel
        if self.density == "match":
            lay = block_layout(layer.shape, self.block_size)
            blocks = self.warmup.count(step, lay.n_blocks, resolve_k(self.match_k, lay.n_blocks))
            return min(n, blocks * lay.block_size)
        return self.warmup.count(step, n, min(n, max(1, math.ceil(self.density * n))))

    def _accumulate(self, layer, grad, ws):
        st = ws.layers.get(layer.index)
        if st is None:
            st = {"residual": torch.zeros(layer.shape, dtype=torch.float32, device=grad.device)}
        st = dict(st)                          # a new entry: the caller commits it on success
        if self.momentum is not None:          # the float variant of §7: u replaces g
            grad = st["velocity"] = self._float_velocity(layer, grad, st)
        return st, (st["residual"] + grad).reshape(-1)

    def _finish(self, layer, ws, st, acc, idx):
        idx, _ = torch.sort(idx)
        values = acc[idx]
        residual = acc.clone()
        residual[idx] = 0.0
        st["residual"] = residual.reshape(layer.shape)
        if self.momentum is not None and self.momentum_mask and idx.numel() < layer.numel:
            u = st["velocity"].reshape(-1).clone()      # factor masking on the sent elements
            u[idx] = 0.0
            st["velocity"] = u.reshape(layer.shape)
        ws.layers[layer.index] = st
        packet = _sparse_packet(idx, values)
        return packet, StepStats(4 * packet.numel(), idx.numel())

    def _decode(self, layer, words, start, host=None):
        return _decode_sparse(layer, words, start)

    def _packet_bound(self, layer, ws):
        return 1 + 2 * self.k_elements(layer, self.compressed_step(layer, ws))

    def _reduce(self, layer, contributions):
        (idx0, _) = contributions[0]
        total = torch.zeros(layer.numel, dtype=torch.float64, device=idx0.device)
        for idx, vals in contributions:                       # rank order
            total.index_add_(0, idx, vals.to(torch.float64))
        return (total / len(contributions)).to(torch.float32).reshape(layer.shape)


def _stable_top(mag: torch.Tensor, k: int) -> torch.Tensor:
    """The indices of the k largest |values| ordered by (-|v|, index): ties at the k-th value go
    to the lower indices, on every device (torch.topk's tie order differs between CPU and
    CUDA). Returned unsorted; the caller sorts them."""
    n = mag.numel()
    if k >= n:
        return torch.arange(n, device=mag.device)
    t = torch.topk(mag, k, sorted=False).values.min()       # the k-th largest value
    above = torch.nonzero(mag > t).reshape(-1)
    ties = torch.nonzero(mag == t).reshape(-1)[:k - above.numel()]
    return torch.cat([above, ties])


class TopKCompressor(_SparseFeedback):
    """Per-layer exact top-k of |residual + gradient| every step."""

    name = "topk"

    def _encode(self, layer, grad, ws):
        st, acc = self._accumulate(layer, grad, ws)
        idx = _stable_top(acc.abs(), self.k_elements(layer, self.compressed_step(layer, ws)))
        return self._finish(layer, ws, st, acc, idx)


class DlgsCompressor(_SparseFeedback):
    """Per-layer top-k whose threshold (the k-th largest |value|) is recomputed every
    `interval` steps; in between, every nonzero element with |value| >= threshold is sent."""

    name = "dlgs"

    def __init__(self, layers, n_workers, *, interval: int = 10, **kw):
        super().__init__(layers, n_workers, **kw)
        params.check_values({"dlgs_interval": interval})
        self.interval = interval

    def config(self) -> dict:
        return {**super().config(), "interval": self.interval}

    def _state_spec(self, layer: LayerInfo) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        return {**super()._state_spec(layer), "threshold": (torch.float32, ())}

    def _packet_bound(self, layer, ws):
        step = self.compressed_step(layer, ws)
        return super()._packet_bound(layer, ws) if step % self.interval == 0 else None

    def _encode(self, layer, grad, ws):
        st, acc = self._accumulate(layer, grad, ws)
        mag = acc.abs()
        step = self.compressed_step(layer, ws)
        if step % self.interval == 0:
            idx = _stable_top(mag, self.k_elements(layer, step))
            st["threshold"] = mag[idx].min().reshape(())          # the k-th largest |value|
        else:
            idx = torch.nonzero((mag >= st["threshold"]) & (mag > 0)).reshape(-1)
        return self._finish(layer, ws, st, acc, idx)


# ------------------------------------------------------------------------------ coarse (gradblock)

class CoarseCompressor(Compressor):
    """The gradblock codec: k blocks per layer, one ZRLE v1 frame per layer, int64 sums."""

    name = "coarse"
    frame_coded = True

    def __init__(self, layers, n_workers, *, k: int | float = 1, R: float = DEFAULT_RANGE,
                 block_size: int | None = None, lmax_log2: int = DEFAULT_LMAX_LOG2,
                 dense_below: int = 0, norm: str = "l1", exchange: str = "allgather", **kw):
        super().__init__(layers, n_workers, dense_below=dense_below, **kw)
        # shim/params.py: the contract's checks (KError, RangeError, BlockSizeError, LmaxError,
        # NormError) and the rule that allreduce (global selection) sums L1 norms
        params.check_values({"compressor": self.name, "k": k, "range": R, "block_size": block_size,
                             "lmax_log2": lmax_log2, "norm": norm, "exchange": exchange})
        self.norm = norm
        self.exchange = exchange
        self.cfg = check_range(R)
        self.k, self.block_size = check_k(k), check_block_size(block_size)
        self.lmax_log2 = check_lmax_log2(lmax_log2)
        self._plans: dict = {}

    def config(self) -> dict:
        cfg = {**super().config(), "k": self.k, "R": self.cfg.range, "block_size": self.block_size,
               "lmax_log2": self.lmax_log2}
        if self.norm != "l1":       # checkpoints carry it; one without "norm" is l1 (older runs)
            cfg["norm"] = self.norm
        if self.exchange != "allgather":      # global block selection (docs/spec.md §8)
            cfg["exchange"] = self.exchange
        return cfg

    def _state_spec(self, layer: LayerInfo) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        spec = {"residual": (torch.int32, layer.shape)}
        if self.momentum is not None:
            spec["velocity"] = (torch.int32, layer.shape)
        return spec

    def _ks(self, layers: Sequence[LayerInfo], step: int):
        """k per layer at compressed step `step`: the configured k, or the warm-up's count."""
        if not self.warmup.active or step >= self.warmup.steps:
            return self.k
        ks = []
        for lay in layers:
            nb = block_layout(lay.shape, self.block_size).n_blocks
            ks.append(self.warmup.count(step, nb, resolve_k(self.k, nb)))
        return ks

    def _plan(self, layers: Sequence[LayerInfo], device: torch.device, ks) -> tc.GroupPlan:
        key = (tuple(lay.index for lay in layers), str(device),
               tuple(ks) if isinstance(ks, list) else ks)
        plan = self._plans.get(key)
        if plan is None:
            if isinstance(ks, list):        # warm-up plans change every few steps: keep one
                self._plans = {k: v for k, v in self._plans.items() if not isinstance(k[2], tuple)}
            plan = tc.plan_group([lay.shape for lay in layers], k=ks, block_size=self.block_size,
                                 layer_ids=[lay.index for lay in layers], R=self.cfg,
                                 lmax_log2=self.lmax_log2, device=device, norm=self.norm)
            self._plans[key] = plan
        return plan

    def _packet_bound(self, layer, ws):
        from gradblock.refmodel.plan import step_plan
        ks = self._ks([layer], self.compressed_step(layer, ws))
        p = step_plan(layer.shape, ks[0] if isinstance(ks, list) else ks, self.block_size,
                      layer.index, self.lmax_log2)
        return frame_words_bound(p.layout.n, p.layout.block_size, p.k_eff, self.lmax_log2)

    def message_bound(self, layers, ws):
        # the group's k at warm-up follows its first layer's step, as _encode_layers does
        sub = [lay for lay in layers if not self.sends_dense(lay)]
        if not sub:
            return sum(lay.numel for lay in layers)
        from gradblock.refmodel.plan import step_plan
        ks = self._ks(layers, self.compressed_step(sub[0], ws))
        total = 0
        for j, layer in enumerate(layers):
            if self.sends_dense(layer):
                total += layer.numel
                continue
            p = step_plan(layer.shape, ks[j] if isinstance(ks, list) else ks, self.block_size,
                          layer.index, self.lmax_log2)
            total += frame_words_bound(p.layout.n, p.layout.block_size, p.k_eff, self.lmax_log2)
        return total

    def _encode_layers(self, layers, grads, ws):
        """All the group's layers in one pass of the torch codec (torchstep.compress_group),
        frames bit-identical to compress_layer's (momentum_layer's with momentum correction).
        CPU tensors take the numba kernels instead (shim/compress/fastpath.py, same frames)."""
        ks = self._ks(layers, self.compressed_step(layers[0], ws))
        if self.host_fast and all(g.device.type == "cpu" for g in grads):
            from .fastpath import encode_coarse_host
            return [(f, StepStats(*st)) for f, st in encode_coarse_host(self, layers, grads, ws, ks)]
        plan = self._plan(layers, grads[0].device, ks)
        state = [ws.layers.get(lay.index, {}) for lay in layers]
        kw = {}
        if self.momentum is not None:
            kw = dict(velocities=[st.get("velocity") for st in state], m_fix=self.momentum.m_fix,
                      mask=self.momentum_mask)
        step = tc.compress_group(plan, list(grads), [st.get("residual") for st in state],
                                 R=self.cfg, lmax_log2=self.lmax_log2,
                                 names=[lay.name for lay in layers], **kw)
        frames = torch.split(step.message, step.frame_words)
        sat_m = step.sat_momentum or [0] * len(layers)
        for j, (lay, r) in enumerate(zip(layers, step.residuals)):
            ws.layers[lay.index] = {"residual": r}
            if step.velocities is not None:
                ws.layers[lay.index]["velocity"] = step.velocities[j]
        return [(f, StepStats(4 * w, nz, sq, sf, sm)) for f, w, nz, sq, sf, sm in
                zip(frames, step.frame_words, step.nonzeros, step.sat_quant, step.sat_feedback,
                    sat_m)]

    def warm_host(self) -> None:
        """Load (or compile, once per machine: numba's on-disk cache) the host kernels with a
        two-layer toy message, so a run's first step does not carry numba's start-up (seconds
        per process; docs/network.md). Touches no state of this compressor."""
        if self.momentum is not None:
            return                       # the momentum kernels load on first use
        from .fastpath import decode_coarse_host, encode_coarse_host, host_words
        layers = [LayerInfo(0, "warm0", (2, 3)), LayerInfo(1, "warm1", (4,))]
        results = encode_coarse_host(self, layers, [torch.ones(2, 3), torch.zeros(4)],
                                     WorkerState(), 1)
        words = torch.cat([f for f, _ in results])
        decode_coarse_host(self, layers, host_words(words), 0, np.zeros(10, dtype=np.int64),
                           np.array([0, 6], dtype=np.int64), PacketError)

    def _decode(self, layer, words, start, host=None):
        f = zrle_torch.decode_frame(words if host is None else host, expected_n=layer.numel, start=start,
                            device=words.device)
        if f.layer_id != layer.index:
            raise PacketError(f"frame carries layer id {f.layer_id}, expected {layer.index} "
                              f"({layer.name!r}): messages are out of step")
        if f.range_bits != self.cfg.range_bits:
            raise PacketError(f"frame for layer {layer.name!r} uses range bits {f.range_bits:#010x}, "
                              f"this worker {self.cfg.range_bits:#010x}")
        return f.values, f.n_words

    def _reduce(self, layer, contributions):
        total = tc.sum_payloads(contributions)                  # exact, order-independent
        return tc.average(total, len(contributions), self.cfg).reshape(layer.shape)


def build_compressor(name: str, layers: Sequence[LayerInfo], n_workers: int, *,
                     k: int | float = 1, density: float | str = "match", interval: int = 10,
                     R: float = DEFAULT_RANGE, block_size: int | None = None,
                     lmax_log2: int = DEFAULT_LMAX_LOG2, dense_below: int = 0,
                     local_momentum: float = 0.0, momentum_mask: bool = True,
                     warmup: Warmup | None = None, norm: str = "l1",
                     exchange: str = "allgather") -> Compressor:
    """A compressor by name. For topk / dlgs, density 'match' keeps per layer as many elements
    as coarse selection with the same k would send. `exchange="allreduce"` (coarse only):
    global block selection (docs/spec.md §8, shim/exchange/global_exchange.py)."""
    if name not in COMPRESSORS:
        raise ConfigError(f"unknown compressor {name!r}; choose one of {', '.join(COMPRESSORS)}")
    params.check_values({"compressor": name, "exchange": exchange, "norm": norm})
    common = dict(dense_below=dense_below, local_momentum=local_momentum,
                  momentum_mask=momentum_mask, warmup=warmup)
    if name == "dense":
        return DenseCompressor(layers, n_workers, **common)
    if name in ("topk", "dlgs"):
        kw = dict(density=density, match_k=k, block_size=block_size, **common)
        if name == "topk":
            return TopKCompressor(layers, n_workers, **kw)
        return DlgsCompressor(layers, n_workers, interval=interval, **kw)
    if name == "coarse":
        return CoarseCompressor(layers, n_workers, k=k, R=R, block_size=block_size,
                                lmax_log2=lmax_log2, norm=norm, exchange=exchange, **common)
    raise AssertionError(name)                      # COMPRESSORS names exactly these four


# ------------------------------------------------------------------------------ the shared path

def encode_group(compressor: Compressor, layers: Sequence[LayerInfo],
                 grads: Sequence[torch.Tensor], ws: WorkerState):
    """One worker's message for a group of layers -> (int32 message, StepStats)."""
    stats = StepStats()
    packets = []
    for packet, s in compressor.encode_many(layers, grads, ws):
        packets.append(packet)
        stats.add(s)
    if not packets:
        return torch.zeros(0, dtype=torch.int32), stats
    return torch.cat(packets), stats


def _with_origin(err: Exception, rank: int, layer: LayerInfo) -> Exception:
    """The same error class, its message prefixed with the peer rank and the layer."""
    where = f"peer rank {rank}, layer {layer.index} {layer.name!r}"
    if isinstance(err, frame_errors.FrameError):
        new = type(err)(f"{where}: {err.detail}", err.word)
    else:
        new = type(err)(f"{where}: {err}")
    new.rank, new.layer = rank, layer.name
    return new


def decode_group(compressor: Compressor, layers: Sequence[LayerInfo],
                 messages: Sequence[torch.Tensor], ranks: Sequence[int] | None = None
                 ) -> list[torch.Tensor]:
    """Every worker's message -> the averaged float32 gradient of each layer. `ranks` names
    the sender of each message (default 0..N-1). A malformed packet raises its error class
    with the rank and layer in the message."""
    ranks = list(range(len(messages))) if ranks is None else list(ranks)
    if len(ranks) != len(messages):
        raise ValueError(f"{len(ranks)} rank labels for {len(messages)} messages")
    if (compressor.host_fast and compressor.frame_coded
            and len(messages) == compressor.n_workers and messages):
        devices = {m.device for m in messages}
        if devices == {torch.device("cpu")}:
            return _decode_group_host(compressor, layers, messages, ranks)
        if len(devices) == 1:
            # on a GPU: each message copied to the host once, then the numba decoder (no
            # per-frame kernel launches and host syncs); the averages go back to the device
            dev = messages[0].device
            out = _decode_group_host(compressor, layers, [m.cpu() for m in messages], ranks)
            return [a.to(dev) for a in out]
    per_layer: list[list] = [[] for _ in layers]
    for rank, msg in zip(ranks, messages):
        at = 0
        # CPU: the reference decoder validates; convert each message once, not once per frame.
        # Off the CPU the frames are validated on the device (codec/zrle_torch_decode.py).
        host = zrle_torch.frame_to_numpy(msg) if compressor.frame_coded \
            and msg.device.type == "cpu" else None
        for j, layer in enumerate(layers):
            try:
                contribution, used = compressor.decode(layer, msg, at, host)
            except (frame_errors.FrameError, PacketError) as e:
                raise _with_origin(e, rank, layer) from e
            per_layer[j].append(contribution)
            at += used
        if at != msg.numel():
            raise PacketError(f"peer rank {rank}: message has {msg.numel() - at} words left "
                              f"after its {len(layers)} layer packets")
    return [compressor.reduce(layer, contribs) for layer, contribs in zip(layers, per_layer)]


def _decode_group_host(compressor, layers: Sequence[LayerInfo], messages: Sequence[torch.Tensor],
                       ranks: Sequence[int]) -> list[torch.Tensor]:
    """decode_group for coarse messages in host memory: each peer's run of frames validated
    and summed into one int64 buffer by one jitted call (shim/compress/fastpath.py), dense packets as
    the torch path decodes them. Same averages, same errors in the same order."""
    from .fastpath import decode_coarse_host, host_words
    dense = [compressor.sends_dense(lay) for lay in layers]
    off = np.zeros(len(layers) + 1, dtype=np.int64)
    for j, lay in enumerate(layers):
        off[j + 1] = off[j] + (0 if dense[j] else lay.numel)
    acc = np.zeros(int(off[-1]), dtype=np.int64)
    dense_parts: dict[int, list] = {j: [] for j, d in enumerate(dense) if d}
    for rank, msg in zip(ranks, messages):
        words = host_words(msg)
        at, j = 0, 0
        while j < len(layers):
            if dense[j]:
                try:
                    contribution, used = compressor.decode(layers[j], msg, at)
                except (frame_errors.FrameError, PacketError) as e:
                    raise _with_origin(e, rank, layers[j]) from e
                dense_parts[j].append(contribution)
                at += used
                j += 1
                continue
            e = j
            while e < len(layers) and not dense[e]:
                e += 1
            try:
                at = decode_coarse_host(compressor, layers[j:e], words, at, acc, off[j:e],
                                        PacketError)
            except (frame_errors.FrameError, PacketError) as err:
                raise _with_origin(err, rank, layers[j + err.layer_pos]) from err
            j = e
        if at != msg.numel():
            raise PacketError(f"peer rank {rank}: message has {msg.numel() - at} words left "
                              f"after its {len(layers)} layer packets")
    total = torch.from_numpy(acc)
    out = []
    for j, lay in enumerate(layers):
        if dense[j]:
            out.append(compressor.reduce(lay, dense_parts[j]))
        else:
            out.append(tc.average(total[off[j]:off[j + 1]], len(messages),
                                  compressor.cfg).reshape(lay.shape))
    return out
