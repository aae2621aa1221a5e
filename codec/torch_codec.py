"""The gradblock compress step and ZRLE v1 codec in torch (docs/spec.md §1-§5).

Bit-exact with the numpy reference (`refmodel/`, `codec/zrle.py`) and device-agnostic: every
hot-path step is an int64 tensor op on the tensor's own device (CPU or CUDA).

Representation: a frame is a 1-D `torch.int32` tensor holding the uint32 words' bit patterns, so it
goes straight into `torch.distributed` collectives (gloo and NCCL both carry int32). On a
little-endian host `frame.numpy().view('<u4')` is the wire format.

Host round trips (documented, not hidden):
* data-dependent sizes (run detection, the frame length) and the error/saturation counts need one
  device->host sync per layer;
* CRC-32: on CPU tensors `zlib.crc32` over the tensor's own bytes (zero copy, C speed); on any other
  device a vectorised GF(2) tree reduction in torch (`crc32_words_tensor`), so the frame never
  leaves the GPU. Both are tested against zlib;
* decoding validates token by token, an inherently sequential walk: `decode_frame` copies the
  frame to host memory and runs the reference decoder (`codec.zrle.decode_frame`, which raises the
  `codec.errors` classes in the spec's order), then moves the values back to the requested device.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from gradblock.codec import zrle
from gradblock.refmodel.quantiser import DEFAULT_RANGE, QMAX, NonFiniteError, QuantConfig
from gradblock.refmodel.selection import BlockLayout, block_layout, resolve_k

__all__ = [
    "QMAX", "TorchLayerStep", "DecodedFrame", "quant_config", "quantise", "error_feedback",
    "block_norms", "select_blocks", "apply_selection", "compress_layer", "encode_frame",
    "crc32_words", "crc32_words_tensor", "decode_frame", "decode_message", "dequantise",
    "average", "sum_payloads", "frame_to_numpy",
]

_MASK32 = 0xFFFFFFFF
_CRC_POLY = 0xEDB88320


def quant_config(R: float | QuantConfig = DEFAULT_RANGE) -> QuantConfig:
    return R if isinstance(R, QuantConfig) else QuantConfig.from_range(R)


def _u32_to_i32(v: int) -> int:
    """A uint32 value as the signed int32 with the same bits (what an int32 tensor stores)."""
    v &= _MASK32
    return v - (1 << 32) if v >= (1 << 31) else v


# ---------------------------------------------------------------------------------------------
# §1 quantiser


def _check_float32(x: torch.Tensor, what: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"{what} must be float32, got {x.dtype}")


def _raise_nan(is_nan: torch.Tensor, count: int, where: str):
    first = int(torch.argmax(is_nan.to(torch.uint8)).item())
    raise NonFiniteError(count, first, where)


def quantise(x: torch.Tensor, cfg: QuantConfig | float = DEFAULT_RANGE, where: str = ""):
    """float32 tensor -> (int32 codes, saturation count) exactly as spec §1.2.

    P = m*M < 2**56 fits int64; the shift is clamped to [1, 58]: for t >= 58, P >> t = 0 and
    half = 2**(t-1) > P, so the rounded result is 0 exactly as the spec's t >= 58 rule says.
    """
    _check_float32(x, "gradient")
    cfg = quant_config(cfg)
    q, absbits = _quantise_lazy(x, cfg)
    is_nan = absbits > 0x7F800000
    nan_n, sat = torch.stack([is_nan.sum(), (absbits > cfg.range_bits).sum()]).tolist()
    if nan_n:
        _raise_nan(is_nan, nan_n, where)
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


def _quantise_lazy(x: torch.Tensor, cfg: QuantConfig):
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


def average(s: torch.Tensor, n_workers: int, cfg: QuantConfig | float = DEFAULT_RANGE) -> torch.Tensor:
    """int64 sum over N workers -> float32 mean: float32(float64(s) * R / (QMAX * N))."""
    cfg = quant_config(cfg)
    if int(n_workers) < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    c = float(np.float64(cfg.range) / (np.float64(QMAX) * np.float64(n_workers)))
    if s.dtype != torch.int64:
        raise TypeError(f"average expects the int64 sum, got {s.dtype}")
    return (s.to(torch.float64) * c).to(torch.float32)


# ---------------------------------------------------------------------------------------------
# §2 error feedback and block selection


def error_feedback(residual: torch.Tensor, q: torch.Tensor):
    """a = clamp(r + q, -QMAX, QMAX) in int64 -> (a as int32, saturation count)."""
    a, sat = _error_feedback_lazy(residual, q)
    return a, int(sat.item())


def _error_feedback_lazy(residual: torch.Tensor, q: torch.Tensor):
    if residual.shape != q.shape:
        raise ValueError(f"residual shape {tuple(residual.shape)} != gradient shape {tuple(q.shape)}")
    s = residual.to(torch.int64) + q.to(torch.int64)
    saturated = (s.abs() > QMAX).sum()
    return s.clamp(-QMAX, QMAX).to(torch.int32), saturated


def block_norms(acc: torch.Tensor, layout: BlockLayout) -> torch.Tensor:
    """Exact L1 norm per block as int64 (|a| <= QMAX, so exact below 2**32 elements)."""
    flat = acc.reshape(-1).to(torch.int64).abs()
    if layout.n_blocks == 0:
        return torch.zeros(0, dtype=torch.int64, device=acc.device)
    padded_len = layout.n_blocks * layout.block_size
    if padded_len != layout.n:                  # short last block: pad with zeros (norm unchanged)
        flat = torch.cat([flat, flat.new_zeros(padded_len - layout.n)])
    return flat.view(layout.n_blocks, layout.block_size).sum(dim=1)


def select_blocks(norms: torch.Tensor, k_eff: int) -> torch.Tensor:
    """The k_eff largest norms in rank order: norm descending, lower index first among ties.

    torch.topk is not tie-stable, so this is a stable ascending sort of -norm (exact: the
    norms are < 2**63)."""
    if k_eff == 0:
        return torch.zeros(0, dtype=torch.int64, device=norms.device)
    order = torch.sort(-norms, stable=True).indices
    return order[:k_eff]


def apply_selection(acc: torch.Tensor, selected: torch.Tensor, layout: BlockLayout):
    """payload = a on the selected blocks, 0 elsewhere; new residual = 0 there, a elsewhere."""
    flat = acc.reshape(-1)
    block_mask = torch.zeros(layout.n_blocks, dtype=torch.bool, device=acc.device)
    block_mask[selected] = True
    mask = block_mask.repeat_interleave(layout.block_size)[:layout.n]
    zero = torch.zeros((), dtype=acc.dtype, device=acc.device)
    payload = torch.where(mask, flat, zero)
    residual = torch.where(mask, zero, flat)
    return payload.reshape(acc.shape), residual.reshape(acc.shape)


# ---------------------------------------------------------------------------------------------
# §3 ZRLE frames


def _split_runs(run_s, run_e, zeros_before, lmax: int):
    """Cut nonzero runs [run_s, run_e) into canonical tokens of at most LMAX literals; only a
    run's first token keeps the zeros before it. Returns (run of each token, literal start, L, z)."""
    chunks = (run_e - run_s + lmax - 1) // lmax
    n_chunks = int(chunks.sum().item()) if chunks.numel() else 0
    run_of_chunk = torch.repeat_interleave(torch.arange(run_s.numel(), device=run_s.device), chunks,
                                           output_size=n_chunks)
    first_chunk = torch.cumsum(chunks, 0) - chunks
    idx_in_run = torch.arange(n_chunks, device=run_s.device) - torch.repeat_interleave(
        first_chunk, chunks, output_size=n_chunks)
    lit_s = run_s[run_of_chunk] + idx_in_run * lmax
    L = torch.minimum(torch.full_like(lit_s, lmax), run_e[run_of_chunk] - lit_s)
    z = torch.where(idx_in_run == 0, zeros_before[run_of_chunk], torch.zeros_like(lit_s))
    return run_of_chunk, lit_s, L, z


