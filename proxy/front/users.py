"""The proxy's own users: the table the ``auth`` config section builds, its ACL log, and its
reload (SIGHUP, ACL LOAD).

Users are protocol/acl.py's ``User`` (Redis 7.0's rules, selectors and check); this module only
builds them from the settings, in Redis' order: the default user (every permission, no
password; ``requirepass`` gives it one), then the ``users`` lines (or the ACL file's users),
where a ``default`` line redefines the default user. ``build`` raises ``ValueError`` with
Redis' texts, so the config loader can refuse a bad section at load time.

A reload keeps every ``User`` object that still exists and copies the new rules into it, so a
connection logged in as a changed user runs under the new rules from its next command; a
removed user's connections are closed (Redis' ACLFreeUserAndKillClients).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from slotgate.protocol import acl, acl_replies
from slotgate.protocol.acl import RuleError, User
from slotgate.protocol.acl_lines import BOTH_SOURCES, check_user_line, parse_acl_file
from slotgate.protocol.acl_replies import LogEntry
from slotgate.protocol.resp import split_args

if TYPE_CHECKING:
    from slotgate.proxy.ops.settings import ProxySettings

ACLLOG_MAX_LEN = 128  # Redis' acllog-max-len default


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def user_lines(lines: Sequence[str]) -> list[list[bytes]]:
    """``auth.users``: each entry ``name rule rule ...`` (quotes as in redis.conf) checked as
    Redis checks a config file's ``user`` line, then applied to a scratch user (which reports
    unknown commands). Raises ValueError naming the entry (by number and user name, never its
    passwords) with Redis' error."""
    out: list[list[bytes]] = []
    names: list[bytes] = []
    for i, line in enumerate(lines):
        words = split_args(_encode(line))
        if not words:
            raise ValueError(f"entry {i}: expected a user name and its rules")
        try:
            merged = check_user_line(words, names)
        except ValueError as e:
            raise ValueError(f"entry {i}: {e}") from None
        scratch = User(merged[0])
        try:
            scratch.apply_all(merged[1:])
        except RuleError as e:
            raise ValueError(f"entry {i}: Error loading ACL rule '{_text(e.args[0])}' for the "
                             f"user named '{_text(merged[0])}': {e.args[1]}") from None
        names.append(merged[0])
        out.append(merged)
    return out


def read_aclfile(path: str) -> dict[bytes, User]:
    """The users of an ACL file; ValueError with Redis' texts (every error of the file)."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"Error loading ACLs, opening file '{path}': {e.strerror}") from None
    return parse_acl_file(text, path)


def build(requirepass: str | None, lines: Sequence[str], aclfile: str | None) -> dict[bytes, User]:
    """The whole table, ``default`` included; raises ValueError."""
    if lines and aclfile:
        raise ValueError(BOTH_SOURCES)
    default = acl.default_user()
    if requirepass:
        default.apply(b"resetpass")
        default.apply(b">" + _encode(requirepass))
    users = {b"default": default}
    for words in user_lines(lines):
        u = users.get(words[0])
        if u is None:
            u = users[words[0]] = User(words[0])
        else:
            u.apply(b"reset")
        u.apply_all(words[1:])
    if aclfile:
        for name, u in read_aclfile(aclfile).items():
            users[name] = u
    return users


class ProxyUsers:
    """The users one proxy process serves, and its ACL log. Sessions point at a ``User`` of
    ``users`` (``auth.Login``); ``proxy.sessions`` is how a change finds them."""

    def __init__(self, settings: ProxySettings) -> None:
        self.users = build(settings.auth_requirepass, settings.auth_users, settings.auth_aclfile)
        self.log: deque[LogEntry] = deque()
        self.log_max_len = ACLLOG_MAX_LEN

    @property
    def default(self) -> User:
        return self.users[b"default"]

    def open_login(self) -> bool:
        """A new connection starts logged in (the default user is on and needs no password)."""
        d = self.default
        return d.enabled and d.nopass

    def replace(self, new: dict[bytes, User]) -> tuple[list[tuple[User, User]], list[User]]:
        """Take ``new`` as the table: users that still exist keep their object and take the
        new rules. Returns (changed users with a copy of their previous rules, removed users)
        for the caller to update or close their connections."""
        changed: list[tuple[User, User]] = []
        table: dict[bytes, User] = {}
        for name, u in new.items():
            old = self.users.get(name)
            if old is None:
                table[name] = u
                continue
            if old.describe() != u.describe():
                before = old.copy()
                old.copy_from(u)
                changed.append((old, before))
            table[name] = old
        removed = [u for name, u in self.users.items() if name not in new]
        self.users = table
        return changed, removed

    def add_log(self, entry: LogEntry) -> None:
        acl_replies.add_log(self.log, self.log_max_len, entry)
