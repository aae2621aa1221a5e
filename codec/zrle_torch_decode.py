"""Validate and decode a ZRLE v1 frame on the tensor's own device (docs/spec.md §3.5).

The reference decoder walks the tokens one by one: token t+1 starts at pos(t) + 2 + L(t). Here
that walk is a linked list over word indices, next(i) = i + 2 + word[i+1], whose chain from the
first token is found by pointer doubling (log2 rounds of gathers; a scalar read every few rounds
stops it early). Every
token's checks are then evaluated at once, in the reference's order, and the first failing token
-- or the token where the elements are complete -- is the only thing read back to the host (a
handful of scalars). Runs are expanded with repeat_interleave; the CRC runs on the device.

Host syncs per frame, none of them sized by the frame: the 5 header words (n is needed on the
host to allocate the output), the walk's summary, and the CRC value. The frame's words and the
decoded values stay on the device.

Window: the chain is computed over a window of the frame that doubles until the walk completes
inside it (a frame at the start of a long message does not pay for the rest of the message).
"""
from __future__ import annotations

import numpy as np
import torch

from . import errors as E
from . import zrle
from .crc32_torch import crc32_words

__all__ = ["decode_frame_on_device"]

_MASK32 = 0xFFFFFFFF
_FIRST_WINDOW = 4096

# per-token check results, in the reference's order (codec/zrle.py decode_frame)
_OK, _TRUNC_HEADER, _TOO_LONG, _EMPTY, _SPLIT, _OVERRUN, _EARLY_ZERO, _TRUNC_LITS, _UNKNOWN, \
    _ZERO_LIT = range(10)


def _header(words: torch.Tensor, start: int, avail: int, expected_n):
    """The reference's header checks on the (at most 5) header words, copied to the host."""
    head = words[start:start + min(avail, zrle.HEADER_WORDS)]
    host = head.cpu().numpy().view(np.uint32) if head.numel() else np.zeros(0, np.uint32)
    return zrle.read_header(np.ascontiguousarray(host), expected_n, 0)


def _chain(u: torch.Tensor, W: int) -> torch.Tensor:
    """Token positions of the walk within a window of W frame words (u: the words as int64,
    uint32 values), in walk order: c0 = HEADER_WORDS, c(t+1) = min(c(t) + 2 + u[c(t)+1], W).
    W is the sink, kept once at the end. Pointer doubling, gathers only: with J = next^(2^r),
    the first 2^r chain nodes C give the next 2^r as J[C]."""
    dev = u.device
    nxt = torch.full((W + 1,), W, dtype=torch.int64, device=dev)
    if W >= 2:
        nxt[:W - 1] = torch.clamp(torch.arange(W - 1, device=dev) + 2 + u[1:W], max=W)
    chain = torch.full((1,), min(zrle.HEADER_WORDS, W), dtype=torch.int64, device=dev)
    for r in range((W // 2 + 2).bit_length()):              # 2**rounds > the longest chain
        if r % 4 == 3 and int(chain[-1]) == W:               # a few syncs: stop once at the sink
            break
        chain = torch.cat([chain, nxt.index_select(0, chain)])
        nxt = nxt.index_select(0, nxt)
    inside = int((chain < W).sum())                          # the tokens, then one sink
    return chain[:inside + 1]


def _walk(u: torch.Tensor, W: int, avail: int, n: int, lmax: int):
    """One pass of the token checks over the chain in a window of W words. Returns the host
    summary (event token index, its code, position, z, L, produced before it, literals up to
    it) of the first token that fails a check or completes the n elements."""
    dev = u.device
    P = _chain(u, W)
    head_in = P + 1 < W                                      # both header words in the window
    Pc = torch.where(head_in, P, torch.zeros_like(P))
    zero = torch.zeros_like(P)
    z = torch.where(head_in, u.index_select(0, Pc), zero)
    L = torch.where(head_in, u.index_select(0, Pc + head_in), zero)
    cum_after = torch.cumsum(z + L, 0)
    produced = cum_after - (z + L)
    remaining = n - produced
    prev_L = torch.cat([torch.full((1,), lmax, dtype=torch.int64, device=dev), L[:-1]])
    lit_end = P + 2 + L
    # zero literals inside the window: prefix counts of zero words
    zeros = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev),
                       torch.cumsum((u == 0).to(torch.int64), 0)])
    lo = torch.clamp(P + 2, max=W)
    hi = torch.clamp(lit_end, max=W)
    has_zero_lit = (zeros.index_select(0, hi) - zeros.index_select(0, lo)) > 0

    code = torch.full_like(P, _OK)
    # assigned in reverse priority, so the reference's first check wins
    code = torch.where(has_zero_lit & (L > 0), _ZERO_LIT, code)
    code = torch.where(lit_end > W, _UNKNOWN, code)         # literals past the window: look further
    code = torch.where(lit_end > avail, _TRUNC_LITS, code)
    code = torch.where((L == 0) & (z < remaining), _EARLY_ZERO, code)
    code = torch.where(z + L > remaining, _OVERRUN, code)
    code = torch.where((z == 0) & (prev_L != lmax), _SPLIT, code)
    code = torch.where((z == 0) & (L == 0), _EMPTY, code)
    code = torch.where(L > lmax, _TOO_LONG, code)
    code = torch.where(~head_in, torch.where(P + 1 >= avail, _TRUNC_HEADER, _UNKNOWN), code)
    event = (code != _OK) | (cum_after >= n)
    e = torch.argmax(event.to(torch.uint8))     # the chain ends at the sink, always an event
    lits = torch.cumsum(L, 0)[e]
    summary = torch.stack([e, code[e], P[e], z[e], L[e], produced[e], lits]).tolist()
    return [int(v) for v in summary], P, z, L, produced


