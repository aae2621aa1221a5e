"""hw/gradblock_pkg.sv against the software: the frame constants and every error code the RTL
reports are read from the package file (the one the simulators and yosys compile) and compared
with gradblock.codec, so neither side can change alone. Also the reader itself and the
compress_top code space (its own names, every code distinct)."""
from __future__ import annotations

import pytest

from gradblock.codec import errors, zrle
from gradblock.hw import sv_constants
from gradblock.hw.sv_constants import PackageParseError, codes, literal, package_constants


@pytest.fixture(scope="module")
def pkg() -> dict[str, int]:
    return package_constants("gradblock_pkg")


def test_frame_constants(pkg):
    assert pkg["ZRLE_MAGIC"] == zrle.MAGIC
    assert pkg["ZRLE_VERSION"] == zrle.VERSION
    assert pkg["ZRLE_LMAX_LOG2_MIN"] == zrle.LMAX_LOG2_MIN
    assert pkg["ZRLE_LMAX_LOG2_MAX"] == zrle.LMAX_LOG2_MAX
    assert pkg["ZRLE_HEADER_WORDS"] == zrle.HEADER_WORDS
    assert pkg["ZRLE_TRAILER_WORDS"] == zrle.TRAILER_WORDS


def test_norm_constants(pkg):
    """cfg_norm's values are the indices of the software's norm kinds, and the largest L2
    shift is the one the reference computes for the largest block size (docs/spec.md §2.3)."""
    from gradblock.refmodel.selection import norm_shift
    from gradblock.refmodel.validation import MAX_BLOCK_SIZE, NORMS
    assert (pkg["NORM_L1"], pkg["NORM_L2"]) == (NORMS.index("l1"), NORMS.index("l2"))
    assert pkg["NORM_L2_SHIFT_MAX"] == norm_shift("l2", MAX_BLOCK_SIZE) == 16
    assert pkg["NORM_L2_SHIFT_MAX"] < 2**5, "block_l1's shift register is 5 bits wide"


def test_frame_error_codes_match_codec(pkg):
    """FRAME_ERR_<NAME> exists for every codec error, with its code, and for nothing else."""
    rtl = codes("FRAME_ERR_")
    sw = {e.name: e.code for e in errors.ALL_ERRORS}
    assert rtl == sw, {k: (rtl.get(k), sw.get(k)) for k in set(rtl) | set(sw)
                       if rtl.get(k) != sw.get(k)}
    assert pkg["FRAME_OK"] == 0 and 0 not in sw.values()
    assert max(sw.values()) < 16, "zrle_decoder's err_code is 4 bits wide"


def test_top_codes_are_their_own(pkg):
    """compress_top's err_code space: distinct codes, 0 is OK, every name says what it is and
    none is called like a frame error (the numbers overlap, the meanings do not)."""
    top = codes("TOP_ERR_")
    assert pkg["TOP_OK"] == 0
    assert len(set(top.values())) == len(top) and 0 not in top.values()
    assert all(0 < v < 16 for v in top.values())
    assert not set(top) & {e.name for e in errors.ALL_ERRORS}
    assert {"N_OVER_N_MAX", "K_OVER_K_MAX", "TLAST_MISPLACED"} <= set(top)


def test_literal_reader():
    assert literal("24") == 24
    assert literal("32'h5A524C45") == 0x5A524C45
    assert literal("4'd14") == 14
    assert literal("8'b0000_0001") == 1
    for bad in ("4'd16", "FOO", "1 + 2"):
        with pytest.raises(PackageParseError):
            literal(bad)


def test_reader_refuses_what_it_cannot_read(tmp_path):
    (tmp_path / "p_pkg.sv").write_text("package p_pkg;\n  localparam int A = 1 + 2;\nendpackage\n")
    with pytest.raises(PackageParseError, match="A"):
        sv_constants.package_constants("p_pkg", tmp_path)
    (tmp_path / "q_pkg.sv").write_text("package q_pkg;\n  localparam int A = 1;\n"
                                       "  localparam int A = 2;\nendpackage\n")
    with pytest.raises(PackageParseError, match="twice"):
        sv_constants.package_constants("q_pkg", tmp_path)
