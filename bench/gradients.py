"""Gradient values for the benchmark workloads.

"real": one forward/backward pass of the architecture (built in torch from the same
configuration as `bench.workloads`, random init with a fixed seed) on a batch of real
Fashion-MNIST images (Debian's `dataset-fashion-mnist`), padded to 32x32 and repeated to
3 channels. Gradients at initialisation are real in structure: per-filter magnitudes
differ by orders of magnitude and BN/bias gradients are small, which is what block selection
and the codecs see.

"synthetic": scaled normal values, used when torch or the data set is missing: per block
(filter / row) a log-normal scale times 1/sqrt(fan-in), so block norms are spread the way
real ones are.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradblock.codec.errors import UsageError

from . import workloads as W

@dataclass
class Workload:
    name: str                 # "ResNet-50", ...
    arch: W.Architecture
    grads: list[np.ndarray]   # float32, one per parameter, in parameter order
    source: str               # how the values were made, for the report

    @property
    def n_params(self) -> int:
        return self.arch.total

    @property
    def nbytes(self) -> int:
        return 4 * self.arch.total


def fashion_mnist_batch(n: int, side: int, channels: int = 3):
    """The first n Fashion-MNIST training images and labels as torch tensors, normalised the
    way training normalises them (shim.setup.data), resized to side x side (bilinear) and repeated
    to `channels` channels."""
    import torch
    import torch.nn.functional as F
    from gradblock.shim.setup.data import load_dataset
    ds = load_dataset("fashion-mnist")
    x = torch.from_numpy(ds.x_train[:n])
    x = F.interpolate(x, size=(side, side), mode="bilinear", align_corners=False)
    return x.expand(-1, channels, -1, -1).contiguous(), torch.from_numpy(ds.y_train[:n])


def fashion_mnist_available() -> str:
    """Why the Fashion-MNIST training set cannot be read here, or "" when it can."""
    from gradblock.shim.setup.data import FASHION_MNIST_DIR
    if not (FASHION_MNIST_DIR / "train-images-idx3-ubyte.gz").exists():
        return f"no Fashion-MNIST at {FASHION_MNIST_DIR}"
    return ""


def torch_model(name: str, seed: int | None = 0):
    """The torch module for a workload name (shim.setup.models builds it); its parameters match
    bench.workloads exactly (tests/test_bench.py)."""
    from gradblock.shim.setup.models import build_model
    arch = W.architecture(name)
    in_channels = arch.shapes[0][1]
    return build_model(name, num_classes=arch.shapes[-1][0], in_shape=(in_channels, 64, 64),
                       seed=seed)


def real_gradients(name: str, batch: int, size: int, seed: int = 0) -> list[np.ndarray]:
    """One forward/backward pass on `batch` Fashion-MNIST images resized to size x size
    (cross-entropy loss)."""
    import torch.nn.functional as F

    arch = W.architecture(name)
    model = torch_model(name, seed)
    shapes = [tuple(p.shape) for p in model.parameters()]
    if shapes != arch.shapes:
        raise AssertionError(f"torch {name} parameter shapes differ from bench.workloads")
    x, y = fashion_mnist_batch(batch, size)
    model.train()
    F.cross_entropy(model(x), y % model.fc.out_features).backward()
    return [p.grad.detach().numpy().astype(np.float32, copy=True) for p in model.parameters()]


def synthetic_gradients(arch: W.Architecture, seed: int = 0) -> list[np.ndarray]:
    """Scaled normal: per block a log-normal scale (sigma 1) times 1e-2 / sqrt(fan-in)."""
    rng = np.random.default_rng(seed)
    grads = []
    for p in arch.params:
        rows = p.shape[0] if len(p.shape) >= 2 else 1
        fan_in = p.size // rows if len(p.shape) >= 2 else p.size
        block_scale = rng.lognormal(0.0, 1.0, size=(rows, 1)).astype(np.float32)
        g = rng.standard_normal((rows, p.size // rows), dtype=np.float32)
        g *= block_scale * np.float32(1e-2 / np.sqrt(fan_in))
        grads.append(g.reshape(p.shape))
    return grads


# (batch, image side): ResNet-50 downsamples 32x, so 64x64 keeps every 3x3 tap of its last
# stage in use (at 32x32 the last stage is 1x1 and 8/9 of its 3x3 weights get zero gradient)
REAL_BATCH = {"resnet20": (64, 32), "resnet50": (8, 64)}


def make_workload(name: str, source: str = "auto", seed: int = 0) -> Workload:
    """source: "real", "synthetic", or "auto" (real if torch and the data set are present)."""
    arch = W.architecture(name)
    if source not in ("auto", "real", "synthetic"):
        raise UsageError(f"gradient source must be auto, real or synthetic, got {source!r}")
    why_not_real = ""
    if source in ("auto", "real"):
        try:
            import torch  # noqa: F401
        except ImportError:
            why_not_real = "torch not installed"
        if not why_not_real:
            why_not_real = fashion_mnist_available()
        if why_not_real and source == "real":
            raise RuntimeError(f"real gradients unavailable: {why_not_real}")
    if source != "synthetic" and not why_not_real:
        batch, size = REAL_BATCH[name]
        grads = real_gradients(name, batch, size, seed)
        desc = (f"real: one backward pass at init on {batch} Fashion-MNIST images "
                f"({size}x{size}, 3 channels)")
    else:
        grads = synthetic_gradients(arch, seed)
        desc = "synthetic: scaled normal, log-normal per-block scale" + (
            f" ({why_not_real})" if why_not_real else "")
    return Workload(arch.name, arch, grads, desc)
