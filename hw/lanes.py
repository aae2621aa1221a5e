"""The lane switch (issue 31): which builds take W elements a cycle, and the one rule that turns
a user's `--lanes W` into a build's HDL parameters. `gradblock verify --lanes`, `gradblock synth
--lanes` and the FuseSoC cores (their `W` parameter, read from the HDL) select builds through it.

LANE_BLOCKS are the blocks whose `parameter int W` is the lane count (W = 1 is the one-element
design, cycle for cycle); in the generic helpers (sync_fifo, pipe_reg, axis_skid_buffer,
axis_credit_link) W is a data width, so the list is explicit (tests/test_lanes.py checks each
entry's header declares W). LANES are the widths the blocks are verified at.
"""
from __future__ import annotations

from gradblock.codec.errors import UsageError
from gradblock.hw.deps import HW_DIR, hdl_defaults

LANES = (1, 2, 4, 8, 16)
LANE_BLOCKS = ("compress_engine", "crc32_lanes", "zrle_lane_encoder", "zrle_lane_decoder",
               "block_norm_lanes", "aggregate_engine")


def lane_parametric(top: str) -> bool:
    """True when `top` takes W elements a cycle by its W parameter and exists in hw/."""
    return top in LANE_BLOCKS and (HW_DIR / f"{top}.sv").is_file() and "W" in hdl_defaults(top)


def with_lanes(top: str, parameters, lanes: int | None) -> dict:
    """`parameters` with W = lanes; UsageError when `top` has no W parameter. lanes None: as is."""
    params = dict(parameters or {})
    if lanes is None:
        return params
    if not lane_parametric(top):
        raise UsageError(f"{top} has no lane parameter W (it takes one element a cycle); "
                         f"lane-parametric blocks: {', '.join(lane_tops()) or 'none'}")
    params["W"] = lanes
    return params


def lane_tops() -> list[str]:
    """The lane blocks of LANE_BLOCKS that are in hw/ with their W parameter."""
    return [t for t in LANE_BLOCKS if lane_parametric(t)]
