"""Models for the torch shim, built by name with a deterministic initialisation.

* `lenet5`     LeNet-style CNN for 1x28x28 (Fashion-MNIST / MNIST)
* `digits-cnn` small CNN for the 1x8x8 scikit-learn digits
* `resnet20`   ResNet-20 (He et al. 2016, option-A shortcuts) for 3x32x32 CIFAR-10
* `resnet50`   ResNet-50 (He et al. 2016, bottleneck blocks, 1000 classes by default): the
               benchmarks' large workload (its gradients, not trained here), any input >= 32x32
* `conv64`     plain 4-conv CNN ending in a 64->64 3x3 conv: real-sized conv layers for the
               golden vectors, any input size
* `gru`        one-layer GRU (128 units) reading an image row by row (Fashion-MNIST: 28 steps
               of 28 values), linear classifier on the last hidden state
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import ConfigError

MODELS = ("lenet5", "digits-cnn", "resnet20", "resnet50", "conv64", "gru")
ALIASES = {"lenet": "lenet5", "lenet5": "lenet5", "digits-cnn": "digits-cnn",
           "digits_cnn": "digits-cnn", "resnet20": "resnet20", "resnet-20": "resnet20",
           "resnet50": "resnet50", "resnet-50": "resnet50",
           "conv64": "conv64", "gru": "gru"}
DEFAULT_MODEL = {"fashion-mnist": "lenet5", "mnist": "lenet5", "digits": "digits-cnn",
                 "cifar10": "resnet20"}


def _check_in_shape(in_shape, min_hw: int, model: str) -> tuple[int, int, int]:
    try:
        c, h, w = (int(d) for d in in_shape)
    except (TypeError, ValueError):
        raise ConfigError(f"{model}: in_shape must be (C, H, W), got {in_shape!r}") from None
    if c < 1 or h < min_hw or w < min_hw:
        raise ConfigError(f"{model}: input {c}x{h}x{w} too small (needs C >= 1, H, W >= {min_hw})")
    return c, h, w


class LeNet5(nn.Module):
    """conv5x5(6, pad 2) - pool - conv5x5(16) - pool - fc120 - fc84 - fc(classes), ReLU."""

    def __init__(self, num_classes: int = 10, in_shape=(1, 28, 28)):
        super().__init__()
        c, h, w = _check_in_shape(in_shape, 12, "lenet5")
        self.conv1 = nn.Conv2d(c, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        fh, fw = (h // 2 - 4) // 2, (w // 2 - 4) // 2
        self.fc1 = nn.Linear(16 * fh * fw, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class DigitsCNN(nn.Module):
    """conv3x3(16) - conv3x3(32) - pool - fc64 - fc(classes), ReLU: a few seconds per epoch."""

    def __init__(self, num_classes: int = 10, in_shape=(1, 8, 8)):
        super().__init__()
        c, h, w = _check_in_shape(in_shape, 2, "digits-cnn")
        self.conv1 = nn.Conv2d(c, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * (h // 2) * (w // 2), 64)
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class Conv64Net(nn.Module):
    """conv3x3 8 - conv3x3 16 - pool - conv3x3 64 - conv3x3 64 - global avg - fc(classes).

    Weight shapes 8xCx3x3, 16x8x3x3, 64x16x3x3, 64x64x3x3 and (classes)x64: the layer sizes
    of a real conv net, in a model small enough to train a few steps on a CPU."""

    def __init__(self, num_classes: int = 10, in_shape=(1, 8, 8)):
        super().__init__()
        c, _, _ = _check_in_shape(in_shape, 2, "conv64")
        self.conv1 = nn.Conv2d(c, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.conv3 = nn.Conv2d(16, 64, 3, padding=1)
        self.conv4 = nn.Conv2d(64, 64, 3, padding=1)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.conv4(F.relu(self.conv3(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers; option-A shortcut (stride-2 subsample, zero-padded channels)."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.stride, self.pad = stride, c_out - c_in

    def shortcut(self, x):
        if self.stride != 1:
            x = x[:, :, ::self.stride, ::self.stride]
        if self.pad:
            x = F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return x

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """ResNet-20 for CIFAR: conv16 - 3 stages of 3 blocks (16, 32, 64 channels) - avg - fc."""

    def __init__(self, num_classes: int = 10, in_shape=(3, 32, 32), blocks_per_stage: int = 3):
        super().__init__()
        c, _, _ = _check_in_shape(in_shape, 4, "resnet20")
        self.conv1 = nn.Conv2d(c, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, c_in = [], 16
        for c_out, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(blocks_per_stage):
                layers.append(BasicBlock(c_in, c_out, stride if i == 0 else 1))
                c_in = c_out
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x):
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Bottleneck(nn.Module):
    """1x1 - 3x3 (stride) - 1x1 conv-BN, 4x expansion; a projection shortcut on the first
    block of a stage."""

    def __init__(self, c_in: int, width: int, stride: int, project: bool):
        super().__init__()
        c_out = width * RESNET50_EXPANSION
        self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                        nn.BatchNorm2d(c_out)) if project else None

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


RESNET50_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))   # (width, blocks, stride)
RESNET50_EXPANSION = 4


class ResNet50(nn.Module):
    """ResNet-50: 7x7/2 conv64 - max pool - 4 bottleneck stages - avg - fc (25,557,032
    parameters at 3 channels, 1000 classes). bench.workloads describes the same shapes."""

    def __init__(self, num_classes: int = 1000, in_shape=(3, 224, 224)):
        super().__init__()
        c, _, _ = _check_in_shape(in_shape, 32, "resnet50")
        self.conv1 = nn.Conv2d(c, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        c_in = 64
        for s, (width, blocks, stride) in enumerate(RESNET50_STAGES, start=1):
            stage = []
            for b in range(blocks):
                stage.append(Bottleneck(c_in, width, stride if b == 0 else 1, b == 0))
                c_in = width * RESNET50_EXPANSION
            setattr(self, f"layer{s}", nn.Sequential(*stage))
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        for s in range(1, len(RESNET50_STAGES) + 1):
            x = getattr(self, f"layer{s}")(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class GRUClassifier(nn.Module):
    """Row-sequential GRU: a C x H x W image is read as H steps of C*W values (Fashion-MNIST:
    28 steps of 28 pixels), one GRU layer of `hidden` units, a linear classifier on the last
    hidden state. Trainable tensors, in order: gru.weight_ih_l0 (3*hidden, C*W),
    gru.weight_hh_l0 (3*hidden, hidden), gru.bias_ih_l0, gru.bias_hh_l0 (3*hidden each),
    fc.weight, fc.bias. The gates are stacked in torch's order (reset, update, new), so coarse's
    default block of a 2-D tensor, one row, is one gate unit's input (or recurrent) weights,
    contiguous in memory. hidden = 128: 61,962 parameters (LeNet-5: 61,706)."""

    def __init__(self, num_classes: int = 10, in_shape=(1, 28, 28), hidden: int = 128):
        super().__init__()
        c, _, w = _check_in_shape(in_shape, 1, "gru")
        self.gru = nn.GRU(c * w, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x):
        n, c, h, w = x.shape
        seq = x.permute(0, 2, 1, 3).reshape(n, h, c * w)      # row r -> step r
        _, last = self.gru(seq)
        return self.fc(last[-1])


_CLASSES = {"lenet5": LeNet5, "digits-cnn": DigitsCNN, "resnet20": ResNet20, "resnet50": ResNet50,
            "conv64": Conv64Net, "gru": GRUClassifier}


def canonical_model_name(name: str) -> str:
    key = name.strip().lower()
    if key not in ALIASES:
        raise ConfigError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    return ALIASES[key]


def build_model(name: str, num_classes: int = 10, in_shape=(1, 28, 28), seed: int | None = 0
                ) -> nn.Module:
    """Build a model by name. With a seed the initial weights depend only on (name, shapes,
    seed); torch's global RNG is left as it was."""
    cls = _CLASSES[canonical_model_name(name)]
    if int(num_classes) < 1:
        raise ConfigError(f"num_classes must be >= 1, got {num_classes}")
    if seed is None:
        return cls(int(num_classes), tuple(in_shape))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return cls(int(num_classes), tuple(in_shape))
