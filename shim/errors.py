"""The training shim's named errors.

Library code raises these (never `SystemExit`); only the CLI entry functions
(`train_main`, `validate_main`) turn them into one line on stderr and exit status 2.
Each is a `GradblockError`, so a `ValueError` too, so callers that caught `ValueError` before keep working.
"""
from __future__ import annotations

from gradblock.codec.errors import GradblockError


class TrainingError(GradblockError):
    """Base class: a run that cannot start or continue for a reason the user can fix."""


class ConfigError(TrainingError):
    """A setting that cannot work: out of range, too few samples for the workers, --ddp
    outside torchrun, a device torch does not see, --workers not the torchrun world size."""


class CheckpointError(TrainingError):
    """A checkpoint is missing, unreadable, malformed (the message names the field), or
    belongs to a different run configuration."""
