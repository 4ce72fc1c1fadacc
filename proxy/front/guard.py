"""No client can lock the proxy out of its own cluster.

A ``CONFIG SET requirepass`` sent through the proxy to the nodes would leave every later node
connection of the proxy failing with NOAUTH, and the proxy unable to send the command that
undoes it. So the command that changes the nodes' credentials is the ``guarded`` row of the
command table:

    CONFIG SET with requirepass / masterauth / masteruser among its parameters
        admin_commands off ─▶ -NOPERM, nothing sent
        admin_commands on  ─▶ every node (replicas too), all must succeed; a new requirepass
                              becomes the proxy's backend password before the client gets its
                              reply
                              (a new requirepass is refused with several workers: only one
                              of them could adopt it)

A CONFIG SET of other parameters only goes to every node, as before. AUTH and HELLO AUTH never
reach the nodes (the proxy answers them), and neither do ACL commands: they manage the proxy's
own users (front/auth.py), so a client cannot change the nodes' users through the proxy.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from slotgate.protocol.commands import CommandInfo
from slotgate.protocol.resp import OK
from slotgate.proxy.routing import fanout
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession
    from slotgate.proxy.ops.settings import ProxySettings

log = logging.getLogger("slotgate.guard")

# CONFIG SET parameters that hold the credentials nodes check or present.
CREDENTIAL_PARAMETERS = frozenset({b"requirepass", b"masterauth", b"masteruser"})
REFUSED = ("NOPERM slotgate: '{what}' would change the credentials the proxy uses on the "
           "cluster's nodes; refused (set admin_commands: true in the proxy's configuration "
           "to allow it)")
DEFAULT_USER = "default"
# Each worker has its own settings: only the one that ran the command would adopt a new
# requirepass, and the others would be locked out.
WORKERS_REFUSED = ("NOPERM slotgate: with {workers} workers the proxy cannot adopt a new "
                   "requirepass; set it on the nodes directly, then backend.password and reload")


def refusal(name: str, argv: list[bytes]) -> str | None:
    """The error text refusing ``argv`` when admin commands are off, or None if harmless."""
    if name != "config|set":
        return REFUSED.format(what=name.replace("|", " "))
    for param in argv[2::2]:
        if param.lower() in CREDENTIAL_PARAMETERS:
            return REFUSED.format(what=f"config set {param.lower().decode()}")
    return None


def _login_user(settings: ProxySettings) -> str:
    return settings.backend_username or DEFAULT_USER


def new_password(argv: list[bytes], name: str, settings: ProxySettings) -> bytes | None:
    """The password the proxy must log in with once ``argv`` succeeds, or None if unchanged:
    CONFIG SET requirepass (when the proxy logs in as the default user)."""
    if name == "config|set":
        if _login_user(settings) != DEFAULT_USER:
            return None
        found = None
        for i in range(2, len(argv) - 1, 2):
            if argv[i].lower() == b"requirepass":
                found = argv[i + 1]
        return found
    return None


def adopt(settings: ProxySettings, password: bytes) -> None:
    """From now on the proxy's new node connections log in with ``password`` (an empty
    requirepass: no AUTH), falling back to the one before for nodes that did not take it.
    Connections already open stay logged in, as on Redis."""
    text = password.decode("utf-8", "surrogateescape") or None
    user = _login_user(settings)
    settings.backend_password_before = settings.backend_password
    settings.backend_password = text
    for addr, (node_user, _) in list(settings.backend_node_auth.items()):
        if (node_user or DEFAULT_USER) == user and text is not None:
            settings.backend_node_auth[addr] = (node_user, text)
    log.warning("the nodes' password of user %r was changed through the proxy; new node "
                "connections use it (put it in backend.password: a reload restores the file's "
                "value)", user)


def route(s: RouteSession, argv: list[bytes], info: CommandInfo) -> None:
    """The ``guarded`` route."""
    reason = refusal(info.name, argv)
    if reason is not None and not s.settings.admin_commands:
        s.reply(info.name, error_frame(reason))
        return
    password = new_password(argv, info.name, s.settings) if reason is not None else None
    workers = s.proxy.worker_count
    if password is not None and info.name == "config|set" and workers > 1:
        s.reply(info.name, error_frame(WORKERS_REFUSED.format(workers=workers)))
        return
    reply_slot = s.new_slot(info.name)

    def done(raw: bytes, replies: list[bytes]) -> None:
        # Adopted as soon as one node took it (the others, if any, are still reached with the
        # password before): a partial failure must not lock the proxy out of the nodes that
        # did change.
        if password is not None and OK in replies:
            adopt(s.settings, password)
        reply_slot(raw)

    fanout.all_nodes_then(s, argv, _ALL_NODES.get(info.name) or _as_all_nodes(info), done)


_ALL_NODES: dict[str, CommandInfo] = {}


def _as_all_nodes(info: CommandInfo) -> CommandInfo:
    """The row as fan-out sees it: to every node (replicas too), merged ``all_ok``."""
    row = _ALL_NODES[info.name] = dataclasses.replace(info, route="all_nodes", merge="all_ok")
    return row
