"""512-bit numba vectors (fastpath.vector_width): when the `gradblock` command sets
NUMBA_CPU_FEATURES, that the on-disk cache keeps the two widths apart, and that every lean
numba entry point gives the reference's bits when compiled for 512-bit vectors (in a child
process: numba's configuration is per process)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gradblock.codec.errors import GradblockError
from gradblock.fastpath import vector_width as VW
from gradblock.refmodel.quantiser import quantise

HERE = Path(__file__).resolve().parent
AVX512 = "+sse2,+avx2,+avx512f,+avx512vl"
WIDE = VW.wide_features(VW.host_features())
needs_avx512 = pytest.mark.skipif(WIDE is None, reason="the host has no AVX-512F: numba has "
                                                       "no 512-bit vectors to choose")


def _env(**changes) -> dict:
    """This process's environment without any numba CPU setting, then `changes` (None deletes)."""
    env = {k: v for k, v in os.environ.items()
           if k not in (VW.FEATURES_ENV, VW.CPU_NAME_ENV, VW.WIDTH_ENV)}
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


@pytest.fixture
def numba_not_imported(monkeypatch):
    """choose_vector_width leaves a process alone once numba is imported (as it is in the
    test process): pretend, for one test, that it is not."""
    monkeypatch.delitem(sys.modules, "numba", raising=False)


def test_wide_features_only_with_avx512f():
    assert VW.wide_features(AVX512) == AVX512 + ",-prefer-256-bit"
    assert VW.wide_features("+sse2,+avx2,-avx512f") is None
    assert VW.wide_features("+avx512fp16") is None        # a feature name, not a prefix
    assert VW.wide_features("") is None and VW.wide_features(None) is None


def test_choose_sets_the_features_once(numba_not_imported):
    env = {}
    assert VW.choose_vector_width(env, AVX512).startswith("512-bit")
    assert env == {VW.FEATURES_ENV: AVX512 + ",-prefer-256-bit"}
    assert VW.vector_width_in_use(env) == "512-bit"
    env512 = {VW.WIDTH_ENV: "512"}
    assert VW.choose_vector_width(env512, AVX512).startswith("512-bit")
    # a second call sees the variable set and leaves it
    assert "NUMBA_CPU_FEATURES is set" in VW.choose_vector_width(env, AVX512)


@pytest.mark.parametrize("env, why", [
    ({VW.WIDTH_ENV: "256"}, "GRADBLOCK_VECTOR_WIDTH=256"),
    ({VW.FEATURES_ENV: "+avx2"}, "NUMBA_CPU_FEATURES is set"),
    ({VW.CPU_NAME_ENV: "generic"}, "NUMBA_CPU_NAME is set"),
    ({VW.FEATURES_ENV: ""}, "NUMBA_CPU_FEATURES is set"),     # empty: numba's "no features"
])
def test_choose_leaves_the_users_choice(numba_not_imported, env, why):
    before = dict(env)
    assert why in VW.choose_vector_width(env, AVX512)
    assert env == before
    assert VW.vector_width_in_use(env).startswith("LLVM's default")


def test_the_report_names_an_emulated_cpu():
    """An AVX2 host's code measured on an AVX-512 one (docs/performance.md) says so."""
    env = {VW.CPU_NAME_ENV: "haswell", VW.FEATURES_ENV: ""}
    assert VW.vector_width_in_use(env) == ("LLVM's default for CPU haswell (NUMBA_CPU_NAME), "
                                           "with that CPU's own features")
    assert "the host's features" in VW.vector_width_in_use({VW.CPU_NAME_ENV: "haswell"})
    assert VW.vector_width_in_use({}) == "LLVM's default"


def test_choose_leaves_hosts_without_avx512_and_processes_with_numba(numba_not_imported,
                                                                     monkeypatch):
    env = {}
    assert "no AVX-512F" in VW.choose_vector_width(env, "+sse2,+avx2")
    assert env == {}
    monkeypatch.setitem(sys.modules, "numba", object())
    assert "numba was imported first" in VW.choose_vector_width(env, AVX512)
    assert env == {}


