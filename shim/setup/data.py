"""Dataset loaders for the torch shim: Fashion-MNIST / MNIST (IDX), CIFAR-10 (python pickle
batches) and scikit-learn's bundled 8x8 digits.

Every loader returns a `Dataset` whose arrays are tensor-ready: x float32 NCHW, normalised
per channel with the constants below, y int64. Nothing is downloaded: files must already be
on disk, and a missing or malformed file raises `DatasetError` naming the file.
"""
from __future__ import annotations

import gzip
import pickle
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradblock.codec.errors import GradblockError

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_INSTALL = "apt-get install dataset-fashion-mnist"

# Per-channel mean / std of the training pixels scaled to [0, 1].
NORMALISATION = {
    "fashion-mnist": ((0.2860,), (0.3530,)),
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "digits": ((0.3053,), (0.3760,)),
}
PIXEL_MAX = {"fashion-mnist": 255.0, "mnist": 255.0, "cifar10": 255.0, "digits": 16.0}

FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")

ALIASES = {"fashion-mnist": "fashion-mnist", "fashion_mnist": "fashion-mnist",
           "fmnist": "fashion-mnist", "mnist": "mnist", "cifar10": "cifar10",
           "cifar-10": "cifar10", "digits": "digits"}
DATASETS = ("digits", "fashion-mnist", "mnist", "cifar10")

# The digits split is fixed: every 5th sample (index % 5 == 4) is a test sample.
DIGITS_TEST_EVERY = 5


class DatasetError(GradblockError):
    """A dataset is missing or its files are malformed; the message names the file."""


@dataclass
class Dataset:
    name: str
    x_train: np.ndarray      # float32 (N, C, H, W), normalised
    y_train: np.ndarray      # int64 (N,)
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    classes: tuple[str, ...]

    @property
    def in_shape(self) -> tuple[int, int, int]:
        return tuple(int(d) for d in self.x_train.shape[1:])

    @property
    def train(self) -> tuple[np.ndarray, np.ndarray]:
        return self.x_train, self.y_train

    @property
    def test(self) -> tuple[np.ndarray, np.ndarray]:
        return self.x_test, self.y_test


# ---------------------------------------------------------------------------------- IDX files

