"""Auth at the proxy: who a client is (``Login``), the permission check before routing, and the
commands that change or show it (AUTH, HELLO ... AUTH, RESET's log-out, ACL).

    dispatch(argv) ── s.checked? ──no──▶ routes (the usual case: the default user with no
                        │                password and every permission: nothing is checked)
                        yes
                        ▼
                    refused(s, argv): NOAUTH unless logged in (AUTH, HELLO, QUIT, RESET pass);
                    NOPERM unless the user's rules allow the command, its keys (read vs
                    write) and its channels (protocol/acl.py's check) ─▶ routes

A session is ``checked`` unless it is logged in as a user that may run every command on every
key and channel; the session then routes its requests through the slow path, where
``refused`` runs. ``derive`` recomputes the flag whenever the session's user or that user's
rules change (AUTH, HELLO, RESET, ACL SETUSER, a reload).

The users are the proxy's own (``users.ProxyUsers``): ACL SETUSER / DELUSER / LOAD sent by a
client change them in this process's memory, as a server would; nothing reaches the nodes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from slotgate.protocol import acl, acl_lines, acl_replies, commands, errors
from slotgate.protocol.acl import User
from slotgate.protocol.acl_replies import AclReplyError, LogEntry
from slotgate.protocol.glob import glob_match
from slotgate.protocol.hello import AUTH, HelloError, hello_reply, parse_hello, valid_client_name
from slotgate.protocol.resp import OK, bulk, error, integer
from slotgate.proxy.front import clients, local, pinned
from slotgate.proxy.front.users import ProxyUsers, build
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession as Session
    from slotgate.proxy.front.server import Proxy
    from slotgate.proxy.ops.settings import ProxySettings

EXECABORT_BECAUSE = "EXECABORT Transaction discarded because of: "
NO_ACLFILE = acl_replies.NO_ACLFILE
SAVE_FAILED = acl_replies.SAVE_FAILED
_NOPERM = {acl.DENIED_KEY: errors.NOPERM_KEY, acl.DENIED_CHANNEL: errors.NOPERM_CHANNEL}


class Login:
    """Who a client is: its user (an object of the proxy's table) and whether it has logged
    in. Changed only by this module."""

    __slots__ = ("user", "authenticated")

    def __init__(self, users: ProxyUsers) -> None:
        self.user: User = users.default
        self.authenticated = users.open_login()


def derive(s: Session) -> None:
    """The session's ``checked`` flag from its login (after any change to it)."""
    login = s.login
    s.set_checked(not (login.authenticated and login.user.unrestricted))


def _log_in(s: Session, user: User, authenticated: bool) -> None:
    s.login.user = user
    s.login.authenticated = authenticated
    derive(s)
    s.proxy.judge_policy(s)  # the user's read/write policy


def _sessions_of(proxy: Proxy, user: User) -> list[Session]:
    return [x for x in proxy.sessions if x.login.user is user]


def _log(s: Session, reason: int, username: bytes, obj: bytes, context: str = "") -> None:
    now_ms = int(time.time() * 1000)
    context = context or ("multi" if s.tx.queued is not None else "toplevel")
    full = clients.full(s)
    cinfo = clients.info_line(full, time.monotonic(), full.last_cmd).rstrip("\n")
    s.proxy.users.add_log(LogEntry(1, reason, context, obj, username, now_ms, cinfo))


def authenticate(s: Session, username: bytes, password: bytes, argv0: bytes) -> bool:
    """ACLAuthenticateUser: on success the session is that user; a failure is logged."""
    u = s.proxy.users.users.get(username)
    if u is not None and u.password_ok(password):
        _log_in(s, u, True)
        return True
    _auth_failed(s, u, username, argv0)
    return False


def _auth_failed(s: Session, u: User | None, username: bytes, argv0: bytes,
                 context: str = "") -> None:
    """A refused login: the ACL log entry and the metric (by reason)."""
    _log(s, acl.DENIED_AUTH, username, argv0, context)
    s.metrics.client_auth_failed(
        "no_such_user" if u is None else "wrong_password" if u.enabled else "disabled_user")


# -- the check before routing -----------------------------------------------------------------
def _reject(s: Session, name: str, text: str) -> None:
    """rejectCommand: EXEC aborts the transaction; inside MULTI the transaction is doomed."""
    if name == "exec":
        pinned.reset(s)
        s.reply(name, error_frame(EXECABORT_BECAUSE + text))
    elif s.tx.queued is not None:
        pinned.refuse(s, name, error_frame(text))
    else:
        s.reply(name, error_frame(text))


def refused(s: Session, argv: list[bytes]) -> bool:
    """processCommand's auth and ACL checks: True when the request got its error. Unknown
    commands and wrong arities pass (their own errors come first, as in Redis)."""
    info = commands.lookup(argv)
    if info is None or not commands.arity_ok(info, len(argv)):
        return False
    login = s.login
    if not login.authenticated and "no_auth" not in info.flags:
        _reject(s, info.name, errors.NOAUTH)
        return True
    denial = login.user.check(info, argv, glob_match)
    if denial is None:
        return False
    obj = info.name.encode() if denial.reason == acl.DENIED_CMD else argv[denial.index]
    _log(s, denial.reason, login.user.name, obj)
    text = _NOPERM.get(denial.reason) or errors.NOPERM_CMD % info.name
    _reject(s, info.name, text)
    return True


def at_exec(s: Session, queued: list[list[bytes]]) -> tuple[dict[int, bytes], Callable[[], None]]:
    """EXEC's part that is the proxy's own, in the queued order: each AUTH and HELLO (Redis
    queues them and runs them in their place; a node never sees AUTH, nor a HELLO's AUTH and
    SETNAME) and the check of every other command again as the user logged in at that point
    (the rules may have changed since it was queued, or an AUTH before it changed the user).
    Returns the replies the proxy gives, by index, and ``commit``: the login, the name, the
    protocol and the ACL log entries, to apply once the transaction ran (an EXEC that aborts,
    a failed WATCH, runs nothing). A HELLO that changes the protocol is replaced in ``queued``
    by ``HELLO protover`` (so the node answers what follows in the new protocol, as Redis
    does); its reply is still the proxy's."""
    users = s.proxy.users.users
    user, authenticated = s.login.user, s.login.authenticated
    replies: dict[int, bytes] = {}
    effects: list[Callable[[], None]] = []
    proto = s.proto
    for i, argv in enumerate(queued):
        if argv[0].lower() == b"hello":
            replies[i], user, authenticated, proto = _hello_at_exec(
                s, argv, user, authenticated, proto, effects)
            if proto != s.proto and replies[i][:1] != b"-":
                queued[i] = [b"HELLO", b"%d" % proto]
            continue
        if argv[0].lower() == b"auth":
            creds = _auth_args(s, argv)
            if isinstance(creds, bytes):
                replies[i] = creds
                continue
            u = users.get(creds[0])
            if u is not None and u.password_ok(creds[1]):
                user, authenticated = u, True
                replies[i] = OK
            else:
                effects.append(partial(_auth_failed, s, u, creds[0], argv[0], "multi"))
                replies[i] = error_frame(errors.WRONGPASS)
            continue
        if authenticated and user.unrestricted:
            continue
        info = commands.lookup(argv)
        denial = None if info is None else user.check(info, argv, glob_match)
        if info is None or denial is None:
            continue
        obj = info.name.encode() if denial.reason == acl.DENIED_CMD else argv[denial.index]
        effects.append(partial(_log, s, denial.reason, user.name, obj, "multi"))
        replies[i] = error_frame(acl_replies.NOPERM_EXEC + acl_replies.EXEC_REASONS[denial.reason])

    def commit() -> None:
        for effect in effects:
            effect()
        if (user, authenticated) != (s.login.user, s.login.authenticated):
            _log_in(s, user, authenticated)
        s.proto = proto

    return replies, commit


def _hello_at_exec(s: Session, argv: list[bytes], user: User, authenticated: bool, proto: int,
                   effects: list[Callable[[], None]]) -> tuple[bytes, User, bool, int]:
    """``hello`` run in its place in a transaction: (its reply, the user, logged in, protocol)
    after it; its other effects (the name, an ACL log entry) appended to ``effects``."""
    try:
        request = parse_hello(argv)
    except HelloError as exc:
        return error(exc.text), user, authenticated, proto
    for step, args in request.steps:
        if step == AUTH:
            u = s.proxy.users.users.get(args[0])
            if u is None or not u.password_ok(args[1]):
                effects.append(partial(_auth_failed, s, u, args[0], argv[0], "multi"))
                return error_frame(errors.WRONGPASS), user, authenticated, proto
            user, authenticated = u, True
        else:
            if not valid_client_name(args[0]):
                return error_frame(errors.CLIENT_NAME_CHARS), user, authenticated, proto
            effects.append(partial(setattr, s, "name", args[0] or None))
    if request.error is not None:
        return error(request.error), user, authenticated, proto
    if request.proto is not None:
        proto = request.proto
    return _hello_reply(s, proto), user, authenticated, proto


def _hello_reply(s: Session, proto: int) -> bytes:
    mode = b"cluster" if s.settings.cluster_emulation else b"standalone"
    return hello_reply(proto, s.id, version=commands.REDIS_VERSION, mode=mode, role=b"master")


# -- AUTH, HELLO, RESET -----------------------------------------------------------------------
def _auth_args(s: Session, argv: list[bytes]) -> tuple[bytes, bytes] | bytes:
    """AUTH's (username, password), or the error frame of a call that checks nothing."""
    if len(argv) > 3:
        return error_frame(errors.SYNTAX)
    if len(argv) == 2:
        if s.proxy.users.default.nopass:
            return error_frame(errors.AUTH_NOT_CONFIGURED)
        return b"default", argv[1]
    return argv[1], argv[2]


def auth_command(s: Session, argv: list[bytes]) -> bytes:
    creds = _auth_args(s, argv)
    if isinstance(creds, bytes):
        return creds
    if not authenticate(s, creds[0], creds[1], argv[0]):
        return error_frame(errors.WRONGPASS)
    return OK


def hello(s: Session, argv: list[bytes]) -> bytes:
    """Redis' HELLO, option by option (protocol/hello.py): AUTH logs in at once, and a client
    still not logged in after the options gets NOAUTH."""
    try:
        request = parse_hello(argv)
    except HelloError as exc:
        return error(exc.text)
    for step, args in request.steps:
        if step == AUTH:
            if not authenticate(s, args[0], args[1], argv[0]):
                return error_frame(errors.WRONGPASS)
        else:
            if not valid_client_name(args[0]):
                return error_frame(errors.CLIENT_NAME_CHARS)
            s.name = args[0] or None
    if request.error is not None:
        return error(request.error)
    if not s.login.authenticated:
        return error_frame(errors.NOAUTH_HELLO)
    if request.proto is not None:
        s.proto = request.proto
    return _hello_reply(s, s.proto)


def reset(s: Session, argv: list[bytes]) -> bytes:
    """RESET: also back to the default user (logged in only if it needs no password)."""
    users = s.proxy.users
    _log_in(s, users.default, users.open_login())
    return local.reset(s, argv)


# -- users changing ---------------------------------------------------------------------------
def _changed(proxy: Proxy, user: User) -> None:
    for x in _sessions_of(proxy, user):
        derive(x)


def _drop(proxy: Proxy, user: User, current: Session | None) -> None:
    """ACLFreeUserAndKillClients: the user's connections close (the caller's after its
    reply), back on the default user and logged out meanwhile."""
    for x in _sessions_of(proxy, user):
        _log_in(x, proxy.users.default, False)
        if x is current:
            x.quit = True
        else:
            x.abort()


def _drop_subscribers(proxy: Proxy, user: User, old: User, new: User) -> None:
    """ACLKillPubsubClientsIfNeeded: ``user``'s subscribers holding a channel or pattern the
    new rules do not allow (``old`` -> ``new``) are closed."""
    allowed = acl_lines.channels_taken_away(old, new)
    if allowed is None:
        return
    for x in _sessions_of(proxy, user):
        link = x.sub.link
        if link is None:
            continue
        sets = link.sets
        if not acl.check_channels(allowed, [*sets["channels"], *sets["shard"]],
                                  list(sets["patterns"]), glob_match):
            x.abort()


def _replace(proxy: Proxy, table: dict[bytes, User], current: Session | None) -> None:
    changed, removed = proxy.users.replace(table)
    for u, before in changed:
        _drop_subscribers(proxy, u, before, u)
        _changed(proxy, u)
    for u in removed:
        _drop(proxy, u, current)


def reload(proxy: Proxy, settings: ProxySettings) -> None:
    """SIGHUP: the ``auth`` section again (the ACL file re-read). Raises ValueError (the
    running users stay) when it no longer builds."""
    _replace(proxy, build(settings.auth_requirepass, settings.auth_users,
                          settings.auth_aclfile), None)


# -- ACL --------------------------------------------------------------------------------------
def _replied(render: Callable[[], bytes]) -> bytes:
    try:
        return render()
    except AclReplyError as e:
        return error_frame(str(e))


def acl_setuser(s: Session, argv: list[bytes]) -> bytes:
    users = s.proxy.users
    try:
        existing, temp = acl_lines.setuser(users.users, argv)
    except ValueError as e:
        return error_frame(str(e))
    if existing is None:
        users.users[argv[2]] = temp
        return OK
    _drop_subscribers(s.proxy, existing, existing, temp)
    existing.copy_from(temp)
    _changed(s.proxy, existing)
    return OK


def acl_deluser(s: Session, argv: list[bytes]) -> bytes:
    try:
        removed = acl_lines.deluser(s.proxy.users.users, argv[2:])
    except ValueError as e:
        return error_frame(str(e))
    for u in removed:
        _drop(s.proxy, u, s)
    return integer(len(removed))


def acl_load(s: Session, argv: list[bytes]) -> bytes:
    settings = s.settings
    if not settings.auth_aclfile:
        return error_frame(NO_ACLFILE)
    try:
        table = build(settings.auth_requirepass, settings.auth_users, settings.auth_aclfile)
    except ValueError as e:
        return error_frame(f"ERR {e}")
    _replace(s.proxy, table, s)
    return OK


def acl_save(s: Session, argv: list[bytes]) -> bytes:
    """ACL SAVE: the process's users to the ACL file (a temporary file, then renamed)."""
    path = s.settings.auth_aclfile
    if not path:
        return error_frame(NO_ACLFILE)
    tmp = Path(f"{path}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(acl_lines.file_text(s.proxy.users.users))
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        return error_frame(SAVE_FAILED)
    return OK


HANDLERS: dict[str, Callable[[Session, list[bytes]], bytes | None]] = {
    "auth": auth_command,
    "hello": hello,
    "reset": reset,
    "acl|whoami": lambda s, argv: bulk(s.login.user.name),
    "acl|users": lambda s, argv: acl_replies.usernames(s.proxy.users.users),
    "acl|list": lambda s, argv: acl_replies.list_users(s.proxy.users.users),
    "acl|getuser": lambda s, argv: acl_replies.getuser(s.proxy.users.users.get(argv[2]),
                                                       s.proto),
    "acl|cat": lambda s, argv: _replied(lambda: acl_replies.cat(argv)),
    "acl|genpass": lambda s, argv: _replied(lambda: acl_replies.genpass(argv)),
    "acl|dryrun": lambda s, argv: _replied(
        lambda: acl_replies.dryrun(s.proxy.users.users, argv, glob_match)),
    "acl|log": lambda s, argv: _replied(lambda: acl_replies.log_command(
        s.proxy.users.log, argv, s.proto, int(time.time() * 1000))),
    "acl|help": lambda s, argv: acl_replies.HELP,
    "acl|setuser": acl_setuser,
    "acl|deluser": acl_deluser,
    "acl|load": acl_load,
    "acl|save": acl_save,
}
