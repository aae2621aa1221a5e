"""Global block selection's per-worker pass on the CPU in numba (docs/spec.md §8.1): quantise,
velocity (momentum correction), error feedback, the exact block norms and the counts, over a
whole group of layers in one jitted call. Bit-exact with refmodel/global_select.py
(prepare_worker); torchstep/global_select.py calls it on CPU tensors' memory."""
from __future__ import annotations

import numba as nb
import numpy as np

from gradblock.refmodel.momentum import M_FRAC_BITS, ROUND_BIAS
from gradblock.refmodel.quantiser import QMAX

from .step_kernels import ABS_MASK, INF_BITS, quantise_bits

__all__ = ["prepare_group_kernel"]


@nb.njit(nogil=True, cache=True)
def prepare_group_kernel(gbits, r, u, momentum, m_fix, elem_start, elem_end, block, block_start,
                         M, k, rbits, tsat, acc_out, u_out, norms, counts):
    """Per layer j (elements elem_start[j]..elem_end[j], blocks of block[j] elements whose
    norms go to norms[block_start[j]:]): q = Q(g); with `momentum` u' = clamp(mul(m, u) + q)
    into u_out; a = clamp(r + (u' or q)) into acc_out; norms = sum |a| per block (int64).
    counts (int64[4]) += NaN, |g| > R, |r + .| > QMAX, |mul(m, u) + q| > QMAX."""
    nan = 0
    satq = 0
    satfb = 0
    satm = 0
    for j in range(elem_start.size):
        lo, hi, B = elem_start[j], elem_end[j], block[j]
        jb = block_start[j]
        s0 = lo
        while s0 < hi:
            s1 = min(s0 + B, hi)
            total = np.int64(0)
            for i in range(s0, s1):
                b = np.int64(gbits[i]) & 0xFFFFFFFF
                ab = b & ABS_MASK
                nan += ab > INF_BITS
                satq += ab > rbits
                q = quantise_bits(b, M, k, tsat)
                if momentum:
                    ui = np.int64(u[i])
                    mag = ((ui if ui >= 0 else -ui) * np.int64(m_fix) + ROUND_BIAS) >> M_FRAC_BITS
                    v = (mag if ui >= 0 else -mag) + q
                    if v > QMAX:
                        v = np.int64(QMAX)
                        satm += 1
                    elif v < -QMAX:
                        v = np.int64(-QMAX)
                        satm += 1
                    u_out[i] = v
                    q = v
                a = np.int64(r[i]) + q
                if a > QMAX:
                    a = np.int64(QMAX)
                    satfb += 1
                elif a < -QMAX:
                    a = np.int64(-QMAX)
                    satfb += 1
                acc_out[i] = a
                total += a if a >= 0 else -a
            norms[jb] = total
            jb += 1
            s0 = s1
    counts[0] += nan
    counts[1] += satq
    counts[2] += satfb
    counts[3] += satm
