"""int32 fixed-point quantiser: the numpy reference (docs/spec.md §1).

Every step is exact integer arithmetic on the float32 bit pattern, so the numba,
torch and RTL implementations can agree with it bit for bit.
"""
from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np

from gradblock.codec.errors import GradblockError, RangeError  # RangeError: one class for every layer (re-exported here)

from .precision import dtype_error, is_gradient_dtype, round_to, widen

QMAX = 2**31 - 1            # largest code; -QMAX is the smallest, -2**31 never occurs
DEFAULT_RANGE = 10.0
MANT_MIN = 2**31            # the multiplier M is normalised into [2**31, 2**32)


class NonFiniteError(GradblockError):
    """A gradient contains NaN: there is no meaningful code for it."""

    def __init__(self, count: int, first_index: int, where: str = ""):
        self.count = count
        self.first_index = first_index
        loc = f" in {where}" if where else ""
        super().__init__(f"{count} NaN value(s){loc}, first at flat index {first_index}")


@dataclass(frozen=True)
class QuantConfig:
    """Quantiser configuration: range R and the hardware multiplier (M, k).

    Q(x) = round_half_even(x * M / 2**k), clamped to [-QMAX, QMAX].
    """

    range: float      # R, exactly representable as float32
    range_bits: int   # R as float32 bits (h4 of a frame)
    M: int            # 2**31 <= M < 2**32
    k: int            # signed shift

    @classmethod
    def from_range(cls, R: float = DEFAULT_RANGE) -> "QuantConfig":
        if isinstance(R, bool) or not isinstance(R, numbers.Real):   # "10", True: not a range
            raise RangeError(f"range R must be a finite float32 > 0, got {R!r}")
        with np.errstate(over="ignore"):                             # 1e39 -> inf: refused below
            r32 = np.float32(R)
        if not np.isfinite(r32) or r32 <= 0:
            raise RangeError(f"range R must be a finite float32 > 0, got {R!r}")
        M, k = multiplier(float(r32))
        return cls(float(r32), int(r32.view(np.uint32)), M, k)

    @classmethod
    def from_bits(cls, bits: int) -> "QuantConfig":
        return cls.from_range(float(np.uint32(bits).view(np.float32)))


def multiplier(R: float) -> tuple[int, int]:
    """(M, k) for range R: S = float64(QMAX) / float64(R) (one IEEE division);
    k is the smallest integer with S * 2**k > 2**31 - 1; M = ceil(S * 2**k).

    Then 2**31 <= M <= 2**32 - 2. ldexp is exact, so ceil sees S * 2**k exactly.
    """
    S = float(QMAX) / float(R)
    _, e = math.frexp(S)          # S = f * 2**e, 0.5 <= f < 1
    k = 32 - e                    # S * 2**k = f * 2**32 > 2**31 - 1 always
    while math.ldexp(S, k - 1) > QMAX:
        k -= 1                    # happens only when f > 1 - 2**-31
    M = math.ceil(math.ldexp(S, k))
    assert MANT_MIN <= M < 2**32
    return M, k


def split_float32(x: np.ndarray):
    """Bit fields of float32 values: sign, integer significand m, exponent E, class flags.

    x = (-1)**sign * m * 2**E exactly; subnormals have E = -149.
    """
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    sign = (bits >> 31).astype(bool)
    ebits = ((bits >> 23) & 0xFF).astype(np.int64)
    frac = (bits & 0x7FFFFF).astype(np.uint64)
    m = np.where(ebits == 0, frac, frac | np.uint64(0x800000))
    E = np.where(ebits == 0, -149, ebits - 150)
    is_inf = (ebits == 255) & (frac == 0)
    is_nan = (ebits == 255) & (frac != 0)
    return sign, m, E, is_inf, is_nan


@dataclass
class QuantResult:
    q: np.ndarray           # int32 codes, same shape as the input
    saturated: int          # elements with |x| > R (±Inf included), clamped to ±QMAX


