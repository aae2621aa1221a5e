"""What every table needs: the run's settings, the workloads, and the reference compress step
of each workload (computed once and shared, so every table measures the same payloads)."""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from gradblock.refmodel.compress import LayerStep, compress_layer
from gradblock.refmodel.quantiser import QuantConfig

from .gradients import Workload
from .tables import failed, not_available


class Unavailable(Exception):
    """A row cannot be measured here; the message is the reason printed in the table."""


def optional_module(name: str):
    """Import a module another part of the project provides, or raise Unavailable saying why."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing = getattr(e, "name", None)
        if missing == name:
            raise Unavailable(f"{name} not present") from None
        raise Unavailable(f"{name} failed to import: {e}") from None


def require(module, *names: str):
    """The named attributes of a module, or Unavailable naming the first one missing."""
    out = []
    for n in names:
        if not hasattr(module, n):
            raise Unavailable(f"{module.__name__}.{n} not present")
        out.append(getattr(module, n))
    return out[0] if len(out) == 1 else tuple(out)


@dataclass
class Prepared:
    """One workload's reference step 2: residual from step 1 on the same gradient, so the timed
    step sees a nonzero residual as in training."""
    workload: Workload
    cfg: QuantConfig
    k: float | int
    residuals: list[np.ndarray]      # int32 residual entering the timed step
    steps: list[LayerStep]           # the reference result of the timed step

    @cached_property
    def payload_flat(self) -> np.ndarray:
        return np.concatenate([s.payload.reshape(-1) for s in self.steps])

    @cached_property
    def message(self) -> np.ndarray:
        return np.concatenate([s.frame for s in self.steps])

    @property
    def density(self) -> float:
        """Fraction of elements in the selected blocks."""
        sel = sum(_selected_elements(s) for s in self.steps)
        return sel / max(1, self.workload.n_params)

    def selected_elements(self) -> list[int]:
        return [_selected_elements(s) for s in self.steps]


def _selected_elements(step: LayerStep) -> int:
    lay = step.layout
    return int(sum(min(lay.block_size, lay.n - int(b) * lay.block_size) for b in step.selected))


@dataclass
class BenchContext:
    quick: bool
    reps: int
    warmup: int
    thread_counts: list[int]
    workloads: list[Workload]
    k: float | int                   # blocks per layer: a fraction of the layer's blocks, or a count
    R: float
    rtl: bool
    verbose: bool = True
    failures: list[str] = field(default_factory=list)
    _prepared: dict = field(default_factory=dict)

    def attempt(self, what: str, fn):
        """(fn(), None), or (None, the cell that replaces the row's numbers): 'not available'
        when a part of the project or a package is missing, 'failed' for anything else (a
        result that differs from the reference, an API that changed), which is also recorded
        so that the run exits non-zero."""
        try:
            return fn(), None
        except Unavailable as e:
            return None, not_available(str(e))
        except ImportError as e:
            return None, not_available(f"{e.name or e} not installed")
        except Exception as e:       # noqa: BLE001 - one broken row must not lose the others
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            self.failures.append(f"{what}: {msg}")
            self.log(f"FAILED {what}: {msg}")
            return None, failed(msg)

    @property
    def cfg(self) -> QuantConfig:
        return QuantConfig.from_range(self.R)

    def log(self, msg: str) -> None:
        if self.verbose:
            print(f"[bench] {msg}", file=sys.stderr, flush=True)

    def prepared(self, w: Workload) -> Prepared:
        if w.name not in self._prepared:
            cfg = self.cfg
            step1 = [compress_layer(g, None, R=cfg, k=self.k, layer_id=i)
                     for i, g in enumerate(w.grads)]
            residuals = [s.residual_out for s in step1]
            steps = [compress_layer(g, r, R=cfg, k=self.k, layer_id=i)
                     for i, (g, r) in enumerate(zip(w.grads, residuals))]
            self._prepared[w.name] = Prepared(w, cfg, self.k, residuals, steps)
        return self._prepared[w.name]