def _tokens(flat: torch.Tensor, lmax: int):
    """Canonical tokens of a flat int32 tensor: (z, L, literal_start), int64 on its device.

    Same vectorised run detection as codec.zrle.tokens."""
    n = flat.numel()
    dev = flat.device
    nz = (flat != 0).to(torch.int8)
    edge_pad = torch.zeros(1, dtype=torch.int8, device=dev)
    edges = torch.diff(torch.cat([edge_pad, nz, edge_pad]))
    run_s = torch.nonzero(edges == 1).reshape(-1)
    run_e = torch.nonzero(edges == -1).reshape(-1)
    prev_end = torch.cat([run_e.new_zeros(1), run_e[:-1]])
    zeros_before = run_s - prev_end
    run_of_chunk, lit_s, L, z = _split_runs(run_s, run_e, zeros_before, lmax)
    last_end = run_e[-1:] if run_e.numel() else run_e.new_zeros(1)
    tail = n - last_end                                  # trailing zeros: final (z, 0) token
    if n > 0:
        has_tail = tail > 0
        z = torch.cat([z, tail[has_tail]])
        L = torch.cat([L, tail.new_zeros(1)[has_tail]])
        lit_s = torch.cat([lit_s, tail.new_full((1,), n)[has_tail]])
    return z, L, lit_s


