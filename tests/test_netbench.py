"""The network testbed (bench/netns.py), `gradblock netbench` (bench/netbench.py) and torch's
DDP peers in the harness (shim/exchange/peers.py).

The testbed tests need root (network namespaces) and the `ip` / `tc` tools; they skip with that
reason elsewhere. Every one of them checks that the namespaces it created are gone afterwards.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gradblock.bench import netbench, netns
from gradblock.codec.errors import GradblockError
from gradblock.bench.netns import NetworkPermissionError, NetworkTestbedError, Testbed

ROOT = Path(__file__).resolve().parents[1]


def _bed_possible() -> str | None:
    """Why a testbed cannot be built here, or None."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2's ip and tc"
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    probe = f"gb{os.getpid()}-can"
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if p.returncode != 0:
        return f"cannot create a network namespace here: {p.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


NO_BED = _bed_possible()
needs_bed = pytest.mark.skipif(NO_BED is not None, reason=str(NO_BED))


def _namespaces(pid: int) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.split() and ln.startswith(f"gb{pid}-")]


# ---------------------------------------------------------------- pure parts (no privileges)

def test_rate_parsing_and_burst():
    assert netns.rate_bits("100mbit") == 100_000_000
    assert netns.rate_bits("1gbit") == 10**9
    assert netns.rate_bits("2.5Mbit") == 2_500_000
    for bad in ("fast", "100", "-5mbit", "0mbit", "10 mb"):
        with pytest.raises(NetworkTestbedError):
            netns.rate_bits(bad)
    assert netns.tbf_burst(10_000_000) == 16 * 1024            # floor
    assert netns.tbf_burst(10**9) == 10**9 // 8 // 200          # 5 ms of traffic
    assert netns.tbf_burst(10**9) >= 10**9 // 8 // 1000         # above rate / HZ at HZ=1000


def test_summary_and_table_from_rank_reports():
    def rank(r, steps, tx):
        return {"rank": r, "step_s": steps, "compress_s": [0.001] * len(steps),
                "exchange_s": [0.0] * len(steps), "compute_s": [0.01, 0.012, 0.011],
                "payload_bytes": 1000 * len(steps), "padded_bytes": 0,
                "counters_before": {"tx_bytes": 0, "rx_bytes": 0},
                "counters_after": {"tx_bytes": tx, "rx_bytes": tx},
                "compressor": {"name": "coarse"}}
    cell = netbench.CellResult([rank(1, [0.02, 0.05, 0.03], 3000), rank(0, [0.04, 0.01, 0.03], 6000)], 1.0)
    row = netbench.summarise("coarse1", "100mbit", 2, cell, 3)
    assert row["step_ms"] == pytest.approx(40.0)     # per step the slower rank: 40, 50, 30
    assert row["compute_ms"] == pytest.approx(11.0)
    assert row["compress_ms"] == pytest.approx(1.0)
    assert row["wait_ms"] == pytest.approx(28.0)
    assert row["tx_bytes_per_step"] == pytest.approx(1500.0)
    assert row["payload_bytes_per_step"] == pytest.approx(1000.0)
    ref = dict(row, method="allreduce", step_ms=80.0)
    rows = [ref, row]
    netbench.add_ratios(rows)
    assert row["x_allreduce"] == pytest.approx(2.0) and row["x_powersgd1"] is None
    table = netbench.format_table(rows)
    assert "| 2 | 100mbit | coarse1 | 40.0 | 11.0 | 1.0 | 28.0 | 0.1 | 1.5 |" in table   # wire model 0.1


def test_doc_section_is_replaced_not_duplicated(tmp_path):
    doc = tmp_path / "network.md"
    doc.write_text("# Network\n\nhand-written text\n")
    netbench.write_doc("first table", doc)
    netbench.write_doc("second table", doc)
    text = doc.read_text()
    assert "hand-written text" in text and "second table" in text and "first table" not in text
    assert text.count(netbench.BEGIN) == 1