def quantise(x: np.ndarray, cfg: QuantConfig | float = DEFAULT_RANGE, where: str = "") -> QuantResult:
    """float32 -> int32 codes (docs/spec.md §1). NaN raises NonFiniteError. A float16 or
    bfloat16 (ml_dtypes) array is widened exactly to float32 first (§1.2): the codes are
    those of the widened array; any other dtype raises TypeError naming the accepted ones."""
    if not isinstance(cfg, QuantConfig):
        cfg = QuantConfig.from_range(cfg)
    x = np.asarray(x)
    if not is_gradient_dtype(x.dtype):
        raise dtype_error("quantise's input", x.dtype)
    x = widen(x)
    flat = x.reshape(-1)
    sign, m, E, is_inf, is_nan = split_float32(flat)
    if is_nan.any():
        raise NonFiniteError(int(is_nan.sum()), int(np.argmax(is_nan)), where)

    P = m * np.uint64(cfg.M)                       # exact: < 2**24 * 2**32 = 2**56
    t = cfg.k - E                                  # magnitude = P / 2**t
    # t <= 0 with m != 0 means P << -t >= 2**31 > QMAX: saturate without shifting.
    ts = np.clip(t, 1, 63).astype(np.uint64)       # P < 2**56, so any t >= 58 rounds to 0
    q = P >> ts
    rem = P & ((np.uint64(1) << ts) - np.uint64(1))
    half = np.uint64(1) << (ts - np.uint64(1))
    q = q + ((rem > half) | ((rem == half) & ((q & np.uint64(1)) == 1))).astype(np.uint64)
    q = np.where((t <= 0) & (m != 0), np.uint64(QMAX), q)
    q = np.where(is_inf, np.uint64(QMAX), q)
    mag = np.minimum(q, np.uint64(QMAX)).astype(np.int64)
    codes = np.where(sign, -mag, mag).astype(np.int32)

    absbits = flat.view(np.uint32) & np.uint32(0x7FFFFFFF)
    saturated = int(np.count_nonzero(absbits > np.uint32(cfg.range_bits)))
    return QuantResult(codes.reshape(x.shape), saturated)


@functools.lru_cache(maxsize=64)
def saturation_bits(cfg: QuantConfig) -> int:
    """The smallest |x| bit pattern (bits & 0x7FFFFFFF) whose code magnitude is QMAX.

    Q is non-decreasing in |x| and the bit patterns of non-negative floats order like their
    values, so exactly the elements at or above this threshold saturate (±Inf included, NaN
    above it too); below it, Q < QMAX and the shift t = k - E is >= 1. The fast backends
    use it to replace their saturation logic by one comparison. Found by bisection with
    `quantise` above, once per configuration."""
    lo, hi = 0, 0x7F800000                        # +Inf saturates
    while lo < hi:
        mid = (lo + hi) // 2
        if int(quantise(np.array([mid], np.uint32).view(np.float32), cfg).q[0]) == QMAX:
            hi = mid
        else:
            lo = mid + 1
    return lo


def dequantise(v: np.ndarray, cfg: QuantConfig | float = DEFAULT_RANGE) -> np.ndarray:
    """int codes -> float32: float32(float64(v) * (float64(R) / float64(QMAX)))."""
    if not isinstance(cfg, QuantConfig):
        cfg = QuantConfig.from_range(cfg)
    c = np.float64(cfg.range) / np.float64(QMAX)
    return (np.asarray(v).astype(np.float64) * c).astype(np.float32)


def average(s: np.ndarray, n_workers: int, cfg: QuantConfig | float = DEFAULT_RANGE,
            dtype=np.float32) -> np.ndarray:
    """int64 sum over N workers -> float32 mean: float32(float64(s) * c),
    c = float64(R) / (float64(QMAX) * N). `dtype` float16 or bfloat16 (a half-precision
    parameter's): that float32 mean rounded to it, round-to-nearest-even (§1.2)."""
    if not isinstance(cfg, QuantConfig):
        cfg = QuantConfig.from_range(cfg)
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    c = np.float64(cfg.range) / (np.float64(QMAX) * np.float64(n_workers))
    return round_to((np.asarray(s, dtype=np.int64).astype(np.float64) * c).astype(np.float32),
                    dtype)
