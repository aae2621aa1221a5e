"""Benchmark workloads: the parameter tensors of ResNet-50 and ResNet-20, computed from their
architecture definitions (stage / block configuration), in parameter order.

torchvision is not available, so the shapes are derived here from the published configurations
(He et al. 2016): ResNet-50 is the ImageNet bottleneck network [3, 4, 6, 3] (25,557,032
parameters), ResNet-20 the CIFAR network with three stages of three basic blocks (269,722
parameters with the parameter-free "option A" shortcut, 272,474 with 1x1-conv "option B").
The same configuration constants drive the torch modules in `bench.gradients`, so the shapes
of real gradients are checked against these lists.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from gradblock.codec.errors import UsageError

# (bottleneck width, blocks, stride of the first block); output channels = width * expansion
RESNET50_STEM_CHANNELS = 64
RESNET50_STEM_KERNEL = 7
RESNET50_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
RESNET50_EXPANSION = 4
RESNET50_CLASSES = 1000
RESNET50_TOTAL = 25_557_032

# (channels, blocks, stride of the first block)
RESNET20_STEM_CHANNELS = 16
RESNET20_STAGES = ((16, 3, 1), (32, 3, 2), (64, 3, 2))
RESNET20_CLASSES = 10
RESNET20_TOTAL = {"A": 269_722, "B": 272_474}


@dataclass(frozen=True)
class Param:
    name: str
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return prod(self.shape)


@dataclass(frozen=True)
class Architecture:
    name: str
    params: tuple[Param, ...]
    expected_total: int     # the published parameter count, checked on construction

    @property
    def total(self) -> int:
        return sum(p.size for p in self.params)

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        return [p.shape for p in self.params]


def _conv(name: str, c_out: int, c_in: int, kernel: int) -> list[Param]:
    return [Param(f"{name}.weight", (c_out, c_in, kernel, kernel))]


def _bn(name: str, channels: int) -> list[Param]:
    return [Param(f"{name}.weight", (channels,)), Param(f"{name}.bias", (channels,))]


def _fc(name: str, c_out: int, c_in: int) -> list[Param]:
    return [Param(f"{name}.weight", (c_out, c_in)), Param(f"{name}.bias", (c_out,))]


def _checked(name: str, params: list[Param], expected: int) -> Architecture:
    arch = Architecture(name, tuple(params), expected)
    if arch.total != expected:
        raise AssertionError(f"{name}: computed {arch.total} parameters, expected {expected}")
    return arch


def resnet50(in_channels: int = 3, num_classes: int = RESNET50_CLASSES) -> Architecture:
    """ImageNet ResNet-50 (torchvision parameter order: conv, bn, then per bottleneck
    conv1/bn1, conv2/bn2, conv3/bn3, downsample conv/bn, then fc)."""
    stem = RESNET50_STEM_CHANNELS
    params = _conv("conv1", stem, in_channels, RESNET50_STEM_KERNEL) + _bn("bn1", stem)
    c_in = stem
    for s, (width, blocks, _stride) in enumerate(RESNET50_STAGES, start=1):
        c_out = width * RESNET50_EXPANSION
        for b in range(blocks):
            p = f"layer{s}.{b}"
            params += _conv(f"{p}.conv1", width, c_in, 1) + _bn(f"{p}.bn1", width)
            params += _conv(f"{p}.conv2", width, width, 3) + _bn(f"{p}.bn2", width)
            params += _conv(f"{p}.conv3", c_out, width, 1) + _bn(f"{p}.bn3", c_out)
            if b == 0:    # first block changes channels (and stride): projection shortcut
                params += _conv(f"{p}.downsample.0", c_out, c_in, 1) + _bn(f"{p}.downsample.1", c_out)
            c_in = c_out
    params += _fc("fc", num_classes, c_in)
    expected = RESNET50_TOTAL if (in_channels, num_classes) == (3, RESNET50_CLASSES) else sum(
        p.size for p in params)
    return _checked("ResNet-50", params, expected)


def resnet20(shortcut: str = "A", in_channels: int = 3,
             num_classes: int = RESNET20_CLASSES) -> Architecture:
    """CIFAR ResNet-20: 3x3 stem, three stages of three basic blocks (conv/bn, conv/bn).
    Shortcut "A" pads and subsamples (no parameters); "B" uses a 1x1 conv + bn projection
    where the shape changes."""
    if shortcut not in RESNET20_TOTAL:
        raise ValueError(f"shortcut must be 'A' or 'B', got {shortcut!r}")
    stem = RESNET20_STEM_CHANNELS
    params = _conv("conv1", stem, in_channels, 3) + _bn("bn1", stem)
    c_in = stem
    for s, (c_out, blocks, stride) in enumerate(RESNET20_STAGES, start=1):
        for b in range(blocks):
            p = f"layer{s}.{b}"
            params += _conv(f"{p}.conv1", c_out, c_in, 3) + _bn(f"{p}.bn1", c_out)
            params += _conv(f"{p}.conv2", c_out, c_out, 3) + _bn(f"{p}.bn2", c_out)
            if shortcut == "B" and b == 0 and (stride != 1 or c_in != c_out):
                params += _conv(f"{p}.shortcut.0", c_out, c_in, 1) + _bn(f"{p}.shortcut.1", c_out)
            c_in = c_out
    params += _fc("fc", num_classes, c_in)
    canonical = (in_channels, num_classes) == (3, RESNET20_CLASSES)
    expected = RESNET20_TOTAL[shortcut] if canonical else sum(p.size for p in params)
    return _checked(f"ResNet-20{'' if shortcut == 'A' else '-B'}", params, expected)


ARCHITECTURES = {"resnet20": resnet20, "resnet50": resnet50}


def architecture(name: str) -> Architecture:
    try:
        return ARCHITECTURES[name]()
    except KeyError:
        raise UsageError(f"unknown workload {name!r}; choose from {sorted(ARCHITECTURES)}") from None
