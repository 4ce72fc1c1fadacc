"""TLS contexts from the settings, and node connections opened with them.

    problems(settings) ─▶ ["tls.cert_file: cannot load ...", ...]   (config check, reload check)
    load(settings)     ─▶ settings.tls_context, settings.backend_tls_context (None: plain)
    await open_node_stream("host:port", settings) ─▶ a connected stream, TLS when configured

Clients: the TLS listener (``tls.port``) hands each accepted connection to
``eventcore.tls`` with ``settings.tls_context``, read at accept time. Nodes: every connection
the proxy opens (pooled data connections, transactions and blocking commands, subscriber
links, topology queries, health probes) goes through ``open_node_stream``. ``load`` runs at
start and on every SIGHUP, reading the certificate files again even when their names did not
change: new handshakes use the new certificate, established connections keep theirs.

Python's ``ssl`` sets TLS 1.2 cipher lists only (``tls.ciphers``); TLS 1.3 suites stay
OpenSSL's defaults.
"""

from __future__ import annotations

import logging
import ssl

import trio

from slotgate.eventcore import sockets, tls
from slotgate.proxy.ops.settings import ProxySettings

PROTOCOLS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
AUTH_CLIENTS = ("no", "optional", "yes")
VERIFY = ("full", "ca", "none")
# How long a client has to finish its TLS handshake before the proxy closes the connection.
HANDSHAKE_TIMEOUT_S = 10.0

log = logging.getLogger("slotgate.backend")
# Nodes whose last TLS handshake failed: logged once until one succeeds again.
_failing: set[str] = set()


class TLSConfigError(ValueError):
    """A TLS setting that cannot be used; ``str()`` starts with the key."""


def _error(key: str, what: str, exc: BaseException) -> TLSConfigError:
    detail = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
    return TLSConfigError(f"{key}: {what}: {detail}")


def _load_chain(ctx: ssl.SSLContext, cert_key: str, cert: str, key_key: str,
                key: str | None) -> None:
    try:
        with open(cert, "rb"):
            pass
    except OSError as exc:
        raise _error(cert_key, f"cannot read {cert!r}", exc) from None
    if key is not None:
        try:
            with open(key, "rb"):
                pass
        except OSError as exc:
            raise _error(key_key, f"cannot read {key!r}", exc) from None
    try:
        ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise _error(f"{cert_key}/{key_key}", "not a certificate and its private key",
                     exc) from None


def _load_ca(ctx: ssl.SSLContext, key: str, path: str) -> None:
    try:
        ctx.load_verify_locations(cafile=path)
    except (ssl.SSLError, OSError) as exc:
        raise _error(key, f"cannot load CA certificates from {path!r}", exc) from None


def _protocols(ctx: ssl.SSLContext, names: tuple[str, ...]) -> None:
    if names:
        versions = sorted(PROTOCOLS[n] for n in names)
        ctx.minimum_version = versions[0]
        ctx.maximum_version = versions[-1]


def server_context(s: ProxySettings) -> ssl.SSLContext | None:
    """The client listener's context (None without ``tls.port``); raises ``TLSConfigError``."""
    if s.tls_port is None:
        return None
    if s.tls_cert_file is None or s.tls_key_file is None:
        raise TLSConfigError("tls.cert_file: tls.port needs tls.cert_file and tls.key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_chain(ctx, "tls.cert_file", s.tls_cert_file, "tls.key_file", s.tls_key_file)
    if s.tls_auth_clients != "no":
        if s.tls_ca_file is None:
            raise TLSConfigError(f"tls.auth_clients: {s.tls_auth_clients} needs tls.ca_file "
                                 "(the CA that signed the clients' certificates)")
        _load_ca(ctx, "tls.ca_file", s.tls_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED if s.tls_auth_clients == "yes" else ssl.CERT_OPTIONAL
    _protocols(ctx, s.tls_protocols)
    if s.tls_ciphers is not None:
        try:
            ctx.set_ciphers(s.tls_ciphers)
        except ssl.SSLError as exc:
            raise _error("tls.ciphers", "no cipher matches", exc) from None
    return ctx


def client_context(s: ProxySettings) -> ssl.SSLContext | None:
    """The context of node connections (None without ``backend.tls``); raises
    ``TLSConfigError``."""
    if not s.backend_tls:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if s.backend_tls_verify == "none":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.check_hostname = s.backend_tls_verify == "full"
        if s.backend_tls_ca_file is not None:
            _load_ca(ctx, "backend.tls_ca_file", s.backend_tls_ca_file)
        else:
            ctx.load_default_certs()
    if s.backend_tls_cert_file is not None:
        _load_chain(ctx, "backend.tls_cert_file", s.backend_tls_cert_file,
                    "backend.tls_key_file", s.backend_tls_key_file)
    return ctx


def problems(s: ProxySettings) -> list[str]:
    """What keeps the TLS settings from being used, one ``"key: ..."`` each."""
    out = []
    for build in (server_context, client_context):
        try:
            build(s)
        except TLSConfigError as exc:
            out.append(str(exc))
    return out


def load(s: ProxySettings) -> None:
    """(Re)build both contexts from the files; raises ``TLSConfigError`` (nothing changed)."""
    server, client = server_context(s), client_context(s)
    s.tls_context, s.backend_tls_context = server, client


async def open_node_stream(address: str, s: ProxySettings | None) -> tls.NodeStream:
    """A connection to ``address`` (``host:port``), TLS-handshaken when ``backend.tls`` is on
    (plain without settings); no deadline of its own. Raises ``OSError`` (``ssl.SSLError``
    for a refused handshake; logged once per node until one succeeds)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    stream = await trio.open_tcp_stream(host, int(port))
    if s is None or s.backend_tls_context is None:
        return stream
    ctx = s.backend_tls_context
    sock = tls.wrap(ctx, sockets.take_over(stream.socket), server_side=False,
                    server_hostname=s.backend_tls_server_name or host)
    try:
        await tls.handshake(sock)
    except BaseException as exc:
        sockets.close(sock)
        if isinstance(exc, ssl.SSLError) and address not in _failing:
            _failing.add(address)
            log.error("TLS handshake with node %s failed: %s (check backend.tls_ca_file, "
                      "backend.tls_verify, backend.tls_server_name, backend.tls_cert_file; "
                      "retrying with backoff)", address, exc)
        raise
    _failing.discard(address)
    return tls.TLSStream(sock)
