"""Wake-ups for pops across slots that wait, from the nodes' client-side caching.

A pop over keys in several slots that found every key empty (``blockmulti.py``) must run its
step 1 again when one of its keys changes. No Redis command blocks until a sorted set (or any
of several keys on several nodes) gets an element without taking it, so the proxy asks the
nodes to tell it: server-assisted client-side caching, which needs no server configuration.

- One *tracker* per node, shared by every waiting pop of this proxy process: a connection in
  RESP3 with ``CLIENT TRACKING ON`` (default mode). Reading a key there (``EXISTS k …``, one
  command per slot) makes the node remember it; the next change of that key (any write:
  ``ZADD``, ``RPUSH``, ``RENAME`` onto it, ``RESTORE``, a transaction, a script, expiry,
  ``FLUSHALL``) sends one ``invalidate`` push naming it, and the node forgets it again.
- A waiting pop is a ``Watch``: it *arms* (registers its keys with their owners' trackers,
  then reads them there), runs step 1, and sleeps until a push names one of its keys, its
  tracker's connection is lost, or a topology refresh finds one of its slots owned by
  another node; then it arms again and runs step 1 again. A push wakes one watch of the
  key, which carries the key's *baton* (``_Tracker.wake_one``): its own pop from the key
  wakes the next; if it ends otherwise it wakes the next itself. Arming before step 1 closes the
  race with an element that arrives in between: it is either seen by step 1 or announced by
  a push after the read's reply (the node writes both on the one connection, in order).
- A key that cannot be armed (its owner unknown or unreachable, ``MOVED``, ``ASK``, an
  error) makes ``arm`` answer False: the caller runs step 1 again after ``RETRY_S``.

While nothing changes a waiting pop costs nothing on the nodes and no connection of its own.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING

import trio

from slotgate.eventcore import tls
from slotgate.protocol.resp import ProtocolError, ReplyFramer, encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.backend.auth import BackendAuthError
from slotgate.proxy.backend.connections import RECV_BUFFER_BYTES, connect
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.ops.metrics import ProxyMetrics
    from slotgate.proxy.ops.settings import ProxySettings
    from slotgate.proxy.routing.topology import Topology

log = logging.getLogger(__name__)

# A key that could not be armed: step 1 again after this long.
RETRY_S = 0.05
# A node whose tracking connection could not be opened is not asked again for this long.
DOWN_S = 1.0
_SETUP = encode_command(b"HELLO", b"3") + encode_command(b"CLIENT", b"TRACKING", b"ON")
_INVALIDATE = b"$10\r\ninvalidate\r\n"


class Watch:
    """One waiting pop's keys: ``woken`` is set when one of them may have changed."""

    __slots__ = ("woken", "owners", "batons", "arms", "_trackers")

    def __init__(self) -> None:
        self.woken = trio.Event()
        self.owners: dict[int, str] = {}  # slot -> the node its keys were armed on
        # keys whose change woke this watch alone, not yet settled by an empty try after
        # it: if its pop ends first, the next watch of each is woken (``KeyWake.forget``)
        # (with the arm it came in: a try settles those given before the arm it follows)
        self.batons: dict[tuple[_Tracker, bytes], int] = {}
        self.arms = 0  # how many times its keys were armed
        # where this watch is registered: tracker -> its keys there
        self._trackers: dict[_Tracker, list[bytes]] = {}

    def wake(self) -> None:
        self.woken.set()


