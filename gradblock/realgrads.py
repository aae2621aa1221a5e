"""Real per-layer gradients for the golden vectors: a small CNN trained a few steps on real
data (CPU, seeded) with gradblock's own compress step as its optimiser, one worker.

Each step, every parameter's gradient goes through compress_layer with that parameter's
error-feedback residual; the payload is averaged (docs/spec.md §1.3, N = 1) and applied with
global-momentum SGD in float32 (§5). The captured (gradient, residual_in) pairs are therefore
exactly what a deployed layer would feed the hardware at that step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gradblock.golden.cases import CaseSpec
from gradblock.refmodel.quantiser import QuantConfig, average

REAL_SOURCES = ("digits", "fashion-mnist")
REAL_MODEL = "conv64"
REAL_RANGE = 1.0            # gradients of this model stay well inside +-1
REAL_K = 0.25               # a quarter of each layer's blocks per step
QUICK_PARAMS = ("conv2.weight", "fc.bias")
QUICK_CAPTURE_STEPS = (1, 2)
FULL_CAPTURE_STEPS = (1, 2, 5)


@dataclass(frozen=True)
class RealGradConfig:
    source: str = "digits"
    data_dir: str | None = None
    seed: int = 0
    capture_steps: tuple[int, ...] = FULL_CAPTURE_STEPS
    params: tuple[str, ...] | None = None      # None: every parameter
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    R: float = REAL_RANGE
    k: float | int = REAL_K

    @classmethod
    def for_golden(cls, source: str, seed: int, quick: bool, data_dir: str | None = None):
        if quick:
            return cls(source, data_dir, seed, QUICK_CAPTURE_STEPS, QUICK_PARAMS)
        return cls(source, data_dir, seed, FULL_CAPTURE_STEPS, None)


@dataclass
class RealLayerStep:
    param: str                # parameter name, e.g. "conv4.weight"
    layer_id: int             # position in parameter order (the frame's layer id)
    step: int
    grad: np.ndarray          # float32, the parameter's shape
    residual_in: np.ndarray   # int32, the residual carried into this step


@dataclass
class RealGradients:
    config: RealGradConfig
    model: str
    dataset: str
    steps: list[RealLayerStep]
    losses: list[float] = field(default_factory=list)
    torch_version: str = ""


def capture_real_gradients(cfg: RealGradConfig, compress_layer) -> RealGradients:
    """Train `REAL_MODEL` for max(capture_steps) + 1 steps and return the captured layers.

    `compress_layer` is refmodel.compress.compress_layer or a bit-exact fast equivalent."""
    import torch
    import torch.nn.functional as F

    from gradblock.shim.setup.data import load_dataset
    from gradblock.shim.setup.models import build_model

    if cfg.source not in REAL_SOURCES:
        raise ValueError(f"real gradient source must be one of {', '.join(REAL_SOURCES)}, "
                         f"got {cfg.source!r}")
    if not cfg.capture_steps or min(cfg.capture_steps) < 0:
        raise ValueError(f"capture steps must be non-negative, got {cfg.capture_steps}")
    ds = load_dataset(cfg.source, cfg.data_dir)
    model = build_model(REAL_MODEL, ds.num_classes, ds.in_shape, seed=cfg.seed)
    names = [name for name, _ in model.named_parameters()]
    wanted = set(names if cfg.params is None else cfg.params)
    unknown = wanted - set(names)
    if unknown:
        raise ValueError(f"{REAL_MODEL} has no parameter(s) {sorted(unknown)}; it has {names}")

    qcfg = QuantConfig.from_range(cfg.R)
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(ds.x_train.shape[0])
    residual = {n: np.zeros(tuple(p.shape), np.int32) for n, p in model.named_parameters()}
    velocity = {n: np.zeros(tuple(p.shape), np.float32) for n, p in model.named_parameters()}
    m32, lr32 = np.float32(cfg.momentum), np.float32(cfg.lr)
    captured, losses = [], []
    for step in range(max(cfg.capture_steps) + 1):
        idx = order[(step * cfg.batch_size + np.arange(cfg.batch_size)) % order.size]
        x = torch.from_numpy(ds.x_train[idx])
        y = torch.from_numpy(ds.y_train[idx])
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        losses.append(float(loss.detach()))
        with torch.no_grad():
            for layer_id, (name, p) in enumerate(model.named_parameters()):
                grad = p.grad.detach().numpy().astype(np.float32, copy=True)
                if step in cfg.capture_steps and name in wanted:
                    captured.append(RealLayerStep(name, layer_id, step, grad,
                                                  residual[name].copy()))
                st = compress_layer(grad, residual[name], R=qcfg, k=cfg.k, layer_id=layer_id,
                                    where=name)
                residual[name] = st.residual_out
                update = average(st.payload, 1, qcfg)
                # global-momentum SGD, one float32 operation at a time (spec §5)
                v = velocity[name] * m32
                v = v + update
                velocity[name] = v
                w = p.detach().numpy()
                p.copy_(torch.from_numpy(w - lr32 * v))
    return RealGradients(cfg, REAL_MODEL, ds.name, captured, losses, torch.__version__)


def real_specs(source: str, seed: int, quick: bool, compress_layer,
               data_dir: str | None = None) -> tuple[list[CaseSpec], dict]:
    """The real-gradient golden cases: each captured (gradient, residual) of a short training
    run, chained step to step, plus the last step's layers ranked by the L2 norm."""
    cfg = RealGradConfig.for_golden(source, seed, quick, data_dir)
    rg = capture_real_gradients(cfg, compress_layer)
    specs, names = [], set()
    l2 = []
    for cap in rg.steps:
        stem = "real_" + cap.param.replace(".", "_")
        name = f"{stem}_s{cap.step}"
        prev = f"{stem}_s{cap.step - 1}"
        specs.append(CaseSpec(
            name, f"{rg.model} {cap.param} {tuple(cap.grad.shape)} gradient at training step "
            f"{cap.step} on {rg.dataset}, error-feedback residual carried from training",
            cap.grad, cap.residual_in, R=cfg.R, k=cfg.k, layer_id=cap.layer_id, kind="real",
            residual_from=prev if prev in names else None,
            source={"dataset": rg.dataset, "model": rg.model, "param": cap.param,
                    "step": cap.step, "seed": seed}))
        names.add(name)
        if cap.step == rg.steps[-1].step:
            # the last step's gradients ranked by the L2 norm; the residual is an input here
            # (it came from the L1 run), so the case stands alone
            l2.append(CaseSpec(
                f"{name}_l2", f"{specs[-1].description}; blocks ranked by the L2 norm",
                cap.grad, cap.residual_in, R=cfg.R, k=cfg.k, layer_id=cap.layer_id, kind="real",
                source=dict(specs[-1].source), norm="l2"))
    specs += l2
    info = {"source": source, "dataset": rg.dataset, "model": rg.model, "torch": rg.torch_version,
            "losses": [round(v, 6) for v in rg.losses]}
    return specs, info


