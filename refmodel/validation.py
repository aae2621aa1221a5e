"""The one validator in front of the compress-step kernels (docs/spec.md §1–§4, "Limits").

Every public entry point of the numeric contract (the numpy reference, the numba fast path,
the CLI, the torch step) checks its numbers here before any kernel runs, so all of them
raise the same class, with the same one-line message, in the same order, and a numba
kernel never sees a value it would misread (a block size of 2**63 overflows its index
arithmetic; a float block size is a typing error).

Check order of a compress step (`check_step`): range R, residual dtype, gradient dtype
(float32, or float16 / bfloat16 widened exactly to float32 here: docs/spec.md §1.2)
(and contiguity where the caller needs it), then NaN in the gradient, then residual size,
block size, k, lmax_log2, layer id, layer size, norm kind. The NaN scan is the caller's (it is
the costly one): `check_step` takes it as a function and runs it only when a check after it
fails, so a NaN is still reported first.

Named errors are GradblockError (so ValueError) subclasses (TypeError for a wrong dtype, as numpy does).
"""
from __future__ import annotations

import argparse
import math
import numbers
from typing import Callable

import numpy as np

from gradblock.codec.errors import LmaxError, ParameterError  # the codec checks lmax too
from gradblock.codec.zrle import LMAX_LOG2_MAX, LMAX_LOG2_MIN

from .precision import dtype_error, is_gradient_dtype, widen
from .quantiser import NonFiniteError, QuantConfig, RangeError

__all__ = ["ParameterError", "BlockSizeError", "KError", "ShapeError", "SizeLimitError",
           "LayerIdError", "LmaxError", "ExpectedSizeError", "NormError", "NORMS", "check_norm", "RangeError", "NonFiniteError",
           "MAX_LAYER_ELEMENTS", "MAX_BLOCK_SIZE", "MAX_LAYER_ID",
           "check_range", "check_block_size", "check_k", "parse_k", "check_lmax_log2",
           "check_layer_id", "check_expected_n", "check_layer_size", "check_gradient",
           "check_residual", "check_residual_size", "check_step", "first_nan"]

MAX_LAYER_ELEMENTS = 2**32 - 1   # a frame's n is one 32-bit header word
MAX_BLOCK_SIZE = 2**32 - 1       # a larger block is never smaller than the layer: nothing gained
MAX_LAYER_ID = 2**32 - 1         # header word h2


class BlockSizeError(ParameterError):
    """block_size is not an integer in 1..MAX_BLOCK_SIZE."""


class KError(ParameterError, argparse.ArgumentTypeError):
    """k is neither an integer >= 1 nor a fraction in (0, 1]. Also an ArgumentTypeError, so
    `parse_k` serves directly as an argparse type with this message."""


class ShapeError(ParameterError):
    """The residual does not match the gradient, or an array has the wrong layout."""


class SizeLimitError(ParameterError):
    """A layer has more elements than a frame (or the caller's limit) can describe."""


class LayerIdError(ParameterError):
    """layer id does not fit its 32-bit header word."""


class ExpectedSizeError(ParameterError):
    """An expected layer size that is not an integer in 0..MAX_LAYER_ELEMENTS."""


class NormError(ParameterError):
    """The block norm kind is neither 'l1' nor 'l2' (docs/spec.md §2.3)."""


NORMS = ("l1", "l2")


def check_norm(norm) -> str:
    """'l1' or 'l2' (exactly these strings); NormError otherwise."""
    if not isinstance(norm, str) or norm not in NORMS:
        raise NormError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
    return norm


