"""A session's single-slot requests under the read and write policies (``reads``/``writes``).

    read-only request ─▶ read_from != master ─▶ replicas.py picks the node (read-your-writes:
        with the offset offsets.py gives for the client's last write to that shard)
        ─▶ a replica: on the session's connection to it, READONLY sent first on that connection
    write ─▶ durable_writes: N ─▶ a DurableCall, its reply held until the batch's WAIT (durable.py)
          ─▶ read-your-writes ─▶ a ticket for the write (offsets.py)
    anything else ─▶ Session.send_single, unchanged

A session's ``Policy`` is the proxy-wide one (``reads.*``, ``writes.*``) with the TLS
listener's fields over it for a TLS client, and its user's over those (``policies.*``).
``judge`` works it out when the client connects, logs in (AUTH, HELLO AUTH, RESET) and on a
reload. Only a session whose policy is on gets ``ReadWrite.send_single`` in place of the
session's own (an instance attribute: sessions without a policy pay nothing); a policy turned
off gives the session its own back. Transactions, WATCH, blocking commands, scripts (EVAL_RO,
FCALL_RO too) and multi-slot fan-out keep going to masters. A redirect or a lost connection
sends the request the router's usual way (the master).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from slotgate.protocol.commands import ALL_COMMANDS
from slotgate.protocol.resp import encode_command
from slotgate.proxy.backend.connections import DISCARD
from slotgate.proxy.front.session import Session, SlotCall, pack_command
from slotgate.proxy.routing.durable import WaitBatch
from slotgate.proxy.routing.router import ASKING

if TYPE_CHECKING:
    from slotgate.proxy.front.server import Proxy
    from slotgate.proxy.ops.settings import ProxySettings

READONLY = encode_command(b"READONLY")
_MINUS = ord("-")
# Read-only commands that stay on the master: scripts.
MASTER_ONLY = frozenset({"eval_ro", "evalsha_ro", "fcall_ro"})
WRITES = frozenset(i.name for i in ALL_COMMANDS.values() if "write" in i.flags)


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
    """One session's policies; ``send_single`` replaces the session's."""

    __slots__ = ("session", "proxy", "policy", "replica_reads", "ryw", "durable", "tickets",
                 "blind_until")

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
            Session.send_single(s, argv, slot, readonly, name)
            return
        if name in WRITES:
            if self.durable:
                self._send_durable(argv, slot, name, owner)
            else:
                Session.send_single(s, argv, slot, readonly, name)
            if self.ryw:
                if owner is None:
                    # Sent when its master is known, so no ticket: every read goes to
                    # masters until the write is surely done and any fit replica has it
                    # (a fit replica lags at most max_replica_lag).
                    st = s.settings
                    self.blind_until = trio.current_time() + (
                        st.retry_deadline_ms + st.max_replica_lag_ms
                        + 3 * st.replica_check_interval_ms) / 1000
                else:
                    self.tickets[owner] = self.proxy.write_offsets.ticket(s.conn_to(owner))
            return
        Session.send_single(s, argv, slot, readonly, name)

    def _read_node(self, owner: str) -> str:
        need = -1
        if self.ryw:
            if self.blind_until and trio.current_time() < self.blind_until:
                return owner
            ticket = self.tickets.get(owner)
            if ticket is not None:
                needed = self.proxy.write_offsets.needed(ticket, owner)
                if needed is None:
                    return owner  # the write's offset is not known yet
                need = needed
        return self.proxy.replica_reads.node_for(owner, need, self.policy.read_from)

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


def judge(session: Session, proxy: Proxy) -> None:
    """The session's policy for its listener and user as of now: its send path set to match."""
    policy = policy_of(proxy.settings, session.login.user.name, session.tls)
    rw = session.policies
    if rw is not None and rw.policy == policy:
        return
    if not policy.on:
        if rw is not None:
            session.policies = None
            session.__dict__.pop("send_single", None)  # the session's own again
        return
    if rw is None:
        rw = session.policies = ReadWrite(session, proxy, policy)
        session.send_single = rw.send_single  # type: ignore[method-assign]
    else:
        rw.take(policy)
