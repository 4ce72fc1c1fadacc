"""ACL in the node: the users (protocol/acl.py's model), AUTH's check, the permission check off
the fast path, ACL LOG, the ACL file, and the ACL command.

``install(server)`` sets ``server.acl`` (a ``NodeAcl``). Clients point at a ``User``
(``Client.acl_user``, set with ``Client.set_acl_user``); a client whose user may run every
command on every key and channel stays on the fast path, any other takes the slow path, where
``process_command`` asks ``NodeAcl.check``. Changing a user re-derives its clients' flag;
deleting one (or ACL LOAD replacing it) closes its clients, as Redis does; ACL SETUSER that
takes channels away closes the user's subscribers that hold them.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from slotgate.node.commands.connection import client_info_line
from slotgate.node.commands.registry import Command, command
from slotgate.node.commands.replies import OK
from slotgate.node.core.errors import CommandError
from slotgate.node.core.glob import held_glob_match
from slotgate.protocol import acl, acl_lines, acl_replies, errors
from slotgate.protocol.acl import RuleError, User
from slotgate.protocol.acl_lines import parse_acl_file
from slotgate.protocol.acl_replies import LogEntry
from slotgate.protocol.commands import ALL_COMMANDS
from slotgate.protocol.resp import bulk, integer

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

NOPERM_CMD = errors.NOPERM_CMD
NOPERM_KEY = errors.NOPERM_KEY
NOPERM_CHANNEL = errors.NOPERM_CHANNEL
NOPERM_EXEC = acl_replies.NOPERM_EXEC
# Inside a script (Redis' scriptVerifyACL), by denial reason.
_SCRIPT_REASONS = {
    acl.DENIED_CMD: b"ERR The user executing the script can't run this command or subcommand",
    acl.DENIED_KEY: b"ERR The user executing the script can't access at least one of the keys "
                    b"mentioned in the command arguments",
    acl.DENIED_CHANNEL: b"ERR The user executing the script can't publish to the channel "
                        b"mentioned in the command",
}
_EXEC_REASONS = acl_replies.EXEC_REASONS
NO_ACLFILE = acl_replies.NO_ACLFILE
SAVE_FAILED = acl_replies.SAVE_FAILED
BOTH_SOURCES = acl_lines.BOTH_SOURCES



class NodeAcl:
    """The node's users, ACL log and ACL file."""

    def __init__(self, server: Server) -> None:
        self.server = server
        cfg = server.config
        self.allchannels_default = str(cfg.get("acl-pubsub-default")) == "allchannels"
        self.default = acl.default_user(self.allchannels_default)
        self.users: dict[bytes, User] = {b"default": self.default}
        self.log: deque[LogEntry] = deque()
        self._requirepass = ""
        self._set_requirepass(str(cfg.get("requirepass")))
        path = str(cfg.get("aclfile"))
        if path and cfg.acl_users:
            raise SystemExit(BOTH_SOURCES)
        for words in cfg.acl_users:
            u = self.users.get(words[0])
            if u is None:
                u = self.users[words[0]] = User(words[0], self.allchannels_default)
            else:
                u.apply(b"reset")
            try:
                u.apply_all(words[1:])
            except RuleError as e:
                raise SystemExit(f"Error loading ACL rule '{_text(e.args[0])}' for the user "
                                 f"named '{_text(words[0])}': {e.args[1]}") from None
        if path:
            failed = self.load_file(path)
            if failed is not None:
                raise SystemExit(f"Aborting Redis startup because of ACL errors: {failed}")
        server.config_hooks.append(self._config_changed)

    # -- users and clients -------------------------------------------------------------------
    def open_login(self) -> bool:
        """A new connection starts authenticated (the default user is on and nopass)."""
        return self.default.enabled and self.default.nopass

    def _set_requirepass(self, password: str) -> None:
        """ACLUpdateDefaultUserPassword."""
        self._requirepass = password
        self.default.apply(b"resetpass")
        self.default.apply(b">" + password.encode("utf-8", "surrogateescape") if password
                           else b"nopass")

    def _config_changed(self) -> None:
        cfg = self.server.config
        password = str(cfg.get("requirepass"))
        if password != self._requirepass:
            self._set_requirepass(password)
            self.user_changed(self.default)
        self.allchannels_default = str(cfg.get("acl-pubsub-default")) == "allchannels"

    def clients_of(self, user: User) -> list[Client]:
        return [c for c in self.server.clients.values() if c.acl_user is user]

    def user_changed(self, user: User) -> None:
        """Its clients' fast-path flag follows the new rules."""
        for c in self.clients_of(user):
            c.set_acl_user(user)

    def drop_user_clients(self, user: User, current: Client | None) -> None:
        """ACLFreeUserAndKillClients: the user's connections close (the caller's after its
        reply), back on the default user and unauthenticated meanwhile."""
        for c in self.clients_of(user):
            c.set_acl_user(self.default)
            c.set_authenticated(False)
            self.server.kill_client(c)

    def authenticate(self, c: Client, username: bytes, password: bytes, argv0: bytes) -> bool:
        """ACLAuthenticateUser: on success the client is that user; a failure is logged."""
        u = self.users.get(username)
        if u is not None and u.password_ok(password):
            c.set_acl_user(u)
            c.set_authenticated(True)
            return True
        self.add_log(c, acl.DENIED_AUTH, 0, username, argv0)
        return False

    # -- the permission check ----------------------------------------------------------------
    def check(self, c: Client, cmd: Command, argv: list[bytes],
              in_exec: bool = False) -> str | None:
        """The NOPERM text for ``c`` running ``argv`` (logged), or None to go on. ``in_exec``:
        a queued command checked again by EXEC (the rules may have changed meanwhile)."""
        user = c.acl_user
        info = ALL_COMMANDS.get(cmd.full_name.encode())
        if user is None or info is None:
            return None
        denial = user.check(info, argv, held_glob_match)
        if denial is None:
            return None
        obj = info.name.encode() if denial.reason == acl.DENIED_CMD else argv[denial.index]
        self.add_log(c, denial.reason, denial.index, user.name, obj, in_exec)
        if in_exec:
            return NOPERM_EXEC + _EXEC_REASONS[denial.reason]
        if denial.reason == acl.DENIED_CMD:
            return NOPERM_CMD % info.name
        return NOPERM_KEY if denial.reason == acl.DENIED_KEY else NOPERM_CHANNEL

    def check_script(self, caller: Client, cmd: Command, argv: list[bytes]) -> bytes | None:
        """scriptVerifyACL: the error text (no ``-``) for a command a script of ``caller``
        runs, logged with context ``lua``; None to go on."""
        user = caller.acl_user
        info = ALL_COMMANDS.get(cmd.full_name.encode())
        if user is None or user.unrestricted or info is None:
            return None
        denial = user.check(info, argv, held_glob_match)
        if denial is None:
            return None
        obj = info.name.encode() if denial.reason == acl.DENIED_CMD else argv[denial.index]
        self.add_log(caller, denial.reason, denial.index, user.name, obj, context="lua")
        return _SCRIPT_REASONS[denial.reason]

    # -- ACL LOG -----------------------------------------------------------------------------
    def add_log(self, c: Client, reason: int, index: int, username: bytes, obj: bytes,
                in_exec: bool = False, context: str | None = None) -> None:
        """addACLLogEntry (protocol/acl_replies.py), with this client's context and info."""
        now_ms = int(time.time() * 1000)
        if context is None:
            context = "multi" if c.multi is not None or in_exec else "toplevel"
        entry = LogEntry(1, reason, context, obj, username, now_ms, client_info_line(c, now_ms))
        acl_replies.add_log(self.log, int(self.server.config.get("acllog-max-len")), entry)

    # -- the ACL file ------------------------------------------------------------------------
    def load_file(self, path: str) -> str | None:
        """ACLLoadFromFile: replace every user, or nothing at all; the error text or None."""
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            return f"Error loading ACLs, opening file '{path}': {e.strerror}"
        shown = str(self.server.config.get("aclfile"))
        try:
            users = parse_acl_file(text, shown, self.allchannels_default)
        except ValueError as e:
            return str(e)
        new_default = users.pop(b"default", None) or acl.default_user(self.allchannels_default)
        old = [u for name, u in self.users.items() if name != b"default"]
        self.default.copy_from(new_default)
        self.users = {b"default": self.default, **users}
        for u in old:
            self.drop_user_clients(u, None)
        self.user_changed(self.default)
        return None

    def save_file(self, path: str) -> bool:
        """ACLSaveToFile: every user as a ``user`` line, written to a temp file then renamed."""
        data = acl_lines.file_text(self.users)
        tmp = f"{path}.tmp-{os.getpid()}-{int(time.time() * 1000)}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        return True


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def install(server: Server) -> None:
    server.acl = NodeAcl(server)


