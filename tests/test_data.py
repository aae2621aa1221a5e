"""shim/setup/data.py loaders (tiny synthetic IDX / CIFAR files written here) and shim/setup/models.py."""
from __future__ import annotations

import gzip
import pickle
import struct

import numpy as np
import pytest

from gradblock.shim.setup import data as D


def idx_bytes(arr: np.ndarray, type_byte: int = 0x08) -> bytes:
    arr = np.asarray(arr)
    header = bytes([0, 0, type_byte, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.astype(D.IDX_DTYPES[type_byte]).tobytes()


def write_mnist_dir(root, n_train=12, n_test=5, gz=True, dotted=False, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {"train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
              "train_labels": rng.integers(0, 10, n_train, dtype=np.uint8),
              "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
              "test_labels": rng.integers(0, 10, n_test, dtype=np.uint8)}
    for key, arr in arrays.items():
        stem = D.IDX_STEMS[key]
        if dotted:
            stem = stem.replace("-idx", ".idx", 1)
        blob = idx_bytes(arr)
        if gz:
            (root / (stem + ".gz")).write_bytes(gzip.compress(blob))
        else:
            (root / stem).write_bytes(blob)
    return arrays


# ------------------------------------------------------------------------------ IDX


@pytest.mark.parametrize("type_byte", sorted(D.IDX_DTYPES))
def test_parse_idx_round_trips_every_type(type_byte):
    arr = np.arange(24).reshape(2, 3, 4)
    out = D.parse_idx(idx_bytes(arr, type_byte))
    assert out.shape == (2, 3, 4)
    np.testing.assert_array_equal(out, arr.astype(D.IDX_DTYPES[type_byte]))
    assert out.dtype.isnative or out.dtype.itemsize == 1


def test_parse_idx_rejects_bad_magic():
    blob = bytearray(idx_bytes(np.zeros((2, 2), np.uint8)))
    blob[0] = 0x1F
    with pytest.raises(D.DatasetError, match="bad IDX magic"):
        D.parse_idx(bytes(blob), "x.idx")
    blob[0], blob[2] = 0, 0x07                     # unknown type byte
    with pytest.raises(D.DatasetError, match="bad IDX magic"):
        D.parse_idx(bytes(blob), "x.idx")


@pytest.mark.parametrize("cut", [2, 6, 20])
def test_parse_idx_rejects_truncation(cut):
    blob = idx_bytes(np.zeros((2, 3, 4), np.uint8))
    with pytest.raises(D.DatasetError, match="too short|truncated"):
        D.parse_idx(blob[:cut], "x.idx")


def test_parse_idx_rejects_trailing_bytes_and_zero_dims():
    with pytest.raises(D.DatasetError, match="trailing bytes"):
        D.parse_idx(idx_bytes(np.zeros(5, np.uint8)) + b"\0", "x.idx")
    with pytest.raises(D.DatasetError, match="0 dimensions"):
        D.parse_idx(bytes([0, 0, 8, 0]), "x.idx")


@pytest.mark.parametrize("gz,dotted", [(True, False), (False, False), (False, True)])
def test_load_idx_dataset(tmp_path, gz, dotted):
    arrays = write_mnist_dir(tmp_path, gz=gz, dotted=dotted)
    ds = D.load_dataset("mnist", tmp_path)
    assert ds.name == "mnist" and ds.num_classes == 10 and ds.in_shape == (1, 28, 28)
    assert ds.x_train.shape == (12, 1, 28, 28) and ds.x_test.shape == (5, 1, 28, 28)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.x_train.flags.c_contiguous
    np.testing.assert_array_equal(ds.y_train, arrays["train_labels"])
    mean, std = D.NORMALISATION["mnist"]
    expect = (arrays["test_images"].astype(np.float32) / np.float32(255) - np.float32(mean[0])) \
        / np.float32(std[0])
    np.testing.assert_array_equal(ds.x_test[:, 0], expect)
    x, y = ds.train
    assert x is ds.x_train and y is ds.y_train


def test_fashion_mnist_from_user_dir_has_class_names(tmp_path):
    write_mnist_dir(tmp_path)
    ds = D.load_dataset("Fashion_MNIST", tmp_path)
    assert ds.name == "fashion-mnist" and ds.classes[9] == "Ankle boot"


def test_truncated_idx_file_names_the_file(tmp_path):
    write_mnist_dir(tmp_path, gz=False)
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(D.DatasetError, match=r"t10k-images-idx3-ubyte: IDX file truncated"):
        D.load_dataset("mnist", tmp_path)


def test_truncated_gzip_names_the_file(tmp_path):
    write_mnist_dir(tmp_path)
    path = tmp_path / "train-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(D.DatasetError, match=r"train-labels-idx1-ubyte.gz: corrupt or truncated"):
        D.load_dataset("mnist", tmp_path)


def test_missing_idx_file_and_dir(tmp_path):
    write_mnist_dir(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(D.DatasetError, match=r"missing .*train-labels-idx1-ubyte\[\.gz\]"):
        D.load_dataset("mnist", tmp_path)
    with pytest.raises(D.DatasetError, match="does not exist"):
        D.load_dataset("mnist", tmp_path / "nope")
    with pytest.raises(D.DatasetError, match="apt-get install dataset-fashion-mnist"):
        D.load_idx_dataset("fashion-mnist", tmp_path / "nope", D.FASHION_MNIST_INSTALL)
    with pytest.raises(D.DatasetError, match="--data-dir"):
        D.load_dataset("mnist")


def test_label_count_and_range_checked(tmp_path):
    write_mnist_dir(tmp_path, gz=False)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(11, np.uint8)))
    with pytest.raises(D.DatasetError, match="12 images .* but 11 labels"):
        D.load_dataset("mnist", tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.full(12, 10, np.uint8)))
    with pytest.raises(D.DatasetError, match="label 10 outside"):
        D.load_dataset("mnist", tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros((12, 1), np.uint8)))
    with pytest.raises(D.DatasetError, match="expected uint8 labels"):
        D.load_dataset("mnist", tmp_path)


