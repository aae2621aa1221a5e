"""A bucket's exchange on the device (docs/spec.md §3.4-§3.5, §5): every rank's gathered slot
validated, decoded, summed and averaged in one batch of torch ops, without a host sync.

Input: the all_gather's slots, (world, width) int32, row r = [message length, rank r's
message, zeros] (the layout of shim's all_gather hook). A message is the bucket's packets in
layer order: a ZRLE v1 frame per compressed layer, the float32 words of each layer sent dense.
What every rank knows alike (`BucketLayout`: the layers' kinds, sizes and ids, the range bits)
is all the walk needs besides the words.

Why batched torch ops and not a Triton kernel: the same code then runs on the CPU in every CI
run (Triton is not in the CPU environment, and its interpreter is slow), and a bucket costs a
number of ops set by log2(slot width), never by its number of layers, frames or tokens.

How the walk avoids the host. The reference decoder walks tokens one after another. Here every
word position p is given the position that would follow it if p were a node of the walk --
a header (next: p + 5, or past an empty frame's trailer), or a token (next: p + 2 + L, or,
when the words 2 further on are where the next expected header, the dense gap before it
included, would sit, that header) -- and the walk from each row's first header is enumerated
by pointer doubling. That candidate walk is then checked against everything the reference
checks, in bulk: each node is a header exactly when the previous one ended a frame, headers
in layer order with the expected id, n and range, every token's checks (§3.5), a frame ends
exactly when its elements are complete, its trailer (token count, CRC over all frames of all
rows in one pass: codec.crc32_torch.crc32_spans), the dense packets finite, the message used
to its last word. If all hold, the candidate walk IS the reference's walk, and the sums are
taken from it. If any fails, `bad` is set and nothing here says which: the caller, after its
one host read of `bad`, runs the reference's walk on the host for the exact error (class and
message) -- or for the sums, in the rare case where literal words that look like a header
misled the candidate walk of a valid message. Same bits either way.

The sums are exact int64 (index_add_), the averages §1.3's float32(float64(s) * c) with
c = float64(R) / (float64(QMAX) * float64(N)) and the dense layers' float32(sum_r float64(v_r)
/ N) summed in rank order: the reference's operations, one IEEE op each.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gradblock.codec import zrle
from gradblock.codec.crc32_torch import crc32_spans
from gradblock.codec.scan_torch import running_max, running_min
from gradblock.refmodel.quantiser import QMAX, QuantConfig

__all__ = ["BucketLayout", "bucket_layout", "decode_slots", "decode_frame_walk", "slot_messages",
           "encode_slot",
           "NONFINITE_WORD", "SKIP_WORD"]

# the length word of a slot whose sender had a NaN gradient: every rank still enters the
# collective, and every rank raises (a peer's: PeerNonFiniteError)
NONFINITE_WORD = -2
# the length word of a slot whose sender had a NaN or Inf under the compressor's "skip" policy
# (mixed precision): every rank makes the bucket's averages NaN, so torch's GradScaler skips
SKIP_WORD = -3

_MASK32 = 0xFFFFFFFF
_PAD = 8                     # zero words after a row: header / trailer reads never leave it


@dataclass(frozen=True)
class BucketLayout:
    """The static shape of a bucket's messages: per layer in bucket order, whether it travels
    as a frame (True) or dense float32 words, its element count and its frame layer id; the
    frames' range bits; the number of workers."""
    framed: tuple[bool, ...]
    sizes: tuple[int, ...]
    layer_ids: tuple[int, ...]
    range_bits: int
    range: float
    n_workers: int
    _dev: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def total(self) -> int:
        return int(sum(self.sizes))

    def tensors(self, device: torch.device) -> dict:
        """The index maps on `device`, built once per device."""
        key = str(device)
        if key not in self._dev:
            self._dev[key] = self._build(device)
        return self._dev[key]

    def _build(self, device) -> dict:
        framed, sizes = np.array(self.framed, dtype=bool), np.array(self.sizes, dtype=np.int64)
        frames = np.flatnonzero(framed)
        F = frames.size
        flat_off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        # dense words before the first frame (gap 0), between frames f-1 and f (gap f), after
        # the last (gap F); each dense word's gap and offset inside it
        gap_of_layer = np.cumsum(framed) - framed.astype(np.int64)  # frames before the layer
        gaps = np.zeros(F + 1, dtype=np.int64)
        gap_i, inner, dense_map = [], [], []
        for j in np.flatnonzero(~framed):
            g = int(gap_of_layer[j])
            gap_i.append(np.full(sizes[j], g, dtype=np.int64))
            inner.append(gaps[g] + np.arange(sizes[j], dtype=np.int64))
            dense_map.append(flat_off[j] + np.arange(sizes[j], dtype=np.int64))
            gaps[g] += sizes[j]
        cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
        ids = np.array(self.layer_ids, dtype=np.int64)[frames]
        id_table = np.full(int(ids.max()) + 1 if F else 1, -1, dtype=np.int64)
        id_table[ids] = np.arange(F)
        n_f = sizes[frames]
        acc_off = np.concatenate([[0], np.cumsum(n_f)]).astype(np.int64)
        coarse_map = cat([flat_off[j] + np.arange(sizes[j], dtype=np.int64) for j in frames])
        dense = np.flatnonzero(~framed)
        dense_layer = cat([np.full(sizes[j], j, dtype=np.int64) for j in dense])
        dense_in_layer = cat([np.arange(sizes[j], dtype=np.int64) for j in dense])
        dense_sizes = sizes[dense]
        dense_bounds = np.concatenate([[0], np.cumsum(dense_sizes)]).astype(np.int64)
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        return dict(F=F, gaps=gaps.tolist(), gaps_t=t(gaps), id_table=t(id_table), n_f=t(n_f),
                    acc_off=t(acc_off[:-1]), acc_total=int(acc_off[-1]),
                    dense_gap=t(cat(gap_i)), dense_inner=t(cat(inner)),
                    dense_map=t(cat(dense_map)), coarse_map=t(coarse_map),
                    dense_total=int(sum(gaps)), frame_pos=t(frames),
                    static_len=t(np.where(framed, 0, sizes)), dense_layer=t(dense_layer),
                    dense_in_layer=t(dense_in_layer), dense_start=t(dense_bounds[:-1]),
                    dense_end=t(dense_bounds[1:]), dense_pos=dense.tolist(),
                    identity=bool(F == len(self.sizes)))


