"""A fake Redis Cluster inside the test's own trio run: a few nodes on loopback ports that
answer from dicts, for in-process tests of the proxy's session, router and fan-out.

Each ``FakeNode`` knows which slots the cluster gives to whom (``FakeCluster.owner``) and
answers like a cluster node: MOVED for a slot another node owns, ASK for a key that is not
here in a slot being migrated (``ask_to``), the command after ASKING on a node importing the
slot, MULTI/EXEC with a queued command's redirect aborting EXEC, WATCH by key versions, and
CLUSTER SLOTS for the proxy's topology. Tests script the rest: ``faults`` (the next replies to
a command, e.g. one TRYAGAIN) and ``moved_to`` (a node that sends a slot elsewhere whatever
the cluster says, e.g. two nodes sending each other MOVED forever); ``hold`` holds replies
back until its event is set. ``log`` records every command a node received, in order.

Values are strings and lists only; BLPOP does not block (it answers null on an empty list).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from slotgate.protocol.commands import key_positions
from slotgate.protocol.resp import RequestReader
from slotgate.protocol.slots import SLOT_COUNT, key_slot

OK = b"+OK\r\n"
NULL = b"$-1\r\n"


def bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def array(items: list[bytes]) -> bytes:
    return b"*%d\r\n%s" % (len(items), b"".join(items))


@dataclass
class _Conn:
    """One client connection's state on a node."""

    asking: bool = False
    queued: list[list[bytes]] | None = None  # inside MULTI
    doomed: bool = False  # a queued command was refused: EXEC aborts
    watched: dict[bytes, int] = field(default_factory=dict)  # key -> version at WATCH


class FakeNode:
    def __init__(self, cluster: FakeCluster, node_id: str) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.address = ""
        self.data: dict[bytes, bytes | list[bytes]] = {}
        self.versions: dict[bytes, int] = {}
        self.log: list[list[bytes]] = []
        self.faults: dict[bytes, list[bytes]] = {}  # upper-case command -> next replies
        self.moved_to: dict[int, str] = {}  # slot -> address, answered whatever the owner
        self.ask_to: dict[int, str] = {}  # slot migrating away -> its target
        self.importing: set[int] = set()
        self.hold: trio.Event | None = None  # replies wait until it is set

    def commands(self, name: bytes) -> list[list[bytes]]:
        """The commands named ``name`` this node received (a proxy's retries included)."""
        return [argv for argv in self.log if argv[0].upper() == name.upper()]

    # --- the server ---------------------------------------------------------------------------
    async def serve(self, stream: trio.SocketStream) -> None:
        reader = RequestReader()
        conn = _Conn()
        async with stream:
            while True:
                try:
                    data = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return
                if not data:
                    return
                reader.feed(data)
                out = [self.handle(conn, argv) for argv in reader.get_requests()]
                if out and self.hold is not None:
                    await self.hold.wait()
                if out:
                    try:
                        await stream.send_all(b"".join(out))
                    except trio.BrokenResourceError:
                        return

    # --- commands -----------------------------------------------------------------------------
    def handle(self, conn: _Conn, argv: list[bytes]) -> bytes:
        self.log.append(argv)
        name = argv[0].upper()
        fault = self.faults.get(name)
        if fault:
            return fault.pop(0)
        if name == b"CLUSTER":
            if argv[1].upper() == b"SLOTS":
                return self.cluster.slots_reply()
            return b"-ERR unknown subcommand\r\n"
        if name == b"ASKING":
            conn.asking = True
            return OK
        if name == b"MULTI":
            conn.queued, conn.doomed = [], False
            return OK
        if name == b"EXEC":
            return self._exec(conn)
        if name == b"UNWATCH":
            conn.watched.clear()
            return OK
        asking = conn.asking
        if conn.queued is None:
            conn.asking = False  # ASKING lasts one command, or to the end of a transaction
        redirect = self._redirect(argv, asking)
        if redirect is not None:
            if conn.queued is not None:
                conn.doomed = True
            return redirect
        if conn.queued is not None:
            conn.queued.append(argv)
            return b"+QUEUED\r\n"
        if name == b"WATCH":
            for key in argv[1:]:
                conn.watched[key] = self.versions.get(key, 0)
            return OK
        return self._run(argv)

    def _exec(self, conn: _Conn) -> bytes:
        queued, doomed = conn.queued, conn.doomed
        conn.queued, conn.doomed, conn.asking = None, False, False
        watched, conn.watched = conn.watched, {}
        if queued is None:
            return b"-ERR EXEC without MULTI\r\n"
        if doomed:
            return b"-EXECABORT Transaction discarded because of previous errors.\r\n"
        if any(self.versions.get(k, 0) != v for k, v in watched.items()):
            return b"*-1\r\n"
        return array([self._run(argv) for argv in queued])

    def _redirect(self, argv: list[bytes], asking: bool) -> bytes | None:
        keys = [argv[p] for p in key_positions(argv)]
        if not keys:
            return None
        slots = {key_slot(k) for k in keys}
        if len(slots) > 1:
            return b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
        slot = slots.pop()
        if slot in self.moved_to:
            return b"-MOVED %d %s\r\n" % (slot, self.moved_to[slot].encode())
        owner = self.cluster.owner[slot]
        if owner is self:
            if slot in self.ask_to and any(k not in self.data for k in keys):
                return b"-ASK %d %s\r\n" % (slot, self.ask_to[slot].encode())
            return None
        if asking and slot in self.importing:
            return None
        if owner is None:
            return b"-CLUSTERDOWN Hash slot not served\r\n"
        return b"-MOVED %d %s\r\n" % (slot, owner.address.encode())

    def _write(self, key: bytes, value: bytes | list[bytes] | None) -> None:
        if value is None:
            self.data.pop(key, None)
        else:
            self.data[key] = value
        self.versions[key] = self.versions.get(key, 0) + 1

    def _run(self, argv: list[bytes]) -> bytes:
        name = argv[0].upper()
        if name == b"PING":
            return b"+PONG\r\n"
        if name == b"GET":
            value = self.data.get(argv[1])
            return NULL if value is None else bulk(value)  # type: ignore[arg-type]
        if name == b"SET":
            self._write(argv[1], argv[2])
            return OK
        if name == b"MSET":
            for i in range(1, len(argv) - 1, 2):
                self._write(argv[i], argv[i + 1])
            return OK
        if name == b"MGET":
            return array([bulk(v) if isinstance(v := self.data.get(k), bytes) else NULL
                          for k in argv[1:]])
        if name == b"INCR":
            n = int(self.data.get(argv[1], b"0")) + 1  # type: ignore[arg-type]
            self._write(argv[1], b"%d" % n)
            return b":%d\r\n" % n
        if name == b"DEL":
            present = [k for k in argv[1:] if k in self.data]
            for k in present:
                self._write(k, None)
            return b":%d\r\n" % len(present)
        if name == b"RPUSH":
            items = self.data.setdefault(argv[1], [])
            assert isinstance(items, list)
            items.extend(argv[2:])
            self._write(argv[1], items)
            return b":%d\r\n" % len(items)
        if name == b"BLPOP":
            for key in argv[1:-1]:
                queue = self.data.get(key)
                if isinstance(queue, list) and queue:
                    first = queue.pop(0)
                    self._write(key, queue or None)
                    return array([bulk(key), bulk(first)])
            return b"*-1\r\n"
        return b"-ERR unknown command '%s'\r\n" % argv[0]


