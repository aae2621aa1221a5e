"""The velocity options of `gradblock step` (docs/spec.md §7: momentum correction with factor
masking): --local-momentum M turns the correction on; --velocity IN.npy is the layer's int32
velocity ('-' or absent: zeros, the first step); --velocity-out OUT.npy receives the next
step's velocity; --no-momentum-mask keeps the velocity on the sent blocks (ablation).

gradblock/commands.py calls `add_options`, `check_args` (before any file is read), `run`
(instead of the plain compress step) and `report` (after its own lines).
"""
from __future__ import annotations

import argparse

import numpy as np

from gradblock.codec import fileio
from gradblock.codec.errors import GradblockError
from gradblock.npyio import read_npy
from gradblock.refmodel.momentum import MomentumConfig, MomentumError, MomentumStep


class VelocityOptionError(GradblockError):
    """The velocity options do not fit together (one line, exit status 2)."""


def _momentum(text: str) -> MomentumConfig:
    try:
        return MomentumConfig.from_float(float(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e) if isinstance(e, MomentumError)
                                         else f"{text!r} is not a number") from None


def add_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("momentum correction (docs/spec.md §7)")
    g.add_argument("--local-momentum", type=_momentum, default=None, metavar="M",
                   help="local momentum factor in [0, 1), rounded to Q0.16 (e.g. 0.9 -> "
                        "58982/65536); the velocity replaces Q(g) in the error feedback")
    g.add_argument("--velocity", default=None, metavar="IN.npy",
                   help="int32 .npy velocity of the gradient's shape, or '-' for zeros "
                        "(default: zeros, the first step)")
    g.add_argument("--velocity-out", default=None, metavar="OUT.npy",
                   help="output int32 .npy velocity for the next step (required with "
                        "--local-momentum)")
    g.add_argument("--no-momentum-mask", action="store_true",
                   help="keep the velocity on the sent blocks (no factor masking)")


def requested(args) -> bool:
    return args.local_momentum is not None


def check_args(args) -> list[str]:
    """The options fit together; returns the extra output paths to check with the others."""
    if not requested(args):
        given = [o for o, v in (("--velocity", args.velocity),
                                ("--velocity-out", args.velocity_out),
                                ("--no-momentum-mask", args.no_momentum_mask)) if v]
        if given:
            raise VelocityOptionError(f"{', '.join(given)} needs --local-momentum M")
        return []
    if args.velocity_out is None:
        raise VelocityOptionError("--local-momentum needs --velocity-out OUT.npy (the next "
                                  "step's velocity)")
    return [args.velocity_out]


def run(args, grad: np.ndarray, residual: np.ndarray, *, R, block_size, layer_id: int,
        lmax_log2: int, max_elements: int, backend, norm: str = "l1") -> MomentumStep:
    """Read the velocity, run the step with the command's backend (gradblock.backends.host_backend():
    numba or the reference, bit-exact either way) and write --velocity-out. The caller writes the frame and
    the residual."""
    if args.velocity in (None, "-"):
        velocity = np.zeros(grad.shape, dtype=np.int32)
    else:
        velocity = read_npy(args.velocity, np.int32, "the velocity", max_elements)
        if velocity.shape != grad.shape:
            raise VelocityOptionError(f"{args.velocity}: velocity shape {tuple(velocity.shape)} "
                                      f"differs from the gradient's {tuple(grad.shape)}")
    st = backend.momentum_layer(grad, residual, velocity, args.local_momentum, R=R, k=args.k,
                        block_size=block_size, layer_id=layer_id, lmax_log2=lmax_log2,
                        mask=not args.no_momentum_mask, where=args.grad, norm=norm)
    fileio.save_npy(args.velocity_out, st.velocity_out)
    return st


def report(args, st) -> None:
    """One line after the command's own: what the velocity did."""
    if not isinstance(st, MomentumStep):
        return
    m = args.local_momentum
    how = ("masked on the sent blocks" if st.masked else
           "not masked (--no-momentum-mask)" if args.no_momentum_mask else
           "not masked (every block sent: ordinary momentum)")
    print(f"velocity: m = {m.value:.9g} (m_fix {m.m_fix}), {st.sat_momentum} saturated, "
          f"{int(np.count_nonzero(st.velocity_out))} of {st.layout.n} nonzero, {how}")
