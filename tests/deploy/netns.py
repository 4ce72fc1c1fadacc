"""A compose network made of Linux network namespaces: one namespace per service, each with an
``eth0`` on one bridge, the compose file's addresses, and a hosts file naming every service
(what Docker's embedded DNS answers). The bridge and the tester live in a namespace of their
own ("hub"), so nothing is added to the machine's own network and two runs cannot collide.

Processes run with ``ip netns exec NS argv`` (``ip`` execs the program: the PID is the
program's own, so it is stopped by PID). ``ip netns exec`` bind-mounts ``/etc/netns/NS/hosts``
over ``/etc/hosts`` for the program, which is how the service names resolve.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

IP = shutil.which("ip") or "/usr/sbin/ip"
NETNS_ETC = Path("/etc/netns")


class NetnsUnavailable(Exception):
    """Network namespaces cannot be made here (no root, no CAP_SYS_ADMIN, no iproute2)."""


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
