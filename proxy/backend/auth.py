"""Logging in to the nodes: the ``AUTH`` every connection the proxy opens sends first.

    credentials(settings, "host:port") ─▶ (user, password) or None (no AUTH configured)
    await login(stream, address, settings, metrics) ─▶ AUTH round trip on a fresh connection,
        before anything else is sent on it; a refusal raises ``BackendAuthError``

Every opener calls ``login``: the pooled data connections (backend/connections.py), the
exclusive ones of transactions and blocking commands (same module), subscriber links
(front/pubsub.py), topology queries (routing/topology.py) and the /healthz probe
(ops/metrics.py). A refusal is counted per node (``slotgate_backend_auth_failures_total``) and
logged once, when a node starts refusing (``ProxyMetrics.backend_auth`` remembers which do);
the caller then treats it as a failed connect, so it is retried with its usual backoff.
Credentials are read from the live settings at each connect: a reload, or a requirepass the
proxy adopted (front/guard.py), applies to the next connection; after an adoption a refused
password is retried once with the one before it, for nodes that missed the change.
"""

from __future__ import annotations

import logging

import trio

from slotgate.protocol.resp import ReplyFramer, encode_command
from slotgate.proxy.ops.metrics import ProxyMetrics
from slotgate.proxy.ops.settings import ProxySettings

log = logging.getLogger("slotgate.backend")

RECV_BUFFER_BYTES = 4096  # an AUTH reply is one short line


class BackendAuthError(ConnectionError):
    """A node refused the proxy's credentials; ``str()`` names the node and its error. A
    ``ConnectionError``: every opener handles it as the failed connect it is."""


def credentials(settings: ProxySettings, address: str) -> tuple[str | None, str] | None:
    """(username or None, password) for ``address``, or None when no AUTH is configured."""
    node = settings.backend_node_auth.get(address)
    if node is not None:
        return node
    if settings.backend_password is None:
        return None
    return settings.backend_username, settings.backend_password


def auth_command(creds: tuple[str | None, str]) -> bytes:
    user, password = creds
    if user is None:
        return encode_command(b"AUTH", password)
    return encode_command(b"AUTH", user, password)


def refused(address: str, creds: tuple[str | None, str], error: bytes,
            metrics: ProxyMetrics) -> BackendAuthError:
    """Count a refusal, log it if it is the node's first since a success; the error to raise."""
    text = error[1:].rstrip(b"\r\n").decode("utf-8", "replace")
    user = creds[0] or "default"
    if metrics.backend_auth(address, ok=False):
        log.error("backend login to %s as %s refused: %s (check backend.username / "
                  "backend.password; retrying with backoff)", address, user, text)
    return BackendAuthError(f"{address} refused the proxy's credentials (user {user}): {text}")


async def login(stream: trio.abc.Stream, address: str, settings: ProxySettings,
                metrics: ProxyMetrics) -> None:
    """Send AUTH on a fresh connection and read its reply (nothing when not configured).

    Raises ``BackendAuthError`` on a refusal; ``OSError`` when the node closes the connection;
    trio's stream errors pass through. The caller owns the stream and its deadline.
    """
    creds = credentials(settings, address)
    if creds is None:
        return
    error = await _auth(stream, address, creds)
    before = settings.backend_password_before
    if error is not None and before is not None and before != creds[1]:
        # A node that missed a password change made through the proxy.
        error = await _auth(stream, address, (creds[0], before))
    if error is not None:
        raise refused(address, creds, error, metrics)
    metrics.backend_auth(address, ok=True)


async def _auth(stream: trio.abc.Stream, address: str,
                creds: tuple[str | None, str]) -> bytes | None:
    """One AUTH round trip: None when accepted, else the node's error frame."""
    await stream.send_all(auth_command(creds))
    framer = ReplyFramer()
    while (frame := framer.next_frame()) is None:
        data = await stream.receive_some(RECV_BUFFER_BYTES)
        if not data:
            raise OSError(f"{address} closed the connection during AUTH")
        framer.feed(data)
    return frame[1] if frame[1][:1] == b"-" else None