# IDX type byte -> big-endian numpy dtype
IDX_DTYPES = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"),
              0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def _read_bytes(path: Path) -> bytes:
    """File contents, transparently gunzipped when the name ends in .gz."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise DatasetError(f"{path}: corrupt or truncated gzip file ({e})") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror or e})") from None


def parse_idx(data: bytes, source: str = "<bytes>") -> np.ndarray:
    """Decode an IDX blob: magic 0x00 0x00 <type> <ndim>, ndim big-endian uint32 dims, data."""
    if len(data) < 4:
        raise DatasetError(f"{source}: {len(data)} bytes, too short for an IDX header")
    if data[0] != 0 or data[1] != 0 or data[2] not in IDX_DTYPES:
        raise DatasetError(f"{source}: bad IDX magic {data[:4].hex()} "
                           f"(expected 0000 then a type byte in "
                           f"{', '.join(f'{t:02x}' for t in IDX_DTYPES)})")
    dtype, ndim = IDX_DTYPES[data[2]], data[3]
    if ndim == 0:
        raise DatasetError(f"{source}: IDX header declares 0 dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DatasetError(f"{source}: truncated IDX header ({len(data)} bytes, "
                           f"{ndim} dimensions need {header})")
    dims = tuple(int(d) for d in np.frombuffer(data, ">u4", ndim, 4))
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "has trailing bytes"
        raise DatasetError(f"{source}: IDX file {what}: dims {dims} of {dtype.itemsize}-byte "
                           f"items need {expected} bytes, found {len(data)}")
    return np.frombuffer(data, dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def read_idx(path: str | Path) -> np.ndarray:
    path = Path(path)
    return parse_idx(_read_bytes(path), str(path))


# MNIST-family file stems; some mirrors use '.' instead of the second '-'.
IDX_STEMS = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
             "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}


def _find_idx(data_dir: Path, stem: str) -> Path | None:
    dotted = stem.replace("-idx", ".idx", 1)
    for name in (stem, stem + ".gz", dotted, dotted + ".gz"):
        if (data_dir / name).is_file():
            return data_dir / name
    return None


def load_idx_dataset(name: str, data_dir: str | Path, install_hint: str = "") -> Dataset:
    """MNIST-format dataset (MNIST, Fashion-MNIST) from the four IDX files in `data_dir`."""
    data_dir = Path(data_dir)
    hint = f"; install it with `{install_hint}` or pass --data-dir" if install_hint else \
        "; pass --data-dir pointing at the directory that holds the IDX files"
    if not data_dir.is_dir():
        raise DatasetError(f"{name}: data directory {data_dir} does not exist{hint}")
    paths = {}
    for key, stem in IDX_STEMS.items():
        p = _find_idx(data_dir, stem)
        if p is None:
            raise DatasetError(f"{name}: missing {data_dir / stem}[.gz]{hint}")
        paths[key] = p
    parts = {key: read_idx(p) for key, p in paths.items()}
    splits = []
    for split in ("train", "test"):
        images, labels = parts[f"{split}_images"], parts[f"{split}_labels"]
        ip, lp = paths[f"{split}_images"], paths[f"{split}_labels"]
        if images.ndim != 3 or images.dtype != np.uint8:
            raise DatasetError(f"{ip}: expected uint8 images (N, H, W), got "
                               f"{images.dtype} {images.shape}")
        if labels.ndim != 1 or labels.dtype != np.uint8:
            raise DatasetError(f"{lp}: expected uint8 labels (N,), got {labels.dtype} {labels.shape}")
        if images.shape[0] != labels.shape[0]:
            raise DatasetError(f"{name} {split}: {images.shape[0]} images in {ip.name} but "
                               f"{labels.shape[0]} labels in {lp.name}")
        if labels.size and labels.max() >= 10:
            raise DatasetError(f"{lp}: label {int(labels.max())} outside 0..9")
        splits.append((normalise(images[:, None], name), labels.astype(np.int64)))
    (xtr, ytr), (xte, yte) = splits
    classes = FASHION_MNIST_CLASSES if name == "fashion-mnist" else tuple(str(d) for d in range(10))
    return Dataset(name, xtr, ytr, xte, yte, 10, classes)


# ---------------------------------------------------------------------------------- CIFAR-10

CIFAR_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR_TEST_BATCH = "test_batch"


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    # The batches are pickles of plain dicts of bytes/lists/ndarrays from the user's own disk.
    try:
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror or e})") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            ImportError, IndexError) as e:
        raise DatasetError(f"{path}: not a CIFAR-10 python batch ({type(e).__name__}: {e})") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise DatasetError(f"{path}: not a CIFAR-10 python batch (no b'data' / b'labels' keys)")
    data = np.asarray(batch[b"data"])
    labels = np.asarray(batch[b"labels"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DatasetError(f"{path}: data is {data.dtype} {data.shape}, expected uint8 (N, 3072)")
    if labels.ndim != 1 or labels.shape[0] != data.shape[0]:
        raise DatasetError(f"{path}: {labels.shape} labels for {data.shape[0]} images")
    if labels.size and (labels.min() < 0 or labels.max() >= 10):
        raise DatasetError(f"{path}: labels outside 0..9")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def load_cifar10(data_dir: str | Path) -> Dataset:
    """CIFAR-10 'python version': data_batch_1..5 and test_batch in `data_dir` (or in its
    cifar-10-batches-py/ subdirectory)."""
    if data_dir is None:
        raise DatasetError("cifar10: no bundled copy; pass --data-dir pointing at the extracted "
                           "cifar-10-batches-py directory (data_batch_1..5, test_batch)")
    data_dir = Path(data_dir)
    if (data_dir / "cifar-10-batches-py").is_dir():
        data_dir = data_dir / "cifar-10-batches-py"
    if not data_dir.is_dir():
        raise DatasetError(f"cifar10: data directory {data_dir} does not exist")
    for name in CIFAR_TRAIN_BATCHES + (CIFAR_TEST_BATCH,):
        if not (data_dir / name).is_file():
            raise DatasetError(f"cifar10: missing {data_dir / name} (expected the python-pickle "
                               f"batches of cifar-10-python.tar.gz)")
    train = [_cifar_batch(data_dir / b) for b in CIFAR_TRAIN_BATCHES]
    xte, yte = _cifar_batch(data_dir / CIFAR_TEST_BATCH)
    xtr = np.concatenate([x for x, _ in train])
    ytr = np.concatenate([y for _, y in train])
    return Dataset("cifar10", normalise(xtr, "cifar10"), ytr, normalise(xte, "cifar10"), yte,
                   10, CIFAR10_CLASSES)


# ---------------------------------------------------------------------------------- digits

def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) 0..16, labels) of scikit-learn's digits. The bundled CSV is read
    directly when it is where scikit-learn keeps it: importing sklearn.datasets costs seconds."""
    import importlib.util
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise DatasetError("digits: needs scikit-learn (pip install scikit-learn)")
    csv = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
    if csv.is_file():
        table = np.loadtxt(csv, delimiter=",", dtype=np.int64)
        if table.ndim != 2 or table.shape[1] != 65 or table.min() < 0 or table[:, :64].max() > 16:
            raise DatasetError(f"{csv}: not scikit-learn's digits table (shape {table.shape})")
        return table[:, :64].reshape(-1, 8, 8), table[:, 64]
    from sklearn.datasets import load_digits
    d = load_digits()
    return np.asarray(d.images), np.asarray(d.target)