def _raise_token_error(code: int, t: int, pos: int, z: int, L: int, produced: int, n: int,
                       lmax: int, prev_L: int, avail: int, u: torch.Tensor):
    """The reference's exception (class and message) for token t's first failed check."""
    remaining = n - produced
    if code == _TRUNC_HEADER:
        i = pos if pos >= avail else pos + 1
        raise E.TruncatedError(f"frame needs word {i} but only {avail} are present", i)
    if code == _TOO_LONG:
        raise E.LiteralRunTooLongError(f"token {t}: L = {L} > LMAX = {lmax}", pos + 1)
    if code == _EMPTY:
        raise E.EmptyTokenError(f"token {t} is (0, 0)", pos)
    if code == _SPLIT:
        raise E.SplitLiteralRunError(f"token {t} has z = 0 after a run of {prev_L} < LMAX", pos)
    if code == _OVERRUN:
        raise E.OverrunError(f"token {t}: z + L = {z + L} > {remaining} elements left", pos)
    if code == _EARLY_ZERO:
        raise E.EarlyZeroLengthError(f"token {t}: L = 0 with {remaining - z} elements left", pos + 1)
    if code == _TRUNC_LITS:
        raise E.TruncatedError(f"token {t} needs {L} literals, {max(0, avail - pos - 2)} present",
                               avail)
    if code == _ZERO_LIT:
        i = int(torch.argmax((u[pos + 2:pos + 2 + L] == 0).to(torch.uint8)).item())
        raise E.ZeroLiteralError(f"token {t}: literal {i} is zero", pos + 2 + i)
    raise AssertionError(f"unhandled token check {code}")   # pragma: no cover


def decode_frame_on_device(words: torch.Tensor, expected_n: int | None, start: int):
    """Validate and decode the frame at words[start] (1-D int32 tensor) where `words` lives.
    Returns (header, values int32 tensor of n, tokens, words consumed); raises the reference's
    codec.errors class for the first problem. Arguments are already checked by the caller."""
    dev = words.device
    avail = max(0, words.numel() - start)
    hdr = _header(words, start, avail, expected_n)
    n, lmax = hdr.n, 1 << hdr.lmax_log2

    if n == 0:                                               # no tokens: the trailer follows
        T, pos, lit_total = 0, zrle.HEADER_WORDS, 0
        P = z = L = produced = None
    else:
        # a dense frame is about n words; a sparse one is far shorter, so start well below n
        W = min(avail, max(_FIRST_WINDOW, n // 8))
        while True:
            u = words[start:start + W].to(torch.int64) & _MASK32
            (t, code, pos, z_e, L_e, prod_e, lit_total), P, z, L, produced = \
                _walk(u, W, avail, n, lmax)
            if code != _UNKNOWN:
                break
            W = min(avail, 2 * W)                            # W == avail never gives _UNKNOWN
        if code != _OK:
            prev_L = int(L[t - 1].item()) if t else lmax
            _raise_token_error(code, t, pos, z_e, L_e, prod_e, n, lmax, prev_L, avail, u)
        T, pos = t + 1, pos + 2 + L_e

    trailer = words[start + pos:start + min(avail, pos + zrle.TRAILER_WORDS)]
    tail = [v & _MASK32 for v in trailer.tolist()]
    if len(tail) < zrle.TRAILER_WORDS:                       # the reference reads t0 and t1 first
        i = pos + len(tail)
        raise E.TruncatedError(f"frame needs word {i} but only {avail} are present", i)
    if tail[0] != T:
        raise E.TokenCountMismatchError(f"trailer says {tail[0]} tokens, frame has {T}", pos)
    crc = crc32_words(words[start:start + pos + 1])
    if tail[1] != crc:
        raise E.CrcMismatchError(f"trailer CRC {tail[1]:#010x}, computed {crc:#010x}", pos + 1)

    values = torch.zeros(n, dtype=torch.int32, device=dev)  # valid frame: n is what was meant
    if lit_total:
        Tk = T
        Lk, Pk = L[:Tk], P[:Tk]
        dst0 = produced[:Tk] + z[:Tk]                        # first element of each token's run
        tok = torch.repeat_interleave(torch.arange(Tk, device=dev), Lk, output_size=lit_total)
        off = torch.arange(lit_total, device=dev) - torch.repeat_interleave(
            torch.cumsum(Lk, 0) - Lk, Lk, output_size=lit_total)
        src = words.index_select(0, start + Pk.index_select(0, tok) + 2 + off)
        values.scatter_(0, dst0.index_select(0, tok) + off, src)
    return hdr, values, T, pos + zrle.TRAILER_WORDS
