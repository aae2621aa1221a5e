"""Old home of `gradblock.golden.cases` (issue 20 item 5: the golden package). Its names are
re-exported; `real_specs`, which needs the trained models, now lives in gradblock.realgrads."""
from gradblock.golden.cases import (MOMENTUM_STAGES, CaseSpec, l2_specs,  # noqa: F401
                                    momentum_specs, synthetic_specs)

from .realgrads import real_specs  # noqa: F401
