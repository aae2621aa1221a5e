"""yosys synthesis of the RTL (hw/synth.py): generic `synth` without memory mapping, no
latches, `check -assert` clean, cell counts per module. The latch check is shown to fire on a
module that does infer a latch; flop counts of small blocks are checked exactly against what
their registers must be. The full run (compress_top with everything in it, and the decoder)
is slow: it takes about a minute of yosys time."""
from __future__ import annotations

import shutil

import pytest

from gradblock.hw import deps, synth
from gradblock.sim.duts import DUTS

needs_yosys = pytest.mark.skipif(shutil.which("yosys") is None,
                                 reason="yosys not installed: synthesis checks need it")


def by_name(result) -> dict:
    return {m.name: m for m in result.modules.values()}


# ------------------------------------------------------------------ helpers (no yosys needed)
def test_readable_module_names():
    assert synth.readable_module("$paramod\\pipe_reg\\W=s32'00000000000000000000000000100010") \
        == "pipe_reg (W=34)"
    assert synth.readable_module("$paramod$5cc55d023fefdcdefb89dfccafa94483648ee433\\sync_fifo") \
        == "sync_fifo"
    assert synth.readable_module("\\block_l1") == "block_l1"


def test_stat_json_with_broken_design_section():
    # yosys 0.23 writes the text hierarchy inside "design" when a top is set
    text = ('{\n "creator": "Yosys",\n "modules": {\n  "\\\\m": {"num_cells": 3, '
            '"num_cells_by_type": {"$_DFF_P_": 2, "$_AND_": 1}}\n },\n "design": {\n'
            '   m    1\n   sub  2\n }\n}\n')
    assert synth.parse_stat_json(text) == {"modules": {"\\m": {
        "num_cells": 3, "num_cells_by_type": {"$_DFF_P_": 2, "$_AND_": 1}}}}


def test_generic_runs_are_the_reference_builds():
    """hw/synth.py repeats no parameter: its runs build each top at its HDL defaults, which are
    the reference build of the DUT table (sim/duts.py) wherever the table has that top; the
    table shows every parameter of the build."""
    for run in synth.RUNS:
        defaults = deps.hdl_defaults(run.top)
        assert defaults and run.build_parameters() == defaults, run
        for dut in (d for d in DUTS.values() if d.toplevel == run.top):
            assert {k: defaults[k] for k in dut.parameters} == dict(dut.parameters), \
                f"{dut.name}: reference build {dict(dut.parameters)}, HDL defaults {defaults}"
    assert deps.hdl_defaults("sync_fifo") == {"W": 33, "AW": 2, "DISTRIBUTED": 0}


def test_memory_dump_parsing():
    dump = ("module \\top\n  cell $mem_v2 \\buf\n    parameter \\SIZE 1024\n"
            "    parameter \\WIDTH 32\n    parameter \\RD_WIDE_CONTINUATION 1'0\n  end\n"
            "  cell $mem_v2 \\mask\n    parameter \\WIDTH 1\n    parameter \\SIZE 1024\n  end\n"
            "end\n")
    assert synth.parse_memories(dump) == {"\\top": [("buf", 1024, 32), ("mask", 1024, 1)]}
    single = "  cell $mem_v2 \\mem\n    parameter \\SIZE 16\n    parameter \\WIDTH 33\n"
    assert synth.parse_memories(single) == {None: [("mem", 16, 33)]}


def test_hierarchy_totals_count_instances():
    stat = {"modules": {
        "\\top": {"num_cells": 4, "num_cells_by_type": {"$_DFF_P_": 1, "$_OR_": 1, "leaf": 2,
                                                        "$mem_v2": 1}},
        "\\leaf": {"num_cells": 3, "num_cells_by_type": {"$_SDFFE_PP0P_": 2, "$_AND_": 1}}}}
    assert synth.hierarchy_totals(stat, "top") == (2 + 2 * 3, 1 + 2 * 2)
    mods = synth.module_stats(stat, {})
    assert (mods["\\top"].cells, mods["\\top"].flops) == (2, 1)
    assert (mods["\\top"].total_cells, mods["\\top"].total_flops) == (8, 5)
    assert (mods["\\leaf"].total_cells, mods["\\leaf"].total_flops) == (3, 2)