class FakeCluster:
    """``n`` fake masters; the slots split in equal ranges between them, in order."""

    def __init__(self, n: int = 3) -> None:
        self.nodes = [FakeNode(self, f"{i:040x}") for i in range(n)]
        self.owner: list[FakeNode | None] = [
            self.nodes[slot * n // SLOT_COUNT] for slot in range(SLOT_COUNT)]

    async def start(self, nursery: trio.Nursery) -> None:
        for node in self.nodes:
            listeners = await nursery.start(trio.serve_tcp, node.serve, 0)
            host, port = listeners[0].socket.getsockname()[:2]
            node.address = f"{host}:{port}"

    def seeds(self) -> list[tuple[str, int]]:
        """The proxy's seed list (settings.seeds): the first node."""
        host, _, port = self.nodes[0].address.rpartition(":")
        return [(host, int(port))]

    def node_of(self, key: bytes) -> FakeNode:
        node = self.owner[key_slot(key)]
        assert node is not None
        return node

    def move(self, slot: int, to: FakeNode) -> None:
        """The slot now belongs to ``to`` (the proxy learns it from a MOVED), keys with it."""
        old = self.owner[slot]
        self.owner[slot] = to
        if old is not None and old is not to:
            for key in [k for k in old.data if key_slot(k) == slot]:
                to.data[key] = old.data.pop(key)

    def slots_reply(self) -> bytes:
        entries: list[bytes] = []
        start = 0
        for slot in range(1, SLOT_COUNT + 1):
            if slot < SLOT_COUNT and self.owner[slot] is self.owner[start]:
                continue
            node = self.owner[start]
            if node is not None:
                host, _, port = node.address.rpartition(":")
                entries.append(b"*3\r\n:%d\r\n:%d\r\n%s" % (
                    start, slot - 1,
                    array([bulk(host.encode()), b":%s\r\n" % port.encode(),
                           bulk(node.node_id.encode())])))
            start = slot
        return array(entries)
