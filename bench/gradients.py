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

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradblock.codec.errors import UsageError

from . import workloads as W

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530


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


def fashion_mnist_images(n: int, root: Path = FASHION_MNIST_DIR) -> np.ndarray:
    """The first n training images, uint8 (n, 28, 28), read from the IDX file."""
    with gzip.open(root / "train-images-idx3-ubyte.gz", "rb") as f:
        header = np.frombuffer(f.read(16), dtype=">u4")
        if header[0] != 2051:
            raise ValueError(f"not an IDX image file (magic {header[0]})")
        rows, cols = int(header[2]), int(header[3])
        data = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8)
    return data.reshape(-1, rows, cols)


def fashion_mnist_labels(n: int, root: Path = FASHION_MNIST_DIR) -> np.ndarray:
    with gzip.open(root / "train-labels-idx1-ubyte.gz", "rb") as f:
        if np.frombuffer(f.read(8), dtype=">u4")[0] != 2049:
            raise ValueError("not an IDX label file")
        return np.frombuffer(f.read(n), dtype=np.uint8).astype(np.int64)


def _torch_modules():
    """ResNet modules built from the configuration in bench.workloads (imports torch lazily)."""
    import torch
    from torch import nn
    import torch.nn.functional as F

    class Bottleneck(nn.Module):
        def __init__(self, c_in, width, stride, downsample):
            super().__init__()
            c_out = width * W.RESNET50_EXPANSION
            self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, c_out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(c_out)
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                            nn.BatchNorm2d(c_out)) if downsample else None

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = F.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return F.relu(out + (self.downsample(x) if self.downsample is not None else x))

    class ResNet50(nn.Module):
        def __init__(self, in_channels=3, num_classes=W.RESNET50_CLASSES):
            super().__init__()
            stem = W.RESNET50_STEM_CHANNELS
            self.conv1 = nn.Conv2d(in_channels, stem, W.RESNET50_STEM_KERNEL, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(stem)
            c_in = stem
            for s, (width, blocks, stride) in enumerate(W.RESNET50_STAGES, start=1):
                layers = []
                for b in range(blocks):
                    layers.append(Bottleneck(c_in, width, stride if b == 0 else 1, b == 0))
                    c_in = width * W.RESNET50_EXPANSION
                setattr(self, f"layer{s}", nn.Sequential(*layers))
            self.fc = nn.Linear(c_in, num_classes)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
            for s in range(1, len(W.RESNET50_STAGES) + 1):
                x = getattr(self, f"layer{s}")(x)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    class BasicBlock(nn.Module):
        def __init__(self, c_in, c_out, stride, shortcut):
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c_out)
            self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c_out)
            self.stride, self.pad = stride, c_out - c_in
            reshape = stride != 1 or c_in != c_out
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                          nn.BatchNorm2d(c_out)) if reshape and shortcut == "B" else None

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if self.shortcut is not None:
                skip = self.shortcut(x)
            elif self.stride != 1 or self.pad:      # option A: subsample, zero-pad channels
                skip = F.pad(x[:, :, ::self.stride, ::self.stride],
                             (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
            else:
                skip = x
            return F.relu(out + skip)

    class ResNet20(nn.Module):
        def __init__(self, shortcut="A", in_channels=3, num_classes=W.RESNET20_CLASSES):
            super().__init__()
            stem = W.RESNET20_STEM_CHANNELS
            self.conv1 = nn.Conv2d(in_channels, stem, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(stem)
            c_in = stem
            for s, (c_out, blocks, stride) in enumerate(W.RESNET20_STAGES, start=1):
                layers = []
                for b in range(blocks):
                    layers.append(BasicBlock(c_in, c_out, stride if b == 0 else 1, shortcut))
                    c_in = c_out
                setattr(self, f"layer{s}", nn.Sequential(*layers))
            self.fc = nn.Linear(c_in, num_classes)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            for s in range(1, len(W.RESNET20_STAGES) + 1):
                x = getattr(self, f"layer{s}")(x)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    return {"resnet50": ResNet50, "resnet20": ResNet20}


def torch_model(name: str):
    """The torch module for a workload name; its parameters match bench.workloads exactly."""
    return _torch_modules()[name]()


def real_gradients(name: str, batch: int, size: int, seed: int = 0) -> list[np.ndarray]:
    """One forward/backward pass on `batch` Fashion-MNIST images resized to size x size
    (cross-entropy loss)."""
    import torch
    import torch.nn.functional as F

    arch = W.architecture(name)
    torch.manual_seed(seed)
    model = torch_model(name)
    shapes = [tuple(p.shape) for p in model.parameters()]
    if shapes != arch.shapes:
        raise AssertionError(f"torch {name} parameter shapes differ from bench.workloads")
    images = fashion_mnist_images(batch).astype(np.float32) / 255.0
    x = torch.from_numpy((images - FASHION_MNIST_MEAN) / FASHION_MNIST_STD)
    x = F.interpolate(x.unsqueeze(1), size=(size, size), mode="bilinear", align_corners=False)
    x = x.expand(-1, 3, -1, -1).contiguous()
    y = torch.from_numpy(fashion_mnist_labels(batch) % model.fc.out_features)
    model.train()
    F.cross_entropy(model(x), y).backward()
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
        if not why_not_real and not (FASHION_MNIST_DIR / "train-images-idx3-ubyte.gz").exists():
            why_not_real = f"no Fashion-MNIST at {FASHION_MNIST_DIR}"
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
