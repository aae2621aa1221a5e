"""The backend protocol and registry: the numpy reference, the numba fast path, the torch step.

Every backend offers the same operations on its own array type (numpy arrays for "numpy" and
"numba", tensors on one device for "torch"), produces the same bits as the reference and raises
the same exception class for the same first fault (tests/test_conformance.py checks both).
`asarray` / `to_numpy` move host data in and out, so a caller (a test, the CLI, a benchmark)
can drive any backend from numpy.

    b = get_backend("numba")            # BackendUnavailableError with the reason if it can't load
    step = b.compress_layer(b.asarray(g), b.asarray(r), R=10.0, k=4)
    frame = b.to_numpy(step.frame)      # uint32 words, identical for every backend

Implementations load lazily: importing this module imports neither numba nor torch.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from gradblock.codec.errors import GradblockError

__all__ = ["Backend", "LayerResult", "DecodedFrame", "BackendUnavailableError", "BACKEND_NAMES",
           "BACKEND_ENV", "HOST_CHOICES", "get_backend", "available_backends", "host_backend"]

BACKEND_NAMES = ("numpy", "numba", "torch")


class BackendUnavailableError(GradblockError):
    """The named backend is unknown, or its implementation cannot be imported here."""


@dataclass
class LayerResult:
    """One layer's compress step, in the backend's array type."""
    payload: Any          # int32, the input's shape: nonzero only on the selected blocks
    residual_out: Any     # int32, the input's shape
    frame: Any            # the ZRLE frame (uint32 words; int32 bit patterns in torch)
    selected: Any         # int64 block indices in rank order
    k_eff: int
    sat_quant: int
    sat_feedback: int


@dataclass
class DecodedFrame:
    values: Any           # int32, flat
    layer_id: int
    range_bits: int
    lmax_log2: int
    n_tokens: int
    n_words: int


@runtime_checkable
class Backend(Protocol):
    """The operations every backend offers (docs/architecture.md, "Backends")."""

    name: str

    def asarray(self, a: np.ndarray) -> Any:
        """A host numpy array (float32, float16 or ml_dtypes bfloat16 gradient, int32 codes,
        uint32 frame words) in this backend's array type, bits unchanged."""

    def to_numpy(self, x: Any) -> np.ndarray:
        """The inverse of `asarray`."""

    def frame_to_numpy(self, frame: Any) -> np.ndarray:
        """A frame or message as host uint32 words (the wire format)."""

    def quantise(self, x: Any, R: Any = 10.0, where: str = "") -> tuple[Any, int]:
        """§1: float32 -> (int32 codes, saturation count). Every gradient entry point
        (quantise, compress_layer) also takes float16 and bfloat16, widened exactly to float32
        first (§1.2: the bits of the widened array's step); other dtypes raise TypeError."""

    def dequantise(self, v: Any, R: Any = 10.0) -> Any:
        """§1.3: int codes -> float32."""

    def average(self, s: Any, n_workers: Any, R: Any = 10.0, dtype: Any = None) -> Any:
        """§5: the exact integer sum of N workers' codes -> float32 mean; with `dtype`
        float16 / bfloat16 (this backend's dtype object) that mean rounded to it, RNE (§1.2)."""

    def compress_layer(self, grad: Any, residual: Any = None, *, R: Any = 10.0, k: Any = 1,
                       block_size: Any = None, layer_id: Any = 0, lmax_log2: Any = 8,
                       where: str = "", norm: str = "l1") -> LayerResult:
        """§4: one layer's step (norm: 'l1' or 'l2', §2.3); a float16 / bfloat16 gradient
        gives the step of its exact float32 widening (§1.2)."""

    def encode_frame(self, payload: Any, layer_id: Any = 0, R: Any = 10.0,
                     lmax_log2: Any = 8) -> Any:
        """§3: int32 payload -> one frame."""

    def decode_frame(self, words: Any, expected_n: Any = None, start: Any = 0) -> DecodedFrame:
        """§3.5: validate and decode the frame at words[start]."""

    def decode_message(self, words: Any, expected_sizes: Any = None) -> list[DecodedFrame]:
        """§3.4: the frames of a message, one per layer."""


def _decoded(f, values) -> DecodedFrame:
    return DecodedFrame(values, f.layer_id, f.range_bits, f.lmax_log2, f.n_tokens, f.n_words)


def _layer_result(s) -> LayerResult:
    return LayerResult(s.payload, s.residual_out, s.frame, s.selected, s.k_eff, s.sat_quant,
                       s.sat_feedback)


