"""Cluster administration used by the operator command: a tiny blocking client and the
cluster-forming steps, the same ones ``redis-cli --cluster create`` performs.

Forming a cluster (``create_cluster``):
  1. every node must be an empty, cluster-enabled node that knows only itself;
  2. masters get even ``CLUSTER ADDSLOTSRANGE`` shares of the 16384 slots;
  3. every node gets a distinct ``CLUSTER SET-CONFIG-EPOCH`` (1..N), so no epoch collision
     has to be resolved by gossip;
  4. every node but the first ``CLUSTER MEET``s the first; gossip introduces the rest;
  5. once every node knows every other, replicas get ``CLUSTER REPLICATE <master-id>``;
  6. wait until every node reports ``cluster_state:ok`` and the same slot signature.

Works against bundled nodes and real redis-server nodes alike. Errors raise ``AdminError``
with a message fit for an operator.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass

import hiredis

from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import SLOT_COUNT

Address = tuple[str, int]


class AdminError(Exception):
    """A cluster administration step failed; ``str()`` is the message for the operator."""


# (username or None, password) a node wants, or None: no AUTH.
Credentials = tuple[str | None, str] | None


@dataclass
class TLSOptions:
    """TLS for every ``NodeClient`` of this process (``slotgate cluster --tls ...``)."""

    context: ssl.SSLContext | None = None  # None: plain TCP
    server_name: str | None = None  # the name the nodes' certificates must hold; None: the host


TLS = TLSOptions()


class NodeClient:
    """One blocking RESP2 connection to a node, logged in with ``auth`` when given. Error
    replies come back as ``hiredis.ReplyError`` values from ``call`` (not raised); ``check``
    raises them as ``AdminError``."""

    def __init__(self, addr: Address, timeout_s: float = 5.0, auth: Credentials = None) -> None:
        self.addr = addr
        try:
            self._sock = socket.create_connection(addr, timeout=timeout_s)
            if TLS.context is not None:
                self._sock = TLS.context.wrap_socket(
                    self._sock, server_hostname=TLS.server_name or addr[0])
        except OSError as exc:
            raise AdminError(f"cannot connect to {addr[0]}:{addr[1]}: {exc.strerror or exc}") from exc
        self._reader = hiredis.Reader()
        self.auth = auth
        if auth is not None:
            try:
                self.check("AUTH", *(a for a in auth if a is not None))
            except AdminError:
                self.close()
                raise

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> NodeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, *args: bytes | str | int) -> object:
        self._sock.sendall(encode_command(*args))
        while True:
            reply = self._reader.gets()
            if reply is not False:
                return reply
            data = self._sock.recv(65536)
            if not data:
                raise AdminError(f"{self.addr[0]}:{self.addr[1]} closed the connection")
            self._reader.feed(data)

    def check(self, *args: bytes | str | int) -> object:
        reply = self.call(*args)
        if isinstance(reply, hiredis.ReplyError):
            cmd = " ".join(str(a) for a in args[:3])
            raise AdminError(f"{self.addr[0]}:{self.addr[1]}: {cmd}: {reply}")
        return reply

    def text(self, *args: bytes | str | int) -> str:
        reply = self.check(*args)
        return reply.decode() if isinstance(reply, bytes) else str(reply)


def parse_info(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, _, v = line.partition(":")
            out[k] = v
    return out


@dataclass(frozen=True)
class NodeLine:
    """One line of CLUSTER NODES."""

    id: str
    addr: str
    flags: frozenset[str]
    master_id: str
    link: str
    slots: tuple[str, ...]

    @classmethod
    def parse(cls, line: str) -> NodeLine:
        f = line.split()
        if len(f) < 8:
            raise AdminError(f"malformed CLUSTER NODES line: {line!r}")
        return cls(f[0], f[1].split("@")[0], frozenset(f[2].split(",")), f[3], f[7], tuple(f[8:]))


def cluster_nodes(client: NodeClient) -> list[NodeLine]:
    return [NodeLine.parse(ln) for ln in client.text("CLUSTER", "NODES").splitlines() if ln.strip()]


def slot_signature(lines: Sequence[NodeLine]) -> str:
    """The slot signature redis-cli compares: id + sorted slot tokens per owning node."""
    parts = []
    for n in lines:
        slots = sorted(s for s in n.slots if not s.startswith("["))
        if slots:
            parts.append(n.id + ":" + ",".join(slots))
    return "|".join(sorted(parts))


def slot_ranges(masters: int) -> list[tuple[int, int]]:
    """Even shares of the slot space, first master first (as redis-cli splits it)."""
    per = SLOT_COUNT / masters
    out = []
    start = 0
    for i in range(masters):
        end = SLOT_COUNT - 1 if i == masters - 1 else int(round(per * (i + 1))) - 1
        out.append((start, end))
        start = end + 1
    return out


def create_cluster(addrs: Sequence[Address], replicas: int = 0, timeout_s: float = 60.0,
                   log: object = print, auth: Credentials = None) -> None:
    """Form a new cluster from empty nodes: the first ``len/(replicas+1)`` are masters."""
    say = log if callable(log) else print
    if replicas < 0:
        raise AdminError("replicas must be >= 0")
    n_masters = len(addrs) // (replicas + 1)
    if n_masters < 3 or n_masters * (replicas + 1) != len(addrs):
        raise AdminError(
            f"{len(addrs)} nodes with {replicas} replicas per master: need masters*(replicas+1) "
            "nodes and at least 3 masters")
    clients = [NodeClient(a, auth=auth) for a in addrs]
    try:
        ids = []
        for c in clients:
            info = parse_info(c.text("INFO", "cluster"))
            if info.get("cluster_enabled") != "1":
                raise AdminError(f"{c.addr[0]}:{c.addr[1]} is not configured as a cluster node")
            cinfo = parse_info(c.text("CLUSTER", "INFO"))
            if cinfo.get("cluster_known_nodes") != "1" or int(c.check("DBSIZE")) != 0:  # type: ignore[call-overload]
                raise AdminError(f"{c.addr[0]}:{c.addr[1]} is not empty (it knows other nodes or holds keys)")
            ids.append(c.text("CLUSTER", "MYID"))
        masters, others = clients[:n_masters], clients[n_masters:]
        for c, (lo, hi) in zip(masters, slot_ranges(n_masters), strict=True):
            say(f">>> {c.addr[0]}:{c.addr[1]} gets slots {lo}-{hi}")
            c.check("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for epoch, c in enumerate(clients, start=1):
            c.call("CLUSTER", "SET-CONFIG-EPOCH", epoch)  # refused if already set: harmless
        first = clients[0].addr
        say(">>> Sending CLUSTER MEET messages to join the cluster")
        for c in clients[1:]:
            c.check("CLUSTER", "MEET", first[0], first[1])
        _wait(lambda: all(len(cluster_nodes(c)) == len(clients) for c in clients), timeout_s,
              "nodes did not all meet")
        for i, c in enumerate(others):
            master_id = ids[i % n_masters]
            say(f">>> {c.addr[0]}:{c.addr[1]} replicates {masters[i % n_masters].addr[1]}")
            c.check("CLUSTER", "REPLICATE", master_id)
        say(">>> Waiting for the cluster to join")
        _wait(lambda: cluster_converged(clients), timeout_s, "cluster did not converge")
    finally:
        for c in clients:
            c.close()


def cluster_converged(clients: Sequence[NodeClient]) -> bool:
    sigs = set()
    for c in clients:
        if parse_info(c.text("CLUSTER", "INFO")).get("cluster_state") != "ok":
            return False
        sigs.add(slot_signature(cluster_nodes(c)))
    return len(sigs) == 1


def _wait(pred: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    assert callable(pred)
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except AdminError:
            pass  # a node still starting its links; asked again below until the deadline
        time.sleep(0.1)
    raise AdminError(f"{what} within {timeout_s:g}s")


def check_cluster(addr: Address, auth: Credentials = None) -> list[str]:
    """Problems seen from ``addr``'s view (empty list: all slots covered, all nodes agree)."""
    problems: list[str] = []
    with NodeClient(addr, auth=auth) as entry:
        lines = cluster_nodes(entry)
    sigs: dict[str, str] = {}
    covered = 0
    for ln in lines:
        for tok in ln.slots:
            if tok.startswith("["):
                problems.append(f"open slot {tok} on {ln.addr}")
                continue
            lo, _, hi = tok.partition("-")
            covered += int(hi or lo) - int(lo) + 1
        if "fail" in ln.flags or "fail?" in ln.flags:
            problems.append(f"node {ln.addr} is flagged {','.join(sorted(ln.flags))}")
            continue
        host, _, port = ln.addr.rpartition(":")
        try:
            with NodeClient((host or addr[0], int(port)), auth=auth) as c:
                sigs[ln.addr] = slot_signature(cluster_nodes(c))
        except AdminError as exc:
            problems.append(str(exc))
    if covered != SLOT_COUNT:
        problems.append(f"only {covered} of {SLOT_COUNT} slots are covered")
    if len(set(sigs.values())) > 1:
        problems.append("nodes don't agree about the slots configuration")
    return problems