@pytest.mark.parametrize("value", ["1024", "wide", "256 bits"])
def test_a_bad_width_is_a_named_error(value):
    with pytest.raises(VW.VectorWidthError, match="256 or 512") as e:
        VW.choose_vector_width({VW.WIDTH_ENV: value}, AVX512)
    assert isinstance(e.value, GradblockError)


def _run(code: str, env: dict, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env,
                          capture_output=True, text=True, timeout=600)


CLI_CHILD = """
    import sys
    from gradblock.cli import main
    status = main(["quantise", sys.argv[1], sys.argv[2]])
    import numba
    print(status, numba.config.CPU_FEATURES)
"""


@needs_avx512
@pytest.mark.parametrize("width, expect_wide", [(None, True), ("512", True), ("256", False)])
def test_the_cli_chooses_before_numba_is_imported(tmp_path, width, expect_wide):
    x = np.array([[0.5, -3.25, 12.0], [1e-6, -0.0, 7.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    got = _run(CLI_CHILD, _env(**{VW.WIDTH_ENV: width}), str(tmp_path / "x.npy"),
               str(tmp_path / "q.npy"))
    assert got.returncode == 0, got.stderr
    status, features = got.stdout.split("\n")[-2].split(" ", 1)
    assert status == "0"
    assert (features == WIDE) == expect_wide
    if not expect_wide:
        assert features == "None"              # numba's own default
    assert np.array_equal(np.load(tmp_path / "q.npy"), quantise(x, 10.0).q)


def test_the_cli_reports_a_bad_width_in_one_line(tmp_path):
    got = subprocess.run([sys.executable, "-m", "gradblock.cli", "quantise", "a.npy", "b.npy"],
                         env=_env(**{VW.WIDTH_ENV: "huge"}), cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert got.returncode == 2
    assert got.stderr.strip() == ("gradblock quantise: GRADBLOCK_VECTOR_WIDTH must be 256 or "
                                  "512, got 'huge'")
    assert not list(tmp_path.iterdir())


CACHE_CHILD = """
    import numpy as np, probe_mod
    probe_mod.f(np.arange(100, dtype=np.int64))
    stats = probe_mod.f.stats
    print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
"""


@needs_avx512
def test_the_numba_cache_keeps_the_widths_apart(tmp_path):
    """An entry compiled for one feature string is never loaded for the other: each width
    compiles once (a miss), then loads its own entry (a hit), from one cache directory."""
    (tmp_path / "probe_mod.py").write_text(textwrap.dedent("""
        import numba
        @numba.njit(cache=True)
        def f(a):
            s = 0
            for i in range(a.size):
                s += (a[i] * 3) >> 1
            return s
    """))
    cache = tmp_path / "cache"
    wide = _env(NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(tmp_path), **{VW.FEATURES_ENV: WIDE})
    default = _env(NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(tmp_path))
    seen = []
    for env in (default, wide, wide, default):
        got = _run(CACHE_CHILD, env)
        assert got.returncode == 0, got.stderr
        seen.append(tuple(int(v) for v in got.stdout.split()))
    assert seen == [(0, 1), (0, 1), (1, 0), (1, 0)]       # (hits, misses)


@needs_avx512
def test_wide_vectors_give_the_reference_bits():
    """tests/wide_vector_check.py in a child compiled for 512-bit vectors: compress_message,
    compress_step, compress_layers (1 and 2 threads) and the numba decoder on real ResNet-20
    gradients and 40 random layouts, NaN handling included. The child uses the ordinary
    cache (keyed on the features): its first run compiles every kernel (about a minute)."""
    got = subprocess.run([sys.executable, str(HERE / "wide_vector_check.py"), "40"],
                         env=_env(**{VW.FEATURES_ENV: WIDE}), capture_output=True, text=True,
                         timeout=900)
    assert got.returncode == 0, got.stderr[-3000:]
    summary = json.loads(got.stdout.strip().splitlines()[-1])
    assert summary["cpu_features_tail"] == "-prefer-256-bit"
    assert summary["layers"] >= 59 + 40