# ------------------------------------------------------------------ yosys
@needs_yosys
def test_latch_is_caught(tmp_path):
    """The flow's latch check must fail a design with a latch (else it checks nothing)."""
    src = tmp_path / "latchy.sv"
    src.write_text("module latchy (input logic en, input logic [3:0] d, output logic [3:0] q);\n"
                   "    always_latch if (en) q = d;\nendmodule\n")
    latch_found = r"(?s)yosys failed.*selection is not empty: t:\*dlatch\*"
    with pytest.raises(RuntimeError, match=latch_found):
        synth.run_synth(synth.SynthRun("latchy", {}, (str(src),)), timeout=120)


@needs_yosys
@pytest.mark.parametrize("top,params,flops", [
    # the L2 shift 5; stage 1: |a| 32 + next_offset 32 + valid, last, block end; stage 2: x 32
    # + 3; stage 3: three partial products 96 + x 32 + the L2 bit + 3; stage 4: the term 64 + 3;
    # stage 5: acc 64 + index 32 + m_tdata 96 + m_tlast + m_tvalid; less bit 1 of h^2 and of l^2
    # (a square is 0 or 1 mod 4), which yosys finds constant: 4 bits
    ("block_l1", {}, 5 + 32 + 32 + 3 + 35 + 96 + 32 + 1 + 3 + 64 + 3 + 64 + 32 + 96 + 1 + 1 - 4),
    # the input ready; per slot norm 64 + index 32 + valid + its copy of the emitting flag;
    # stage 2: norm 64 +
    # index 32 + valid + last + 3 compare bits for each of the two pairs in flight, per slot 3
    # compare bits and the used-slot mask (slot 0 is always used: a constant); stage 3: norm 64
    # + index 32 + valid + last, per slot its keep, the previous pair's keep, the write enable
    # and the select (slot 0's is a constant)
    ("topk_select", {"K_MAX": 3}, 1 + 3 * 98 + 104 + 3 * 4 - 1 + 98 + 4 * 3 - 1),
    # one pipe_reg of {sat, last, a} and its valid
    ("ef_add", {}, 34 + 1),
])
def test_small_blocks_synthesise(top, params, flops):
    res = synth.run_synth(synth.SynthRun(top, params), timeout=600)
    assert res.total_flops == flops, synth.format_table([res])
    assert res.total_cells > flops
    assert not any(m.memories for m in res.modules.values())


@needs_yosys
@pytest.mark.slow
def test_full_synthesis():
    """compress_top (with every datapath block and the encoder) and the decoder: clean, no
    latches; the layer buffer and block mask stay memories of N_MAX words; the table renders."""
    results = [synth.run_synth(run) for run in synth.RUNS]
    top = by_name(results[0])
    ref = DUTS["compress_top"].parameters           # the reference build, the one DUT table
    n_max, k_max = ref["N_MAX"], ref["K_MAX"]
    for block in ("compress_top", "block_l1", "ef_add", "crc32_word", "sync_fifo"):
        assert block in top and top[block].cells > 0, sorted(top)
    assert top["compress_top"].memories == [("layer_mem", n_max, 32), ("sel_mem", n_max, 1)]
    assert top[f"topk_select (K_MAX={k_max})"].flops == k_max * 106 + 201
    assert top["quantiser (UW=32)"].cells > 1000            # the 24 x 32 multiplier is there
    assert "zrle_decoder" in by_name(results[1])
    assert top["compress_top"].total_cells == results[0].total_cells
    assert top["ef_add"].total_flops == 35 and top["ef_add"].flops == 0   # its pipe_reg holds them
    table = synth.format_table(results)
    assert "**compress_top** run" in table and "**zrle_decoder** run" in table