def encode_frame(payload: torch.Tensor, layer_id: int = 0, R: float | QuantConfig = DEFAULT_RANGE,
                 lmax_log2: int = zrle.DEFAULT_LMAX_LOG2, crc: str = "auto") -> torch.Tensor:
    """int32 payload (any shape, flattened row-major) -> one ZRLE v1 frame as an int32 tensor.

    `crc`: "auto" (zlib on CPU tensors, the torch tree elsewhere), "zlib" or "torch"."""
    if not isinstance(payload, torch.Tensor):
        raise TypeError(f"payload must be a torch.Tensor, got {type(payload).__name__}")
    if payload.dtype != torch.int32:
        raise TypeError(f"encode_frame expects int32, got {payload.dtype}")
    lmax_log2 = zrle.check_lmax_log2(lmax_log2)
    rbits = quant_config(R).range_bits
    flat = payload.reshape(-1)
    n = flat.numel()
    if n >= 2**32:
        raise ValueError(f"layer of {n} elements does not fit the 32-bit n field")
    if not (0 <= int(layer_id) < 2**32):
        raise ValueError(f"layer id must fit 32 bits, got {layer_id}")
    dev = flat.device
    z, L, lit_s = _tokens(flat, 1 << lmax_log2)
    T = z.numel()
    # one sync for the body length; the literal count is L.sum()
    lit_total = int(L.sum().item()) if T else 0
    size = zrle.HEADER_WORDS + 2 * T + lit_total + zrle.TRAILER_WORDS
    words = torch.empty(size, dtype=torch.int32, device=dev)
    header = [zrle.MAGIC, zrle.VERSION | (lmax_log2 << 8), int(layer_id), n, rbits]
    words[:zrle.HEADER_WORDS] = torch.tensor([_u32_to_i32(h) for h in header], dtype=torch.int32,
                                             device=dev)
    if T:
        pos = zrle.HEADER_WORDS + torch.cumsum(2 + L, 0) - (2 + L)
        words[pos] = z.to(torch.int32)
        words[pos + 1] = L.to(torch.int32)
        if lit_total:
            tok = torch.repeat_interleave(torch.arange(T, device=dev), L, output_size=lit_total)
            off = torch.arange(lit_total, device=dev) - torch.repeat_interleave(
                torch.cumsum(L, 0) - L, L, output_size=lit_total)
            words[pos[tok] + 2 + off] = flat[lit_s[tok] + off]
    words[-2] = T
    words[-1] = _u32_to_i32(crc32_words(words[:-1], method=crc))
    return words


def crc32_words(words: torch.Tensor, method: str = "auto") -> int:
    """CRC-32 (zlib / IEEE 802.3) over the little-endian bytes of 32-bit words held in an int32
    tensor. "zlib" copies to host if needed; "torch" runs on the tensor's device."""
    if method not in ("auto", "zlib", "torch"):
        raise ValueError(f"crc method must be 'auto', 'zlib' or 'torch', got {method!r}")
    if method == "torch" or (method == "auto" and words.device.type != "cpu"):
        return crc32_words_tensor(words)
    arr = words.detach().contiguous().cpu().numpy().astype("<i4", copy=False)
    return zlib.crc32(arr.tobytes() if arr.size else b"") & _MASK32


# CRC-32 is affine over GF(2). Feeding one little-endian word w to the reflected register is
# s' = A32(s ^ w), A32 = 32 zero-bit shift steps; so crc = A32^N-weighted XOR of the words with
# the init 0xFFFFFFFF folded into word 0. A pairwise tree combines segments:
# v(left ++ right) = A32^len(right) (v(left)) ^ v(right); leading zero words contribute nothing,
# so the word count is padded at the front to a power of two.


def _gf2_apply(cols: tuple[int, ...], v: int) -> int:
    out = 0
    for i in range(32):
        if (v >> i) & 1:
            out ^= cols[i]
    return out


