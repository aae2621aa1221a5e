"""Shared test set-up: one deterministic hypothesis profile and a few fixtures.

Profiles (choose with HYPOTHESIS_PROFILE): "ci" (default; derandomized, so every run tests
the same examples) and "thorough" (more examples, still derandomized). Neither has a
deadline: the first call of a numba kernel compiles or loads its cache.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:               # top-level packages without a pip install
    sys.path.insert(0, str(ROOT))

_common = dict(derandomize=True, deadline=None, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=100, **_common)
settings.register_profile("thorough", max_examples=2000, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# docs/spec.md §6: the frame for layer 7 (R = 10, LMAX_LOG2 = 8) of [0, 0, 5, -1, 0].
SPEC_PAYLOAD = np.array([0, 0, 5, -1, 0], dtype=np.int32)
SPEC_FRAME = np.array([0x5A524C45, 0x00000801, 0x00000007, 0x00000005, 0x41200000,
                       0x00000002, 0x00000002, 0x00000005, 0xFFFFFFFF,
                       0x00000001, 0x00000000,
                       0x00000002, 0x455EB0ED], dtype=np.uint32)


# Hardware sign-off runs (marker `signoff`: a 2.36M-element layer through the engine on
# Verilator, the engine through ECP5 place-and-route) take 15-45 minutes each on 2 cores, more
# than the whole suite's budget. They run when GRADBLOCK_SIGNOFF=1 and skip with the reason.
SIGNOFF_TIMEOUT_S = 4 * 3600


def pytest_collection_modifyitems(config, items):
    if os.environ.get("GRADBLOCK_SIGNOFF") == "1":
        for item in items:
            if "signoff" in item.keywords:       # past pyproject's 15-minute hang guard
                item.add_marker(pytest.mark.timeout(SIGNOFF_TIMEOUT_S))
        return
    skip = pytest.mark.skip(reason="hardware sign-off run (15-45 min on 2 cores): "
                                   "set GRADBLOCK_SIGNOFF=1 to run it")
    for item in items:
        if "signoff" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def golden_quick(tmp_path_factory):
    """`gradblock golden --quick`, written once per session (the RTL tests and `verify` read it)."""
    out = tmp_path_factory.mktemp("golden") / "quick"
    proc = subprocess.run([sys.executable, "-m", "gradblock.cli", "golden", "--quick", "--no-check",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"gradblock golden --quick failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
                    f"\n{proc.stderr[-2000:]}")
    return out


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh, seeded generator per test (tests stay independent of their order)."""
    return np.random.default_rng(20240611)


@pytest.fixture
def spec_frame() -> tuple[np.ndarray, np.ndarray]:
    """(payload, frame words) of the worked example in docs/spec.md §6."""
    return SPEC_PAYLOAD.copy(), SPEC_FRAME.copy()


# GRADBLOCK_REQUIRE_CUDA=1 (scripts/gpu-check.sh): on a GPU machine a test skipped for want of
# CUDA is a failure, so a broken CUDA set-up cannot pass the check by skipping everything.
_CUDA_SKIP_WORDS = ("cuda", "gpu", "nccl")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if os.environ.get("GRADBLOCK_REQUIRE_CUDA") != "1":
        return
    rep = outcome.get_result()
    if rep.skipped and not hasattr(rep, "wasxfail"):
        reason = str(rep.longrepr[-1] if isinstance(rep.longrepr, tuple) else rep.longrepr)
        if any(w in reason.lower() for w in _CUDA_SKIP_WORDS):
            rep.outcome = "failed"
            rep.longrepr = f"GRADBLOCK_REQUIRE_CUDA=1 but the test skipped: {reason}"