def bucket_layout(framed, sizes, layer_ids, cfg: QuantConfig, n_workers: int) -> BucketLayout:
    return BucketLayout(tuple(bool(f) for f in framed), tuple(int(n) for n in sizes),
                        tuple(int(i) for i in layer_ids), int(cfg.range_bits), float(cfg.range),
                        int(n_workers))


def slot_messages(slots: torch.Tensor) -> list[torch.Tensor] | None:
    """The host's view of the slots for the reference walk: each row's message (CPU int32),
    or None when a length word does not fit its row (the caller names the peer)."""
    host = slots.detach().cpu()
    width = host.shape[1]
    lengths = host[:, 0].tolist()
    if any(not 0 <= n <= width - 1 for n in lengths):
        return None
    return [host[r, 1:1 + n] for r, n in enumerate(lengths)]


def _signed(u: torch.Tensor) -> torch.Tensor:
    """uint32 values held in int64 -> the int32 values with the same bits (still int64)."""
    return u - ((u >> 31) << 32)


def decode_slots(layout: BucketLayout, slots: torch.Tensor, sums: bool = False,
                 open_end: bool = False):
    """The bucket's averaged gradient, flat float32 in bucket (layer) order, and `bad`, a
    0-d bool tensor: True when some row is not exactly what the reference accepts (or could
    not be shown to be; see the module doc) -- the flat result then means nothing. No host
    sync; ops in a number set by log2(width). With `sums`: the framed layers' exact int64
    sums over the rows (in frame order) instead of the averages. With `open_end` (frames only,
    with `sums`): a row's frames may be followed by anything (decode_frame's view of a frame
    at the start of a longer buffer); returns (sums, bad, each frame's trailer position in
    its row, (world, F))."""
    if slots.dim() != 2 or slots.dtype != torch.int32:
        raise TypeError(f"slots must be a (world, width) int32 tensor, got {slots.dim()}-D "
                        f"{slots.dtype}")
    dev = slots.device
    world, width = slots.shape
    if world != layout.n_workers:
        raise ValueError(f"{world} slots for a bucket of {layout.n_workers} workers")
    T = layout.tensors(dev)
    F = T["F"]
    i64 = torch.int64
    NP = width + 1                                   # positions 0..width (width: a full row's end)
    u = torch.zeros(world, NP + _PAD, dtype=i64, device=dev)
    u[:, :width] = slots.to(i64) & _MASK32
    length = slots[:, 0].to(i64)                     # signed: a negative word is out of range
    bad = ((length < 0) | (length > width - 1)).any()
    E = (1 + length).clamp(1, width).unsqueeze(1)    # (world, 1) one past each message
    pos = torch.arange(NP, dtype=i64, device=dev).unsqueeze(0)

    dense_bits = None
    if T["dense_total"]:
        gap_start = torch.ones(world, F + 1, dtype=i64, device=dev)   # gap 0 starts at word 1
    if F == 0:
        bad = bad | (E.squeeze(1) != 1 + T["dense_total"]).any()
        acc = torch.zeros(0, dtype=i64, device=dev)
    else:
        gaps_t = T["gaps_t"]
        w = [u[:, k:k + NP] for k in range(5)]
        lmax_log2 = (w[1] >> 8) & 0xFF
        tab = T["id_table"]
        id_ok = w[2] < tab.numel()
        f_at = torch.where(id_ok, tab[w[2].clamp(max=tab.numel() - 1)], torch.full_like(w[2], -1))
        fc = f_at.clamp(min=0)
        n_at = T["n_f"][fc]
        hdr = ((w[0] == zrle.MAGIC) & ((w[1] & 0xFF) == zrle.VERSION) & ((w[1] >> 16) == 0)
               & (lmax_log2 >= zrle.LMAX_LOG2_MIN) & (lmax_log2 <= zrle.LMAX_LOG2_MAX)
               & (f_at >= 0) & (w[3] == n_at) & (w[4] == layout.range_bits) & (pos + 5 <= E))
        # jm[a] = where a walk that has just passed a trailer ending at a-1 goes next: the
        # header of the frame whose dense gap starts at a, or the row's end after the last gap
        jm = torch.full((world, NP + _PAD + 1), -1, dtype=i64, device=dev)
        dummy = NP + _PAD
        a = pos - gaps_t[fc]
        a = torch.where(hdr & (f_at >= 1) & (a >= 0), a, torch.full_like(a, dummy))
        jm.scatter_(1, a, pos.expand(world, NP))
        if not open_end:
            a_end = E - gaps_t[F]
            jm.scatter_(1, torch.where(a_end >= 0, a_end, torch.full_like(a_end, dummy)), E)

        def after_trailer(q):                        # q: a trailer's first word
            at = (q + 2).clamp(max=dummy)
            return jm.gather(1, at)

        L_at = w[1]
        q_tok = (pos + 2 + L_at).clamp(max=NP + _PAD - 3)
        j_tok = after_trailer(q_tok)
        tok_next = torch.where(j_tok >= 0, j_tok, q_tok)
        j_hdr = after_trailer(pos.expand(world, NP) + 5)     # (gather takes the index's rows)
        hdr_next = torch.where(n_at > 0, pos + 5, torch.where(j_hdr >= 0, j_hdr, pos + 5))
        nxt = torch.where(hdr, hdr_next, tok_next)
        nxt = torch.where(pos >= E, E.expand(world, NP), torch.minimum(nxt, E))

        # the walk from each row's first header, by pointer doubling: C >= nodes + 1 entries
        start = min(1 + T["gaps"][0], width)
        chain = torch.minimum(torch.full((world, 1), start, dtype=i64, device=dev), E)
        J = nxt
        for _ in range((NP // 2 + 2).bit_length()):
            chain = torch.cat([chain, J.gather(1, chain)], dim=1)
            J = J.gather(1, J)
        C = chain.shape[1]
        node = torch.arange(C, dtype=i64, device=dev).unsqueeze(0).expand(world, C)
        valid = chain < E
        P = chain
        is_h = hdr.gather(1, P) & valid
        is_t = valid & ~is_h
        f_h = f_at.gather(1, P)
        z = u.gather(1, P)
        L = u.gather(1, P + 1)
        fidx = torch.cumsum(is_h.to(i64), 1) - 1
        in_range = (fidx >= 0) & (fidx < F)
        fi = fidx.clamp(0, F - 1)
        slot_f = torch.where(is_h & in_range, fidx, torch.full_like(fidx, F))
        hnode = torch.zeros(world, F + 1, dtype=i64, device=dev).scatter_(1, slot_f, node)
        hpos = torch.zeros(world, F + 1, dtype=i64, device=dev).scatter_(1, slot_f, P)
        n_f = T["n_f"][fi]
        lmax = torch.bitwise_left_shift(torch.ones_like(hpos[:, :F]),
                                       (u.gather(1, hpos[:, :F] + 1) >> 8) & 0xFF)
        lmax_n = lmax.gather(1, fi)
        zl = torch.where(is_t, z + L, torch.zeros_like(z))
        cum = torch.cumsum(zl, 1)
        h_of = hnode.gather(1, fi)
        produced = cum - zl - cum.gather(1, h_of)
        remaining = n_f - produced
        final_t = is_t & (produced + z + L == n_f)
        ends = final_t | (is_h & (n_f == 0))
        keep = valid
        if open_end:                                 # nodes past the last frame: not ours
            e64 = (ends & valid).to(i64)
            keep = valid & ((torch.cumsum(e64, 1) - e64) < F)
        first = node == 0
        prev_ends = torch.cat([torch.ones(world, 1, dtype=torch.bool, device=dev),
                               ends[:, :-1]], dim=1)
        prev_t = torch.cat([torch.zeros(world, 1, dtype=torch.bool, device=dev),
                            is_t[:, :-1]], dim=1)
        prev_L = torch.where(prev_t, torch.cat([L[:, :1], L[:, :-1]], dim=1), lmax_n)
        nxt_pos = torch.cat([chain[:, 1:], chain[:, -1:]], dim=1)
        # zero literal words: prefix counts of zero words along the row
        zc = torch.cat([torch.zeros(world, 1, dtype=i64, device=dev),
                        torch.cumsum((u == 0).to(i64), 1)], dim=1)
        lit_end = P + 2 + L
        lo = (P + 2).clamp(max=zc.shape[1] - 1)
        hi = lit_end.clamp(max=zc.shape[1] - 1)
        zero_lit = (zc.gather(1, hi) - zc.gather(1, lo)) > 0
        q = torch.where(is_t, lit_end, P + 5)        # an ending node's trailer
        qc = q.clamp(max=NP + _PAD - 2)
        gap_after = gaps_t[(fi + 1)]
        tok_bad = is_t & ((P + 1 >= E) | (L > lmax_n) | ((z == 0) & (L == 0))
                          | ((z == 0) & (prev_L != lmax_n)) | (z + L > remaining)
                          | ((L == 0) & (z < remaining)) | (lit_end > E) | ((L > 0) & zero_lit))
        hdr_bad = is_h & (~in_range | (f_h != fidx) | ((n_f > 0) & (nxt_pos != P + 5)))
        seq_bad = valid & ((is_h != prev_ends) | (first & ~is_h))
        last = fidx == F - 1
        after = nxt_pos != q + 2 + gap_after
        if open_end:
            after = after & ~last                    # what follows the last frame is not read
        else:
            after = after | (last & (q + 2 + gap_after != E))
        end_bad = ends & ((q + 2 > E) | (u.gather(1, qc) != node - h_of) | after)
        cont_bad = final_t.logical_not() & is_t & (nxt_pos != q)
        n_ends = (ends & keep).sum(1)
        bad = bad | ((tok_bad | hdr_bad | seq_bad | end_bad | cont_bad) & keep).any() \
            | ((is_h & keep).sum(1) != F).any() | (n_ends != F).any() | keep[:, -1].any()
        # CRC of every frame of every row in one pass: [header, t0]
        slot_e = torch.where(ends & keep & in_range, fidx, torch.full_like(fidx, F))
        qpos = torch.zeros(world, F + 1, dtype=i64, device=dev).scatter_(1, slot_e, q)
        crc = crc32_spans(u[:, :NP], hpos[:, :F], qpos[:, :F] + 1)
        t1 = u.gather(1, (qpos[:, :F] + 1).clamp(max=NP + _PAD - 1))
        bad = bad | (crc != t1).any()
        if T["dense_total"]:
            gap_start[:, 1:] = qpos[:, :F] + 2
        # literals: the token covering each word position (ids rise along a row: running max)
        mark = torch.full((world, NP + _PAD + 1), -1, dtype=i64, device=dev)
        lit_tok = is_t & (L > 0) & keep
        mark.scatter_(1, torch.where(lit_tok, (P + 2).clamp(max=dummy), torch.full_like(P, dummy)),
                      torch.where(lit_tok, node, torch.full_like(node, -1)))
        tk = running_max(mark[:, :NP])
        tkc = tk.clamp(min=0)
        ls = (P + 2).gather(1, tkc)
        is_lit = (tk >= 0) & (pos < ls + L.gather(1, tkc)) & (pos < E)
        elem = (T["acc_off"][fi.gather(1, tkc)] + produced.gather(1, tkc) + z.gather(1, tkc)
                + (pos - ls))
        idx = torch.where(is_lit & ~bad, elem, torch.full_like(elem, T["acc_total"]))
        acc = torch.zeros(T["acc_total"] + 1, dtype=i64, device=dev)
        acc.index_add_(0, idx.reshape(-1), _signed(u[:, :NP]).reshape(-1))
        acc = acc[:T["acc_total"]]
    if T["dense_total"]:
        at = gap_start.gather(1, T["dense_gap"].unsqueeze(0).expand(world, -1)) \
            + T["dense_inner"]
        dense_bits = u.gather(1, at.clamp(max=NP + _PAD - 1))
        bad = bad | (at >= E).any() | ((dense_bits & 0x7F800000) == 0x7F800000).any()

    if sums:
        return (acc, bad, qpos[:, :F]) if open_end and F else (acc, bad)
    n = layout.n_workers
    out = torch.empty(layout.total, dtype=torch.float32, device=dev)
    if F:
        c = float(np.float64(layout.range) / (np.float64(QMAX) * np.float64(n)))
        coarse = (acc.to(torch.float64) * c).to(torch.float32)
        if T["identity"]:
            out = coarse
        else:
            out.index_copy_(0, T["coarse_map"], coarse)
    if dense_bits is not None:
        vals = _signed(dense_bits).to(torch.int32).view(torch.float32)
        total = vals[0].to(torch.float64)
        for r in range(1, world):                     # rank order, as the reference sums
            total = total + vals[r].to(torch.float64)
        out.index_copy_(0, T["dense_map"], (total / n).to(torch.float32))
    return out, bad


def encode_slot(layout: BucketLayout, plan, payload: torch.Tensor, dense_words: torch.Tensor | None,
                width: int, lmax: int, nonfinite: torch.Tensor | None = None,
                flag_word: int = NONFINITE_WORD) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's slot for the bucket's all_gather, built on the device without a host sync:
    [message length, the message, zeros], width `width` (the bound every rank computes from
    shapes, plus one). The message is the bucket's packets in layer order: the ZRLE v1 frame
    of each framed layer (payload: the flat int32 payload of the framed layers in plan order,
    `plan` a torchstep.group.GroupPlan of them; bit-identical to codec.zrle.encode_frame of
    each layer's payload) and the dense layers' words (`dense_words`, int32, in bucket order).
    Frames lie at offsets computed on the device from their token and literal counts; their
    CRCs come from one pass (crc32_spans). With `nonfinite` (0-d bool) True the length word
    is `flag_word` (NONFINITE_WORD, or SKIP_WORD under the "skip" policy). A message longer than width - 1 (a wrong bound) keeps its true length
    in the length word and is cut, so every receiver refuses it.
    Returns (slot, frame lengths in words (F,) int64)."""
    dev = payload.device
    T_ = layout.tensors(dev)
    i64 = torch.int64
    F = T_["F"]
    out = torch.zeros(width + 1, dtype=torch.int32, device=dev)
    dummy = width
    frame_len = torch.zeros(F, dtype=i64, device=dev)
    if F:
        n = payload.numel()
        i = torch.arange(n, dtype=i64, device=dev)
        nz = payload != 0
        start = plan.is_layer_start
        false1 = torch.zeros(1, dtype=torch.bool, device=dev)
        prev_nz = torch.cat([false1, nz[:-1]]) & ~start
        run_s = running_max(torch.where(nz & ~prev_nz, i, torch.full_like(i, -1))) if n else i
        idx_in_run = i - run_s
        tok = nz & (idx_in_run % lmax == 0)
        brk = ~nz | start
        nb = torch.flip(running_min(torch.flip(torch.where(brk, i, torch.full_like(i, n)), [0])),
                        [0]) if n else i
        run_end = torch.cat([nb[1:], torch.full((1,), n, dtype=i64, device=dev)]) if n else i
        L_tok = torch.clamp(run_end - i, max=lmax)
        last_nz = running_max(torch.where(nz, i, torch.full_like(i, -1))) if n else i
        prev_nz_pos = torch.cat([torch.full((1,), -1, dtype=i64, device=dev), last_nz[:-1]]) \
            if n else i
        lay = plan.layer_of_elem
        prev_end = torch.maximum(prev_nz_pos + 1, plan.elem_start[lay])
        z_tok = torch.where(idx_in_run == 0, i - prev_end, torch.zeros_like(i))
        zero1 = torch.zeros(1, dtype=i64, device=dev)
        ctok = torch.cat([zero1, torch.cumsum(tok.to(i64), 0)])     # tokens in [0, k)
        cnz = torch.cat([zero1, torch.cumsum(nz.to(i64), 0)])
        tok_base, nz_base = ctok[plan.elem_start], cnz[plan.elem_start]
        T_run = ctok[plan.elem_end] - tok_base
        NZ = cnz[plan.elem_end] - nz_base
        last_in = torch.cat([torch.full((1,), -1, dtype=i64, device=dev), last_nz])[plan.elem_end]
        tail = plan.elem_end - torch.maximum(last_in + 1, plan.elem_start)
        has_tail = tail > 0
        T = T_run + has_tail.to(i64)
        frame_len = zrle.HEADER_WORDS + 2 * T + NZ + zrle.TRAILER_WORDS
    plen = T_["static_len"].clone()
    if F:
        plen.index_copy_(0, T_["frame_pos"], frame_len)
    poff = 1 + torch.cumsum(plen, 0) - plen
    total = plen.sum()

    def put(idx: torch.Tensor, mask, src: torch.Tensor) -> None:
        ok = (idx < width) if mask is None else mask & (idx < width)
        out.scatter_(0, torch.where(ok, idx, torch.full_like(idx, dummy)), src.to(torch.int32))

    if F:
        foff = poff[T_["frame_pos"]]
        hdr_idx = foff.unsqueeze(1) + torch.arange(zrle.HEADER_WORDS, dtype=i64, device=dev)
        put(hdr_idx.reshape(-1), None, plan.headers.reshape(-1))
        fo = foff[lay]
        trel = ctok[:-1] - tok_base[lay]               # tokens before element i in its layer
        nzrel = cnz[:-1] - nz_base[lay]                # nonzeros before element i in its layer
        tpos = fo + zrle.HEADER_WORDS + 2 * trel + nzrel
        put(tpos, tok, z_tok)
        put(tpos + 1, tok, L_tok)
        lpos = fo + zrle.HEADER_WORDS + 2 * (ctok[1:] - tok_base[lay]) + nzrel
        put(lpos, nz, payload)
        put(foff + zrle.HEADER_WORDS + 2 * T_run + NZ, has_tail, tail)
        t0 = foff + frame_len - 2
        put(t0, None, T)
        crc = crc32_spans((out[:width].to(i64) & _MASK32).unsqueeze(0), foff.unsqueeze(0),
                          (t0 + 1).unsqueeze(0)).squeeze(0)
        put(t0 + 1, None, _signed(crc))
    if dense_words is not None and dense_words.numel():
        put(poff[T_["dense_layer"]] + T_["dense_in_layer"], None, dense_words)
    length = total if nonfinite is None else torch.where(
        nonfinite, torch.full_like(total, flag_word), total)
    out[:1] = length.to(torch.int32)
    return out[:width], frame_len


def decode_frame_walk(words: torch.Tensor, expected_n: int | None = None, start: int = 0):
    """decode_frame through this module's walk (the code the DDP hook runs), for the
    conformance suite: the header is read on the host first (the reference's header checks;
    its n, id and range are the walk's layout), the frame at words[start:] validated and
    decoded on the words' device with open_end; on `bad`, the reference decoder over a host
    copy raises its error (or decodes a frame the walk could not prove). -> (header, values
    int32 tensor, tokens, words used)."""
    host = words.detach().cpu().numpy().view(np.uint32)
    head = zrle.read_header(host, expected_n, start)
    cfg = type("Range", (), {"range_bits": head.range_bits,
                             "range": float(np.uint32(head.range_bits).view(np.float32))})()
    layout = bucket_layout([True], [head.n], [head.layer_id], cfg, 1)
    avail = max(0, words.numel() - start)
    row = torch.zeros(1, avail + 1, dtype=torch.int32, device=words.device)
    row[0, 0] = avail
    row[0, 1:] = words[start:]
    acc, bad, qpos = decode_slots(layout, row, sums=True, open_end=True)
    if bool(bad):
        f = zrle.decode_frame(host, expected_n, start)
        return head, torch.from_numpy(f.values).to(words.device), f.n_tokens, f.n_words
    q = int(qpos[0, 0])                               # the trailer's t0, in the row
    tokens = int(row[0, q]) & _MASK32
    return head, acc.to(torch.int32), tokens, q + 2 - 1