def test_without_privilege_one_line_and_exit_2(monkeypatch, capsys):
    from gradblock import cli
    monkeypatch.setattr(netns, "_have_privilege", lambda: False)
    rc = cli.main(["netbench", "--quick", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("gradblock netbench:") and "root or CAP_NET_ADMIN" in err
    with pytest.raises(NetworkPermissionError):
        Testbed(2, "10mbit").up()
    assert issubclass(NetworkPermissionError, GradblockError)


def test_bad_rate_is_a_named_error(monkeypatch, capsys):
    from gradblock import cli
    monkeypatch.setattr(netns, "_have_privilege", lambda: True)
    monkeypatch.setattr(netbench, "netem_available", lambda: False)
    rc = cli.main(["netbench", "--rates", "fast", "--no-progress"])
    assert rc == 2
    assert "link rate must look like" in capsys.readouterr().err


# ---------------------------------------------------------------- the testbed itself

SINK = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5601)); s.listen(1); print("listening", flush=True)
c, _ = s.accept(); got = 0
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    got += len(b)
print(got, flush=True)
"""
SOURCE = """
import socket, sys, time
for _ in range(100):
    try:
        s = socket.create_connection((sys.argv[1], 5601), timeout=5); break
    except OSError:
        time.sleep(0.05)
s.sendall(b"x" * int(sys.argv[2])); s.close()
"""


@needs_bed
def test_two_namespace_bed_counts_bytes_and_cleans_up():
    payload = 2_000_000
    pid = os.getpid()
    with Testbed(2, "100mbit") as bed:
        created = list(bed.namespaces)
        assert set(created) == {f"gb{pid}-br", f"gb{pid}-w0", f"gb{pid}-w1"}
        assert "tbf" in bed.qdiscs(0) and "rate 100Mbit" in bed.qdiscs(0)
        # nothing of ours in the root namespace
        root_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert "gbv" not in root_links and "gbp" not in root_links and netns.BRIDGE not in root_links
        before = bed.counters()
        sink = bed.popen(1, [sys.executable, "-c", SINK, bed.address(1)], stdout=subprocess.PIPE,
                         text=True)
        assert sink.stdout.readline().strip() == "listening"
        t0 = time.perf_counter()
        src = bed.exec(0, [sys.executable, "-c", SOURCE, bed.address(1), str(payload)],
                       capture_output=True, text=True, timeout=60)
        assert src.returncode == 0, src.stderr
        assert int(sink.stdout.readline()) == payload
        sink.wait(timeout=30)
        seconds = time.perf_counter() - t0
        after = bed.counters()
        sent = after[0]["tx_bytes"] - before[0]["tx_bytes"]
        got = after[1]["rx_bytes"] - before[1]["rx_bytes"]
        # on the wire: the payload plus TCP/IP/Ethernet headers (~3 %), never less
        assert payload < sent < 1.2 * payload, sent
        assert payload < got < 1.2 * payload, got
        # shaped: 2 MB at 100 Mbit/s take at least ~0.16 s
        assert seconds > 0.9 * 8 * payload / 100e6
    assert _namespaces(pid) == []
    assert all(not Path(f"/var/run/netns/{n}").exists() for n in created)


@needs_bed
def test_bed_is_removed_after_an_exception_inside():
    pid = os.getpid()
    with pytest.raises(RuntimeError, match="boom"):
        with Testbed(2) as bed:
            sleeper = bed.popen(0, [sys.executable, "-c", "import time; time.sleep(60)"])
            assert len(_namespaces(pid)) == 3
            raise RuntimeError("boom")
    assert _namespaces(pid) == []
    assert sleeper.poll() is not None           # the process it started was killed


@needs_bed
def test_bed_is_removed_on_sigterm(tmp_path):
    code = textwrap.dedent("""
        import os, signal, sys, time
        from gradblock.bench.netns import Testbed
        bed = Testbed(2, "10mbit").up()
        print(os.getpid(), flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)
    try:
        child = int(proc.stdout.readline())
        assert len(_namespaces(child)) == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _namespaces(child) == []