@lru_cache(maxsize=None)
def _a32_power_cols(level: int) -> tuple[int, ...]:
    """Columns (images of each basis bit) of A32^(2**level)."""
    if level == 0:
        cols = []
        for i in range(32):
            s = 1 << i
            for _ in range(32):
                s = (s >> 1) ^ (_CRC_POLY if s & 1 else 0)
            cols.append(s)
        return tuple(cols)
    half = _a32_power_cols(level - 1)
    return tuple(_gf2_apply(half, c) for c in half)


_A32_TABLES: dict[tuple[int, str], torch.Tensor] = {}


def _a32_tables(level: int, device: torch.device) -> torch.Tensor:
    """A32^(2**level) as four 256-entry byte tables (slice-by-4): by linearity the image of a
    word is the XOR of its four bytes' images. int64 (4, 256) on `device`, cached."""
    key = (level, str(device))
    if key not in _A32_TABLES:
        cols = _a32_power_cols(level)
        tables = []
        for j in range(4):
            t = [0] * 256
            for b in range(1, 256):
                low = (b & -b).bit_length() - 1          # lowest set bit: reuse b without it
                t[b] = t[b & (b - 1)] ^ cols[8 * j + low]
            tables.append(t)
        _A32_TABLES[key] = torch.tensor(tables, dtype=torch.int64, device=device)
    return _A32_TABLES[key]


def _gf2_apply_tensor(level: int, v: torch.Tensor) -> torch.Tensor:
    """Apply A32^(2**level) to each 32-bit value in int64 tensor v (four table gathers)."""
    t = _a32_tables(level, v.device)
    return t[0][v & 0xFF] ^ t[1][(v >> 8) & 0xFF] ^ t[2][(v >> 16) & 0xFF] ^ t[3][(v >> 24) & 0xFF]


def crc32_words_tensor(words: torch.Tensor) -> int:
    """CRC-32 of int32 words computed on their own device (no host copy of the frame)."""
    n = words.numel()
    if n == 0:
        return 0
    v = words.reshape(-1).to(torch.int64) & _MASK32
    v = torch.cat([v[:1] ^ _MASK32, v[1:]])          # fold in the init value
    size = 1 << (n - 1).bit_length()
    if size != n:
        v = torch.cat([v.new_zeros(size - n), v])
    v = _gf2_apply_tensor(0, v)                        # leaves: A32(word)
    level = 0
    while v.numel() > 1:
        pairs = v.view(-1, 2)
        v = _gf2_apply_tensor(level, pairs[:, 0]) ^ pairs[:, 1]
        level += 1
    return (int(v.item()) ^ _MASK32) & _MASK32


def frame_to_numpy(words: torch.Tensor) -> np.ndarray:
    """A frame / message tensor as uint32 words on the host (the wire format)."""
    if words.dtype != torch.int32:
        raise TypeError(f"frames are int32 tensors, got {words.dtype}")
    return words.detach().contiguous().cpu().numpy().view(np.uint32)


@dataclass
class DecodedFrame:
    layer_id: int
    range_bits: int
    lmax_log2: int
    values: torch.Tensor   # int32, flat, on the requested device
    n_tokens: int
    n_words: int


def decode_frame(words: torch.Tensor | np.ndarray, expected_n: int | None = None, start: int = 0,
                 device: torch.device | str | None = None) -> DecodedFrame:
    """Decode the frame starting at words[start]; raises the codec.errors class the spec names.

    Validation runs on the host with the reference semantics (documented in the module doc);
    the values land on `device` (default: the input's device)."""
    if isinstance(words, torch.Tensor):
        device = words.device if device is None else device
        host = frame_to_numpy(words)
    else:
        host = np.asarray(words)
        if host.dtype == np.int32:
            host = host.view(np.uint32)
        device = "cpu" if device is None else device
    f = zrle.decode_frame(host, expected_n, start)
    values = torch.from_numpy(f.values).to(device)
    return DecodedFrame(f.layer_id, f.range_bits, f.lmax_log2, values, f.n_tokens, f.n_words)


def decode_message(words: torch.Tensor | np.ndarray, expected_sizes: list[int] | None = None,
                   device: torch.device | str | None = None) -> list[DecodedFrame]:
    """Decode concatenated frames (one per layer, in parameter order), checking the frame count
    against `expected_sizes` like codec.zrle.decode_message."""
    if isinstance(words, torch.Tensor):
        device = words.device if device is None else device
        host = frame_to_numpy(words)
    else:
        host = np.asarray(words)
        if host.dtype == np.int32:
            host = host.view(np.uint32)
    frames = zrle.decode_message(host, expected_sizes)
    dev = "cpu" if device is None else device
    return [DecodedFrame(f.layer_id, f.range_bits, f.lmax_log2, torch.from_numpy(f.values).to(dev),
                         f.n_tokens, f.n_words) for f in frames]


