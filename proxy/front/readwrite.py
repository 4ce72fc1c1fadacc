"""A session's single-slot requests under the read and write policies (``reads``/``writes``).

    read-only request ─▶ read_from != master ─▶ replicas.py picks the node (read-your-writes:
        with the offset offsets.py gives for the client's last write to that shard)
        ─▶ a replica: on the session's connection to it, READONLY sent first on that connection
    write ─▶ durable_writes: N ─▶ a DurableCall, its reply held until the batch's WAIT (durable.py)
          ─▶ read-your-writes ─▶ a ticket for the write (offsets.py)
    anything else ─▶ Session.send_master, unchanged

A session's ``Policy`` is the proxy-wide one (``reads.*``, ``writes.*``) with the TLS
listener's fields over it for a TLS client, and its user's over those (``policies.*``).
``judge`` works it out when the client connects, logs in (AUTH, HELLO AUTH, RESET) and on a
reload. Only a session whose policy is on has a ``ReadWrite`` (``Session.policies``, which
``Session.send_single`` hands its requests to: sessions without a policy pay one test); a
policy turned off drops it. Transactions, WATCH, blocking commands, scripts (EVAL_RO,
FCALL_RO too) and multi-slot fan-out keep going to masters. A redirect or a lost connection
sends the request the router's usual way (the master).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from slotgate.protocol.commands import ALL_COMMANDS
from slotgate.protocol.resp import OK, encode_command
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import DISCARD, BackendError, DirectConnection
from slotgate.proxy.front.session import Session, SlotCall, pack_command
from slotgate.proxy.front.wait import TOUCH
from slotgate.proxy.routing.durable import WaitBatch
from slotgate.proxy.routing.offsets import ROLE, master_offset
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.router import ASKING

if TYPE_CHECKING:
    from slotgate.proxy.front.server import Proxy
    from slotgate.proxy.ops.settings import ProxySettings

READONLY = encode_command(b"READONLY")
_MINUS = ord("-")
_COLON = ord(":")
# Read-only commands that stay on the master: scripts.
MASTER_ONLY = frozenset({"eval_ro", "evalsha_ro", "fcall_ro"})
# Writes: the table's, and the scripts that may write (their reply, even an error, may
# follow writes: the WAIT and the ticket cover them).
WRITES = frozenset({*(i.name for i in ALL_COMMANDS.values() if "write" in i.flags),
                    "eval", "evalsha", "fcall"})


@dataclass(frozen=True)
class Policy:
    """Where one client's reads go and how durable its writes are."""

    read_from: str = "master"
    read_your_writes: bool = False
    durable_writes: int = 0

    @property
    def on(self) -> bool:
        return self.read_from != "master" or self.durable_writes > 0


def policy_of(settings: ProxySettings, user: bytes, tls: bool) -> Policy:
    """The proxy-wide fields, the TLS listener's over them, the user's over those."""
    fields: dict[str, Any] = {
        "read_from": settings.read_from, "read_your_writes": settings.read_your_writes,
        "durable_writes": settings.durable_writes}
    if tls:
        fields.update(settings.policy_tls)
    fields.update(settings.policy_users.get(user.decode("utf-8", "replace"), {}))
    return Policy(**fields)


class DurableCall(SlotCall):
    """A write whose reply is held until the WAIT after it (durable.py)."""

    __slots__ = ("held", "batch", "wanted")

    def __init__(self, session: Session, payload: bytes, slot: int, name: str,
                 wanted: int) -> None:
        super().__init__(session, payload, slot, False, name)
        self.held: bytes | None = None
        self.batch: WaitBatch | None = None
        self.wanted = wanted  # replicas this client's policy asks for

    def on_frame(self, type_byte: int, raw: bytes) -> None:
        if type_byte == _MINUS:
            self.router.on_error(self, raw)
        else:
            self.held = raw

    def transmit(self, node: str, asking: bool) -> None:
        conn = self.router.pool.get(node, self.proto, self.sticky)
        if asking:
            conn.send(ASKING, DISCARD)
        conn.send(self.payload, self)
        self.session.proxy.durable.hold(conn, self)