class NumpyFamilyBackend:
    """numpy arrays in and out; `compress` / `codec` are the modules that implement the step
    and the frames (the reference pair, or the numba pair).

    The host commands (gradblock/commands.py, the golden generator) use the implementations
    themselves, whose results carry more than LayerResult: `step` (compress_layer), `codec`
    (encode_frame / decode_frame / decode_message) and `momentum_layer` (§6; its module is
    imported on first use)."""

    def __init__(self, name: str, quantise: Callable, compress_layer: Callable, codec,
                 momentum_module: str = "gradblock.refmodel.momentum"):
        from gradblock.refmodel import quantiser
        self.name = name
        self._quantiser = quantiser              # §1.3 / §5 float steps: the reference's own
        self._quantise = quantise
        self._compress_layer = compress_layer
        self._codec = codec
        self._momentum_module = momentum_module

    @property
    def step(self) -> Callable:
        """The implementation's compress_layer (its own result type, with the layout)."""
        return self._compress_layer

    @property
    def codec(self):
        return self._codec

    def momentum_layer(self, *args, **kw):
        """§6: one layer's step with local momentum (refmodel.momentum or its numba twin)."""
        return importlib.import_module(self._momentum_module).momentum_layer(*args, **kw)

    def asarray(self, a: np.ndarray) -> np.ndarray:
        return np.array(a, order="C")

    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x)

    def frame_to_numpy(self, frame) -> np.ndarray:
        return np.asarray(frame, dtype=np.uint32)

    def quantise(self, x, R=10.0, where: str = ""):
        r = self._quantise(x, R, where=where)
        return r.q, r.saturated

    def dequantise(self, v, R=10.0):
        return self._quantiser.dequantise(v, R)

    def average(self, s, n_workers, R=10.0, dtype=None):
        return self._quantiser.average(s, n_workers, R,
                                       np.float32 if dtype is None else dtype)

    def compress_layer(self, grad, residual=None, **kw) -> LayerResult:
        return _layer_result(self._compress_layer(grad, residual, **kw))

    def encode_frame(self, payload, layer_id=0, R=10.0, lmax_log2=8):
        return self._codec.encode_frame(payload, layer_id, R, lmax_log2)

    def decode_frame(self, words, expected_n=None, start=0) -> DecodedFrame:
        f = self._codec.decode_frame(words, expected_n, start)
        return _decoded(f, f.values)

    def decode_message(self, words, expected_sizes=None) -> list[DecodedFrame]:
        return [_decoded(f, f.values) for f in self._codec.decode_message(words, expected_sizes)]

    def __repr__(self) -> str:
        return f"<gradblock backend {self.name}>"


class TorchBackend:
    """Tensors on one device (CPU unless told); frames are int32 tensors (uint32 bit patterns).
    `decode`: "auto" (validate on the device off the CPU, with the reference on CPU tensors),
    "device" or "host" (codec.zrle_torch.decode_frame), or "bucket": the DDP hook's batched
    walk (torchstep.bucket.decode_frame_walk, no host sync besides its flag), so the
    conformance suite runs what the hook runs on a GPU."""

    name = "torch"

    def __init__(self, device: str = "cpu", decode: str = "auto"):
        import torch

        from gradblock import torchstep
        from gradblock.codec import zrle_torch
        self._torch, self._step, self._codec = torch, torchstep, zrle_torch
        self.device = torch.device(device)
        self.decode = decode

    def asarray(self, a: np.ndarray):
        from gradblock.refmodel.precision import bfloat16_dtype
        a = np.array(a, order="C")
        if a.dtype == np.uint32:                       # frame words travel as int32 bit patterns
            a = a.view(np.int32)
        if bfloat16_dtype() is not None and a.dtype == bfloat16_dtype():  # ml_dtypes: same bits
            return self._torch.from_numpy(a.view(np.int16)).to(self.device).view(
                self._torch.bfloat16)
        return self._torch.from_numpy(a).to(self.device)

    def to_numpy(self, x) -> np.ndarray:
        if x.dtype == self._torch.bfloat16:            # numpy has none: ml_dtypes' (same bits)
            from gradblock.refmodel.precision import bfloat16_dtype
            if bfloat16_dtype() is None:
                raise TypeError("a bfloat16 tensor has no numpy dtype here: install ml_dtypes")
            return x.detach().cpu().view(self._torch.int16).numpy().view(bfloat16_dtype())
        return x.detach().cpu().numpy()

    def frame_to_numpy(self, frame) -> np.ndarray:
        return self._codec.frame_to_numpy(frame)

    def quantise(self, x, R=10.0, where: str = ""):
        return self._step.quantise(x, R, where=where)

    def dequantise(self, v, R=10.0):
        return self._step.dequantise(v, R)

    def average(self, s, n_workers, R=10.0, dtype=None):
        return self._step.average(s, n_workers, R,
                                  self._torch.float32 if dtype is None else dtype)

    def compress_layer(self, grad, residual=None, **kw) -> LayerResult:
        return _layer_result(self._step.compress_layer(grad, residual, **kw))

    def encode_frame(self, payload, layer_id=0, R=10.0, lmax_log2=8):
        return self._codec.encode_frame(payload, layer_id, R, lmax_log2)

    def decode_frame(self, words, expected_n=None, start=0) -> DecodedFrame:
        if self.decode == "bucket":
            words, expected_n, start = self._codec.check_args(words, expected_n, start)
            f = self._walk(self._words(words), expected_n, start)
            return _decoded(f, f.values)
        f = self._codec.decode_frame(words, expected_n, start, method=self.decode)
        return _decoded(f, f.values)

    def decode_message(self, words, expected_sizes=None) -> list[DecodedFrame]:
        if self.decode == "bucket":
            from gradblock.codec.zrle import walk_message
            words, _, _ = self._codec.check_args(words, None, 0)
            w = self._words(words)
            return [_decoded(f, f.values) for f in walk_message(
                w.numel(), lambda exp, at: self._walk(w, exp, at), expected_sizes)]
        return [_decoded(f, f.values) for f in
                self._codec.decode_message(words, expected_sizes, method=self.decode)]

    def _words(self, words):
        if isinstance(words, np.ndarray):
            return self._torch.from_numpy(np.ascontiguousarray(words).view(np.int32)).to(
                self.device)
        return words

    def _walk(self, words, expected_n, start):
        from gradblock.torchstep.bucket import decode_frame_walk
        head, values, tokens, used = decode_frame_walk(words, expected_n, start)
        return self._codec.DecodedFrame(head.layer_id, head.range_bits, head.lmax_log2, values,
                                        tokens, used)

    def __repr__(self) -> str:
        return f"<gradblock backend torch on {self.device}, decode {self.decode}>"