def sum_payloads(payloads: list[torch.Tensor]) -> torch.Tensor:
    """Exact int64 element-wise sum of int32 payloads (order-independent: N*QMAX < 2**63)."""
    if not payloads:
        raise ValueError("sum_payloads needs at least one payload")
    total = payloads[0].to(torch.int64)
    for p in payloads[1:]:
        if p.shape != total.shape:
            raise ValueError(f"payload shapes differ: {tuple(p.shape)} vs {tuple(total.shape)}")
        total = total + p.to(torch.int64)
    return total


# ---------------------------------------------------------------------------------------------
# §4 one compress step


@dataclass
class TorchLayerStep:
    layout: BlockLayout
    k_eff: int
    selected: torch.Tensor      # int64 block indices, rank order
    payload: torch.Tensor       # int32, nonzero only on selected blocks
    residual_out: torch.Tensor  # int32
    frame: torch.Tensor         # int32 words (uint32 bit patterns)
    sat_quant: int
    sat_feedback: int


def compress_layer(grad: torch.Tensor, residual: torch.Tensor | None = None, *,
                   R: float | QuantConfig = DEFAULT_RANGE, k: int | float = 1,
                   block_size: int | None = None, layer_id: int = 0,
                   lmax_log2: int = zrle.DEFAULT_LMAX_LOG2, where: str = "",
                   crc: str = "auto") -> TorchLayerStep:
    """quantise -> error feedback -> block norms -> top-k -> mask -> ZRLE frame (spec §4).

    The inputs are not modified; the caller stores `residual_out` as the next residual."""
    _check_float32(grad, "gradient")
    cfg = quant_config(R)
    grad = grad.detach()
    if residual is None:
        residual = torch.zeros(grad.shape, dtype=torch.int32, device=grad.device)
    if not isinstance(residual, torch.Tensor) or residual.dtype != torch.int32:
        raise TypeError(f"residual must be an int32 tensor, got "
                        f"{getattr(residual, 'dtype', type(residual).__name__)}")
    if residual.device != grad.device:
        raise ValueError(f"residual on {residual.device}, gradient on {grad.device}")
    layout = block_layout(tuple(grad.shape), block_size)
    k_eff = resolve_k(k, layout.n_blocks)
    q, absbits = _quantise_lazy(grad, cfg)
    is_nan = absbits > 0x7F800000
    acc, sat_fb = _error_feedback_lazy(residual, q)
    nan_n, sat_q, sat_fb = torch.stack([is_nan.sum(), (absbits > cfg.range_bits).sum(),
                                        sat_fb]).tolist()
    if nan_n:
        _raise_nan(is_nan, nan_n, where)
    norms = block_norms(acc, layout)
    selected = select_blocks(norms, k_eff)
    payload, residual_out = apply_selection(acc, selected, layout)
    frame = encode_frame(payload, layer_id, cfg, lmax_log2, crc=crc)
    return TorchLayerStep(layout, k_eff, selected, payload, residual_out, frame, sat_q, sat_fb)


# ---------------------------------------------------------------------------------------------
# §4 for a group of layers at once (a DDP bucket, a whole model)
#
# Small layers make the per-layer path pay torch's per-op overhead dozens of times per layer.
# The group path runs every step once over the concatenation of the layers' elements, with
# segment bookkeeping (block ids, layer ids) precomputed in a GroupPlan; its frames are
# bit-identical to compress_layer's, layer by layer (tested).


@dataclass
class GroupPlan:
    """Static layout of a group: element / block / layer index maps on one device."""
    shapes: tuple[tuple[int, ...], ...]
    layouts: tuple[BlockLayout, ...]
    k_effs: tuple[int, ...]
    layer_ids: tuple[int, ...]
    sizes: tuple[int, ...]                 # elements per layer
    elem_start: torch.Tensor               # (L,) int64 first element of each layer
    elem_end: torch.Tensor                 # (L,) int64 one past the last
    layer_of_elem: torch.Tensor            # (n,) int64
    block_of_elem: torch.Tensor            # (n,) int64 group-wide block index
    layer_of_block: torch.Tensor           # (n_blocks,) int64
    block_start: torch.Tensor              # (L,) int64 first group-wide block of each layer
    k_eff: torch.Tensor                    # (L,) int64
    is_layer_start: torch.Tensor           # (n,) bool
    headers: torch.Tensor                  # (L, 5) int32 frame headers
    total: int
    n_blocks: int

    @property
    def n_layers(self) -> int:
        return len(self.sizes)


