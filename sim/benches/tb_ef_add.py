"""cocotb testbench of hw/ef_add.sv against golden vectors: (residual_in, quantised) ->
accumulated, feedback_sat; the tests (every traffic profile, a mid-stream reset, full rate) are
tb_util.stage_tests."""
from __future__ import annotations

from cocotbext.axi import AxiStreamFrame

from gradblock.sim.benches import tb_util


class Bench(tb_util.StageBench):
    module = "ef_add"

    def frame(self, case, seed: int) -> AxiStreamFrame:
        r = case.arrays["residual_in"].view("uint32").astype("uint64")
        q = case.arrays["quantised"].view("uint32").astype("uint64")
        return AxiStreamFrame(tdata=((r << 32) | q).tolist())

    def check(self, case, rx, sent) -> None:
        a = case.arrays
        tuser = tb_util.user_words(rx)
        tb_util.check_words(case.name, "accumulated", a["accumulated"].view("uint32"), rx.tdata)
        tb_util.check_words(case.name, "feedback_sat", a["feedback_sat"], tuser, 1)
        tb_util.check_value(case.name, "sat_feedback", case.meta["sat_feedback"], sum(tuser))


globals().update(tb_util.stage_tests(Bench, __name__))