class _Tracker:
    """One node's tracking connection and the watches of the keys read on it."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.stream: tls.NodeStream | None = None
        self.ready = trio.Event()  # connected (or failed: ``lost``)
        self.lost = False
        self.replies: deque[list[bytes]] = deque()  # one cell per request awaiting its reply
        self.answered = trio.Event()  # set whenever a reply arrives (then replaced)
        self.watches: dict[bytes, dict[Watch, None]] = {}  # key -> its watches
        self.send_lock = trio.Lock()
        self.scope = trio.CancelScope()  # cancelled: the connection is given up

    def register(self, watch: Watch, keys: list[bytes]) -> None:
        for key in keys:
            self.watches.setdefault(key, {})[watch] = None
        watch._trackers.setdefault(self, []).extend(keys)

    def forget(self, watch: Watch, keys: list[bytes]) -> None:
        for key in keys:
            ws = self.watches.get(key)
            if ws is not None:
                ws.pop(watch, None)
                if not ws:
                    del self.watches[key]

    def invalidated(self, raw: bytes) -> None:
        """An ``invalidate`` push: for each key it names, one watch is woken (a null: all)."""
        keys = array_elements(raw)[1]
        if keys[:1] not in (b"*", b"~"):  # FLUSHALL/FLUSHDB: every key
            self.wake_all()
            return
        for item in array_elements(keys):
            self.wake_one(item[item.index(b"\r\n") + 2:-2])

    def wake_one(self, key: bytes) -> None:
        """The first watch of ``key`` not woken yet is, and carries the key's baton: a
        change wakes one waiting pop, as Redis serves one blocked client per element. It
        arms its keys again (the node tracks ``key`` again for every watch) and tries: its
        own pop from ``key`` is a change that wakes the next one; a try that finds nothing
        settles the baton; a pop that ends otherwise passes it on (``KeyWake.forget``)."""
        ws = self.watches.get(key)
        if not ws:
            return
        watch = next((w for w in ws if not w.woken.is_set()), None)
        if watch is None:  # every one is awake already: each will arm and try
            return
        del ws[watch]
        if not ws:
            del self.watches[key]
        watch.batons[(self, key)] = watch.arms
        watch.wake()

    def wake_all(self) -> None:
        for ws in self.watches.values():
            for watch in ws:
                watch.wake()
        self.watches.clear()

    async def send(self, payload: bytes, replies: int) -> list[list[bytes]] | None:
        """``payload`` sent: one cell per reply, filled as they arrive (None: the connection
        is lost)."""
        if self.lost or self.stream is None:
            return None
        cells: list[list[bytes]] = [[] for _ in range(replies)]
        async with self.send_lock:
            self.replies.extend(cells)
            with trio.CancelScope(shield=True):  # a request cut halfway would end the stream
                try:
                    await self.stream.send_all(payload)
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                    self.lost = True
                    return None
        return cells

    async def replies_to(self, cells: list[list[bytes]]) -> list[bytes] | None:
        """The replies ``send`` gave ``cells`` for (None: the connection is lost)."""
        while not self.lost and not cells[-1]:
            await self.answered.wait()
        return None if self.lost else [cell[0] for cell in cells]


class KeyWake:
    """The trackers of one proxy process, read by tasks of its nursery."""

    def __init__(self, settings: ProxySettings, metrics: ProxyMetrics, nursery: trio.Nursery,
                 topology: Topology) -> None:
        self._settings = settings
        self._metrics = metrics
        self._nursery = nursery
        self._topology = topology
        self._trackers: dict[str, _Tracker] = {}
        self._armed: dict[Watch, None] = {}  # every watch armed and not forgotten
        nursery.start_soon(self._follow_topology)
        # node -> when to try again to open its tracker, after a failure (logged once)
        self._down_until: dict[str, float] = {}

    async def _tracker(self, address: str) -> _Tracker | None:
        t = self._trackers.get(address)
        if t is None:
            if self._down_until.get(address, 0.0) > trio.current_time():
                return None
            t = self._trackers[address] = _Tracker(address)
            self._nursery.start_soon(self._run, t)
        await t.ready.wait()
        return None if t.lost else t

    async def _run(self, t: _Tracker) -> None:
        """Open ``t`` and read it until its connection is lost; then every watch wakes."""
        framer = ReplyFramer()
        try:
            try:
                t.stream = await connect(t.address, self._settings, self._metrics)
                await t.stream.send_all(_SETUP)
                setup: list[bytes] = []
                with trio.fail_after(self._settings.command_timeout_ms / 1000):
                    while len(setup) < 2:
                        frame = framer.next_frame()
                        if frame is None:
                            data = await t.stream.receive_some(RECV_BUFFER_BYTES)
                            if not data:
                                raise OSError("closed")
                            framer.feed(data)
                        else:
                            setup.append(frame[1])
                if setup[1][:1] == b"-":
                    raise OSError(setup[1].decode("utf-8", "replace").strip())
            except (OSError, BackendAuthError, trio.TooSlowError, trio.BrokenResourceError,
                    trio.ClosedResourceError) as exc:
                if t.address not in self._down_until:
                    log.warning("key tracking on %s unavailable (waiting pops there try "
                                "every %d ms): %r", t.address, RETRY_S * 1000, exc)
                self._down_until[t.address] = trio.current_time() + DOWN_S
                return
            if self._down_until.pop(t.address, None) is not None:
                log.info("key tracking on %s available again", t.address)
            t.ready.set()
            try:
                with t.scope:
                    await self._read(t, framer)
            except (ProtocolError, ValueError, IndexError) as exc:  # unreadable: start afresh
                log.warning("key tracking on %s: %r", t.address, exc)
        finally:
            t.lost = True
            t.ready.set()
            t.answered.set()
            t.wake_all()
            if self._trackers.get(t.address) is t:
                del self._trackers[t.address]
            if t.stream is not None:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(t.stream)

    async def _read(self, t: _Tracker, framer: ReplyFramer) -> None:
        assert t.stream is not None
        while True:
            for _, raw in framer.frames():
                if raw[:1] == b">":
                    if raw.find(_INVALIDATE, 0, 40) > 0:
                        t.invalidated(raw)
                elif t.replies:
                    t.replies.popleft().append(raw)
                    t.answered.set()
                    t.answered = trio.Event()
            try:
                data = await t.stream.receive_some(RECV_BUFFER_BYTES)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                return
            framer.feed(data)

    async def arm(self, watch: Watch, keys: list[bytes]) -> bool:
        """``watch`` woken at the next change of any of ``keys``, from now on; False: some
        key could not be armed (step 1 should run again soon)."""
        self._unregister(watch)
        watch.arms += 1
        self._armed[watch] = None
        topology = self._topology
        watch.woken = trio.Event()
        watch.owners.clear()
        by_node: dict[str, list[list[bytes]]] = {}
        for key in dict.fromkeys(keys):
            slot = key_slot(key)
            node = topology.owners[slot]
            if node is None:
                return False
            watch.owners[slot] = node
            runs = by_node.setdefault(node, [])
            if runs and key_slot(runs[-1][0]) == slot:
                runs[-1].append(key)
            else:
                runs.append([key])
        sent: list[tuple[_Tracker, list[list[bytes]]]] = []
        for node, runs in by_node.items():  # every node's reads at once
            t = await self._tracker(node)
            if t is None:
                return False
            t.register(watch, [k for run in runs for k in run])
            cells = await t.send(b"".join(encode_command(b"EXISTS", *run) for run in runs),
                                 len(runs))
            if cells is None:
                return False
            sent.append((t, cells))
        ok = True
        for t, cells in sent:
            got = None
            with trio.move_on_after(self._settings.command_timeout_ms / 1000):
                got = await t.replies_to(cells)
            if got is None and not t.lost:  # a node that stopped answering: given up
                log.warning("key tracking on %s: no reply in time", t.address)
                t.scope.cancel()
            if got is None or any(r[:1] != b":" for r in got):
                ok = False
        return ok

    def forget(self, watch: Watch) -> None:
        """``watch`` is no longer woken (its pop is over); the next watch of each key whose
        baton it carries is woken in its place."""
        self._unregister(watch)
        batons, watch.batons = watch.batons, {}
        for t, key in batons:
            t.wake_one(key)

    def _unregister(self, watch: Watch) -> None:
        for t, keys in watch._trackers.items():
            t.forget(watch, keys)
        watch._trackers.clear()
        self._armed.pop(watch, None)

    async def _follow_topology(self) -> None:
        """After every refresh, each watch one of whose slots has another owner now is
        woken (a failover, a slot moved: its keys must be armed on the new owner)."""
        topology = self._topology
        while True:
            await topology.refreshed.wait()
            owners = topology.owners
            for watch in list(self._armed):
                if any(owners[slot] != node for slot, node in watch.owners.items()):
                    watch.wake()

    async def wait(self, watch: Watch, left_s: float) -> None:
        """Until ``watch`` wakes or ``left_s`` passes."""
        with trio.move_on_after(left_s):
            await watch.woken.wait()


class Waiting:
    """A waiting pop's side of the loop ``try; nothing? between_tries; try …``: the first
    call arms its keys (so the next try is followed by pushes for anything it missed), the
    next ones sleep until a change, then arm again. ``close`` when the pop is over."""

    def __init__(self, hub: KeyWake, keys: list[bytes]) -> None:
        self._hub = hub
        self._keys = keys
        self._watch = Watch()
        self._armed: bool | None = None  # the keys armed before the last try (None: not)

    async def between_tries(self, left_s: float) -> None:
        """After a try that found nothing, with ``left_s`` of the client's timeout left."""
        if self._armed:
            # the try after the arm found nothing: the batons given before it are settled
            w = self._watch
            w.batons = {b: n for b, n in w.batons.items() if n >= w.arms}
            deadline = trio.current_time() + left_s
            await self._hub.wait(self._watch, left_s)
            if trio.current_time() >= deadline:
                self._armed = None  # one last try, then the timeout
                return
        elif self._armed is not None:  # a key could not be armed: try again soon
            await trio.sleep(min(RETRY_S, left_s))
        self._armed = await self._hub.arm(self._watch, self._keys)

    def close(self, took: bytes | None = None) -> None:
        """The pop is over; ``took``: the key it took from, whose change by this pop woke
        the key's next watch already (when the key was armed before the try)."""
        w = self._watch
        if took is not None and self._armed:
            w.batons = {b: n for b, n in w.batons.items() if b[1] != took}
        self._hub.forget(w)