def plan_group(shapes, *, k: int | float | list = 1, block_size: int | None | list = None,
               layer_ids: list[int] | None = None, R: float | QuantConfig = DEFAULT_RANGE,
               lmax_log2: int = zrle.DEFAULT_LMAX_LOG2,
               device: torch.device | str = "cpu") -> GroupPlan:
    """Precompute the index maps for compressing `shapes` together. `k` and `block_size` may be
    one value for all layers or a list with one per layer."""
    shapes = tuple(tuple(int(d) for d in s) for s in shapes)
    L = len(shapes)
    ks = list(k) if isinstance(k, (list, tuple)) else [k] * L
    bss = list(block_size) if isinstance(block_size, (list, tuple)) else [block_size] * L
    ids = list(range(L)) if layer_ids is None else [int(i) for i in layer_ids]
    if not (len(ks) == len(bss) == len(ids) == L):
        raise ValueError(f"{L} shapes but {len(ks)} k values, {len(bss)} block sizes, "
                         f"{len(ids)} layer ids")
    for i in ids:
        if not (0 <= i < 2**32):
            raise ValueError(f"layer id must fit 32 bits, got {i}")
    lmax_log2 = zrle.check_lmax_log2(lmax_log2)
    rbits = quant_config(R).range_bits
    layouts = tuple(block_layout(s, b) for s, b in zip(shapes, bss))
    k_effs = tuple(resolve_k(kk, lay.n_blocks) for kk, lay in zip(ks, layouts))
    sizes = tuple(lay.n for lay in layouts)
    nbs = [lay.n_blocks for lay in layouts]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if L else np.zeros(0, np.int64)
    bstarts = np.concatenate([[0], np.cumsum(nbs)[:-1]]).astype(np.int64) if L else np.zeros(0, np.int64)
    total, n_blocks = int(sum(sizes)), int(sum(nbs))
    layer_of_elem = np.repeat(np.arange(L, dtype=np.int64), sizes)
    block_of_elem = np.empty(total, dtype=np.int64)
    for j, lay in enumerate(layouts):
        block_of_elem[starts[j]:starts[j] + lay.n] = bstarts[j] + np.arange(lay.n) // lay.block_size
    is_start = np.zeros(total, dtype=bool)
    is_start[starts[np.asarray(sizes, dtype=np.int64) > 0]] = True
    headers = np.array([[_u32_to_i32(h) for h in (zrle.MAGIC, zrle.VERSION | (lmax_log2 << 8), i, n,
                                                  rbits)] for i, n in zip(ids, sizes)],
                       dtype=np.int32).reshape(L, zrle.HEADER_WORDS)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    return GroupPlan(shapes, layouts, k_effs, tuple(ids), sizes,
                     t(starts), t(starts + np.asarray(sizes, dtype=np.int64)), t(layer_of_elem),
                     t(block_of_elem), t(np.repeat(np.arange(L, dtype=np.int64), nbs)), t(bstarts),
                     t(np.asarray(k_effs, dtype=np.int64)), t(is_start), t(headers), total, n_blocks)


@dataclass
class GroupStep:
    message: torch.Tensor          # int32: the layers' frames back to back, in plan order
    frame_words: list[int]         # words of each layer's frame
    residuals: list[torch.Tensor]  # int32, one per layer in its shape (views of one buffer)
    nonzeros: list[int]            # payload elements sent per layer
    sat_quant: list[int]
    sat_feedback: list[int]


def _segment_counts_rows(flags: torch.Tensor, plan: GroupPlan) -> torch.Tensor:
    """Per-layer sums of each row of a (rows, n) int32 0/1 tensor: prefix sums read at the
    layer bounds -> (rows, L) int64."""
    cs = torch.cumsum(flags, dim=1, dtype=torch.int64)
    cs = torch.cat([cs.new_zeros(cs.shape[0], 1), cs], dim=1)
    return cs[:, plan.elem_end] - cs[:, plan.elem_start]