def load_digits_dataset() -> Dataset:
    """scikit-learn's bundled 8x8 digits (1797 images, pixels 0..16): a fixed split with every
    DIGITS_TEST_EVERY-th sample in the test set (1438 train, 359 test)."""
    images, labels = _digits_arrays()
    labels = labels.astype(np.int64)
    is_test = np.arange(labels.size) % DIGITS_TEST_EVERY == DIGITS_TEST_EVERY - 1
    x = normalise(images[:, None], "digits")
    return Dataset("digits", x[~is_test], labels[~is_test], x[is_test], labels[is_test], 10,
                   tuple(str(i) for i in range(10)))


# ---------------------------------------------------------------------------------- common

def normalise(pixels: np.ndarray, name: str) -> np.ndarray:
    """Raw pixels (N, C, H, W) -> float32 ((p / PIXEL_MAX) - mean) / std per channel."""
    mean, std = (np.asarray(v, dtype=np.float32).reshape(1, -1, 1, 1) for v in NORMALISATION[name])
    x = pixels.astype(np.float32) / np.float32(PIXEL_MAX[name])
    return np.ascontiguousarray((x - mean) / std, dtype=np.float32)


def canonical_name(name: str) -> str:
    key = name.strip().lower()
    if key not in ALIASES:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    return ALIASES[key]


def load_dataset(name: str, data_dir: str | Path | None = None) -> Dataset:
    """Load a dataset by name. `data_dir` overrides the default location (Fashion-MNIST) and
    is required for MNIST and CIFAR-10, which are not bundled."""
    name = canonical_name(name)
    if name == "digits":
        if data_dir is not None:
            raise DatasetError("digits is bundled with scikit-learn and takes no --data-dir")
        return load_digits_dataset()
    if name == "fashion-mnist":
        if data_dir is None:
            return load_idx_dataset(name, FASHION_MNIST_DIR, FASHION_MNIST_INSTALL)
        return load_idx_dataset(name, data_dir)
    if name == "mnist":
        if data_dir is None:
            raise DatasetError("mnist: no bundled copy; pass --data-dir pointing at the MNIST IDX "
                               "files (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
                               "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz])")
        return load_idx_dataset(name, data_dir)
    return load_cifar10(data_dir)
