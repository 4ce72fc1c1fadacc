"""The ACL command's replies and the ACL log, as Redis 7.0 renders them (sans-IO), for the node's
users and the proxy's own alike: GETUSER, LIST, USERS, CAT, DRYRUN, GENPASS, HELP, LOG.

Each function takes what it renders (users, log entries, the client's protocol) and returns
the complete reply frame, or raises ``AclReplyError`` with Redis' error text (with ``ERR``).
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slotgate.protocol import acl
from slotgate.protocol.acl import CATEGORIES, CATEGORY_MEMBERS, Matcher, User
from slotgate.protocol.commands import CommandInfo, arity_ok, lookup
from slotgate.protocol.errors import wrong_args
from slotgate.protocol.resp import (
    array_header,
    bulk,
    double,
    integer,
    map_header,
    null,
    set_header,
    string2ll,
)

GENPASS_MAX_BITS = 4096
LOG_GROUPING_MS = 60000  # ACL_LOG_GROUPING_MAX_TIME_DELTA
LOG_SCAN = 10  # entries looked at for one to bump instead of adding
REASONS = {acl.DENIED_CMD: "command", acl.DENIED_KEY: "key", acl.DENIED_CHANNEL: "channel",
           acl.DENIED_AUTH: "auth"}
NOT_INTEGER = "ERR value is not an integer or out of range"
NOPERM_EXEC = (
    "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC "
    "call. This command is no longer allowed for the following reason: ")
EXEC_REASONS = {
    acl.DENIED_CMD: "no permission to execute the command or subcommand",
    acl.DENIED_KEY: "no permission to touch the specified keys",
    acl.DENIED_CHANNEL: "no permission to access one of the channels used as arguments",
}
NO_ACLFILE = (
    "ERR This Redis instance is not configured to use an ACL file. You may want to specify "
    "users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a "
    "Redis configuration file set) in order to store users in the Redis configuration.")
SAVE_FAILED = ("ERR There was an error trying to save the ACLs. Please check the server logs "
               "for more information")


class AclReplyError(Exception):
    """The error reply's text (``ERR ...``), without ``-`` and CRLF."""


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def shown(raw: bytes, limit: int) -> str:
    """An argument inside an error text: at most ``limit`` bytes, newlines as spaces."""
    text = raw[:limit].decode("utf-8", "replace")
    return "".join(" " if ch in "\r\n" else ch for ch in text)


def subcommand_error(argv: Sequence[bytes]) -> str:
    return (f"ERR unknown subcommand or wrong number of arguments for "
            f"'{shown(argv[1], 128)}'. Try ACL HELP.")


# -- users -------------------------------------------------------------------------------------
def _selector_fields(s: acl.Selector) -> list[bytes]:
    return [bulk(b"commands"), bulk(s.describe_commands()),
            bulk(b"keys"), bulk(b" ".join(s.key_words())),
            bulk(b"channels"), bulk(b" ".join(s.channel_words()))]


def getuser(u: User | None, proto: int) -> bytes:
    if u is None:
        return null(proto)
    flags = u.flag_words()
    parts = [map_header(6, proto), bulk(b"flags"), set_header(len(flags), proto)]
    parts += [bulk(f) for f in flags]
    parts += [bulk(b"passwords"), array_header(len(u.passwords))]
    parts += [bulk(p) for p in u.passwords]
    parts += _selector_fields(u.root)
    parts += [bulk(b"selectors"), array_header(len(u.selectors) - 1)]
    for s in u.selectors[1:]:
        parts.append(map_header(3, proto))
        parts += _selector_fields(s)
    return b"".join(parts)


def list_users(users: Mapping[bytes, User]) -> bytes:
    names = sorted(users)
    return array_header(len(names)) + b"".join(
        bulk(b"user " + n + b" " + users[n].describe()) for n in names)


def usernames(users: Mapping[bytes, User]) -> bytes:
    names = sorted(users)
    return array_header(len(names)) + b"".join(bulk(n) for n in names)


def cat(argv: Sequence[bytes]) -> bytes:
    if len(argv) == 2:
        return array_header(len(CATEGORIES)) + b"".join(bulk(x) for x in CATEGORIES)
    if len(argv) > 3:
        raise AclReplyError(subcommand_error(argv))
    name = argv[2].decode("utf-8", "replace").lower()
    if name not in CATEGORY_MEMBERS:
        raise AclReplyError(f"ERR Unknown category '{shown(argv[2], 128)}'")
    names = CATEGORY_MEMBERS[name]
    return array_header(len(names)) + b"".join(bulk(n) for n in names)