def _numpy_backend() -> NumpyFamilyBackend:
    from gradblock.codec import zrle
    from gradblock.refmodel import compress, quantiser
    return NumpyFamilyBackend("numpy", quantiser.quantise, compress.compress_layer, zrle)


def _numba_backend() -> NumpyFamilyBackend:
    from gradblock.codec import zrle_numba
    from gradblock.fastpath import fast
    return NumpyFamilyBackend("numba", fast.quantise, fast.compress_layer, zrle_numba,
                              "gradblock.fastpath.momentum_numba")


_FACTORIES: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "numpy": (_numpy_backend, ()),
    "numba": (_numba_backend, ("numba",)),
    "torch": (TorchBackend, ("torch",)),
}
_CACHE: dict[tuple, Any] = {}


def _missing_requirement(name: str) -> str | None:
    for module in _FACTORIES[name][1]:
        if importlib.util.find_spec(module) is None:
            return f"the {name} backend needs the '{module}' package, which is not installed"
    return None


def get_backend(name: str, **options) -> Backend:
    """The backend called `name` ("numpy", "numba", "torch"; torch takes device="cuda:0" ...).
    Raises BackendUnavailableError naming the reason when it cannot be used here."""
    if name not in _FACTORIES:
        raise BackendUnavailableError(f"unknown backend {name!r}; choose one of "
                                      f"{', '.join(BACKEND_NAMES)}")
    key = (name, tuple(sorted(options.items())))
    if key not in _CACHE:
        reason = _missing_requirement(name)
        if reason:
            raise BackendUnavailableError(reason)
        _CACHE[key] = _FACTORIES[name][0](**options)
    return _CACHE[key]


def available_backends() -> dict[str, str | None]:
    """Every backend name -> None when it can be used here, else the reason it cannot."""
    return {name: _missing_requirement(name) for name in BACKEND_NAMES}


# ------------------------------------------------------------------- the host commands' choice

BACKEND_ENV = "GRADBLOCK_BACKEND"
HOST_CHOICES = ("auto", "numba", "reference")


def host_backend(choice: str | None = None) -> NumpyFamilyBackend:
    """The backend the host commands run (gradblock quantise/encode/decode/step/inspect, the
    golden generator): `choice`, else $GRADBLOCK_BACKEND, else "auto" -- numba where it loads,
    else the numpy reference; "numba" insists on numba; "reference" is the numpy reference.
    Bit-exact either way; numba is only faster."""
    choice = (choice or os.environ.get(BACKEND_ENV) or "auto").lower()
    if choice not in HOST_CHOICES:
        raise BackendUnavailableError(f"{BACKEND_ENV} must be auto, numba or reference, "
                                      f"got {choice!r}")
    if choice == "reference":
        return get_backend("numpy")
    try:
        return get_backend("numba")
    except BackendUnavailableError as e:
        if choice == "numba":
            raise BackendUnavailableError(f"{BACKEND_ENV}=numba but {e}") from None
        return get_backend("numpy")
