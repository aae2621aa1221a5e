"""Table 3: ZRLE against general-purpose compressors on the same masked payloads.

The payload is the int32 output of the reference compress step (selected blocks kept, zeros
elsewhere). ZRLE encodes one frame per layer, as the wire format requires (a message); the
general-purpose compressors get the whole model's payload as one contiguous buffer, which
spares them per-layer call overhead. Ratios are raw payload bytes over compressed bytes;
"of ideal" is compressed bytes over the ideal (every nonzero word plus ZRLE's 7 framing words
per layer); GB/s are raw payload bytes per second. Every codec round-trips the payload once,
checked, before it is timed.
"""
from __future__ import annotations

import numpy as np

from gradblock.codec import zrle
from gradblock.codec.zrle import HEADER_WORDS, TRAILER_WORDS, max_frame_words

from .context import BenchContext, Prepared, Unavailable, optional_module, require
from .tables import Table
from .timing import measure, threads

BASELINE = "zstd level 1"


class Codec:
    """encode() compresses the workload's payload and keeps the result; decode() restores it.
    `size` is the compressed size in bytes, `decoded()` the flat int32 payload."""

    def __init__(self, prep: Prepared):
        self.prep = prep
        self.payload = prep.payload_flat


# ---------------------------------------------------------------------------- ZRLE (per layer)

class _ZrleMessage(Codec):
    def __init__(self, prep: Prepared, R: float):
        super().__init__(prep)
        self.R = R
        self.layers = [s.payload.reshape(-1) for s in prep.steps]
        self.sizes = [p.size for p in self.layers]

    @property
    def size(self) -> int:
        return 4 * sum(len(f) for f in self.frames)


class ZrleReference(_ZrleMessage):
    label = "ZRLE numpy reference"

    def encode(self):
        self.frames = [zrle.encode_frame(p, i, self.R) for i, p in enumerate(self.layers)]

    def decode(self):
        self.out = [zrle.decode_frame(f, n).values for f, n in zip(self.frames, self.sizes)]

    def decoded(self):
        return np.concatenate(self.out)


class ZrleNumba(_ZrleMessage):
    """encode_into one preallocated message buffer; decode_into a freshly allocated output
    each time, as the general-purpose decoders allocate theirs (same page-fault cost)."""
    label = "ZRLE numba"

    def __init__(self, prep: Prepared, R: float):
        super().__init__(prep, R)
        zn = optional_module("gradblock.codec.zrle_numba")
        self.encode_into, self.decode_into = require(zn, "encode_into", "decode_into")
        self.buf = np.empty(sum(max_frame_words(n) for n in self.sizes), dtype=np.uint32)
        self.starts = []

    def encode(self):
        at, starts = 0, []
        for i, p in enumerate(self.layers):
            starts.append(at)
            at += self.encode_into(p, self.buf, at, i, self.R)
        self.starts, self.used = starts, at

    @property
    def size(self) -> int:
        return 4 * self.used

    def decode(self):
        self.out = np.empty(sum(self.sizes), dtype=np.int32)
        at = 0
        for n, start in zip(self.sizes, self.starts):
            self.decode_into(self.buf, self.out[at:at + n], n, start)
            at += n

    def decoded(self):
        return self.out


class ZrleNumbaMessage(_ZrleMessage):
    """The whole message in one call each way (encode_message_into / decode_message_into):
    the payload is one flat buffer, as the compress step leaves it; decode allocates its
    output each time, as the others do."""
    label = "ZRLE numba, one call per message"

    def __init__(self, prep: Prepared, R: float):
        super().__init__(prep, R)
        zn = optional_module("gradblock.codec.zrle_numba")
        self.enc, self.dec, words = require(zn, "encode_message_into", "decode_message_into",
                                            "message_words")
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.buf = np.empty(words(self.offsets), dtype=np.uint32)

    def encode(self):
        self.used = self.enc(self.payload, self.offsets, self.buf, None, self.R)

    @property
    def size(self) -> int:
        return 4 * self.used

    def decode(self):
        self.out = np.empty(self.payload.size, dtype=np.int32)
        self.dec(self.buf[:self.used], self.out, self.offsets)

    def decoded(self):
        return self.out