class ReadWrite:
    """One session's policies; ``Session.send_single`` calls its ``send_single``."""

    __slots__ = ("session", "proxy", "policy", "replica_reads", "ryw", "durable", "on_writes",
                 "tickets", "blind_until")

    def __init__(self, session: Session, proxy: Proxy, policy: Policy) -> None:
        self.session = session
        self.proxy = proxy
        self.tickets: dict[str, int] = {}  # master -> ticket of this client's last write there
        self.blind_until = 0.0  # trio time: reads go to masters until then (ticketless write)
        self.take(policy)

    def take(self, policy: Policy) -> None:
        """A new policy (login, reload); the client's tickets stay."""
        self.policy = policy
        self.replica_reads = policy.read_from != "master"
        self.ryw = self.replica_reads and policy.read_your_writes
        self.durable = policy.durable_writes > 0
        self.on_writes = self.durable or self.ryw  # multi-slot writes: split_write

    def send_single(self, argv: list[bytes], slot: int, readonly: bool, name: str) -> None:
        s = self.session
        owner = s.router.topology.owners[slot]
        if readonly:
            if owner is not None and self.replica_reads and name not in MASTER_ONLY:
                node = self._read_node(owner)
                self.proxy.metrics.read(node, "master" if node == owner else "replica")
                if node != owner:
                    self._send_to_replica(argv, slot, name, node)
                    return
            s.send_master(argv, slot, readonly, name)
            return
        if name in WRITES:
            if self.durable:
                self._send_durable(argv, slot, name, owner)
            else:
                s.send_master(argv, slot, readonly, name)
            if self.ryw:
                self._ticket(owner)
            return
        s.send_master(argv, slot, readonly, name)

    def _ticket(self, owner: str | None) -> None:
        """Read-your-writes: the write just queued to ``owner`` (None: not known yet)."""
        s = self.session
        if owner is None:
            # Sent when its master is known, so no ticket: every read goes to masters until
            # the write is surely done and any fit replica has it (a fit replica lags at most
            # max_replica_lag).
            st = s.settings
            self.blind_until = trio.current_time() + (
                st.retry_deadline_ms + st.max_replica_lag_ms
                + 3 * st.replica_check_interval_ms) / 1000
        else:
            self.tickets[owner] = self.proxy.write_offsets.ticket(s.conn_to(owner))

    def split_write(self, reply: Callable[[bytes], None], nodes: list[str],
                    late_nodes: set[str]) -> Callable[[bytes], None]:
        """A multi-slot write (MSET, DEL ... across slots) just sent to ``nodes``: what takes
        its merged reply in place of ``reply``. Durable: one held WAIT per node (the batch's),
        and one more after the merge for each node a redirected or retried part reached
        (``late_nodes``, filled by then); the client gets the reply once every WAIT is in, or
        the first WAIT's error. Read-your-writes: a ticket per node."""
        if self.ryw:
            for node in nodes:
                self._ticket(node)
        if not self.durable:
            if self.ryw:
                return partial(self._late_tickets, reply, late_nodes)
            return reply
        gate = _SplitGate(self, reply, late_nodes)
        for node in nodes:
            gate.hold(node)
        return gate.merged

    def _late_tickets(self, reply: Callable[[bytes], None], late_nodes: set[str],
                      raw: bytes) -> None:
        if late_nodes:
            self._ticket(None)  # (a ticket's ROLE now would come after the reply)
        reply(raw)

    async def after_writes(self, conns: list[DirectConnection], raw: bytes) -> bytes:
        """Writes answered ``raw`` on ``conns`` (connections of the client's own: a
        transaction's, a blocking pop's, a move's): on each, after them, its WAIT (durable)
        and ROLE (read-your-writes: the offset of the client's writes there), before the
        client has the reply; the reply, or the first WAIT's error."""
        s = self.session
        wanted = self.policy.durable_writes
        # TOUCH first: a pop served to a blocked client leaves the connection's write offset
        # where it was (Redis 7.0), so WAIT alone could count replicas that lack the pop.
        requests = [TOUCH, encode_command(b"WAIT", wanted, s.settings.durable_timeout_ms)] \
            if self.durable else []
        if self.ryw:
            requests.append(ROLE)
        failed: bytes | None = None
        bound_s = (s.settings.command_timeout_ms + s.settings.durable_timeout_ms) / 1000
        for conn in dict.fromkeys(conns):  # each once, in order
            try:
                with trio.fail_after(bound_s):
                    frames = await conn.roundtrip(b"".join(requests), len(requests))
            except (BackendError, trio.TooSlowError):
                if self.ryw:
                    self._ticket(None)
                if self.durable:
                    self.proxy.metrics.durable_wait("lost")
                    failed = failed or error_frame(
                        errors.DURABILITY_UNKNOWN.format(node=conn.address))
                continue
            if self.ryw:
                offset = master_offset(frames[-1][1])
                self.tickets[conn.address] = self.proxy.write_offsets.known(conn.address,
                                                                            offset)
            if self.durable:
                type_byte, reply = frames[1]
                acked = int(reply[1:-2]) if type_byte == _COLON else 0
                self.proxy.metrics.durable_wait("short" if acked < wanted else "ok")
                if acked < wanted:
                    failed = failed or error_frame(errors.NOT_DURABLE.format(
                        node=conn.address, acked=acked, wanted=wanted,
                        timeout_ms=s.settings.durable_timeout_ms))
        return raw if failed is None else failed

    def _read_node(self, owner: str) -> str:
        need = -1
        if self.ryw:
            if self.blind_until and trio.current_time() < self.blind_until:
                return owner
            ticket = self.tickets.get(owner)
            if ticket is None and self.tickets:
                ticket = self._carried(owner)
            if ticket is not None:
                needed = self.proxy.write_offsets.needed(ticket, owner)
                if needed is None:
                    return owner  # the write's offset is not known yet
                need = needed
        return self.proxy.replica_reads.node_for(owner, need, self.policy.read_from)

    def _carried(self, owner: str) -> int | None:
        """The client's last write to a former master of ``owner``'s shard (a failover put
        ``owner`` in its place): its ticket, now ``owner``'s. Offsets continue across a
        promotion, so the offset it needs holds for ``owner``'s replicas too."""
        successors = self.session.router.topology.successors
        if not successors:
            return None
        formers = succeeded_by(self.tickets, successors, owner)
        if not formers:
            return None
        carried = max(self.tickets.pop(master) for master in formers)  # the latest write
        self.tickets[owner] = carried
        return carried

    def _send_to_replica(self, argv: list[bytes], slot: int, name: str, node: str) -> None:
        s = self.session
        call = SlotCall(s, pack_command(tuple(argv)), slot, True, name)
        s.slots.append(call)
        s.unfilled += 1
        s.metrics.slot_requests[slot] += 1
        call.node = node
        conn = s.conn_to(node)
        conn.set_readonly(READONLY)
        conn.send(call.payload, call)

    def _send_durable(self, argv: list[bytes], slot: int, name: str, owner: str | None) -> None:
        s = self.session
        call = DurableCall(s, pack_command(tuple(argv)), slot, name, self.policy.durable_writes)
        s.slots.append(call)
        s.unfilled += 1
        if owner is None:
            s.router.send(call)  # the retry path; DurableCall.transmit holds it when sent
            return
        s.metrics.slot_requests[slot] += 1
        call.node = owner
        conn = s.conn_to(owner)
        conn.send(call.payload, call)
        self.proxy.durable.hold(conn, call)


