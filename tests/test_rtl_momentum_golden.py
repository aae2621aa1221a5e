"""hw/momentum.sv against the golden momentum cases (gradblock.golden.cases.momentum_specs:
carried steps, saturation, ties, masking off, a whole layer, m = 0) through `gradblock verify`'s
registry entry, on Icarus (quick) and Verilator (slow)."""
from __future__ import annotations

import pytest

from gradblock.golden.cases import momentum_specs
from gradblock.golden.compute import compute_case
from gradblock.refmodel.compress import compress_layer
from gradblock.golden.format import write_golden
from gradblock.sim.harness import simulator_available
from gradblock.sim.duts import DUTS
from gradblock.sim.verify import run_module

pytestmark = pytest.mark.sim



def momentum_golden(out):
    """A golden directory holding only the momentum cases (chained steps carried)."""
    def cases():
        outs = {}
        for spec in momentum_specs(0):
            prev = outs.get(spec.residual_from, (None, None))
            meta, arrays = compute_case(spec, compress_layer, *prev)
            outs[spec.name] = (arrays["residual_out"], arrays["velocity_out"])
            yield meta, arrays
    write_golden(out, {"generator": "gradblock test (momentum cases)", "seed": 0,
                       "quick": True}, cases())
    return out


@pytest.mark.parametrize("sim", ["icarus", pytest.param("verilator", marks=pytest.mark.slow)])
def test_momentum_stage_on_golden_cases(sim, tmp_path):
    reason = simulator_available(sim)
    if reason:
        pytest.skip(f"{sim} unavailable: {reason}")
    golden = momentum_golden(tmp_path / "golden")
    rows, report = run_module(DUTS["momentum"], sim, golden, "0:0,0.6:0.7", False, None,
                              tmp_path)
    by_case = {r.case: r.status for r in rows}
    assert set(by_case) == {s.name for s in momentum_specs(0)}, report
    assert set(by_case.values()) == {"pass"}, (rows, report)