def compress_group(plan: GroupPlan, grads: list[torch.Tensor], residuals: list[torch.Tensor | None],
                   *, R: float | QuantConfig = DEFAULT_RANGE, lmax_log2: int = zrle.DEFAULT_LMAX_LOG2,
                   names: list[str] | None = None, crc: str = "auto") -> GroupStep:
    """compress_layer for every layer of `plan` in one pass; the message is the frames of
    compress_layer(grads[j], residuals[j], k, block_size, layer_id) concatenated."""
    cfg = quant_config(R)
    lmax_log2 = zrle.check_lmax_log2(lmax_log2)
    lmax = 1 << lmax_log2
    L = plan.n_layers
    if len(grads) != L or len(residuals) != L:
        raise ValueError(f"plan has {L} layers, got {len(grads)} gradients and "
                         f"{len(residuals)} residuals")
    dev = plan.layer_of_elem.device
    for j, (g, r) in enumerate(zip(grads, residuals)):
        what = f"layer {names[j] if names else j}"
        _check_float32(g, f"{what} gradient")
        if tuple(g.shape) != plan.shapes[j]:
            raise ValueError(f"{what}: gradient shape {tuple(g.shape)}, plan has {plan.shapes[j]}")
        if g.device != dev:
            raise ValueError(f"{what}: gradient on {g.device}, plan on {dev}")
        if r is not None and (r.dtype != torch.int32 or tuple(r.shape) != plan.shapes[j]
                              or r.device != dev):
            raise TypeError(f"{what}: residual must be int32 {plan.shapes[j]} on {dev}, got "
                            f"{r.dtype} {tuple(r.shape)} on {r.device}")
    flat_g = torch.cat([g.detach().reshape(-1) for g in grads]) if L else \
        torch.zeros(0, dtype=torch.float32, device=dev)
    flat_r = torch.cat([torch.zeros(plan.sizes[j], dtype=torch.int32, device=dev) if r is None
                        else r.reshape(-1) for j, r in enumerate(residuals)]) if L else \
        torch.zeros(0, dtype=torch.int32, device=dev)

    q, absbits = _quantise_lazy(flat_g, cfg)
    s = flat_r.to(torch.int64) + q.to(torch.int64)
    acc = s.clamp(-QMAX, QMAX)
    # NaN, |g| > R, |r + q| > QMAX: totals in one host sync, per layer only when any is nonzero
    flags = (absbits > 0x7F800000, absbits > cfg.range_bits, s != acc)
    if any(torch.stack([f.sum() for f in flags]).tolist()):
        nan_c, sat_q, sat_fb = _segment_counts_rows(torch.stack(flags).to(torch.int32), plan).tolist()
    else:
        nan_c = sat_q = sat_fb = [0] * L
    is_nan = flags[0]
    for j, c in enumerate(nan_c):
        if c:
            start = int(plan.elem_start[j])
            first = int(torch.argmax(is_nan[start:start + plan.sizes[j]].to(torch.uint8)).item())
            raise NonFiniteError(int(c), first, names[j] if names else f"layer {plan.layer_ids[j]}")

    # block norms and per-layer selection: blocks grouped by layer, norm descending, index
    # ascending (two stable sorts), then the first k_eff of each layer
    norms = torch.zeros(plan.n_blocks, dtype=torch.int64, device=dev)
    norms.index_add_(0, plan.block_of_elem, acc.abs())
    by_norm = torch.sort(-norms, stable=True).indices
    order = by_norm[torch.sort(plan.layer_of_block[by_norm], stable=True).indices]
    layer_of_ranked = plan.layer_of_block[order]
    rank = torch.arange(plan.n_blocks, device=dev) - plan.block_start[layer_of_ranked]
    block_mask = torch.zeros(plan.n_blocks, dtype=torch.bool, device=dev)
    block_mask[order[rank < plan.k_eff[layer_of_ranked]]] = True
    elem_mask = block_mask[plan.block_of_elem]
    acc32 = acc.to(torch.int32)
    payload = acc32 * elem_mask                       # a on selected blocks, 0 elsewhere
    residual_out = acc32 - payload                    # so payload + residual = a exactly

    message, frame_words, nonzeros = _encode_group_frames(plan, payload, lmax, crc)
    residual_list = [t.view(shape) for t, shape in
                     zip(torch.split(residual_out, list(plan.sizes)), plan.shapes)]
    return GroupStep(message, frame_words, residual_list, nonzeros, [int(v) for v in sat_q],
                     [int(v) for v in sat_fb])