class ZrleTorch(_ZrleMessage):
    label = "ZRLE torch"

    def __init__(self, prep: Prepared, R: float):
        super().__init__(prep, R)
        import torch
        tc = optional_module("gradblock.codec.zrle_torch")
        self.encode_frame, self.decode_frame = require(tc, "encode_frame", "decode_frame")
        self.tensors = [torch.from_numpy(p) for p in self.layers]

    def encode(self):
        self.frames = [self.encode_frame(t, i, self.R) for i, t in enumerate(self.tensors)]

    def decode(self):
        self.out = [self.decode_frame(f, n).values for f, n in zip(self.frames, self.sizes)]

    def decoded(self):
        return np.concatenate([v.numpy() for v in self.out])


# ------------------------------------------------------------ general-purpose (whole buffer)

class _Bytes(Codec):
    def encode(self):
        self.blob = self._compress(self.payload)

    def decode(self):
        self.raw = self._decompress(self.blob)

    @property
    def size(self) -> int:
        return len(self.blob)

    def decoded(self):
        return np.frombuffer(self.raw, dtype=np.int32)


class Zstd(_Bytes):
    def __init__(self, prep: Prepared, level: int):
        super().__init__(prep)
        zstandard = optional_module("zstandard")
        self.label = f"zstd level {level}"
        self._c = zstandard.ZstdCompressor(level=level)      # single-threaded (threads=0)
        self._d = zstandard.ZstdDecompressor()
        self._compress, self._decompress = self._c.compress, self._d.decompress


class Lz4(_Bytes):
    label = "lz4 (block, default)"

    def __init__(self, prep: Prepared):
        super().__init__(prep)
        block = optional_module("lz4.block")
        self._compress = lambda a: block.compress(a, store_size=True)
        self._decompress = block.decompress


class Blosc2(_Bytes):
    label = "blosc2 (lz4, shuffle, clevel 5)"

    def __init__(self, prep: Prepared):
        super().__init__(prep)
        blosc2 = optional_module("blosc2")
        self._compress = lambda a: blosc2.compress(a, typesize=4, clevel=5,
                                                   filter=blosc2.Filter.SHUFFLE,
                                                   codec=blosc2.Codec.LZ4)
        self._decompress = blosc2.decompress


def _codecs(R: float):
    return [("ZRLE numpy reference", lambda p: ZrleReference(p, R)),
            ("ZRLE numba", lambda p: ZrleNumba(p, R)),
            ("ZRLE numba, one call per message", lambda p: ZrleNumbaMessage(p, R)),
            ("ZRLE torch", lambda p: ZrleTorch(p, R)),
            ("zstd level 1", lambda p: Zstd(p, 1)),
            ("zstd level 3", lambda p: Zstd(p, 3)),
            ("lz4 (block, default)", Lz4),
            ("blosc2 (lz4, shuffle, clevel 5)", Blosc2)]


def ideal_bytes(prep: Prepared) -> int:
    """Every nonzero word once plus each frame's header and trailer."""
    nnz = int(np.count_nonzero(prep.payload_flat))
    return 4 * (nnz + (HEADER_WORDS + TRAILER_WORDS) * len(prep.steps))


def zrle_call_overhead(ctx: BenchContext) -> tuple[float, float] | None:
    """Seconds one numba encode_into / decode_into call costs on a 1-element frame."""
    try:
        zn = optional_module("gradblock.codec.zrle_numba")
        encode_into, decode_into = require(zn, "encode_into", "decode_into")
    except Unavailable:
        return None
    payload = np.ones(1, dtype=np.int32)
    buf = np.empty(max_frame_words(1), dtype=np.uint32)
    out = np.empty(1, dtype=np.int32)
    encode_into(payload, buf, 0, 0, ctx.R)
    reps = max(ctx.reps, 20)
    t_enc = measure(lambda: encode_into(payload, buf, 0, 0, ctx.R), reps, ctx.warmup).median
    t_dec = measure(lambda: decode_into(buf, out, 1, 0), reps, ctx.warmup).median
    return t_enc, t_dec


