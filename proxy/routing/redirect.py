"""What to do with a backend error reply or a lost connection: a pure decision function.

The thin loop that acts on these decisions lives in ``router.py``.

    reply -MOVED s host:port  -> RESEND to host:port now, update slot s, schedule a refresh
    reply -ASK s host:port    -> ASK: ASKING + the command on host:port, back to back, map kept
    reply -TRYAGAIN ...       -> RETRY after a short backoff (slot being migrated)
    reply -CLUSTERDOWN ...    -> RETRY with backoff and refreshes until the request's deadline
    reply -LOADING ...        -> RETRY (a restarted node loading its data)
    reply -BUSY ...           -> RETRY (a script or function runs on the node: not a dead link)
    any other reply           -> FORWARD to the client untouched
    connection lost, request never written            -> RETRY (nothing happened)
    connection lost, written, read-only command       -> RETRY (safe to repeat)
    connection lost, written, anything else           -> FAIL with the unknown-fate error

Every RESEND / ASK counts against ``max_redirects``; every RETRY is bounded by the request's
deadline. When a bound is hit the client gets an error instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from slotgate.proxy import errors


class Action(Enum):
    FORWARD = "forward"
    RESEND = "resend"  # MOVED: to the new owner
    ASK = "ask"  # ASKING + command on the target, once
    RETRY = "retry"  # after a backoff, to the slot's current owner
    FAIL = "fail"  # answer the client with ``error``


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    kind: str = ""  # MOVED / ASK / TRYAGAIN / CLUSTERDOWN / LOADING / LOST
    slot: int = -1
    node: str = ""  # host:port for RESEND / ASK
    error: bytes = b""  # complete RESP error frame for FAIL


FORWARD = Decision(Action.FORWARD)

# First bytes of the error frames that mean "not here / not now"; everything else is forwarded.
# ``-BUSY `` with its space: ``-BUSYKEY``/``-BUSYGROUP`` are ordinary errors.
_RETRY_PREFIXES = {b"-TRYAGAIN": "TRYAGAIN", b"-CLUSTERDOWN": "CLUSTERDOWN", b"-LOADING": "LOADING",
                   b"-BUSY ": "BUSY"}


def error_frame(text: str) -> bytes:
    return b"-" + text.encode() + b"\r\n"


def _parse_target(raw: bytes, from_node: str) -> tuple[int, str] | None:
    # -MOVED 3999 127.0.0.1:6381\r\n ; an empty host (":6381") means "the node you asked".
    parts = raw[:-2].split(b" ")
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    host, _, port = parts[2].decode("ascii", "replace").rpartition(":")
    if not port.isdigit():
        return None
    if not host:
        host = from_node.rpartition(":")[0]
    return int(parts[1]), f"{host}:{port}"


def classify_error(
    raw: bytes, from_node: str, redirects: int, max_redirects: int, expired: bool
) -> Decision:
    """Decide for one error reply frame ``raw`` (starting with ``-``) received from ``from_node``.

    ``redirects`` is how many MOVED/ASK the request followed so far; ``expired`` says whether
    its retry deadline has passed.
    """
    head = raw[:12]
    if head.startswith((b"-MOVED ", b"-ASK ")):
        kind = "MOVED" if head[1] == 77 else "ASK"
        target = _parse_target(raw, from_node)
        if target is None:
            return FORWARD
        slot, node = target
        if redirects >= max_redirects:
            text = errors.TOO_MANY_REDIRECTS.format(count=redirects, slot=slot)
            return Decision(Action.FAIL, kind, slot, node, error_frame(text))
        return Decision(Action.RESEND if kind == "MOVED" else Action.ASK, kind, slot, node)
    for prefix, kind in _RETRY_PREFIXES.items():
        if head.startswith(prefix):
            if expired:
                return Decision(Action.FAIL, kind, error=raw)
            return Decision(Action.RETRY, kind)
    return FORWARD


def decide_lost(node: str, sent: bool, readonly: bool, expired: bool) -> Decision:
    """Decide for a request whose backend connection failed before its reply arrived."""
    if sent and not readonly:
        return Decision(
            Action.FAIL, "LOST", node=node,
            error=error_frame(errors.UNKNOWN_FATE_WRITE.format(node=node)),
        )
    if expired:
        return Decision(
            Action.FAIL, "LOST", node=node,
            error=error_frame(errors.NODE_UNREACHABLE.format(node=node)),
        )
    return Decision(Action.RETRY, "LOST", node=node)