def genpass(argv: Sequence[bytes]) -> bytes:
    if len(argv) > 3:
        raise AclReplyError(subcommand_error(argv))
    bits = 256
    if len(argv) == 3:
        parsed = string2ll(argv[2])
        if parsed is None:
            raise AclReplyError(NOT_INTEGER)
        bits = parsed
    if bits <= 0 or bits > GENPASS_MAX_BITS:
        raise AclReplyError("ERR ACL GENPASS argument must be the number of bits for the output "
                            f"password, a positive number up to {GENPASS_MAX_BITS}")
    chars = (bits + 3) // 4
    return bulk(secrets.token_hex((chars + 1) // 2)[:chars])


def dryrun(users: Mapping[bytes, User], argv: Sequence[bytes], match: Matcher) -> bytes:
    """ACL DRYRUN user command [arg ...]: +OK, or the reason as a bulk string."""
    u = users.get(argv[2])
    if u is None:
        raise AclReplyError(f"ERR User '{_text(argv[2])}' not found")
    rest = argv[3:]
    info: CommandInfo | None = lookup(rest)
    if info is None:
        raise AclReplyError(f"ERR Command '{_text(rest[0])}' not found")
    if not arity_ok(info, len(rest)):
        raise AclReplyError(wrong_args(info.name))
    denial = u.check(info, rest, match)
    if denial is None:
        return b"+OK\r\n"
    if denial.reason == acl.DENIED_CMD:
        text = f"This user has no permissions to run the '{info.name}' command"
    elif denial.reason == acl.DENIED_KEY:
        text = f"This user has no permissions to access the '{_text(rest[denial.index])}' key"
    else:
        text = ("This user has no permissions to access the "
                f"'{_text(rest[denial.index])}' channel")
    return bulk(text)


# -- the ACL log -------------------------------------------------------------------------------
@dataclass
class LogEntry:
    count: int
    reason: int
    context: str  # toplevel / multi
    obj: bytes
    username: bytes
    ctime_ms: int
    cinfo: str


def add_log(log: deque[LogEntry], max_len: int, entry: LogEntry) -> None:
    """addACLLogEntry: bump a recent similar entry (moved to the front), else add ``entry``;
    the log keeps at most ``max_len`` entries."""
    for i, e in enumerate(log):
        if i >= LOG_SCAN:
            break
        if (e.reason == entry.reason and e.context == entry.context and e.obj == entry.obj
                and e.username == entry.username
                and abs(e.ctime_ms - entry.ctime_ms) <= LOG_GROUPING_MS):
            del log[i]
            log.appendleft(e)
            e.count += 1
            e.cinfo, e.ctime_ms = entry.cinfo, entry.ctime_ms
            return
    log.appendleft(entry)
    while len(log) > max_len:
        log.pop()


def log_command(log: deque[LogEntry], argv: Sequence[bytes], proto: int, now_ms: int) -> bytes:
    """ACL LOG [count | RESET]."""
    if len(argv) > 3:
        raise AclReplyError(subcommand_error(argv))
    count = 10
    if len(argv) == 3:
        if argv[2].lower() == b"reset":
            log.clear()
            return b"+OK\r\n"
        parsed = string2ll(argv[2])
        if parsed is None:
            raise AclReplyError(NOT_INTEGER)
        count = max(parsed, 0)
    entries = list(log)[:count]
    parts = [array_header(len(entries))]
    for e in entries:
        parts += [
            map_header(7, proto), bulk(b"count"), integer(e.count),
            bulk(b"reason"), bulk(REASONS.get(e.reason, "unknown")),
            bulk(b"context"), bulk(e.context), bulk(b"object"), bulk(e.obj),
            bulk(b"username"), bulk(e.username),
            bulk(b"age-seconds"), double((now_ms - e.ctime_ms) / 1000, proto),
            bulk(b"client-info"), bulk(e.cinfo),
        ]
    return b"".join(parts)


HELP_LINES = (
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
)
HELP = array_header(len(HELP_LINES)) + b"".join(b"+" + ln.encode() + b"\r\n" for ln in HELP_LINES)
