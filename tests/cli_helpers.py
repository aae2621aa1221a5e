"""Shared by the CLI test files: the backend fixture and an in-process `gradblock` call."""
from __future__ import annotations

import pytest

from gradblock import cli
from gradblock.backends import BACKEND_ENV


@pytest.fixture(params=["auto", "reference"])
def any_backend(request, monkeypatch):
    """Run the test with the fastest backend and again with the numpy reference (the host
    commands ask gradblock.backends.host_backend on every call)."""
    monkeypatch.setenv(BACKEND_ENV, request.param)
    yield request.param


def run(capsys, *argv):
    """gradblock.cli.main in-process: (exit status, stdout, stderr)."""
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err
