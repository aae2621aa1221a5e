"""Named errors: the user-facing base class, and the frame errors. Each frame error carries
the numeric code the RTL decoder reports (docs/spec.md §3.5)."""
from __future__ import annotations

import argparse


class GradblockError(ValueError):
    """Base of every named user-facing error (bad frame, bad number, bad file, refused output).
    The CLI prints its message as one line and exits with status 2; anything else that escapes
    a command is a bug (exit 1). Lives here, in the lowest layer, so every layer can subclass it."""


class UsageError(GradblockError):
    """A command's arguments cannot work (an unknown name, a missing external tool, a bad
    combination): what a command used to print before returning status 2 itself."""


class UsageParser(argparse.ArgumentParser):
    """The argument parser of every gradblock command: a bad argument is a UsageError, one line
    naming the option (exit 2 through gradblock.cli), never argparse's usage dump and its own
    exit; --help still prints and exits 0. Here beside UsageError so every layer's command can
    use it (tests/test_cli_errors.py runs all twenty)."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


class ParameterError(GradblockError):
    """A step parameter outside the range docs/spec.md allows. Here, in the lowest layer,
    because the codec checks lmax_log2 too; refmodel.validation re-exports it with the rest
    of its family (BlockSizeError, KError, ...)."""


class LmaxError(ParameterError):
    """lmax_log2 outside LMAX_LOG2_MIN..LMAX_LOG2_MAX (codec.zrle.check_lmax_log2 and
    refmodel.validation.check_lmax_log2 raise this one class)."""


class RangeError(GradblockError):
    """The quantiser range R is not a finite, positive float32 (a frame's h4 word). Here, in
    the lowest layer, because the encoders check R too; refmodel.quantiser re-exports it."""


class FrameError(GradblockError):
    """A ZRLE frame failed validation. `code` matches the RTL decoder's error code;
    `word` is the index (within the frame) of the word where the problem was found."""

    code = 0
    name = "FRAME_ERROR"

    def __init__(self, detail: str, word: int | None = None):
        self.detail = detail
        self.word = word
        at = f" at word {word}" if word is not None else ""
        super().__init__(f"{self.name}{at}: {detail}")


class DecodeArgumentError(GradblockError, TypeError):
    """A decoder was called with arguments outside its contract: words that are not a 1-D
    numpy uint32 array, an expected size that is not an integer in 0..2**32-1, a negative or
    non-integer start. Raised alike by every decoder (codec.zrle.check_decode_args)."""


def _err(code: int, name: str, doc: str):
    return type(name.title().replace("_", "") + "Error", (FrameError,),
                {"code": code, "name": name, "__doc__": doc})


BadMagicError = _err(1, "BAD_MAGIC", "h0 is not 0x5A524C45 ('ZRLE').")
BadVersionError = _err(2, "BAD_VERSION", "h1 bits 7..0 are not a supported version.")
BadLmaxError = _err(3, "BAD_LMAX", "LMAX_LOG2 outside 1..24, or reserved h1 bits 31..16 set.")
BadRangeError = _err(4, "BAD_RANGE", "h4 is not a finite, positive float32 range.")
LiteralRunTooLongError = _err(5, "LITERAL_RUN_TOO_LONG", "A token's L exceeds LMAX.")
ZeroLiteralError = _err(6, "ZERO_LITERAL", "A literal word is zero (zeros belong in runs).")
EmptyTokenError = _err(7, "EMPTY_TOKEN", "A token with z = 0 and L = 0.")
EarlyZeroLengthError = _err(8, "EARLY_ZERO_LENGTH", "L = 0 on a token that does not end the frame.")
SplitLiteralRunError = _err(9, "SPLIT_LITERAL_RUN",
                            "A token with z = 0 after a token whose L < LMAX (non-canonical).")
OverrunError = _err(10, "OVERRUN", "Tokens describe more than n elements.")
TruncatedError = _err(11, "TRUNCATED", "The frame ends before its header, tokens or trailer do.")
TokenCountMismatchError = _err(12, "TOKEN_COUNT_MISMATCH", "Trailer t0 differs from the tokens read.")
CrcMismatchError = _err(13, "CRC_MISMATCH", "Trailer t1 differs from the CRC-32 of the frame.")
SizeMismatchError = _err(14, "SIZE_MISMATCH", "Header n differs from the size the caller expects.")

ALL_ERRORS = (BadMagicError, BadVersionError, BadLmaxError, BadRangeError, LiteralRunTooLongError,
              ZeroLiteralError, EmptyTokenError, EarlyZeroLengthError, SplitLiteralRunError,
              OverrunError, TruncatedError, TokenCountMismatchError, CrcMismatchError,
              SizeMismatchError)
ERROR_BY_CODE = {e.code: e for e in ALL_ERRORS}
ERROR_NAMES = {e.code: e.name for e in ALL_ERRORS}