# -- the ACL command ---------------------------------------------------------------------------
@command("acl|setuser")
def acl_setuser(c: Client, argv: list[bytes]) -> bytes:
    node = c.server.acl
    try:
        existing, temp = acl_lines.setuser(node.users, argv, node.allchannels_default)
    except ValueError as e:
        raise CommandError(str(e)) from None
    if existing is None:
        node.users[argv[2]] = temp
        return OK
    _kill_pubsub_if_needed(c, temp, existing)
    existing.copy_from(temp)
    node.user_changed(existing)
    return OK


def _kill_pubsub_if_needed(c: Client, new: User, old: User) -> None:
    """ACLKillPubsubClientsIfNeeded: subscribers of ``old`` holding a channel or pattern the
    new rules do not allow are closed."""
    allowed = acl_lines.channels_taken_away(old, new)
    if allowed is None:
        return
    node = c.server.acl
    for other in node.clients_of(old):
        subs = other.pubsub
        if not other.subscriptions or subs is None:
            continue
        if not acl.check_channels(allowed, [*subs.channels, *subs.shard], list(subs.patterns),
                                  held_glob_match):
            c.server.kill_client(other)


@command("acl|deluser")
def acl_deluser(c: Client, argv: list[bytes]) -> bytes:
    node = c.server.acl
    try:
        removed = acl_lines.deluser(node.users, argv[2:])
    except ValueError as e:
        raise CommandError(str(e)) from None
    for u in removed:
        node.drop_user_clients(u, c)
    return integer(len(removed))


