"""Golden vectors for a plain SystemVerilog bench: what a testbench needs besides the hex files,
in files it can read without Python (docs/golden.md, "A bench without Python").

Per case, beside its hex files (`<case>/`):
  params.txt   one `key value` line per setting, every value a decimal integer (signed where
               the quantity is: k_shift; -1 where a quantity does not apply), read with
               `$fscanf(fd, "%s %d\\n", key, value)`: the layer's configuration, the expected
               status (saturation and NaN counts, frame length), one `stage_<name> 0|1` per
               golden stage and one `words_<array>` per array: its word count, -1 when the
               case does not carry it (an empty hex file then has a count of 0). Exchange cases
               carry the expected error as numbers: `error_code` is the aggregate engine's
               (the decoder's FRAME_ERR_* code for a bad frame, AGG_ERR_* for a cross-worker
               mismatch), `error_frame_code` the FRAME_ERR_* code alone (0 for none).
  params.svh   the same as `localparam longint GB_<KEY> = <value>;` lines, for a bench compiled
               per case.
At the top, `cases.txt`: one line per case, `<name> compress|exchange`, in manifest order.
Every value here comes from the manifest entry and the arrays (nothing else), so
golden/check.py recomputes these files and compares them byte for byte.
"""
from __future__ import annotations

import numpy as np

from gradblock.codec.errors import ALL_ERRORS

PARAMS_TXT = "params.txt"
PARAMS_SVH = "params.svh"
CASE_LIST = "cases.txt"
# the RTL's cfg_norm values (gradblock_pkg NORM_L1 / NORM_L2; tests/test_plain_sv_bench.py
# checks them against the package)
NORM_CODES = {"l1": 0, "l2": 1}
# aggregate_engine's codes for the cross-worker checks (gradblock_pkg AGG_ERR_*; checked there
# too); a bad frame is the decoder's FRAME_ERR_* code, the codec error's `code`
CROSS_WORKER_CODES = {"RANGE_MISMATCH": 16, "LAYER_ID_MISMATCH": 17}
FRAME_ERROR_CODES = {e.name: e.code for e in ALL_ERRORS}


def params_name(case: str, ext: str = "txt") -> str:
    """The golden layout's path of a case's parameters file (ext "txt" or "svh")."""
    return f"{case}/params.{ext}"


def _or_minus1(v) -> int:
    return -1 if v is None else int(v)


def compress_params(meta: dict, arrays: dict, all_arrays, stages) -> list[tuple[str, int]]:
    """(key, value) pairs of a compress case (manifest "cases")."""
    mom = "momentum" in meta["stages"]
    nan = arrays.get("quant_nan")
    pairs = [("n", meta["n"]), ("layer_id", meta["layer_id"]), ("range_bits", meta["range_bits"]),
             ("m", meta["M"]), ("k_shift", meta["k_shift"]), ("lmax_log2", meta["lmax_log2"]),
             ("block_size", meta["block_size"]), ("n_blocks", meta["n_blocks"]),
             ("k_eff", _or_minus1(meta["k_eff"])),
             ("norm", NORM_CODES[meta.get("norm", "l1")]),
             ("sat_quant", meta["sat_quant"]), ("sat_feedback", _or_minus1(meta["sat_feedback"])),
             ("nan_count", -1 if nan is None else int(np.count_nonzero(nan))),
             ("frame_words", _or_minus1(meta["frame_words"])),
             ("momentum", int(mom)), ("m_fix", int(meta.get("m_fix", 0)) if mom else 0),
             ("momentum_mask", int(bool(meta.get("momentum_mask"))) if mom else 0),
             ("masked", int(bool(meta.get("masked"))) if mom else 0),
             ("sat_momentum", int(meta.get("sat_momentum", 0)) if mom else 0)]
    pairs += [(f"stage_{s}", int(s in meta["stages"])) for s in stages]
    pairs += [(f"words_{a}", int(np.asarray(arrays[a]).size) if a in arrays else -1)
              for a in all_arrays]
    return pairs


def exchange_params(meta: dict, arrays: dict) -> list[tuple[str, int]]:
    """(key, value) pairs of an exchange case (manifest "exchange")."""
    err = meta["error"]
    name = err["name"] if err else None
    frame_code = FRAME_ERROR_CODES.get(name, 0) if err else 0
    code = (CROSS_WORKER_CODES[name] if name in CROSS_WORKER_CODES else frame_code) if err else 0
    if err and code == 0:
        raise ValueError(f"exchange case {meta['name']}: error {name!r} has no RTL code")
    words = [int(w) for w in meta["frame_words"]]
    pairs = [("n", meta["n"]), ("n_workers", meta["n_workers"]), ("layer_id", meta["layer_id"]),
             ("range_bits", meta["range_bits"]), ("error", int(err is not None)),
             ("error_code", code), ("error_frame_code", frame_code),
             ("error_worker", err["worker"] if err else -1),
             ("error_word", err["word"] if err else -1)]
    offset = 0
    for w, count in enumerate(words):
        pairs += [(f"frame_words_{w}", count), (f"frame_offset_{w}", offset)]
        offset += count
    pairs += [(f"words_{a}", int(np.asarray(arrays[a]).size)) for a in ("frames", "sums")]
    return pairs


def params_files(meta: dict, arrays: dict, all_arrays, stages,
                 exchange: bool) -> dict[str, str]:
    """{path in the golden layout: text} of a case's params.txt and params.svh. `all_arrays`
    and `stages` are the format's (golden/format.py passes them: this module imports nothing of
    the package), `exchange` whether the case is from the manifest's "exchange" list."""
    pairs = (exchange_params(meta, arrays) if exchange
             else compress_params(meta, arrays, all_arrays, stages))
    txt = "".join(f"{k} {v}\n" for k, v in pairs)
    svh = (f"// gradblock golden case {meta['name']}: its params.txt as localparams\n"
           + "".join(f"localparam longint GB_{k.upper()} = {v};\n" for k, v in pairs))
    return {params_name(meta["name"], "txt"): txt, params_name(meta["name"], "svh"): svh}


def case_list(entries, exchange=()) -> str:
    """cases.txt: `<name> compress|exchange` per case, in manifest order."""
    return "".join([f"{e['name']} compress\n" for e in entries]
                   + [f"{e['name']} exchange\n" for e in exchange])
