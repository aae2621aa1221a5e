"""A network testbed for real multi-process runs: N workers, each in a network namespace of its
own, each joined by a veth pair to a Linux bridge that lives in a further namespace.

    with Testbed(4, rate="100mbit") as bed:
        procs = [bed.popen(w, [sys.executable, "-m", ...], env=bed.rank_env(w, port))
                 for w in range(4)]
        ...
        bed.counters()        # {worker: {"tx_bytes", "rx_bytes"}} of each worker's veth

What it creates, and nothing else (the root namespace is never touched):
* namespaces `gb<pid>-br` (the bridge `gbbr`) and `gb<pid>-w<i>` (worker i); the pid prefix keeps
  concurrent runs apart, and only the namespaces this object created are ever deleted;
* per worker a veth pair `gbv<i>` (worker side, address 10.77.0.<i+1>/24) -- `gbp<i>` (bridge
  port); no route out, no address anywhere else, lo up in each namespace;
* shaping (`rate` given): `tc tbf` on both ends of each pair, so a worker's link is full duplex
  at `rate` each way (upload on gbv<i>, download on gbp<i>); burst sized for the rate (5 ms of
  traffic, at least 16 KiB), queue latency 50 ms. `delay_ms`: netem on the worker side with tbf
  under it, only where the kernel has netem -- it is probed at run time (`netem_available`) and
  reported as "netem missing" otherwise.

Cleanup runs on every exit path: the context manager's exit (exceptions included), SIGINT /
SIGTERM while the bed is up (the handler removes the namespaces, then re-raises the signal's
default behaviour as KeyboardInterrupt / exit 143), and an atexit hook. Deleting a namespace
removes the veths in it; a process still inside is killed first (those this object started).
Without root (or CAP_NET_ADMIN) it raises `NetworkPermissionError`, a GradblockError: the CLI
prints one line and exits 2.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass, field

from gradblock.codec.errors import GradblockError

SUBNET = "10.77.0"           # a private /24, only on interfaces this bed creates
BRIDGE = "gbbr"
QUEUE_LATENCY = "50ms"


class NetworkTestbedError(GradblockError):
    """The testbed could not be built (a missing tool, a refused `ip` / `tc` command)."""


class NetworkPermissionError(NetworkTestbedError):
    """Building network namespaces needs root or CAP_NET_ADMIN."""


_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit)$", re.IGNORECASE)
_UNIT = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}


def rate_bits(rate: str) -> int:
    """'100mbit' -> 100_000_000 (tc's decimal units); NetworkTestbedError when malformed."""
    m = _RATE.match(rate.strip())
    if not m or float(m.group(1)) <= 0:
        raise NetworkTestbedError(f"link rate must look like 10mbit, 100mbit, 1gbit; got {rate!r}")
    return int(float(m.group(1)) * _UNIT[m.group(2).lower()])


def tbf_burst(bits_per_s: int) -> int:
    """tbf bucket in bytes: 5 ms of traffic at the rate, at least 16 KiB (above rate / HZ for
    every kernel HZ and a few full frames)."""
    return max(16 * 1024, bits_per_s // 8 // 200)


def _have_privilege() -> bool:
    return os.geteuid() == 0


def check_privilege() -> None:
    """NetworkPermissionError unless this process can create namespaces."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise NetworkTestbedError(f"the network testbed needs the {tool!r} command "
                                      f"(iproute2), which is not on PATH")
    if not _have_privilege():
        raise NetworkPermissionError("the network testbed needs root or CAP_NET_ADMIN to create "
                                     "network namespaces (run as root, or use a machine where "
                                     "you may)")


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        msg = (p.stderr or p.stdout).strip().splitlines()
        if any("Operation not permitted" in line or "Permission denied" in line for line in msg):
            raise NetworkPermissionError(f"`{' '.join(cmd)}` was refused ({msg[-1]}): the "
                                         f"testbed needs root or CAP_NET_ADMIN")
        raise NetworkTestbedError(f"`{' '.join(cmd)}` failed: {msg[-1] if msg else p.returncode}")
    return p


_NETEM: bool | None = None


def netem_available() -> bool:
    """Whether the kernel has the netem qdisc: tried once on a throw-away namespace's lo."""
    global _NETEM
    if _NETEM is None:
        ns = f"gb{os.getpid()}-probe"
        _run(["ip", "netns", "add", ns])
        try:
            _NETEM = _run(["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem",
                           "delay", "1ms"], check=False).returncode == 0
        finally:
            _run(["ip", "netns", "del", ns], check=False)
    return _NETEM


def own_namespaces(pid: int | None = None) -> list[str]:
    """Namespaces named for process `pid` (default this one) that exist now."""
    prefix = f"gb{os.getpid() if pid is None else pid}-"
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()
            and line.split()[0].startswith(prefix)]


@dataclass
class Testbed:
    __test__ = False                 # not a pytest class
    n_workers: int
    rate: str | None = None          # None: unshaped
    delay_ms: float = 0.0            # netem delay per direction on the worker side, if available
    mtu: int = 1500
    namespaces: list[str] = field(default_factory=list, init=False)   # created, in order
    notes: list[str] = field(default_factory=list, init=False)
    procs: list[subprocess.Popen] = field(default_factory=list, init=False)

    def __post_init__(self):
        if int(self.n_workers) < 1 or int(self.n_workers) > 250:
            raise NetworkTestbedError(f"workers must be in 1..250, got {self.n_workers}")
        self.rate_bits = rate_bits(self.rate) if self.rate else None
        self.prefix = f"gb{os.getpid()}-"
        self._lock = threading.Lock()
        self._old_handlers: dict = {}
        self._up = False

    # -- names
    @property
    def bridge_ns(self) -> str:
        return f"{self.prefix}br"

    def ns(self, w: int) -> str:
        return f"{self.prefix}w{w}"

    @staticmethod
    def ifname(w: int) -> str:
        return f"gbv{w}"

    @staticmethod
    def address(w: int) -> str:
        return f"{SUBNET}.{w + 1}"

    # -- life cycle
    def __enter__(self) -> "Testbed":
        self.up()
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self) -> "Testbed":
        check_privilege()
        self._install_handlers()
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        self._up = True
        return self

    def _add_ns(self, name: str) -> None:
        if name in own_namespaces():
            raise NetworkTestbedError(f"namespace {name} exists already (another testbed in this "
                                      f"process?)")
        _run(["ip", "netns", "add", name])
        self.namespaces.append(name)            # recorded at once: cleanup deletes it
        _run(["ip", "-n", name, "link", "set", "lo", "up"])

    def _build(self) -> None:
        br = self.bridge_ns
        self._add_ns(br)
        _run(["ip", "-n", br, "link", "add", BRIDGE, "type", "bridge"])
        _run(["ip", "-n", br, "link", "set", BRIDGE, "up"])
        delay = self.delay_ms > 0
        if delay and not netem_available():
            self.notes.append("netem missing: no delay added")
            delay = False
        for w in range(self.n_workers):
            ns, v, p = self.ns(w), self.ifname(w), f"gbp{w}"
            self._add_ns(ns)
            _run(["ip", "link", "add", v, "netns", ns, "mtu", str(self.mtu), "type", "veth",
                  "peer", "name", p, "netns", br, "mtu", str(self.mtu)])
            _run(["ip", "-n", br, "link", "set", p, "master", BRIDGE, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.address(w)}/24", "dev", v])
            _run(["ip", "-n", ns, "link", "set", v, "up"])
            if self.rate_bits:
                self._shape(ns, v, delay)
                self._shape(br, p, False)

    def _shape(self, ns: str, dev: str, delay: bool) -> None:
        tbf = ["tbf", "rate", f"{self.rate_bits}bit", "burst", str(tbf_burst(self.rate_bits)),
               "latency", QUEUE_LATENCY]
        if delay:
            _run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem",
                  "delay", f"{self.delay_ms}ms"])
            _run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:",
                  *tbf])
        else:
            _run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", *tbf])

    def down(self) -> None:
        """Kill the processes this bed started, delete the namespaces it created (only
        those); safe to call twice and from a signal handler."""
        with self._lock:
            for proc in self.procs:
                if proc.poll() is None:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        proc.kill()
            for proc in self.procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            self.procs = []
            for name in reversed(self.namespaces):
                _run(["ip", "netns", "del", name], check=False)
            self.namespaces = []
            self._up = False
        self._restore_handlers()

    # -- signals and atexit
    def _install_handlers(self) -> None:
        atexit.register(self.down)
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.getsignal(sig)
            signal.signal(sig, self._on_signal)

    def _restore_handlers(self) -> None:
        for sig, old in self._old_handlers.items():
            try:
                signal.signal(sig, old)
            except (ValueError, TypeError):
                pass
        self._old_handlers = {}
        try:
            atexit.unregister(self.down)
        except Exception:  # noqa: BLE001
            pass

    def _on_signal(self, signum, frame) -> None:
        self.down()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    # -- using it
    def rank_env(self, w: int, port: int, base: dict | None = None) -> dict:
        """torchrun's environment for worker w (rank w, rank 0 the master), gloo bound to the
        worker's veth, one thread."""
        env = dict(os.environ if base is None else base)
        env.update(MASTER_ADDR=self.address(0), MASTER_PORT=str(port), RANK=str(w),
                   LOCAL_RANK="0", WORLD_SIZE=str(self.n_workers), LOCAL_WORLD_SIZE="1",
                   GLOO_SOCKET_IFNAME=self.ifname(w), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   GRADBLOCK_NET_IF=self.ifname(w))
        return env

    def popen(self, w: int, cmd: list[str], **kw) -> subprocess.Popen:
        """Start `cmd` inside worker w's namespace (its own process group, killed by down())."""
        if not self._up:
            raise NetworkTestbedError("the testbed is not up")
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(w), *cmd],
                                start_new_session=True, **kw)
        self.procs.append(proc)
        return proc

    def exec(self, w: int, cmd: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.ns(w), *cmd], **kw)

    def counters(self) -> dict[int, dict[str, int]]:
        """Each worker veth's byte and packet counters (`ip -s -j link` in its namespace)."""
        import json
        out = {}
        for w in range(self.n_workers):
            p = _run(["ip", "-n", self.ns(w), "-s", "-j", "link", "show", "dev", self.ifname(w)])
            st = json.loads(p.stdout)[0]["stats64"]
            out[w] = {"tx_bytes": int(st["tx"]["bytes"]), "rx_bytes": int(st["rx"]["bytes"]),
                      "tx_packets": int(st["tx"]["packets"]),
                      "rx_packets": int(st["rx"]["packets"])}
        return out

    def qdiscs(self, w: int) -> str:
        return _run(["tc", "-n", self.ns(w), "qdisc", "show", "dev", self.ifname(w)]).stdout


def read_counters(ifname: str) -> dict[str, int]:
    """From inside a namespace (a rank process): its interface's byte counters via sysfs."""
    base = f"/sys/class/net/{ifname}/statistics"
    with open(f"{base}/tx_bytes") as f:
        tx = int(f.read())
    with open(f"{base}/rx_bytes") as f:
        rx = int(f.read())
    return {"tx_bytes": tx, "rx_bytes": rx}
