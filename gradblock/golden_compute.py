"""Old home of `gradblock.golden.compute` (issue 20 item 5: the golden package). Everything it
had is re-exported; `generate_golden` keeps its old signature and its whole set (the backend
registry's kernel and the real-gradient cases): it is `gradblock.golden_cli.generate`."""
from gradblock.golden.compute import (compute_case, compute_momentum_case,  # noqa: F401
                                      derive_flags, feedback_flags, momentum_flags)

from .golden_cli import generate as generate_golden  # noqa: F401