def succeeded_by(masters: Iterable[str], successors: dict[str, str], owner: str) -> list[str]:
    """Those of ``masters`` whose place ``owner`` took, through one failover or a chain of
    them (``successors``: former master -> the replica promoted in its place)."""
    found: list[str] = []
    for master in masters:
        node = master
        for _ in range(len(successors)):  # a chain of failovers; a cycle ends here
            node = successors.get(node, "")
            if not node or node == owner:
                break
        if node == owner:
            found.append(master)
    return found


class _SplitGate:
    """One multi-slot write's WAITs (``HeldWrite``s of durable.py, one per node) and its
    merged reply: the client's reply when all are in."""

    __slots__ = ("rw", "reply", "late_nodes", "pending", "raw", "error")

    def __init__(self, rw: ReadWrite, reply: Callable[[bytes], None],
                 late_nodes: set[str]) -> None:
        self.rw = rw
        self.reply = reply
        self.late_nodes = late_nodes
        self.pending = 1  # the merged reply
        self.raw = b""
        self.error: bytes | None = None

    def hold(self, node: str) -> None:
        self.pending += 1
        wait = _NodeWait(self, self.rw.policy.durable_writes)
        self.rw.proxy.durable.hold(self.rw.session.conn_to(node), wait)
        wait.held = OK  # (no reply of its own: the WAIT's result is what counts)

    def merged(self, raw: bytes) -> None:
        self.raw = raw
        if raw[:1] != b"-":
            for node in self.late_nodes:
                self.hold(node)
        self.done(None)

    def done(self, error: bytes | None) -> None:
        if error is not None and self.error is None:
            self.error = error
        self.pending -= 1
        if self.pending == 0:
            self.reply(self.raw if self.error is None or self.raw[:1] == b"-" else self.error)


class _NodeWait:
    """A multi-slot write's WAIT on one node (durable.py's ``HeldWrite``)."""

    __slots__ = ("gate", "held", "batch", "wanted")

    def __init__(self, gate: _SplitGate, wanted: int) -> None:
        self.gate = gate
        self.held: bytes | None = None
        self.batch: WaitBatch | None = None
        self.wanted = wanted

    def finish(self, raw: bytes) -> None:
        self.gate.done(raw if raw[:1] == b"-" else None)


def judge(session: Session, proxy: Proxy) -> None:
    """The session's policy for its listener and user as of now: its send path set to match."""
    policy = policy_of(proxy.settings, session.login.user.name, session.tls)
    rw = session.policies
    if rw is not None and rw.policy == policy:
        return
    if not policy.on:
        if rw is not None:
            session.policies = None  # Session.send_single sends to masters again
        return
    if rw is None:
        session.policies = ReadWrite(session, proxy, policy)  # Session.send_single asks it
    else:
        rw.take(policy)