def _encode_group_frames(plan: GroupPlan, payload: torch.Tensor, lmax: int, crc: str):
    """ZRLE frames of every layer's slice of `payload`, back to back (spec §3)."""
    dev = payload.device
    L = plan.n_layers
    n = payload.numel()
    nz = payload != 0
    false1 = torch.zeros(1, dtype=torch.bool, device=dev)
    # runs never cross a layer boundary
    prev_nz = torch.cat([false1, nz[:-1]]) & ~plan.is_layer_start
    next_nz = torch.cat([nz[1:] & ~plan.is_layer_start[1:], false1]) if n else nz
    run_s = torch.nonzero(nz & ~prev_nz).reshape(-1)
    run_e = torch.nonzero(nz & ~next_nz).reshape(-1) + 1
    run_layer = plan.layer_of_elem[run_s]
    same_layer = torch.cat([false1, run_layer[1:] == run_layer[:-1]])
    prev_end = torch.where(same_layer, torch.cat([run_e.new_zeros(1), run_e[:-1]]),
                           plan.elem_start[run_layer])
    zeros_before = run_s - prev_end
    run_of_chunk, lit_s, tok_L, tok_z = _split_runs(run_s, run_e, zeros_before, lmax)
    tok_layer = run_layer[run_of_chunk]
    # trailing zeros of each layer: one (z, 0) token
    last_end = plan.elem_start.clone()
    last_end.scatter_reduce_(0, run_layer, run_e, reduce="amax", include_self=True)
    tail = plan.elem_end - last_end
    has_tail = tail > 0
    tail_layers = torch.nonzero(has_tail).reshape(-1)
    tok_z = torch.cat([tok_z, tail[has_tail]])
    tok_L = torch.cat([tok_L, torch.zeros_like(tail_layers)])
    lit_s = torch.cat([lit_s, plan.elem_end[has_tail]])
    tok_layer = torch.cat([tok_layer, tail_layers])
    # tokens in frame order: by layer, then position (a tail sorts after its layer's runs)
    key = tok_layer * (n + 1) + lit_s
    perm = torch.sort(key).indices
    tok_z, tok_L, lit_s, tok_layer = tok_z[perm], tok_L[perm], lit_s[perm], tok_layer[perm]
    T = tok_z.numel()

    tokens_per_layer = torch.bincount(tok_layer, minlength=L) if T else \
        torch.zeros(L, dtype=torch.int64, device=dev)
    lits_per_layer = torch.zeros(L, dtype=torch.int64, device=dev).index_add_(0, tok_layer, tok_L)
    frame_len = zrle.HEADER_WORDS + 2 * tokens_per_layer + lits_per_layer + zrle.TRAILER_WORDS
    host = torch.stack([frame_len, lits_per_layer, tokens_per_layer]).tolist()
    frame_words, nonzeros, tokens_host = host
    frame_off = torch.cumsum(frame_len, 0) - frame_len
    total_words = int(sum(frame_words))
    words = torch.empty(total_words, dtype=torch.int32, device=dev)
    if L:
        hdr_pos = frame_off.unsqueeze(1) + torch.arange(zrle.HEADER_WORDS, device=dev)
        words[hdr_pos.reshape(-1)] = plan.headers.reshape(-1)
    if T:
        # every earlier frame adds its 7 fixed words to the running token-word count
        step = 2 + tok_L
        tok_pos = torch.cumsum(step, 0) - step + (zrle.HEADER_WORDS + zrle.TRAILER_WORDS) * tok_layer \
            + zrle.HEADER_WORDS
        words[tok_pos] = tok_z.to(torch.int32)
        words[tok_pos + 1] = tok_L.to(torch.int32)
        lit_total = int(sum(nonzeros))
        if lit_total:
            tok = torch.repeat_interleave(torch.arange(T, device=dev), tok_L, output_size=lit_total)
            off = torch.arange(lit_total, device=dev) - torch.repeat_interleave(
                torch.cumsum(tok_L, 0) - tok_L, tok_L, output_size=lit_total)
            words[tok_pos[tok] + 2 + off] = payload[lit_s[tok] + off]
    if L:
        t0_pos = frame_off + frame_len - 2
        words[t0_pos] = tokens_per_layer.to(torch.int32)
        ends = torch.cumsum(frame_len, 0).tolist()
        crcs = []
        if crc == "zlib" or (crc == "auto" and dev.type == "cpu"):
            buf = memoryview(frame_to_numpy(words)).cast("B")
            start = 0
            for end in ends:
                crcs.append(zlib.crc32(buf[4 * start:4 * (end - 1)]) & _MASK32)
                start = end
        else:
            start = 0
            for end in ends:
                crcs.append(crc32_words(words[start:end - 1], method=crc))
                start = end
        words[t0_pos + 1] = torch.tensor([_u32_to_i32(c) for c in crcs], dtype=torch.int32,
                                         device=dev)
    return words, [int(v) for v in frame_words], [int(v) for v in nonzeros]