@needs_bed
@pytest.mark.slow
def test_two_ranks_run_methods_on_the_bed(tmp_path):
    """A 2-rank run of a peer and a gradblock method on a shaped link: every rank reports,
    the wire carries at least the payload, and the bed is gone afterwards."""
    pid = os.getpid()
    plan = [(m, netbench._common_args(2, 0, netbench.METHODS[m] + ["--train-subset", "2000",
                                                                  "--test-subset", "200"]))
            for m in ("allreduce", "coarse1")]
    with Testbed(2, "100mbit") as bed:
        done, failed = netbench.run_plan(bed, plan, ["--warmup", "1", "--steps", "3",
                                                     "--compute-steps", "2"], tmp_path, 300)
    assert failed == [] and sorted(done) == ["allreduce", "coarse1"]
    for m, cell in done.items():
        row = netbench.summarise(m, "100mbit", 2, cell, 3)
        assert row["tx_bytes_per_step"] > row["payload_bytes_per_step"] * 0.5 > 0, row
        assert row["step_ms"] > 0 and row["compute_ms"] > 0
    ar = netbench.summarise("allreduce", "100mbit", 2, done["allreduce"], 3)
    # DDP's allreduce of LeNet-5's float32 gradients: at least half of them leave each rank
    assert ar["tx_bytes_per_step"] > ar["payload_bytes_per_step"] / 2
    assert _namespaces(pid) == []


@needs_bed
def test_failed_rank_stops_the_others_and_is_named(tmp_path):
    pid = os.getpid()
    plan = [("allreduce", netbench._common_args(2, 0, ["--compressor", "allreduce",
                                                      "--data-dir", str(tmp_path / "missing")]))]
    t0 = time.perf_counter()
    with Testbed(2) as bed:
        done, failed = netbench.run_plan(bed, plan, ["--steps", "2"], tmp_path, 120)
    assert done == {} and len(failed) == 1
    assert failed[0]["method"] == "allreduce" and "rank " in failed[0]["message"]
    assert time.perf_counter() - t0 < 110
    assert _namespaces(pid) == []


# ---------------------------------------------------------------- the peers in train

def _train(args: list[str], tmp_path) -> dict:
    from gradblock import cli
    out = tmp_path / "out"
    rc = cli.main(["train", *args, "--out", str(out), "--no-progress"])
    assert rc == 0
    return json.loads((out / "result.json").read_text())


COMMON = ["--workers", "2", "--epochs", "1", "--max-steps", "4", "--train-subset", "1000",
          "--test-subset", "200", "--threads", "1"]


@pytest.mark.slow
def test_peers_train_in_two_local_gloo_ranks(tmp_path):
    """allreduce, fp16 and powerSGD rank 2: torch's hooks in 2 processes (gloo on
    127.0.0.1); allreduce lands where the simulated dense run lands (float sums differ only in
    rounding), the payload per step is the hook's."""
    dense = _train(["--compressor", "dense", *COMMON], tmp_path / "dense")
    runs = {c: _train(["--compressor", c, "--rank", "2", *COMMON], tmp_path / c)
            for c in ("allreduce", "fp16", "powersgd")}
    params = dense["params"]
    for name, r in runs.items():
        assert r["mode"] == "ddp-local" and r["compressor_config"]["name"] == name
        assert r["steps"] == 4
        assert (tmp_path / name / "out" / "model.rank1.pt").exists()
    assert runs["allreduce"]["final_test_loss"] == pytest.approx(dense["final_test_loss"], abs=1e-4)
    assert runs["allreduce"]["bytes_sent"] == 4 * params * 4 * 2
    assert runs["fp16"]["bytes_sent"] == 2 * params * 4 * 2
    assert runs["fp16"]["final_test_loss"] == pytest.approx(dense["final_test_loss"], abs=2e-2)
    ps = runs["powersgd"]
    assert ps["compressor_config"]["matrix_approximation_rank"] == 2
    # steps 0 and 1 plain allreduce (start_powerSGD_iter = 2), then P and Q only
    assert 4 * params * 2 * 2 < ps["bytes_sent"] < 4 * params * 4 * 2
    assert ps["final_test_loss"] == ps["final_test_loss"]        # finite, not NaN