@pytest.mark.slow
def test_installed_fashion_mnist():
    if not D.FASHION_MNIST_DIR.is_dir():
        pytest.skip(f"Fashion-MNIST not installed at {D.FASHION_MNIST_DIR}")
    ds = D.load_dataset("fashion-mnist")
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert np.bincount(ds.y_train).tolist() == [6000] * 10
    assert abs(float(ds.x_train.mean())) < 0.01 and abs(float(ds.x_train.std()) - 1) < 0.01


# ------------------------------------------------------------------------------ CIFAR-10


def write_cifar_dir(root, per_batch=4, seed=0):
    rng = np.random.default_rng(seed)
    for name in D.CIFAR_TRAIN_BATCHES + (D.CIFAR_TEST_BATCH,):
        batch = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                 b"labels": [int(v) for v in rng.integers(0, 10, per_batch)],
                 b"batch_label": name.encode()}
        with open(root / name, "wb") as f:
            pickle.dump(batch, f)


def test_cifar10_loads_batches(tmp_path):
    sub = tmp_path / "cifar-10-batches-py"
    sub.mkdir()
    write_cifar_dir(sub)
    ds = D.load_dataset("CIFAR-10", tmp_path)           # finds the extracted subdirectory
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (4, 3, 32, 32)
    assert ds.y_train.dtype == np.int64 and ds.classes[0] == "airplane"
    with open(sub / "data_batch_1", "rb") as f:
        raw = pickle.load(f)
    first = raw[b"data"][0].reshape(3, 32, 32).astype(np.float32) / np.float32(255)
    mean, std = D.NORMALISATION["cifar10"]
    np.testing.assert_array_equal(ds.x_train[0, 2], (first[2] - np.float32(mean[2])) / np.float32(std[2]))