def _time_codec(c: Codec, ctx: BenchContext) -> tuple[int, float, float]:
    """Round-trip once and check, then (compressed bytes, encode s, decode s), medians."""
    c.encode()
    c.decode()
    if not np.array_equal(c.decoded(), c.payload):
        raise AssertionError(f"{c.label}: round trip differs from the payload")
    t_enc = measure(c.encode, ctx.reps, ctx.warmup).median
    t_dec = measure(c.decode, ctx.reps, ctx.warmup).median
    return c.size, t_enc, t_dec


def run(ctx: BenchContext) -> Table:
    table = Table("codec", "3. Codec: ZRLE vs general-purpose compressors on masked payloads",
                  ["workload", "threads", "codec", "ratio", "of ideal", "encode GB/s",
                   "decode GB/s", "encode vs zstd-1", "decode vs zstd-1"])
    for w in ctx.workloads:
        prep = ctx.prepared(w)
        raw_gb = prep.payload_flat.nbytes / 1e9
        ideal = ideal_bytes(prep)
        for n_threads in ctx.thread_counts:
            rows = []
            with threads(n_threads):
                for label, factory in _codecs(ctx.R):
                    r, cell = ctx.attempt(f"codec {w.name} x{n_threads} {label}",
                                          lambda factory=factory: _time_codec(factory(prep), ctx))
                    rows.append((label, r, cell))
                    if r is not None:
                        ctx.log(f"codec {w.name} x{n_threads} {label}: {r[0]} B, "
                                f"enc {r[1] * 1e3:.3f} ms, dec {r[2] * 1e3:.3f} ms")
                overhead, _ = ctx.attempt("numba ZRLE call overhead", lambda: zrle_call_overhead(ctx))
            numba_row = next((r for label, r, _ in rows if label == ZrleNumba.label and r), None)
            if overhead and numba_row:
                n_frames = len(prep.steps)
                table.notes.append(
                    f"{w.name} ×{n_threads}: one numba encode_into / decode_into call on a "
                    f"1-element frame takes {overhead[0] * 1e6:.1f} / {overhead[1] * 1e6:.1f} µs; "
                    f"× {n_frames} frames = {overhead[0] * n_frames / numba_row[1]:.0%} of ZRLE "
                    f"numba's encode time and {overhead[1] * n_frames / numba_row[2]:.0%} of its "
                    f"decode time")
            base = next((r for label, r, _ in rows if label == BASELINE and r), None)
            for label, r, cell in rows:
                labels = [w.name, str(n_threads), label]
                if r is None:
                    table.unmeasured(labels, cell)
                    continue
                size, t_enc, t_dec = r
                enc_gbs, dec_gbs = raw_gb / t_enc, raw_gb / t_dec
                table.add(*labels, 4 * prep.payload_flat.size / size, size / ideal, enc_gbs,
                          dec_gbs, base[1] / t_enc if base else "no zstd",
                          base[2] / t_dec if base else "no zstd")
        nnz = int(np.count_nonzero(prep.payload_flat))
        table.notes.append(
            f"{w.name}: payload {prep.payload_flat.nbytes / 2**20:.2f} MiB, {nnz:,} nonzero words "
            f"({nnz / prep.payload_flat.size:.2%}), {len(prep.steps)} frames; ideal "
            f"{ideal:,} B = ratio {prep.payload_flat.nbytes / ideal:.2f}")
    table.notes.append("ZRLE: one frame per layer (the wire format); numba encodes into one "
                       "preallocated buffer and decodes into a fresh one each time (the others' "
                       "Python APIs allocate their outputs too); torch decode validates on the host with the "
                       "reference decoder on CPU tensors (codec/zrle_torch.py). zstd and lz4 are "
                       "single-threaded; blosc2 uses the row's thread count")
    return table