def test_peer_refuses_what_it_cannot_honour(capsys):
    from gradblock import cli
    rc = cli.main(["train", "--compressor", "powersgd", "--local-momentum", "0.9", "--momentum",
                   "0", "--workers", "2", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "--local-momentum is not supported with the torch peer" in err


def test_validate_matrix_has_peer_rows_only_when_asked():
    from gradblock.shim.setup.config import TrainConfig
    from gradblock.shim.training.validate import matrix
    base = TrainConfig(workers=2)
    assert not {"allreduce", "fp16"} & {n for n, _ in matrix(base, 4, None)}
    rows = dict(matrix(base, 4, None, peers=True))
    assert rows["powersgd4"].powersgd_rank == 4 and rows["fp16"].compressor == "fp16"
    assert [n for n, _ in matrix(base, 4, ["powersgd2"])] == ["powersgd2"]


def test_from_json_renders_a_saved_run_without_privileges(tmp_path, monkeypatch, capsys):
    from gradblock import cli
    monkeypatch.setattr(netns, "_have_privilege", lambda: False)
    row = {"method": "coarse1", "rate": "10mbit", "workers": 4, "step_ms": 50.0, "compute_ms": 20.0,
           "compress_ms": 5.0, "wait_ms": 25.0, "tx_bytes_per_step": 9000.0,
           "rx_bytes_per_step": 9100.0, "payload_bytes_per_step": 4000.0, "x_allreduce": 3.0,
           "x_powersgd1": 1.5}
    saved = tmp_path / "nb.json"
    saved.write_text(json.dumps({"description": "a saved run", "rows": [row], "notes": ["netem missing"]}))
    png = tmp_path / "nb.png"
    assert cli.main(["netbench", "--from-json", str(saved), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    # wire model: the busier direction, 9100 bytes at 10 Mbit/s = 7.3 ms
    assert "| 4 | 10mbit | coarse1 | 50.0 | 20.0 | 5.0 | 25.0 | 7.3 | 9.0 | 9.1 | 4.0 | 3.00 | 1.50 |" in out
    assert "note: netem missing" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "bad.json").write_text("[]")
    assert cli.main(["netbench", "--from-json", str(tmp_path / "bad.json")]) == 2


def test_a_failed_rank_stops_the_others_at_once(tmp_path):
    """shim.exchange.peers.wait_ranks: rank 1 dies, rank 0 (which would wait forever) is killed and the
    error names rank 1 with the end of its output; a silent hang ends at the timeout."""
    from gradblock.shim.errors import TrainingError
    from gradblock.shim.exchange.peers import wait_ranks

    def start(code: str, name: str):
        log = tmp_path / name
        with open(log, "w") as fh:
            return subprocess.Popen([sys.executable, "-c", code], stdout=fh,
                                    stderr=subprocess.STDOUT, start_new_session=True), log
    sleeper, log0 = start("import time; time.sleep(120)", "r0.log")
    dying, log1 = start("import sys, time; time.sleep(0.3); print('boom: peer gone'); sys.exit(3)",
                        "r1.log")
    t0 = time.perf_counter()
    with pytest.raises(TrainingError, match=r"rank 1 failed \(exit status 3\): boom: peer gone"):
        wait_ranks([sleeper, dying], [log0, log1], timeout=60)
    assert time.perf_counter() - t0 < 30
    assert sleeper.poll() is not None
    hung, log2 = start("import time; time.sleep(120)", "r2.log")
    with pytest.raises(TrainingError, match="ran past 1 s"):
        wait_ranks([hung], [log2], timeout=1)
    assert hung.poll() is not None
