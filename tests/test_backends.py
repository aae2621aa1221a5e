"""The backend registry (gradblock/backends.py): names, lazy loading, named unavailability."""
from __future__ import annotations

import subprocess
import sys

import pytest

from gradblock import backends
from gradblock.backends import (BACKEND_NAMES, Backend, BackendUnavailableError,
                                available_backends, get_backend)
from gradblock.codec.errors import GradblockError


def test_unknown_backend_is_a_named_user_error():
    with pytest.raises(BackendUnavailableError, match="unknown backend 'cupy'"):
        get_backend("cupy")
    assert issubclass(BackendUnavailableError, GradblockError)


def test_missing_package_names_the_reason(monkeypatch):
    real = backends.importlib.util.find_spec
    monkeypatch.setattr(backends.importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    monkeypatch.setattr(backends, "_CACHE", {})
    assert "'torch' package" in available_backends()["torch"]
    with pytest.raises(BackendUnavailableError, match="needs the 'torch' package"):
        get_backend("torch")
    assert available_backends()["numpy"] is None


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_every_available_backend_satisfies_the_protocol(name):
    reason = available_backends()[name]
    if reason:
        pytest.skip(reason)
    b = get_backend(name)
    assert isinstance(b, Backend) and b.name == name
    assert get_backend(name) is b                       # one instance per name and options


def test_importing_the_registry_loads_neither_numba_nor_torch():
    code = ("import sys, gradblock.backends as b; b.available_backends(); "
            "print(sorted(m for m in ('numba', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