def _integer(value, what: str, error: type[ParameterError]) -> int:
    """An int from an int, a numpy integer or an integral finite float; nothing else."""
    if isinstance(value, bool):
        raise error(f"{what} must be an integer, got {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    raise error(f"{what} must be an integer, got {value!r}")


def check_range(R) -> QuantConfig:
    """R (or a QuantConfig) -> QuantConfig; RangeError unless a finite float32 > 0."""
    if isinstance(R, QuantConfig):
        return R
    if isinstance(R, bool) or not isinstance(R, (numbers.Real, np.floating)):
        raise RangeError(f"range R must be a finite float32 > 0, got {R!r}")
    with np.errstate(over="ignore"):
        return QuantConfig.from_range(float(R))


def check_block_size(block_size) -> int | None:
    """None (the shape decides) or an integer in 1..MAX_BLOCK_SIZE."""
    if block_size is None:
        return None
    b = _integer(block_size, "block_size", BlockSizeError)
    if not 1 <= b <= MAX_BLOCK_SIZE:
        raise BlockSizeError(f"block_size must be an integer in 1..{MAX_BLOCK_SIZE}, got {block_size!r}")
    return b


def check_k(k) -> int | float:
    """k as the spec reads it: an integer >= 1 (blocks) or a fraction in (0, 1) of the blocks;
    an integral float (1.0, 3.0) counts as that integer. Returns int or float."""
    msg = f"k must be an integer >= 1 or a fraction in (0, 1], got {k!r}"
    if isinstance(k, bool):
        raise KError(msg)
    if isinstance(k, numbers.Integral):
        if k < 1:
            raise KError(msg)
        return int(k)
    if not isinstance(k, (numbers.Real, np.floating)):
        raise KError(msg)
    f = float(k)
    if 0.0 < f < 1.0:
        return f
    if f >= 1.0 and math.isfinite(f) and f.is_integer():
        return int(f)
    raise KError(msg)


def parse_k(text: str) -> int | float:
    """The one parser for a k given as text (CLI, training config): '4' -> 4, '0.01' -> 0.01,
    '1.0' -> 1. Raises KError (also an argparse.ArgumentTypeError)."""
    text = str(text).strip()
    try:
        return check_k(int(text))
    except ValueError as e:
        if isinstance(e, KError):
            raise
    try:
        f = float(text)
    except ValueError:
        raise KError(f"k must be an integer >= 1 or a fraction in (0, 1], got {text!r}") from None
    return check_k(f)


def check_lmax_log2(lmax_log2) -> int:
    v = _integer(lmax_log2, "lmax_log2", LmaxError)
    if not LMAX_LOG2_MIN <= v <= LMAX_LOG2_MAX:
        raise LmaxError(f"lmax_log2 must be in {LMAX_LOG2_MIN}..{LMAX_LOG2_MAX}, got {lmax_log2!r}")
    return v


def check_layer_id(layer_id) -> int:
    v = _integer(layer_id, "layer id", LayerIdError)
    if not 0 <= v <= MAX_LAYER_ID:
        raise LayerIdError(f"layer id must fit 32 bits (0..{MAX_LAYER_ID}), got {layer_id!r}")
    return v


def check_expected_n(expected_n) -> int | None:
    """None, or the element count a frame must declare: an integer in 0..MAX_LAYER_ELEMENTS
    (a frame cannot declare more, so a larger value is a caller's mistake, not a mismatch)."""
    if expected_n is None:
        return None
    if isinstance(expected_n, bool) or not isinstance(expected_n, numbers.Integral):
        raise ExpectedSizeError(f"expected n must be an integer, got {expected_n!r}")
    v = int(expected_n)
    if not 0 <= v <= MAX_LAYER_ELEMENTS:
        raise ExpectedSizeError(f"expected n must be in 0..{MAX_LAYER_ELEMENTS}, got {v}")
    return v


def check_layer_size(n: int, max_elements: int = MAX_LAYER_ELEMENTS, what: str = "layer") -> int:
    """n elements fit a frame (and the caller's own limit, e.g. the CLI's --max-elements)."""
    limit = min(int(max_elements), MAX_LAYER_ELEMENTS)
    if n > limit:
        why = "the 32-bit n field" if limit == MAX_LAYER_ELEMENTS else f"the limit of {limit} elements"
        raise SizeLimitError(f"{what} of {n} elements exceeds {why}")
    return int(n)


def _check_layout(a: np.ndarray, name: str, contiguous: bool, writeable: bool) -> None:
    if contiguous and not a.flags.c_contiguous:
        raise ShapeError(f"{name} must be C-contiguous")
    if writeable and not a.flags.writeable:
        raise ShapeError(f"{name} must be writeable")


def check_gradient(grad, *, contiguous: bool = False, name: str = "grad") -> np.ndarray:
    """A float32 numpy array: float32 as given, float16 / bfloat16 (ml_dtypes) widened exactly
    to a new float32 array (docs/spec.md §1.2, refmodel.precision), so every kernel after this
    sees float32 bits; TypeError naming the accepted dtypes otherwise (a list is converted
    first). The layout check is the input's own."""
    if not isinstance(grad, np.ndarray):
        grad = np.asarray(grad)
    if not is_gradient_dtype(grad.dtype):
        raise dtype_error(name, grad.dtype)
    _check_layout(grad, name, contiguous, False)
    return widen(grad)


def check_residual(residual, *, contiguous: bool = False, writeable: bool = False,
                   name: str = "residual") -> np.ndarray:
    """An int32 numpy array (TypeError otherwise); size is checked by `check_residual_size`."""
    if not isinstance(residual, np.ndarray) or residual.dtype != np.int32:
        got = getattr(residual, "dtype", type(residual).__name__)
        raise TypeError(f"{name} must be a numpy int32 array, got {got}")
    _check_layout(residual, name, contiguous, writeable)
    return residual


def check_residual_size(grad_shape: tuple, residual_shape: tuple, same_shape: bool) -> None:
    """The reference API wants the gradient's shape; the lean in-place API only its size."""
    if same_shape:
        if tuple(residual_shape) != tuple(grad_shape):
            raise ShapeError(f"residual shape {tuple(residual_shape)} != gradient shape "
                             f"{tuple(grad_shape)}")
    elif math.prod(residual_shape) != math.prod(grad_shape):
        raise ShapeError(f"residual has {math.prod(residual_shape)} elements, gradient "
                         f"{math.prod(grad_shape)}")


def first_nan(grad: np.ndarray, where: str = "") -> NonFiniteError | None:
    """The NonFiniteError the reference quantiser would raise for `grad`, or None (numpy)."""
    bits = np.ascontiguousarray(grad, dtype=np.float32).reshape(-1).view(np.uint32)
    is_nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    count = int(np.count_nonzero(is_nan))
    return NonFiniteError(count, int(np.argmax(is_nan)), where) if count else None


def check_step(grad, residual, R, *, contiguous: bool = False, writeable: bool = False,
               same_shape: bool = True,
               nan_error: Callable[[np.ndarray], NonFiniteError | None] | None = None,
               late_checks: Callable[[], object] | None = None):
    """The checks of one compress step, in the contract's order (module docstring).

    `late_checks()` runs the parameter checks that follow the NaN position (block size, k,
    lmax, layer id, size; see refmodel.plan) and returns its result; should it raise a
    ValueError or TypeError, `nan_error(grad)` is consulted first and a NaN wins.
    Returns (cfg, grad, residual, late_checks()). `residual=None` skips its checks."""
    cfg = check_range(R)
    if residual is not None:
        residual = check_residual(residual, contiguous=contiguous, writeable=writeable)
    grad = check_gradient(grad, contiguous=contiguous)
    try:
        if residual is not None:
            check_residual_size(grad.shape, residual.shape, same_shape)
        late = late_checks() if late_checks is not None else None
    except (ValueError, TypeError):
        nan = nan_error(grad) if nan_error is not None else None
        if nan is not None:
            raise nan from None
        raise
    return cfg, grad, residual, late
