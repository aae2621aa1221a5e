"""Golden exchange cases (docs/golden.md "Exchange cases"): N workers' frames of one layer and
the int64 sums refmodel.exchange.sum_messages makes of them, or the error it raises.

Every frame comes from the reference compress step (refmodel.compress.compress_layer on a
seeded gradient per worker: varied sparsity, k, block size, LMAX) or the reference encoder
(all-zero and dense payloads). Hostile cases change one worker's frame (a CRC bit, the layer
id, the range, the end of the frame, the size) and expect the reference's error, named as the
RTL names it: a codec FrameError by its `name`, the cross-worker checks as RANGE_MISMATCH and
LAYER_ID_MISMATCH (the gradblock_pkg AGG_ERR_* codes).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradblock.codec import errors as E
from gradblock.codec import zrle
from gradblock.refmodel.compress import compress_layer
from gradblock.refmodel.exchange import sum_messages
from gradblock.golden.format import EXCHANGE_ARRAY_DTYPES, EXCHANGE_STAGE


@dataclass
class ExchangeSpec:
    name: str
    description: str
    frames: list[np.ndarray]      # one uint32 frame per worker
    n: int


def _worker_frame(rng, n: int, k, block_size: int, layer_id: int, lmax_log2: int = 8,
                  R: float = 10.0, scale: float = 2.0) -> np.ndarray:
    grad = (rng.standard_normal(n) * scale).astype(np.float32)
    return compress_layer(grad, k=k, block_size=block_size, layer_id=layer_id,
                          lmax_log2=lmax_log2, R=R).frame


def _payload_frame(payload, layer_id: int, lmax_log2: int = 8, R: float = 10.0) -> np.ndarray:
    return zrle.encode_frame(np.asarray(payload, np.int32), layer_id, R, lmax_log2)


def _with_crc_flip(frame: np.ndarray) -> np.ndarray:
    out = frame.copy()
    out[-1] ^= np.uint32(1 << 7)
    return out


def _reheader(frame: np.ndarray, word: int, value: int) -> np.ndarray:
    """A frame with header word `word` set to `value` and its CRC made right again, so that
    only the changed field is wrong."""
    out = frame.copy()
    out[word] = value
    out[-1] = zrle.crc32_words(out[:-1])
    return out


def exchange_specs(seed: int, quick: bool) -> list[ExchangeSpec]:
    rng = np.random.default_rng(seed + 1100)
    specs = []

    def add(name, description, frames, n):
        specs.append(ExchangeSpec(name, description, [np.asarray(f, np.uint32) for f in frames],
                                  n))

    n = 96
    add("ex_one_worker", "1 worker, 96 elements, 2 of 6 blocks of 16: the sums are its payload",
        [_worker_frame(rng, n, 2, 16, 3)], n)
    n = 200
    add("ex_four_sparse", "4 workers, 200 elements in blocks of 10, k = 3 each (different blocks)",
        [_worker_frame(rng, n, 3, 10, 7) for _ in range(4)], n)
    n = 150
    add("ex_eight_mixed", "8 workers, k from 1 to 15 blocks of 10 (one worker sends everything), "
        "LMAX 2^2 in half of them", [_worker_frame(rng, n, min(1 + 2 * w, 15), 10, 1,
                                                   2 if w % 2 else 8) for w in range(8)], n)
    n = 120
    add("ex_all_zero", "3 workers whose payloads are all zero: no literal, no memory traffic",
        [_payload_frame(np.zeros(n), 5) for _ in range(3)], n)
    n = 64
    dense = [rng.integers(-2**31 + 1, 2**31, n, dtype=np.int64) for _ in range(5)]
    for d in dense:
        d[d == 0] = 1
    add("ex_dense_extremes", "5 workers, dense payloads near +-2^31 (int64 sums beyond int32), "
        "LMAX 2^3", [_payload_frame(d.astype(np.int32), 2, 3) for d in dense], n)
    n = 0
    add("ex_empty_layer", "2 workers, n = 0", [_payload_frame(np.zeros(0), 0) for _ in range(2)], n)
    n = 1100
    add("ex_pages", "2 workers, 1100 elements, dense runs across the 4 KiB pages of the sums "
        "(512 int64 per page), k large", [_worker_frame(rng, n, 30, 32, 9) for _ in range(2)], n)
    # hostile: the reference raises; the RTL reports the same error for the same worker
    n = 100
    good = [_worker_frame(rng, n, 2, 10, 4) for _ in range(4)]
    add("ex_bad_crc_w2", "4 workers, worker 2's CRC has one bit flipped",
        good[:2] + [_with_crc_flip(good[2])] + good[3:], n)
    add("ex_layer_id_w1", "3 workers, worker 1 sends layer id 5 (worker 0: 4)",
        [good[0], _reheader(good[1], 2, 5), good[2]], n)
    add("ex_range_w3", "4 workers, worker 3 used R = 20 (worker 0: 10)",
        good[:3] + [_reheader(good[3], 4, zrle.range_bits(20.0))], n)
    add("ex_truncated_w1", "3 workers, worker 1's frame lacks its last 3 words",
        [good[0], good[1][:-3], good[2]], n)
    add("ex_size_w0", "2 workers, worker 0's header says n + 1", [_reheader(good[0], 3, n + 1),
                                                                   good[1]], n)
    if not quick:
        n = 16384
        add("ex_large_sparse", "8 workers, 16384 elements in blocks of 64, 4 blocks each",
            [_worker_frame(rng, n, 4, 64, 11) for _ in range(8)], n)
        n = 4096
        add("ex_large_dense", "6 workers, 4096 elements, half the blocks of 32 each",
            [_worker_frame(rng, n, 64, 32, 12) for _ in range(6)], n)
    return specs


def _header(frame: np.ndarray, word: int) -> int:
    return int(frame[word]) if frame.size > word else 0


def reference_outcome(frames: list[np.ndarray], n: int) -> tuple[np.ndarray | None, dict | None]:
    """(sums, None) or (None, {"name", "worker", "word"}) from refmodel.exchange.sum_messages."""
    try:
        return sum_messages(frames, [n])[0], None
    except E.FrameError as err:
        worker = int(str(err.detail).split(":")[0].split()[-1])
        return None, {"name": err.name, "worker": worker, "word": int(err.word or 0)}
    except ValueError:
        # the cross-worker check (range first, then layer id, as _check_consistent)
        for w, f in enumerate(frames[1:], 1):
            if _header(f, 4) != _header(frames[0], 4):
                return None, {"name": "RANGE_MISMATCH", "worker": w, "word": 4}
            if _header(f, 2) != _header(frames[0], 2):
                return None, {"name": "LAYER_ID_MISMATCH", "worker": w, "word": 2}
        raise


def compute_exchange(spec: ExchangeSpec) -> tuple[dict, dict]:
    sums, error = reference_outcome(spec.frames, spec.n)
    f0 = spec.frames[0]
    meta = {"name": spec.name, "kind": "synthetic", "description": spec.description,
            "stages": [EXCHANGE_STAGE], "n": spec.n, "n_workers": len(spec.frames),
            "frame_words": [int(f.size) for f in spec.frames],
            "layer_id": _header(f0, 2), "range_bits": _header(f0, 4), "error": error}
    arrays = {"frames": np.concatenate(spec.frames).astype(np.uint32),
              "sums": np.zeros(0, np.int64) if sums is None else sums}
    return meta, {k: np.ascontiguousarray(v, dtype=EXCHANGE_ARRAY_DTYPES[k])
                  for k, v in arrays.items()}


def split_frames(meta: dict, frames: np.ndarray) -> list[np.ndarray]:
    """The concatenated frames of an exchange case, one array per worker."""
    ends = np.cumsum(meta["frame_words"])
    return [frames[e - w:e] for e, w in zip(ends, meta["frame_words"])]


def check_exchange(meta: dict, arrays: dict) -> list[str]:
    """Recompute an exchange case with the reference: the problems found (empty: it holds)."""
    problems = []
    frames = split_frames(meta, arrays["frames"])
    try:
        sums, error = reference_outcome(frames, meta["n"])
    except (ValueError, TypeError) as e:
        return [f"reference rejects the inputs: {type(e).__name__}: {e}"]
    if error != meta["error"]:
        problems.append(f"error {meta['error']!r}, reference {error!r}")
    want = np.zeros(0, np.int64) if sums is None else sums
    if not np.array_equal(arrays["sums"], want):
        problems.append("sums differ from refmodel.exchange.sum_messages")
    for key, word in (("layer_id", 2), ("range_bits", 4)):
        if frames and meta[key] != _header(frames[0], word):
            problems.append(f"manifest {key} = {meta[key]}, worker 0's header {_header(frames[0], word)}")
    return problems
