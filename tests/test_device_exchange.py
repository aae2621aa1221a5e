"""Issue 29 on a real 2-rank gloo group (tests/device_ddp_case.py under torchrun): the device
codec (the code a GPU runs, selected on the CPU) equals the simulation's reference decode in
both check modes, channels_last included; the allreduce exchange with a channels_last model
and --dense-below equals the simulation, and writes a bucket whose views follow the
parameters' strides right (it wrote through the flat buffer before: torch 2.13's CPU DDP hands
row-major views, so only the made-up strided bucket fails with the old write); a NaN on one
rank raises a named error on every rank instead of leaving the others in the collective; a
corrupt frame raises the reference's error on every rank under the device codec."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="the DDP hook needs torch")
import torch.distributed as dist  # noqa: E402

from test_global_exchange import torchrun  # noqa: E402  (tests/ on the ranks' path)

pytestmark = [pytest.mark.torch]

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("device_ddp")
    proc = torchrun(["device_ddp_case", str(out)], 2)
    got = {}
    for r in range(2):
        path = out / f"rank{r}.json"
        if not path.exists():
            pytest.fail(f"rank {r} wrote no report; torchrun said:\n{proc.stdout}\n{proc.stderr}")
        got[r] = json.loads(path.read_text())
    for r, rep in got.items():
        assert "error" not in rep, f"rank {r} failed:\n{rep['error']}"
    return got


def test_device_codec_equals_simulation_on_every_rank(reports):
    for r, rep in reports.items():
        assert len(rep["device"]) == 12, rep["device"]      # merged hook's two, graphs' two
        for name, res in rep["device"].items():
            assert res == {"equal_to_simulation": True, "equal_on_all_ranks": True}, (r, name)


def test_allreduce_exchange_writes_channels_last_through_the_views(reports):
    for r, rep in reports.items():
        assert rep["allreduce_channels_last"] == {"equal_to_simulation": True,
                                                  "equal_on_all_ranks": True}, r


def test_nan_on_one_rank_raises_on_every_rank(reports):
    # the case's process group times out after 20 s: a rank left waiting in the collective
    # would report a gloo timeout, not these classes
    for codec in ("host", "device", "device_graphs"):
        assert reports[1]["nan"][codec]["raised"] == "NonFiniteError", codec
        assert reports[0]["nan"][codec]["raised"] == "PeerNonFiniteError", codec
        assert "peer rank 1" in reports[0]["nan"][codec]["message"]
        for rep in reports.values():
            assert rep["nan"][codec]["seconds"] < 10, rep["nan"][codec]
    # the device path names the same layer, count and index as the host path
    assert reports[1]["nan"]["device"]["message"] == reports[1]["nan"]["host"]["message"]


def test_corrupt_frame_is_the_reference_error_in_both_check_modes(reports):
    for rep in reports.values():
        host = rep["corrupt"]["host"]
        assert host["raised"] == "CrcMismatchError"
        assert "peer rank 1, layer" in host["message"]
        for check in ("bucket", "step"):
            assert rep["corrupt"][check]["raised"] == host["raised"], check
            assert rep["corrupt"][check]["message"] == host["message"], check


def test_gradscaler_overflow_on_one_rank_skips_the_step_as_without_the_hook(reports):
    for r, rep in reports.items():
        plain = rep["amp"]["None"]
        assert plain["unchanged"], (r, plain)            # torch's own DDP skips the step
        for codec in ("host", "device"):
            assert rep["amp"][codec] == plain, (r, codec, rep["amp"])


def test_allreduce_exchange_waits_on_every_collectives_future():
    from own_process import run_in_own_process
    run_in_own_process("device_ddp_case", "combined_future_case", timeout=300)


def test_allreduce_exchange_writes_strided_views_right():
    from own_process import run_in_own_process
    run_in_own_process("device_ddp_case", "strided_bucket_case", timeout=300)