def test_cifar10_errors(tmp_path):
    with pytest.raises(D.DatasetError, match="--data-dir"):
        D.load_dataset("cifar10")
    write_cifar_dir(tmp_path)
    (tmp_path / "data_batch_3").unlink()
    with pytest.raises(D.DatasetError, match="missing .*data_batch_3"):
        D.load_dataset("cifar10", tmp_path)
    (tmp_path / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(D.DatasetError, match="data_batch_3: not a CIFAR-10 python batch"):
        D.load_dataset("cifar10", tmp_path)
    with open(tmp_path / "data_batch_3", "wb") as f:
        pickle.dump({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, f)
    with pytest.raises(D.DatasetError, match=r"data_batch_3: data is uint8 \(2, 100\)"):
        D.load_dataset("cifar10", tmp_path)


# ------------------------------------------------------------------------------ digits


def test_digits_fixed_split():
    a, b = D.load_dataset("digits"), D.load_dataset("digits")
    assert a.x_train.shape == (1438, 1, 8, 8) and a.x_test.shape == (359, 1, 8, 8)
    assert a.in_shape == (1, 8, 8) and a.x_train.dtype == np.float32 and a.y_test.dtype == np.int64
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert sorted(set(a.y_test.tolist())) == list(range(10))
    assert abs(float(a.x_train.mean())) < 0.05 and abs(float(a.x_train.std()) - 1) < 0.05
    with pytest.raises(D.DatasetError, match="takes no --data-dir"):
        D.load_dataset("digits", "/tmp")


def test_unknown_dataset():
    with pytest.raises(D.DatasetError, match="unknown dataset 'imagenet'"):
        D.load_dataset("imagenet")


# ------------------------------------------------------------------------------ models


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="the models need torch")


@pytest.mark.torch
@pytest.mark.parametrize("name,in_shape,params", [
    ("lenet5", (1, 28, 28), 61706), ("digits-cnn", (1, 8, 8), 38282),
    ("resnet20", (3, 32, 32), 269722), ("conv64", (1, 8, 8), 48106),
    ("conv64", (1, 28, 28), 48106), ("lenet5", (3, 32, 32), None)])
def test_model_forward_shapes(torch, name, in_shape, params):
    from gradblock.shim.setup.models import build_model
    model = build_model(name, 10, in_shape, seed=0)
    out = model(torch.zeros(3, *in_shape))
    assert out.shape == (3, 10)
    if params is not None:
        assert sum(p.numel() for p in model.parameters()) == params


@pytest.mark.torch
def test_conv64_has_a_64x64x3x3_layer(torch):
    from gradblock.shim.setup.models import build_model
    shapes = [tuple(p.shape) for p in build_model("conv64", 10, (1, 8, 8)).parameters()]
    assert (64, 64, 3, 3) in shapes and (16, 8, 3, 3) in shapes


@pytest.mark.torch
def test_model_init_is_seeded_and_leaves_global_rng_alone(torch):
    from gradblock.shim.setup.models import build_model
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("digits-cnn", 10, (1, 8, 8), seed=7)
    after = torch.rand(1)
    assert torch.equal(before, after)
    b = build_model("digits-cnn", 10, (1, 8, 8), seed=7)
    c = build_model("digits-cnn", 10, (1, 8, 8), seed=8)
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.conv1.weight, c.conv1.weight)


@pytest.mark.torch
def test_model_errors(torch):
    from gradblock.shim.setup.models import build_model
    with pytest.raises(ValueError, match="unknown model"):
        build_model("vgg", 10, (1, 8, 8))
    with pytest.raises(ValueError, match="too small"):
        build_model("lenet5", 10, (1, 8, 8))
    with pytest.raises(ValueError, match=r"in_shape must be \(C, H, W\)"):
        build_model("conv64", 10, (8, 8))
    with pytest.raises(ValueError, match="num_classes"):
        build_model("conv64", 0, (1, 8, 8))


def test_digits_match_scikit_learn():
    sklearn_datasets = pytest.importorskip("sklearn.datasets", reason="needs scikit-learn")
    d = sklearn_datasets.load_digits()
    ds = D.load_dataset("digits")
    is_test = np.arange(d.target.size) % D.DIGITS_TEST_EVERY == D.DIGITS_TEST_EVERY - 1
    np.testing.assert_array_equal(ds.y_train, d.target[~is_test])
    np.testing.assert_array_equal(ds.x_test, D.normalise(d.images[is_test][:, None], "digits"))
