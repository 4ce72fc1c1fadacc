"""A compose network made of Linux network namespaces: one namespace per service, each with an
``eth0`` on one bridge, the compose file's addresses, and a hosts file naming every service
(what Docker's embedded DNS answers). The bridge and the tester live in a namespace of their
own ("hub"), so nothing is added to the machine's own network and two runs cannot collide.

Processes run with ``ip netns exec NS argv`` (``ip`` execs the program: the PID is the
program's own, so it is stopped by PID). ``ip netns exec`` bind-mounts ``/etc/netns/NS/hosts``
over ``/etc/hosts`` for the program, which is how the service names resolve.

Faults, for the reliability tests: every fault is a rule in the *sender's* namespace (an
nftables ``output`` chain of its own, or a netem qdisc on its ``eth0``), so it goes with the
namespace. :meth:`Network.cut` drops every packet between two groups of services (a symmetric
partition); :meth:`Network.cut_link` kills the TCP connections one service opens to another's
port, both ways, and leaves those the other opens intact (a one-way cut of a link);
:meth:`Network.lose` drops a share of the packets; :meth:`Network.delay` delays them (netem,
which some kernels lack: :class:`FaultUnavailable`); :meth:`Network.heal` removes them all.

The test process stays in the machine's own namespace and reaches the services from threads
that entered a service's namespace (:meth:`Network.call_in`, :meth:`Network.thread_in`): a
socket belongs to the namespace it was created in, whichever thread uses it later.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import shutil
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

IP = shutil.which("ip") or "/usr/sbin/ip"
NFT = shutil.which("nft") or "/usr/sbin/nft"
TC = shutil.which("tc") or "/usr/sbin/tc"
NETNS_ETC = Path("/etc/netns")
NETNS_RUN = Path("/run/netns")
CLONE_NEWNET = 0x40000000
FAULT_TABLE = "sgfault"
T = TypeVar("T")


class NetnsUnavailable(Exception):
    """Network namespaces cannot be made here (no root, no CAP_SYS_ADMIN, no iproute2)."""


class FaultUnavailable(Exception):
    """This fault cannot be made here (no nft, or a kernel without nf_tables or sch_netem)."""


def ip(*args: str) -> None:
    r = subprocess.run([IP, *args], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {r.stderr.strip()}")


class Network:
    """Namespaces on one bridge. ``close()`` ends every process started here (by PID), then
    deletes the namespaces (their veths go with them) and their hosts files."""

    def __init__(self, subnet: str) -> None:
        self.tag = uuid.uuid4().hex[:5]
        self.net = ipaddress.ip_network(subnet)
        self.hub = f"sg{self.tag}-hub"
        self.namespaces: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.addresses: dict[str, str] = {}  # service name -> address
        self.fault_tables: set[str] = set()  # namespaces given an nftables fault chain
        self.delayed: set[str] = set()  # services with a netem qdisc
        self.pending: dict[str, list[str]] | None = None  # rules of a batch, per namespace
        try:
            self._add_ns(self.hub)
        except OSError as exc:
            raise NetnsUnavailable(str(exc)) from exc
        gateway = str(next(self.net.hosts()))
        try:
            ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            ip("-n", self.hub, "addr", "add", f"{gateway}/{self.net.prefixlen}", "dev", "br0")
            ip("-n", self.hub, "link", "set", "br0", "up")
        except OSError:
            self.close()
            raise
        self.taken = {gateway}

    def _add_ns(self, name: str) -> None:
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def ns(self, service: str) -> str:
        return f"sg{self.tag}-{service}"

    def next_free(self) -> str:
        """The next unassigned address of the subnet, as Docker's IPAM hands them out."""
        return next(str(a) for a in self.net.hosts()
                    if str(a) not in self.taken and str(a) not in self.addresses.values())

    def add(self, service: str, address: str | None) -> str:
        """A namespace for ``service`` on the bridge, at ``address`` (or the next free one)."""
        address = address or self.next_free()
        name = self.ns(service)
        self._add_ns(name)
        veth = f"sg{self.tag}v{len(self.addresses)}"
        ip("link", "add", veth, "netns", self.hub, "type", "veth", "peer", "name", "eth0",
           "netns", name)
        ip("-n", self.hub, "link", "set", veth, "master", "br0", "up")
        ip("-n", name, "addr", "add", f"{address}/{self.net.prefixlen}", "dev", "eth0")
        ip("-n", name, "link", "set", "eth0", "up")
        self.addresses[service] = address
        return address

    def write_hosts(self) -> None:
        """Every namespace (the hub too) resolves every service name to its address."""
        lines = ["127.0.0.1 localhost", *(f"{a} {s}" for s, a in self.addresses.items())]
        for name in self.namespaces:
            d = NETNS_ETC / name
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text("\n".join(lines) + "\n")

    def argv(self, ns: str, argv: Sequence[str]) -> list[str]:
        return [IP, "netns", "exec", ns, *argv]

    def run(self, ns: str, argv: Sequence[str], timeout_s: float = 60.0,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(ns, argv), capture_output=True, text=True,
                              timeout=timeout_s, cwd=cwd, stdin=subprocess.DEVNULL)

    def start(self, ns: str, argv: Sequence[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            proc = subprocess.Popen(self.argv(ns, argv), cwd=cwd, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        """SIGTERM every process started here (by PID), newest first; SIGKILL after 10 s."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.procs.clear()

    def close(self) -> None:
        self.stop_all()
        for name in reversed(self.namespaces):
            try:
                ip("netns", "del", name)
            except OSError:
                pass  # reported by the leak check of the test that made it
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """Namespaces of this network still present (after close: none)."""
        r = subprocess.run([IP, "netns", "list"], capture_output=True, text=True, timeout=10)
        return [line.split()[0] for line in r.stdout.splitlines()
                if line.startswith(f"sg{self.tag}-")]

    # -- reaching the services ----------------------------------------------------------------
    def address(self, service: str) -> str:
        return self.addresses[service]

    def thread_in(self, service: str, target: Callable[[], object],
                  name: str = "") -> threading.Thread:
        """A (not yet started) daemon thread that runs ``target`` inside ``service``'s
        namespace: every socket it opens is that namespace's."""

        def run() -> None:
            enter_netns(self.ns(service))
            target()

        return threading.Thread(target=run, name=name or f"in-{service}", daemon=True)

    def call_in(self, service: str, fn: Callable[..., T], *args: Any,
                timeout_s: float = 60.0) -> T:
        """``fn(*args)`` run inside ``service``'s namespace; its result, or its exception."""
        out: list[Any] = []

        def target() -> None:
            try:
                out.append((True, fn(*args)))
            except BaseException as exc:  # handed to the caller
                out.append((False, exc))

        t = self.thread_in(service, target)
        t.start()
        t.join(timeout_s)
        if not out:
            raise TimeoutError(f"{getattr(fn, '__name__', fn)} in {service}: no answer "
                               f"after {timeout_s}s")
        ok, value = out[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    # -- faults -------------------------------------------------------------------------------
    def _nft(self, service: str, *rule: str) -> None:
        """One rule appended to ``service``'s output chain (made on first use); inside
        :meth:`batch`, at the batch's end."""
        ns = self.ns(service)
        line = f"add rule inet {FAULT_TABLE} out {' '.join(rule)}\n"
        if self.pending is not None:
            self.pending.setdefault(ns, []).append(line)
            return
        self._nft_script(ns, [line])

    def _nft_script(self, ns: str, lines: list[str]) -> None:
        """``lines`` in one nft run (the output chain made first if it is new)."""
        if ns not in self.fault_tables:
            lines = [f"add table inet {FAULT_TABLE}\n",
                     f"add chain inet {FAULT_TABLE} out "
                     "{ type filter hook output priority 0; policy accept; }\n", *lines]
        self._nft_run(ns, ["-f", "-"], "".join(lines))
        self.fault_tables.add(ns)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """The rules added inside go in together at the end: one nft run per namespace, all
        namespaces at once. A fault of many rules (a cut is two per pair of services) then
        starts within one nft run's time instead of dozens of them one after another (on a
        loaded machine each takes 0.1 s or more: a 1 s cut made rule by rule lasted seconds
        for the first rules)."""
        self.pending = {}
        try:
            yield
        finally:
            pending, self.pending = self.pending, None
        self._each_ns(lambda ns: self._nft_script(ns, pending[ns]), pending)

    def _nft_run(self, ns: str, args: list[str], stdin: str | None = None) -> None:
        if not Path(NFT).exists():
            raise FaultUnavailable("nft is not installed (.ci/run installs nftables)")
        r = subprocess.run(self.argv(ns, [NFT, *args]), input=stdin, capture_output=True,
                           text=True, timeout=30)
        if r.returncode != 0:
            raise FaultUnavailable(f"nft {' '.join(args)}: {r.stderr.strip()}")

    def cut(self, side_a: Sequence[str], side_b: Sequence[str]) -> None:
        """A symmetric partition: no packet passes between a service of ``side_a`` and one of
        ``side_b`` (connections already open stall, new ones time out)."""
        for src, dsts in ((side_a, side_b), (side_b, side_a)):
            for s in src:
                for d in dsts:
                    self._nft(s, "ip", "daddr", self.addresses[d], "drop")

    def cut_link(self, src: str, dst: str, port: int) -> None:
        """The TCP connections ``src`` opens to ``dst``:``port`` are cut both ways (what
        ``src`` sends there, and what comes back from that port); the connections ``dst``
        opens to ``src`` still work: a one-way cut of a link."""
        self._nft(src, "ip", "daddr", self.addresses[dst], "tcp", "dport", str(port), "drop")
        self._nft(dst, "ip", "daddr", self.addresses[src], "tcp", "sport", str(port), "drop")

    def lose(self, src: str, dst: str, percent: int) -> None:
        """``percent`` (1..100) of the packets ``src`` sends to ``dst`` are dropped, at random."""
        share = [] if percent >= 100 else ["numgen", "random", "mod", "100", "<", str(percent)]
        self._nft(src, "ip", "daddr", self.addresses[dst], *share, "drop")

    def delay(self, service: str, delay_ms: int) -> None:
        """Every packet ``service`` sends leaves ``delay_ms`` late (netem on its eth0)."""
        r = self.run(self.ns(service), [TC, "qdisc", "replace", "dev", "eth0", "root", "netem",
                                        "delay", f"{delay_ms}ms"], timeout_s=30)
        if r.returncode != 0:
            raise FaultUnavailable(f"tc netem: {r.stderr.strip()} (the kernel has no sch_netem)")
        self.delayed.add(service)

    def netem_available(self) -> bool:
        """Whether this kernel delays packets with netem (tried on the hub's bridge)."""
        r = self.run(self.hub, [TC, "qdisc", "add", "dev", "br0", "root", "netem", "delay", "1ms"])
        if r.returncode == 0:
            self.run(self.hub, [TC, "qdisc", "del", "dev", "br0", "root"])
        return r.returncode == 0

    def heal(self) -> None:
        """Every fault removed: the rules flushed (every namespace at once), the netem qdiscs
        deleted."""
        self._each_ns(lambda ns: self._nft_run(ns, ["flush", "chain", "inet", FAULT_TABLE, "out"]),
                      self.fault_tables)
        for service in sorted(self.delayed):
            self.run(self.ns(service), [TC, "qdisc", "del", "dev", "eth0", "root"])
        self.delayed.clear()

    @staticmethod
    def _each_ns(fn: Callable[[str], None], namespaces: Sequence[str] | set[str] | dict[str, Any],
                 ) -> None:
        """``fn(ns)`` for every namespace, in parallel threads; the first error re-raised."""
        names = sorted(namespaces)
        if not names:
            return
        with ThreadPoolExecutor(len(names)) as pool:
            for future in [pool.submit(fn, ns) for ns in names]:
                future.result()


_libc = ctypes.CDLL(None, use_errno=True)


def enter_netns(ns: str) -> None:
    """The calling thread (only it) moves into network namespace ``ns`` for good."""
    fd = os.open(NETNS_RUN / ns, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {ns}: {os.strerror(err)}")
    finally:
        os.close(fd)
