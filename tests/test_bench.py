"""The benchmark suite: workloads computed from the architectures, helpers, and one
`gradblock bench --quick` run whose report is checked for structure and self-consistency
(every table present, numbers parse, ratio columns agree with the time columns)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gradblock.bench import report, rtl, rtl_engines, rtl_runner, targets, workloads
from gradblock.bench.tables import NOT_AVAILABLE, Table, fmt, parse_markdown_tables, unmeasured
from gradblock.bench.gradients import make_workload
from gradblock.codec.errors import UsageError
from gradblock.bench.timing import measure

REPO = Path(__file__).resolve().parent.parent

TITLES = {
    "selection": "1. Selection: coarse blocks vs fine-grained top-k",
    "compress": "2. Full compress step per training step",
    "codec": "3. Codec: ZRLE vs general-purpose compressors on masked payloads",
    "rtl": "4. RTL: cycles per word (unthrottled streams)",
    "rtl_speed": "4b. RTL simulation speed",
    "rtl_engine": "4c. RTL compress_engine: cycles and memory beats per element",
    "rtl_aggregate": "4d. RTL aggregate_engine: cycles per frame word and memory beats",
    "training": "5. Training step: where the time goes (torch shim)",
}
LABEL_COLUMNS = {"workload", "threads", "device", "method", "implementation", "codec", "simulator",
                 "module", "case", "stream", "model", "workers", "compressor"}


# ------------------------------------------------------------------------------ workloads

def test_resnet50_is_computed_from_its_configuration():
    arch = workloads.resnet50()
    assert arch.total == 25_557_032
    assert len(arch.params) == 161
    assert arch.params[0].shape == (64, 3, 7, 7)
    assert arch.params[-2].shape == (1000, 2048)
    downsample = [p for p in arch.params if "downsample.0" in p.name]
    assert [p.shape for p in downsample] == [(256, 64, 1, 1), (512, 256, 1, 1),
                                            (1024, 512, 1, 1), (2048, 1024, 1, 1)]


def test_resnet20_is_computed_from_its_configuration():
    a, b = workloads.resnet20("A"), workloads.resnet20("B")
    assert (a.total, b.total) == (269_722, 272_474)
    assert len(a.params) == 3 + 18 * 3 + 2     # stem conv + bn (2), 18 x (conv + bn), fc (2)
    assert a.params[-2].shape == (10, 64)
    assert workloads.resnet20(in_channels=1, num_classes=7).params[0].shape == (16, 1, 3, 3)
    with pytest.raises(ValueError):
        workloads.architecture("vgg")


@pytest.mark.torch
def test_torch_models_match_the_workload_shapes():
    pytest.importorskip("torch")
    from gradblock.bench.gradients import torch_model
    for name in ("resnet20", "resnet50"):
        shapes = [tuple(p.shape) for p in torch_model(name).parameters()]
        assert shapes == workloads.architecture(name).shapes


@pytest.mark.torch
def test_shim_resnet20_has_the_workload_shapes():
    pytest.importorskip("torch")
    models = pytest.importorskip("gradblock.shim.setup.models")
    model = models.build_model("resnet20", num_classes=10, in_shape=(3, 32, 32))
    assert [tuple(p.shape) for p in model.parameters()] == workloads.resnet20().shapes


def test_synthetic_gradients_have_the_shapes_and_spread():
    from gradblock.bench.gradients import synthetic_gradients
    arch = workloads.resnet20()
    grads = synthetic_gradients(arch, seed=1)
    assert [g.shape for g in grads] == arch.shapes
    assert all(g.dtype == np.float32 and np.isfinite(g).all() for g in grads)
    conv = grads[3].reshape(grads[3].shape[0], -1)          # 16 filters of one conv
    norms = np.abs(conv).sum(axis=1)
    assert norms.max() / norms.min() > 2                     # block norms are spread


# ------------------------------------------------------------------------------ helpers

def test_fmt_keeps_four_significant_digits():
    assert [fmt(x) for x in (0.000123456, 1.23456, 1234.56, 123456.7, 3, 0.0)] == \
        ["0.0001235", "1.235", "1235", "123457", "3", "0"]


def test_table_round_trips_through_markdown():
    t = Table("k", "T", ["a", "b"])
    t.add("x", 1.5)
    t.skip(["y"], "no numba")
    t.notes.append("note")
    parsed = parse_markdown_tables(t.to_markdown())
    assert parsed == {"T": [{"a": "x", "b": "1.500"}, {"a": "y", "b": f"{NOT_AVAILABLE}: no numba"}]}
    with pytest.raises(ValueError):
        t.add("too", "many", "cells")


def test_measure_runs_setup_untimed_and_counts():
    calls = {"fn": 0, "setup": 0}

    def fn():
        calls["fn"] += 1

    def setup():
        calls["setup"] += 1
        time.sleep(0.01)

    s = measure(fn, reps=5, warmup=2, setup=setup)
    assert len(s.times) == 5 and calls == {"fn": 7, "setup": 7}
    assert s.median < 0.01                                  # setup's sleep is not timed


def test_attempt_turns_errors_into_cells():
    from gradblock.bench.context import BenchContext, Unavailable
    ctx = BenchContext(quick=True, reps=1, warmup=0, thread_counts=[1], workloads=[], k=1, R=10.0,
                       rtl=False, verbose=False)
    assert ctx.attempt("ok", lambda: 3) == (3, None)

    def missing():
        raise Unavailable("fastpath.fast not present")

    def broken():
        raise AssertionError("layer 3: frame differs from the reference")

    assert ctx.attempt("m", missing) == (None, f"{NOT_AVAILABLE}: fastpath.fast not present")
    value, cell = ctx.attempt("b", broken)
    assert value is None and cell.startswith("failed: AssertionError: layer 3")
    assert unmeasured(cell) and ctx.failures == ["b: AssertionError: layer 3: frame differs from "
                                                 "the reference"]


def test_report_write_keeps_hand_written_sections(tmp_path):
    out = tmp_path / "b.md"
    report.write(out, "first\n")
    assert out.read_text().startswith(report.TITLE)
    text = out.read_text() + "\n## What bounds it\n\nhand-written\n"
    out.write_text(text)
    report.write(out, "second\n")
    new = out.read_text()
    assert "second" in new and "first" not in new
    assert new.count(report.BEGIN) == 1 and "## What bounds it\n\nhand-written" in new


def test_rtl_metrics_in_both_formats(tmp_path):
    listed = tmp_path / "a.json"
    listed.write_text(json.dumps([
        {"module": "zrle_encoder", "pattern": "dense", "n": 8, "frame_words": 23, "cycles": 25,
         "ideal_cycles": 24},
        {"module": "zrle_decoder", "pattern": "sparse", "n": 64, "frame_words": 9, "cycles": 70,
         "ideal_cycles": 66}]))
    lines = tmp_path / "b.json"
    lines.write_text("\n".join(json.dumps({"module": "quantiser", "stream": s, "case": "c",
                                           "words": 8, "cycles": c, "cycles_per_word": c / 8})
                               for s, c in (("in", 8), ("out", 9))))
    enc, dec = rtl.throughputs(rtl_runner.read_metrics(listed))
    assert enc == rtl.Throughput("dense", "frame out (busier side)", 23, 25, 24)
    assert dec == rtl.Throughput("sparse", "values out (busier side)", 64, 70, 66)
    q_in, q_out = rtl.throughputs(rtl_runner.read_metrics(lines))
    assert q_out == rtl.Throughput("c", "out", 8, 9, 8)
    assert rtl_runner.read_metrics(tmp_path / "missing.json") == []
    with pytest.raises(ValueError):
        rtl.throughputs([{"module": "mystery", "cycles": 3}])


def test_rtl_timing_from_cocotb_results(tmp_path):
    xml = tmp_path / "results.xml"
    xml.write_text('<testsuites><testsuite><testcase name="throughput" time="2.5"><properties>'
                   '<property name="sim_time_unit" value="us" />'
                   '<property name="sim_time_duration" value="4.0" /></properties></testcase>'
                   '</testsuite></testsuites>')
    assert rtl_runner.testcase_timing(xml, "throughput") == (2.5, 4000.0)
    assert rtl_runner.testcase_timing(xml, "other") is None


def test_rtl_sources_are_found_transitively(tmp_path):
    (tmp_path / "leaf.sv").write_text("module leaf; endmodule\n")
    (tmp_path / "mid.sv").write_text("module mid; leaf #(.W(2)) u_leaf (); endmodule\n")
    (tmp_path / "top.sv").write_text("module top;\n// leaf in a comment only\n mid u_mid ();\n"
                                     "endmodule\n")
    assert rtl.hw_dependencies("top", tmp_path) == ["leaf", "mid", "top"]


def test_targets_read_the_tables():
    comp = Table("compress", "2", ["workload", "threads", "implementation", "time (ms)", "GB/s",
                                   "of read-sum", "of copy", "speed-up vs numpy"])
    comp.add("R", "1", "numba compress_step", 1.0, 2.0, 0.4, 0.6, 10.0)
    comp.add("R", "1", "numba compress_layers", 1.0, 2.0, 0.2, 0.3, 10.0)
    comp.add("ResNet-20", "1", "numba compress_message", 1.0, 2.0, 0.2, 0.3, 10.0)
    comp.add("ResNet-20", "2", "numba compress_message", 0.5, 4.0, 0.2, 0.9, 10.0)
    comp.add("ResNet-50", "1", "numba compress_message", 10.0, 2.0, 0.2, 0.45, 10.0)
    comp.add("ResNet-50", "2", "numba compress_message", 6.0, 2.0, 0.2, 0.7, 10.0)
    lines = targets.evaluate({"compress": comp})
    # one thread is judged, at 25% for ResNet-20 and 50% for ResNet-50; more threads are listed
    assert "R ×1: 60% of copy" in lines[0] and "target 50%: met" in lines[0]
    assert "ResNet-20 ×1: 30% of copy" in lines[0] and "target 25%: met" in lines[0]
    assert "ResNet-50 ×1: 45% of copy" in lines[0] and "target 50%: missed" in lines[0]
    assert "ResNet-50 ×2: 70% of copy" in lines[0] and lines[0].count("for reference") == 2
    assert "not measured" in lines[1] and "not measured" in lines[3]
    # scaling: judged on ResNet-50 (10 → 6 ms = 1.67×, missed), ResNet-20 listed
    assert "ResNet-50: 1.67× on 2 threads (10 → 6 ms) — missed" in lines[4]
    assert "ResNet-20: 2.00× on 2 threads" in lines[4] and "for reference" in lines[4]
    cols = ["simulator", "module", "case", "stream", "words", "cycles", "ideal cycles",
            "cycles/word", "words/cycle", "of ideal"]
    rtl_table = Table("rtl", "4", cols)
    rtl_table.add("icarus", "top", "c", "in (pass 1)", 1000, 1004, 1000, 1.004, 0.996, 0.996)
    rtl_table.add("icarus", "top", "c", "frame", 10, 100, 10, 10.0, 0.1, 0.1)   # not judged
    rtl_table.add("icarus", "enc", "c", "frame out (busier side)", 90, 100, 97, 1.11, 0.9, 0.97)
    line = targets.evaluate({"rtl": rtl_table})[3]
    assert "icarus top: 0.9960 of ideal" in line and "icarus enc: 0.9700 of ideal" in line
    assert line.count("— met") == 1 and line.count("— missed") == 1


# ------------------------------------------------------------------ engines (tables 4c, 4d)

# docs/hw.md's ECP5 table (compress_engine before the burst_walker fix), in `gradblock synth
# --target ecp5 --json`'s shape: the Fmax the engine rows use when docs/ecp5.json is absent
HW_MD_ECP5 = {"device": "LFE5U-85F-8BG381 (out of context)", "tools": ["yosys", "nextpnr-ecp5"],
              "modules": {"compress_engine": {"fmax_mhz": 31.2, "lut4": 26329, "ff": 6156,
                                              "ebr": 2, "mult18": 11, "gbps_fp32": 1.0,
                                              "parameters": {"ADDR_W": 32, "K_MAX": 32,
                                                             "LMAX_LOG2_MAX": 8}}}}


@pytest.fixture
def ecp5_json(tmp_path):
    path = tmp_path / "ecp5.json"
    path.write_text(json.dumps(HW_MD_ECP5))
    return path


def _engine_record(case, n, selected, cycles, beats, k_eff=1):
    return {"module": "compress_engine", "stream": f"layer (config to done), selected {selected}",
            "case": case, "words": n, "cycles": cycles, "cycles_per_word": cycles / n,
            "sim": "Icarus Verilog", "selected": selected, "k_eff": k_eff,
            "axi_beats": dict(zip(("ar", "r", "aw", "w"), beats))}


def check_engine_rows(rows: list[dict]) -> None:
    """Every measured table-4c row: its ratio columns agree with its counts."""
    for r in _measured(rows):
        n, cycles, sel = _num(r["n"]), _num(r["cycles"]), _num(r["selected S"])
        assert _close(_num(r["S/n"]), sel / n), r
        assert _close(_num(r["cycles/element"]), cycles / n), r
        assert _close(_num(r["elements/cycle"]), n / cycles), r
        assert _close(_num(r["R beats/element"]), _num(r["R beats"]) / n), r
        assert _close(_num(r["W beats/element"]), _num(r["W beats"]) / n), r
        # the engine moves every element once and each selected element once more, each way
        assert _num(r["R beats"]) >= n + sel and _num(r["W beats"]) >= n + sel, r
        assert 0 < _num(r["AR bursts"]) <= _num(r["R beats"]), r
        # the velocity port: idle without momentum; with it, read once, written once plus
        # the zeros over the selected blocks
        vel = (_num(r["velocity R beats"]), _num(r["velocity W beats"]))
        assert vel == ((n, n + sel) if r["momentum"] == "yes" else (0, 0)), r
        if r["Fmax (MHz)"] != rtl_engines.NO_FMAX:
            want = _num(r["Fmax (MHz)"]) * _num(r["elements/cycle"]) * 32 / 1000
            assert _close(_num(r["fp32 Gb/s at Fmax"]), want), r


def test_engine_rows_agree_with_their_counts(ecp5_json):
    from gradblock.bench import results
    runs = rtl_engines.engine_runs([
        _engine_record("big", 36864, 576, 37739, (2341, 37440, 2341, 37440)),
        _engine_record("small", 2304, 144, 2631, (154, 2448, 154, 2448)),
        dict(_engine_record("big_m", 36864, 576, 37745, (2341, 37440, 2341, 37440)),
             momentum=True, vel_axi_beats={"ar": 2304, "r": 36864, "aw": 2340, "w": 37440}),
        {"module": "other", "stream": "in", "case": "x", "words": 1, "cycles": 1}])
    assert [e.case for e in runs] == ["big", "small", "big_m"] and runs[0].r == 37440
    assert runs[2].momentum and (runs[2].vel_r, runs[2].vel_w) == (36864, 37440)
    fmax, note = rtl_engines.ecp5_fmax("compress_engine", ecp5_json)
    assert fmax.mhz == 31.2 and "31.2 MHz" in note and "K_MAX=32" in note
    table = rtl_engines.compress_table()
    rtl_engines.add_compress_rows(table, "icarus", runs, fmax)
    rtl_engines.add_compress_rows(table, "verilator", runs, None)
    rows = parse_markdown_tables(table.to_markdown())[TITLES["rtl_engine"]]
    assert len(rows) == 6 and [r["momentum"] for r in rows[:3]] == ["no", "no", "yes"]
    check_engine_rows(rows)
    with pytest.raises(AssertionError):       # a momentum row whose velocity port idled
        check_engine_rows([dict(rows[2], **{"velocity R beats": "0"})])
    assert rows[0]["fp32 Gb/s at Fmax"] == fmt(31.2 * 36864 / 37739 * 0.032)
    assert rows[3]["Fmax (MHz)"] == rows[3]["fp32 Gb/s at Fmax"] == rtl_engines.NO_FMAX
    json_rows = results.table_rows(4, table)
    assert json_rows[0]["labels"] == {"simulator": "icarus", "module": "compress_engine",
                                      "case": "big", "momentum": "no"}
    assert json_rows[0]["metrics"]["R beats"] == 37440 and "Fmax (MHz)" in json_rows[0]["metrics"]
    assert "Fmax (MHz)" not in json_rows[3]["metrics"]          # no figure: no number
    broken = dict(rows[0], **{"elements/cycle": "0.5"})
    with pytest.raises(AssertionError):
        check_engine_rows([broken])


def test_engine_records_need_their_beat_counts():
    rec = _engine_record("c", 100, 10, 120, (7, 110, 7, 110))
    del rec["axi_beats"]
    with pytest.raises(ValueError, match="axi_beats"):
        rtl_engines.engine_runs([rec])


def test_ecp5_fmax_says_why_there_is_none(tmp_path, ecp5_json):
    fmax, note = rtl_engines.ecp5_fmax("compress_engine", tmp_path / "absent.json")
    assert fmax is None and "not present" in note
    fmax, note = rtl_engines.ecp5_fmax("aggregate_engine", ecp5_json)
    assert fmax is None and "aggregate_engine" in note
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    fmax, note = rtl_engines.ecp5_fmax("compress_engine", bad)
    assert fmax is None and "JSONDecodeError" in note
    assert rtl_engines.gbps(None, 1.0) == rtl_engines.NO_FMAX
    _, note = rtl_engines.ecp5_fmax("compress_engine", ecp5_json, simulated={"K_MAX": 128})
    assert "simulated build differs: K_MAX=128" in note
    _, note = rtl_engines.ecp5_fmax("compress_engine", ecp5_json,
                                    simulated=rtl_engines.COMPRESS_PARAMETERS)
    assert "differs" not in note


def test_engine_target_reads_table_4c(ecp5_json):
    fmax, _ = rtl_engines.ecp5_fmax("compress_engine", ecp5_json)
    table = rtl_engines.compress_table()
    assert "run with --rtl" in targets.evaluate({"rtl_engine": table})[-1]
    runs = rtl_engines.engine_runs([
        _engine_record("line_rate", 36864, 576, 37739, (2341, 37440, 2341, 37440)),
        _engine_record("dense_sel", 2304, 144, 2631, (154, 2448, 154, 2448)),    # S/n 6 %
        _engine_record("slow", 10000, 200, 11000, (700, 10200, 700, 10200))])
    rtl_engines.add_compress_rows(table, "icarus", runs[:2], fmax)
    line = targets.evaluate({"rtl_engine": table})[-1]
    assert "icarus: 0.977 (line_rate" in line and line.endswith("— met")
    assert "dense_sel" not in line                   # more than 2 % selected: not judged
    rtl_engines.add_compress_rows(table, "verilator", runs[1:], fmax)
    line = rtl_engines.target_line({"rtl_engine": table})
    assert "verilator: 0.909 (slow" in line and "— missed" in line
    only_dense = rtl_engines.compress_table()
    rtl_engines.add_compress_rows(only_dense, "icarus", runs[1:2], fmax)
    assert "no layer with S ≤ 2 % of n" in rtl_engines.target_line({"rtl_engine": only_dense})


def test_engine_layers_are_real_conv_layers_of_the_workloads():
    w20 = make_workload("resnet20", "synthetic")
    w50 = make_workload("resnet50", "synthetic")
    layers = rtl_engines.engine_layers([w20, w50])
    shapes = [tuple(e.grad.shape) for e in layers]
    assert shapes == [(64, 64, 3, 3), (16, 16, 3, 3), (128, 256, 1, 1)]     # one of each shape
    assert layers[0].name.startswith("resnet20_layer") and layers[2].name.startswith("resnet50_")
    for e in layers:
        assert e.grad is w20.grads[e.layer_id] or e.grad is w50.grads[e.layer_id]
    meta, arrays = rtl_engines.engine_case(layers[1], 10.0, 0.01)
    assert meta["n"] == 2304 and meta["block_size"] == 144 and meta["k_eff"] == 1
    assert arrays["residual_in"].any()                # step 1's residual, not zeros
    meta, arrays = rtl_engines.engine_momentum_case(layers[1], 10.0, 0.01)
    assert "momentum" in meta["stages"] and meta["m_fix"] == 58982 and meta["masked"]
    # step 1's residual and velocity: the velocity is zero exactly on step 1's sent block
    assert arrays["residual_in"].any() and arrays["velocity_in"].any()
    assert meta["name"].endswith("_momentum") and meta["k_eff"] == 1


def _aggregate_record(case, clear, n, workers, frame_words, literals, cycles, beats):
    return {"module": "aggregate_engine", "case": case, "sim": "Icarus Verilog", "clear": clear,
            "n": n, "workers": workers, "frame_words": frame_words, "literals": literals,
            "cycles": cycles, "budget": 10**9, "axi_beats": dict(zip(("ar", "r", "aw", "w"), beats))}


def check_aggregate_rows(rows: list[dict]) -> None:
    """Every measured table-4d row: its ratio columns agree with its counts."""
    for r in _measured(rows):
        n, workers, lit = _num(r["n"]), _num(r["workers"]), _num(r["literals"])
        words, cycles = _num(r["frame words"]), _num(r["cycles"])
        clear_writes = n if r["clear"] == "yes" else 0
        beats = _num(r["R beats"]) + _num(r["W beats"]) - clear_writes
        assert _num(r["zero elements"]) == n * workers - lit, r
        assert _close(_num(r["cycles/frame word"]), cycles / words), r
        assert _close(_num(r["elements/cycle"]), n * workers / cycles), r
        assert _close(_num(r["beats/literal"]), beats / lit), r
        assert abs(_num(r["beats/zero element"]) - (beats - 2 * lit) / _num(r["zero elements"])) \
            <= 1e-4 * max(1.0, abs(_num(r["beats/zero element"]))), r
        if r["Fmax (MHz)"] != rtl_engines.NO_FMAX:
            want = _num(r["Fmax (MHz)"]) * words / cycles * 32 / 1000
            assert _close(_num(r["frame Gb/s at Fmax"]), want), r


def test_aggregate_rows_agree_with_their_counts(tmp_path):
    ecp5 = tmp_path / "ecp5.json"
    ecp5.write_text(json.dumps({"modules": {"aggregate_engine": {"fmax_mhz": 80.0}}}))
    fmax, _ = rtl_engines.ecp5_fmax("aggregate_engine", ecp5)
    runs = rtl_engines.aggregate_runs([
        _aggregate_record("sparse", False, 2304, 4, 620, 576, 9500, (40, 576, 40, 576)),
        _aggregate_record("sparse", True, 2304, 4, 620, 576, 12000, (40, 576, 184, 2880)),
        _engine_record("other", 10, 1, 12, (1, 11, 1, 11))])
    assert [(a.case, a.clear) for a in runs] == [("sparse", False), ("sparse", True)]
    assert runs[1].clear_writes == 2304 and runs[1].literal_beats == 2 * 576
    table = rtl_engines.aggregate_table()
    rtl_engines.add_aggregate_rows(table, "icarus", runs, fmax)
    rtl_engines.add_aggregate_rows(table, "verilator", runs, None)
    rows = parse_markdown_tables(table.to_markdown())[TITLES["rtl_aggregate"]]
    assert len(rows) == 4 and [r["clear"] for r in rows[:2]] == ["no", "yes"]
    check_aggregate_rows(rows)
    assert _num(rows[0]["beats/literal"]) == 2 and _num(rows[1]["beats/zero element"]) == 0
    with pytest.raises(AssertionError):
        check_aggregate_rows([dict(rows[0], **{"beats/literal": "1.5"})])
    rec = _aggregate_record("c", False, 10, 2, 8, 3, 30, (1, 3, 1, 3))
    del rec["axi_beats"]
    with pytest.raises(ValueError, match="axi_beats"):
        rtl_engines.aggregate_runs([rec])


def test_exchange_case_holds_workers_frames_of_a_real_layer():
    from gradblock.golden.exchange import check_exchange, split_frames
    w20 = make_workload("resnet20", "synthetic")
    small = min(rtl_engines.engine_layers([w20]), key=lambda e: e.grad.size)
    meta, arrays = rtl_engines.exchange_case(small, 10.0, 0.25, 4, "x_4workers")
    assert meta["n"] == small.grad.size and meta["n_workers"] == 4 and meta["error"] is None
    assert check_exchange(meta, arrays) == []                    # the reference's own sums
    frames = split_frames(meta, arrays["frames"])
    assert len({f.tobytes() for f in frames}) == 4               # the workers differ


@pytest.mark.slow
@pytest.mark.sim
def test_engine_table_from_a_real_icarus_run(monkeypatch):
    """Both engines through Icarus (~2 min): compress_engine on ResNet-20's 64x64x3x3 (also
    with momentum) and 16x16x3x3 layers, aggregate_engine on 4 workers' frames of the latter; measured rows whose
    ratios agree with their counts, and their speed rows in table 4b."""
    from gradblock.bench.context import BenchContext
    from gradblock.sim.harness import simulator_available
    if simulator_available("icarus"):
        pytest.skip(f"icarus unavailable: {simulator_available('icarus')}")
    monkeypatch.setattr(rtl_engines, "SIMULATORS", ("icarus",))
    ctx = BenchContext(quick=False, reps=1, warmup=0, thread_counts=[1],
                       workloads=[make_workload("resnet20", "synthetic")], k=0.01, R=10.0,
                       rtl=True, verbose=False)
    speed = rtl_runner.speed_table()
    comp, agg = rtl_engines.run(ctx, speed)
    assert not ctx.failures, ctx.failures
    rows = parse_markdown_tables(comp.to_markdown())[TITLES["rtl_engine"]]
    assert len(_measured(rows)) == 3, rows            # two layers, the larger also with momentum
    check_engine_rows(rows)
    for r in rows:
        if "64x64x3x3" in r["case"]:
            assert _num(r["elements/cycle"]) >= 0.95, r
    assert [r["momentum"] for r in rows if "64x64x3x3" in r["case"]] == ["no", "yes"]
    rows = parse_markdown_tables(agg.to_markdown())[TITLES["rtl_aggregate"]]
    assert len(_measured(rows)) == 4, rows            # two exchanges, without and with clear
    check_aggregate_rows(rows)
    assert all(_num(r["beats/literal"]) == 2 and _num(r["beats/zero element"]) == 0
               for r in rows)
    assert [r[1] for r in speed.rows] == ["compress_engine", "aggregate_engine"]


# ------------------------------------------------------------------------------ quick run

def _num(cell: str) -> float:
    return float(cell.rstrip("%")) / (100 if cell.endswith("%") else 1)


def _close(a: float, b: float, rel: float = 0.01) -> bool:
    """Equal within the rounding of two 4-significant-digit cells."""
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "benchmarks.md"
    t0 = time.monotonic()
    rows = out.with_name("rows.json")
    proc = subprocess.run([sys.executable, "-m", "gradblock.cli", "bench", "--quick", "--quiet",
                           "--out", str(out), "--json", str(rows)], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out.read_text(), proc.stdout, elapsed, json.loads(rows.read_text())


@pytest.mark.torch
def test_quick_run_writes_every_table(quick_report):
    text, stdout, _, _ = quick_report
    assert report.BEGIN in text and report.END in text
    assert text.split(report.BEGIN)[1].split(report.END)[0].strip() == stdout.strip()
    for needle in ("- machine:", "- threads measured:", "numpy ", "numba ", "torch ",
                   "mode: quick"):
        assert needle in text
    tables = parse_markdown_tables(text)
    for key, title in TITLES.items():
        assert title in tables and tables[title], f"table {key} missing or empty"
    assert "## Targets" in text


@pytest.mark.torch
def test_quick_run_cells_parse(quick_report):
    tables = parse_markdown_tables(quick_report[0])
    for title in TITLES.values():
        for row in tables[title]:
            cells = list(row.items())
            skipped = any(unmeasured(v) for _, v in cells)
            for col, value in cells:
                if col in LABEL_COLUMNS or skipped:
                    continue
                if value in ("no baseline", "no reference", "no zstd", "inf",
                             rtl_engines.NO_FMAX, "no literal", "no zero"):
                    continue
                _num(value)                          # raises if a number does not parse
    # the measured tables have measured rows: ResNet-20 on one thread at least
    for title in (TITLES["selection"], TITLES["compress"], TITLES["codec"]):
        assert any(not any(unmeasured(v) for v in r.values()) for r in tables[title])


def _measured(rows):
    return [r for r in rows if not any(unmeasured(v) for v in r.values())]


@pytest.mark.torch
def test_quick_run_ratios_agree_with_times(quick_report):
    tables = parse_markdown_tables(quick_report[0])

    sel = _measured(tables[TITLES["selection"]])
    groups = {}
    for r in sel:
        groups.setdefault((r["workload"], r["threads"], r["device"]), []).append(r)
    for rows in groups.values():
        base = next(r for r in rows if r["method"] == "fine: torch.topk")
        for r in rows:
            want = _num(base["time (ms)"]) / _num(r["time (ms)"])
            assert _close(_num(r["speed-up vs torch.topk"]), want), r

    comp = _measured(tables[TITLES["compress"]])
    groups = {}
    for r in comp:
        groups.setdefault((r["workload"], r["threads"]), []).append(r)
    for rows in groups.values():
        by = {r["implementation"]: r for r in rows}
        read, copy = by["memory: read-sum"], by["memory: copy"]
        ref = by["numpy reference compress_layer"]
        gbytes = _num(read["GB/s"]) * _num(read["time (ms)"]) / 1e3
        for r in rows:
            t, gbs = _num(r["time (ms)"]), _num(r["GB/s"])
            assert _close(gbs * t / 1e3, gbytes), r                     # same bytes every row
            assert _close(_num(r["of read-sum"]), gbs / _num(read["GB/s"])), r
            assert _close(_num(r["of copy"]), gbs / _num(copy["GB/s"])), r
            assert _close(_num(r["speed-up vs numpy"]), _num(ref["time (ms)"]) / t), r

    cod = _measured(tables[TITLES["codec"]])
    groups = {}
    for r in cod:
        groups.setdefault((r["workload"], r["threads"]), []).append(r)
    for rows in groups.values():
        zstd = next(r for r in rows if r["codec"] == "zstd level 1")
        raw_over_ideal = {round(_num(r["ratio"]) * _num(r["of ideal"]), 1) for r in rows}
        assert len(raw_over_ideal) == 1 or max(raw_over_ideal) / min(raw_over_ideal) < 1.01
        for r in rows:
            assert _close(_num(r["encode vs zstd-1"]), _num(r["encode GB/s"]) / _num(zstd["encode GB/s"])), r
            assert _close(_num(r["decode vs zstd-1"]), _num(r["decode GB/s"]) / _num(zstd["decode GB/s"])), r
        zrle = [r for r in rows if r["codec"].startswith("ZRLE")]
        assert len({r["ratio"] for r in zrle}) == 1             # one wire format, one size

    for r in _measured(tables[TITLES["training"]]):
        shares = [_num(r[c]) for c in ("compute", "compress", "exchange (decode + reduce)", "update")]
        assert abs(sum(shares) - 1) < 0.005, r

    for r in _measured(tables[TITLES["rtl"]]):
        assert _close(_num(r["words/cycle"]), _num(r["words"]) / _num(r["cycles"])), r
        assert _close(_num(r["words/cycle"]) * _num(r["cycles/word"]), 1.0), r
        assert _close(_num(r["of ideal"]), _num(r["ideal cycles"]) / _num(r["cycles"])), r


@pytest.mark.torch
def test_quick_run_json_holds_every_row_of_the_report(quick_report):
    text, _, _, doc = quick_report
    tables = parse_markdown_tables(text)
    rows = doc["rows"]
    by_title = {}
    for r in rows:
        by_title.setdefault(TITLES[r["key"]], []).append(r)
    for title, md_rows in tables.items():
        if title in TITLES.values():
            assert len(by_title.get(title, [])) == len(md_rows), title
    comp = [r for r in rows if r["key"] == "compress" and "status" not in r]
    assert comp and all(r["table"] == 2 and r["threads"] == 1 and r["workload"] == "ResNet-20"
                        for r in comp)
    for r in comp:                      # the markdown cells are the JSON numbers, rounded
        md = next(m for m in tables[TITLES["compress"]] if m["implementation"] == r["implementation"])
        assert _close(_num(md["time (ms)"]), r["time_ms"]) and _close(_num(md["GB/s"]), r["gbps"])
        assert _close(_num(md["of copy"]), r["of_copy"])
    assert any(r["implementation"].startswith("numba compress_message") for r in comp)
    codec_rows = [r for r in rows if r["key"] == "codec" and "status" not in r]
    assert all("encode GB/s" in r["metrics"] and "decode GB/s" in r["metrics"] for r in codec_rows)


# ------------------------------------------------------------------ benchmarks as data

def _rows_file(path, rows):
    path.write_text(json.dumps({"rows": rows}))
    return path


def _row(impl, time_ms=None, **metrics):
    return {"table": 2, "key": "compress", "workload": "ResNet-50", "threads": 1,
            "implementation": impl, "time_ms": time_ms, "gbps": None, "of_copy": None,
            "labels": {"workload": "ResNet-50", "threads": "1", "implementation": impl},
            "metrics": metrics}


def test_compare_flags_rows_slower_than_the_threshold(tmp_path):
    from gradblock.bench import results
    old = _rows_file(tmp_path / "old.json", [_row("a", 10.0), _row("b", 10.0), _row("c", 10.0),
                                            _row("zrle", **{"encode GB/s": 4.0, "decode GB/s": 8.0}),
                                            _row("gone", 1.0)])
    new = _rows_file(tmp_path / "new.json", [_row("a", 10.9), _row("b", 11.5), _row("c", 5.0),
                                            _row("zrle", **{"encode GB/s": 4.1, "decode GB/s": 6.0}),
                                            _row("added", 1.0)])
    changes, compared = results.compare(results.load_rows(old), results.load_rows(new), 0.1)
    assert compared == 4
    assert sorted((dict(c.key[1])["implementation"], c.metric) for c in changes) == [
        ("b", "time_ms"), ("zrle", "decode GB/s")]
    lines = []
    assert results.compare_main(old, new, 0.1, out=lines.append) == 1
    assert sum(line.startswith("REGRESSION") for line in lines) == 2
    assert results.compare_main(old, new, 1.0, out=lines.append) == 0


def test_compare_refuses_files_that_are_not_bench_results(tmp_path):
    from gradblock.bench import results
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    good = _rows_file(tmp_path / "good.json", [_row("a", 1.0)])
    for old in (bad, tmp_path / "missing.json"):
        with pytest.raises(results.CompareError) as e:
            results.compare_main(old, good, 0.1)
    assert "gradblock bench --json" in str(e.value) or "missing.json" in str(e.value)
    from gradblock import cli
    assert cli.main(["bench", "--compare", str(bad), str(good)]) == 2
    with pytest.raises(results.CompareError):
        results.compare([], [], -1)


def test_compare_through_the_cli(tmp_path):
    from gradblock.bench.run import bench_main
    old = _rows_file(tmp_path / "old.json", [_row("a", 10.0)])
    new = _rows_file(tmp_path / "new.json", [_row("a", 12.0)])
    argv = ["--compare", str(old), str(new), "--threshold"]
    assert bench_main(argv + ["0.1"]) == 1 and bench_main(argv + ["0.5"]) == 0


def test_table_json_rows_keep_numbers_and_skips(tmp_path):
    from gradblock.bench import results
    t = Table("codec", "3. x", ["workload", "threads", "codec", "encode GB/s", "decode GB/s",
                                "encode vs zstd-1"])
    t.add("ResNet-20", "1", "ZRLE numba", 5.123456, 9.0, "no zstd")
    t.skip(["ResNet-20", "1", "ZRLE torch"], "torch missing")
    rows = results.table_rows(3, t)
    assert rows[0]["metrics"] == {"encode GB/s": 5.123456, "decode GB/s": 9.0}
    assert rows[0]["gbps"] == 5.123456 and rows[0]["implementation"] == "ZRLE numba"
    assert rows[0]["threads"] == 1 and rows[0]["table"] == 3
    assert rows[1]["status"].startswith(NOT_AVAILABLE) and rows[1]["metrics"] == {}
    path = tmp_path / "r.json"
    results.write_json(path, {3: [t]}, ["- header"])
    assert json.loads(path.read_text())["rows"] == json.loads(json.dumps(rows))
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]          # no temp file left


@pytest.mark.parametrize("argv, writes", [
    (["--quick"], None), (["--tables", "2"], None), (["--workloads", "resnet20"], None),
    ([], "default"), (["--quick", "--out", "X"], "X"), (["--no-write"], None)])
def test_only_a_full_run_replaces_the_committed_report(argv, writes):
    from gradblock.bench.run import DEFAULT_OUT, build_parser, report_path
    args = build_parser().parse_args(argv)
    got = report_path(args, quick=args.quick)
    assert got == (DEFAULT_OUT if writes == "default" else None if writes is None else Path(writes))


def test_cpu_clock_leaves_out_sleep_and_needs_one_thread():
    from gradblock.bench import timing
    from gradblock.bench.run import bench_main
    try:
        timing.set_clock("cpu")
        assert timing.measure(lambda: time.sleep(0.02), reps=3, warmup=0).median < 0.01
        timing.set_clock("wall")
        assert timing.measure(lambda: time.sleep(0.02), reps=3, warmup=0).median >= 0.02
        with pytest.raises(ValueError, match="clock"):
            timing.set_clock("sundial")
    finally:
        timing.set_clock("wall")
    with pytest.raises(UsageError, match="--threads 1"):
        bench_main(["--clock", "cpu", "--threads", "1,2", "--tables", "2", "--no-write"])


def test_bench_has_no_model_or_dataset_of_its_own():
    """The models and data sets live in shim (shim.setup.models, shim.setup.data); bench builds on them
    rather than keeping copies (a second ResNet or IDX reader drifts from the first)."""
    import ast
    from pathlib import Path
    pytest.importorskip("torch")
    models = pytest.importorskip("gradblock.shim.setup.models")
    shim_models = {name for name, obj in vars(models).items()
                   if isinstance(obj, type) and issubclass(obj, models.nn.Module)}
    assert {"ResNet20", "ResNet50", "Bottleneck", "BasicBlock"} <= shim_models
    bench = Path(__file__).resolve().parents[1] / "bench"
    for path in sorted(bench.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):   # a harness module (netbench's Shaped) is fine
                assert node.name not in shim_models, (path.name, node.name)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = {a.name for a in node.names} | {getattr(node, "module", None) or ""}
                assert "gzip" not in names, f"{path.name} reads files itself: use shim.setup.data"
