"""bfloat16 and float16 gradients (docs/spec.md §1.2), in numpy: the one home of the rule.

Every bfloat16 and float16 value is a float32 value, so a half-precision gradient is widened
exactly to float32 (one exact conversion) and the contract runs on it as it is: the codes,
residuals and frames are those of the widened array, bit for bit. A float32 result written
back in the gradient's dtype (an average) is rounded by round-to-nearest-even.

numpy has no bfloat16 of its own: `ml_dtypes.bfloat16` arrays are accepted where ml_dtypes
imports (its .npy files say '<V2', not bfloat16, so a file cannot carry one: the CLI takes
float32 and float16 files). Both conversions are written on the bits, so they depend on no
library's rounding: widening bfloat16 is `bits << 16`; narrowing to bfloat16 adds 0x7FFF plus
the kept part's lowest bit and drops 16 bits (RNE; it overflows to ±Inf exactly where the
value rounds past the largest bfloat16), a NaN stays a (quiet) NaN of the same sign.
float16 uses numpy's own conversions, which are exact (widening) and RNE (narrowing).
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["GRADIENT_DTYPES", "accepted_dtypes", "bfloat16_dtype", "is_half", "is_gradient_dtype",
           "widen", "round_to", "bf16_bits_from_f32_bits", "dtype_error"]

GRADIENT_DTYPES = ("float32", "float16", "bfloat16")


@functools.lru_cache(maxsize=1)
def bfloat16_dtype() -> np.dtype | None:
    """ml_dtypes' bfloat16, or None where ml_dtypes does not import (looked up once)."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def accepted_dtypes() -> str:
    """'float32, float16 or bfloat16': the one phrase every refusal uses."""
    return f"{', '.join(GRADIENT_DTYPES[:-1])} or {GRADIENT_DTYPES[-1]}"


def dtype_error(name: str, got) -> TypeError:
    """The one-line refusal of a gradient dtype (TypeError, as numpy's own)."""
    return TypeError(f"{name} must be {accepted_dtypes()}, got {got}")


def _is_bfloat16(dtype: np.dtype) -> bool:
    bf16 = bfloat16_dtype()
    return bf16 is not None and dtype == bf16


def is_half(dtype) -> bool:
    """float16 or (ml_dtypes) bfloat16."""
    dtype = np.dtype(dtype)
    return dtype == np.float16 or _is_bfloat16(dtype)


def is_gradient_dtype(dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype == np.float32 or is_half(dtype)


def widen(a: np.ndarray) -> np.ndarray:
    """A float16 / bfloat16 array as float32 (a new C-contiguous array, same shape), exactly;
    a float32 array is returned as it is. Other dtypes: TypeError (dtype_error)."""
    a = np.asarray(a)
    if a.dtype == np.float32:
        return a
    if a.dtype == np.float16:
        return np.ascontiguousarray(a).astype(np.float32)        # exact, NaN stays NaN
    if _is_bfloat16(a.dtype):
        bits = np.ascontiguousarray(a).view(np.uint16).astype(np.uint32) << np.uint32(16)
        return bits.view(np.float32)
    raise dtype_error("gradient", a.dtype)


def bf16_bits_from_f32_bits(bits: np.ndarray) -> np.ndarray:
    """float32 bit patterns (uint32) -> bfloat16 bit patterns (uint16), round-to-nearest-even;
    NaN -> the same sign's NaN with the quiet bit set (never Inf)."""
    b = np.asarray(bits, dtype=np.uint32)
    lsb = (b >> np.uint32(16)) & np.uint32(1)
    rounded = (b + np.uint32(0x7FFF) + lsb) >> np.uint32(16)     # < 2**32: |b| <= 0x7F800000
    nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    quiet = (b >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(nan, quiet, rounded).astype(np.uint16)


def round_to(x: np.ndarray, dtype) -> np.ndarray:
    """float32 -> `dtype` by round-to-nearest-even: float32 (as it is), float16 (numpy's
    conversion: RNE, overflow to ±Inf) or bfloat16 (bf16_bits_from_f32_bits). TypeError for
    anything else."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"round_to takes a float32 array, got {x.dtype}")
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return x
    if dtype == np.float16:
        with np.errstate(over="ignore"):                          # to ±Inf, as RNE says
            return x.astype(np.float16)
    if _is_bfloat16(dtype):
        b = np.ascontiguousarray(x).view(np.uint32)
        return bf16_bits_from_f32_bits(b).view(dtype)
    raise dtype_error("round_to's dtype", dtype)
