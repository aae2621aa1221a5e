"""§1 of docs/spec.md in torch: the int32 fixed-point quantiser, dequantisation and the mean.

Bit-exact with refmodel/quantiser.py and device-agnostic: integer tensor ops on the float32 bit
pattern, on the tensor's own device."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from gradblock.refmodel.precision import dtype_error
from gradblock.refmodel.quantiser import DEFAULT_RANGE, QMAX, NonFiniteError, QuantConfig
from gradblock.refmodel.validation import check_range

__all__ = ["QMAX", "NAN_BITS", "HALF_DTYPES", "quant_config", "check_float32", "raise_nan", "quantise",
           "quantise_lazy", "saturation_bits", "dequantise", "average"]

NAN_BITS = 0x7F800000          # |bits| above this is a NaN


def quant_config(R: float | QuantConfig = DEFAULT_RANGE) -> QuantConfig:
    """R (or a QuantConfig) checked by the reference's validator: RangeError unless finite > 0."""
    return check_range(R)


HALF_DTYPES = (torch.float16, torch.bfloat16)


def check_float32(x: torch.Tensor, what: str) -> torch.Tensor:
    """x as float32: float32 as given; float16 / bfloat16 widened exactly (`.float()`, every
    value of either is a float32 value: docs/spec.md §1.2), so the step's bits are those of the
    widened tensor. TypeError naming the accepted dtypes otherwise, as the reference."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype in HALF_DTYPES:
        return x.float()
    if x.dtype != torch.float32:
        raise dtype_error(what, x.dtype)
    return x


def raise_nan(is_nan: torch.Tensor, count: int, where: str):
    first = int(torch.argmax(is_nan.to(torch.uint8)).item())
    raise NonFiniteError(count, first, where)


def quantise(x: torch.Tensor, cfg: QuantConfig | float = DEFAULT_RANGE, where: str = ""):
    """float32 tensor -> (int32 codes, saturation count) exactly as spec §1.2.

    P = m*M < 2**56 fits int64; the shift is clamped to [1, 58]: for t >= 58, P >> t = 0 and
    half = 2**(t-1) > P, so the rounded result is 0 exactly as the spec's t >= 58 rule says.
    """
    cfg = quant_config(cfg)                       # the reference checks R before the dtype
    x = check_float32(x, "gradient")
    q, absbits = quantise_lazy(x, cfg)
    is_nan = absbits > NAN_BITS
    nan_n, sat = torch.stack([is_nan.sum(), (absbits > cfg.range_bits).sum()]).tolist()
    if nan_n:
        raise_nan(is_nan, nan_n, where)
    return q, sat


@lru_cache(maxsize=64)
def saturation_bits(cfg: QuantConfig) -> int:
    """The smallest |x| bit pattern whose code magnitude is QMAX. Q is monotone in |x| and the
    bits of non-negative floats order like their values, so exactly the elements with
    (bits & 0x7FFFFFFF) >= this value saturate (±Inf included). Found by bisection on the
    numpy reference quantiser."""
    from gradblock.refmodel.quantiser import quantise as ref_quantise

    def saturates(b: int) -> bool:
        x = np.array([b], dtype=np.uint32).view(np.float32)
        return int(ref_quantise(x, cfg).q[0]) == QMAX

    lo, hi = 0, 0x7F800000                        # saturates(hi): +Inf
    while lo < hi:
        mid = (lo + hi) // 2
        if saturates(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def quantise_lazy(x: torch.Tensor, cfg: QuantConfig):
    """quantise without any host sync or checks: returns (codes, |bits|) tensors; NaN
    (|bits| > 0x7F800000) and saturation (|bits| > bits(R)) are for the caller to count.

    With e' = max(e, 1): m = |bits| - ((e' - 1) << 23) (the implicit 1 for normals, f for
    subnormals) and t = k + 150 - e'. P = m*M < 2**56 is int64. Round-half-to-even of P / 2**t
    is (P + 2**(t-1) - 1 + ((P >> t) & 1)) >> t, the spec's q/rem/half rule. Every element that
    does not saturate has 1 <= t, and t >= 58 gives 0 as the spec says, so t is clamped to
    [1, 58]; saturating elements (and NaN, reported by the caller) are overwritten with QMAX
    by one comparison against saturation_bits(cfg)."""
    bits = x.reshape(-1).view(torch.int32)
    absbits = bits & 0x7FFFFFFF
    e1 = (absbits >> 23).clamp_(min=1)
    m = absbits - ((e1 - 1) << 23)
    ts = ((cfg.k + 150) - e1).clamp_(1, 58).to(torch.int64)
    P = m.to(torch.int64) * cfg.M
    mag = (P + ((1 << (ts - 1)) - 1) + ((P >> ts) & 1)) >> ts
    mag.masked_fill_(absbits >= saturation_bits(cfg), QMAX)
    mag32 = mag.to(torch.int32)
    sign = bits >> 31                                  # 0 or -1: (v ^ -1) - -1 = -v
    codes = ((mag32 ^ sign) - sign).reshape(x.shape)
    return codes, absbits


def dequantise(v: torch.Tensor, cfg: QuantConfig | float = DEFAULT_RANGE) -> torch.Tensor:
    """int codes -> float32(float64(v) * (float64(R) / float64(QMAX))) (spec §1.3)."""
    cfg = quant_config(cfg)
    c = float(np.float64(cfg.range) / np.float64(QMAX))
    return (v.to(torch.float64) * c).to(torch.float32)


def average(s: torch.Tensor, n_workers: int, cfg: QuantConfig | float = DEFAULT_RANGE,
            dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Exact integer sum over N workers -> float32 mean: float32(float64(s) * R / (QMAX * N)).
    Checks in the reference's order: R, then N. `dtype` float16 / bfloat16: that float32 mean
    rounded to it by torch's conversion (round-to-nearest-even, §1.2)."""
    cfg = quant_config(cfg)
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    c = float(np.float64(cfg.range) / (np.float64(QMAX) * np.float64(n_workers)))
    if s.dtype.is_floating_point or s.dtype.is_complex or s.dtype == torch.bool:
        raise TypeError(f"average expects the integer sum, got {s.dtype}")
    if dtype not in (torch.float32, *HALF_DTYPES):
        raise dtype_error("average's dtype", dtype)
    return (s.to(torch.int64).to(torch.float64) * c).to(torch.float32).to(dtype)