@command("acl|getuser")
def acl_getuser(c: Client, argv: list[bytes]) -> bytes:
    return acl_replies.getuser(c.server.acl.users.get(argv[2]), c.resp)


@command("acl|list")
def acl_list(c: Client, argv: list[bytes]) -> bytes:
    return acl_replies.list_users(c.server.acl.users)


@command("acl|users")
def acl_users(c: Client, argv: list[bytes]) -> bytes:
    return acl_replies.usernames(c.server.acl.users)


@command("acl|whoami")
def acl_whoami(c: Client, argv: list[bytes]) -> bytes:
    return bulk(c.user)


def _aclfile(c: Client) -> str:
    path = str(c.server.config.get("aclfile"))
    if not path:
        raise CommandError(NO_ACLFILE)
    return path


@command("acl|load")
def acl_load(c: Client, argv: list[bytes]) -> bytes:
    failed = c.server.acl.load_file(_aclfile(c))
    if failed is not None:
        raise CommandError("ERR " + failed)
    return OK


@command("acl|save")
def acl_save(c: Client, argv: list[bytes]) -> bytes:
    if not c.server.acl.save_file(_aclfile(c)):
        raise CommandError(SAVE_FAILED)
    return OK


def _replied(render: Callable[[], bytes]) -> bytes:
    try:
        return render()
    except acl_replies.AclReplyError as e:
        raise CommandError(str(e)) from None


@command("acl|cat")
def acl_cat(c: Client, argv: list[bytes]) -> bytes:
    return _replied(lambda: acl_replies.cat(argv))


@command("acl|genpass")
def acl_genpass(c: Client, argv: list[bytes]) -> bytes:
    return _replied(lambda: acl_replies.genpass(argv))


@command("acl|log")
def acl_log(c: Client, argv: list[bytes]) -> bytes:
    now_ms = int(time.time() * 1000)
    return _replied(lambda: acl_replies.log_command(c.server.acl.log, argv, c.resp, now_ms))


@command("acl|dryrun")
def acl_dryrun(c: Client, argv: list[bytes]) -> bytes:
    return _replied(lambda: acl_replies.dryrun(c.server.acl.users, argv, held_glob_match))


@command("acl|help")
def acl_help(c: Client, argv: list[bytes]) -> bytes:
    return acl_replies.HELP
