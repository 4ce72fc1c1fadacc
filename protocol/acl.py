"""Redis 7.0 ACL users (sans-IO): the rule parser, the description ACL LIST/GETUSER print, and
the permission check. Shared by the node and (later) the proxy's own users.

A user is flags + password hashes + selectors; the first selector is the root one (rules
outside parentheses), the others come from ``(...)`` rules. A selector allows a set of
commands (full names: ``get``, ``config|get``), first arguments of otherwise denied commands
(``+select|0``), key patterns with read/write flags and channel patterns. As in Redis:

- ``+@cat`` / ``-@cat`` change every command of the category, a container's subcommands
  included; ``+@all`` also allows "future" commands (the bit that picks ``+@all`` or
  ``-@all`` as the first word of the description);
- the description is recomputed from the allowed set, not remembered: categories are picked
  greedily (the best fit first), then single commands fix the rest
  (``describe_commands``); Redis emits those singles in its command dict's random order, we
  emit them sorted;
- a check passes if any selector allows the command with its keys and channels; otherwise
  the denial reported is the "largest" kind (channel > key > command) at the largest index.

Key and channel patterns are matched with an injected Redis glob matcher (the node's bounded
``stringmatchlen``), so this module needs nothing outside ``protocol``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slotgate.protocol.acl_keys import key_refs
from slotgate.protocol.commands import ALL_COMMANDS, COMMANDS, CommandInfo
from slotgate.protocol.resp import split_args

Matcher = Callable[[bytes, bytes], bool]  # (pattern, subject) -> matches

CATEGORIES = (
    "keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
    "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous",
    "connection", "transaction", "scripting",
)
READ, WRITE = 1, 2
ALL_PERMS = READ | WRITE

# Results of a check, ordered as Redis orders them when it picks the error to report.
OK, DENIED_CMD, DENIED_KEY, DENIED_AUTH, DENIED_CHANNEL = 0, 1, 2, 3, 4

# ACLSetUserStringError's texts, by cause.
ERR_UNKNOWN = "Unknown command or category name in ACL"
ERR_SYNTAX = "Syntax error"
ERR_KEYS_AFTER_ALL = (
    "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not "
    "have any effect. Try 'resetkeys' to start with an empty list of patterns")
ERR_CHANNELS_AFTER_ALL = (
    "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does "
    "not have any effect. Try 'resetchannels' to start with an empty list of channels")
ERR_NO_SUCH_PASS = "The password you are trying to remove from the user does not exist"
ERR_BAD_HASH = ("The password hash must be exactly 64 characters and contain only lowercase "
                "hexadecimal characters")
ERR_DUPLICATE_USER = "Duplicate user found. A user can only be defined once in config files"
ERR_SUB_FIRSTARG = "Allowing first-arg of a subcommand is not supported"


class RuleError(Exception):
    """A rule that cannot be applied; ``str(e)`` is Redis' reason text."""


# -- the command table as ACL sees it --------------------------------------------------------
def _walk() -> list[CommandInfo]:
    out: list[CommandInfo] = []
    for name in sorted(COMMANDS):
        info = COMMANDS[name]
        out.append(info)
        out.extend(info.subcommands[s] for s in sorted(info.subcommands))
    return out


ORDERED: tuple[CommandInfo, ...] = tuple(_walk())  # every command, containers then their subs
ALL_NAMES: frozenset[str] = frozenset(i.name for i in ORDERED)
_SUBS: dict[str, tuple[str, ...]] = {
    i.name: tuple(s.name for s in i.subcommands.values()) for i in ORDERED if i.subcommands}
CATEGORY_MEMBERS: dict[str, tuple[str, ...]] = {
    cat: tuple(i.name for i in ORDERED if "@" + cat in i.acl_categories) for cat in CATEGORIES}


def lookup_command(name: str) -> CommandInfo | None:
    """ACLLookupCommand: ``get``, ``config|get`` (case-insensitive); None otherwise."""
    parts = name.lower().split("|")
    if len(parts) > 2:
        return None
    base = COMMANDS.get(parts[0].encode("utf-8", "surrogateescape"))
    if base is None or len(parts) == 1:
        return base
    if not base.subcommands:
        return None
    return base.subcommands.get(parts[1])


def hash_password(password: bytes) -> str:
    return hashlib.sha256(password).hexdigest()


def _valid_hash(text: bytes) -> bool:
    return len(text) == 64 and all(c in b"0123456789abcdef" for c in text)


def has_spaces(text: bytes) -> bool:
    """ACLStringHasSpaces: C isspace() or NUL anywhere."""
    return any(c in b" \t\n\v\f\r\0" for c in text)


# -- selectors -------------------------------------------------------------------------------
class Selector:
    """One set of permissions (aclSelector)."""

    __slots__ = ("root", "allkeys", "allchannels", "allcommands", "future", "allowed",
                 "firstargs", "patterns", "channels")

    def __init__(self, root: bool, allchannels: bool) -> None:
        self.root = root
        self.allkeys = False
        self.allchannels = allchannels  # acl-pubsub-default
        self.allcommands = False  # every command allowed, no bit to test
        self.future = False  # +@all was the last of +@all / -@all
        self.allowed: set[str] = set()
        self.firstargs: dict[str, list[bytes]] = {}
        self.patterns: list[list] = []  # [pattern bytes, READ|WRITE] in order
        self.channels: list[bytes] = []

    def copy(self) -> Selector:
        s = Selector(self.root, self.allchannels)
        s.allkeys, s.allcommands, s.future = self.allkeys, self.allcommands, self.future
        s.allowed = set(self.allowed)
        s.firstargs = {k: list(v) for k, v in self.firstargs.items()}
        s.patterns = [list(p) for p in self.patterns]
        s.channels = list(self.channels)
        return s

    # -- command bits --------------------------------------------------------------------
    def _set_bit(self, name: str, allow: bool) -> None:
        if allow:
            self.allowed.add(name)
        else:
            self.allowed.discard(name)
            self.allcommands = False

    def change_perm(self, info: CommandInfo, allow: bool) -> None:
        """ACLChangeSelectorPerm: the command and all its subcommands."""
        self._set_bit(info.name, allow)
        self.firstargs.pop(info.name, None)
        for sub in _SUBS.get(info.name, ()):
            self._set_bit(sub, allow)

    def set_category(self, category: str, allow: bool) -> None:
        for name in CATEGORY_MEMBERS[category]:
            info = ALL_COMMANDS[name.encode()]
            self.change_perm(info, allow)

    def set_all(self, allow: bool) -> None:
        self.allowed = set(ALL_NAMES) if allow else set()
        self.allcommands = self.future = allow
        self.firstargs = {}

    # -- one rule ------------------------------------------------------------------------
    def apply(self, op: bytes) -> None:
        """ACLSetSelector; raises RuleError."""
        low = op.lower()
        if low in (b"allkeys", b"~*"):
            self.allkeys = True
            self.patterns = []
        elif low == b"resetkeys":
            self.allkeys = False
            self.patterns = []
        elif low in (b"allchannels", b"&*"):
            self.allchannels = True
            self.channels = []
        elif low == b"resetchannels":
            self.allchannels = False
            self.channels = []
        elif low in (b"allcommands", b"+@all"):
            self.set_all(True)
        elif low in (b"nocommands", b"-@all"):
            self.set_all(False)
        elif op[:1] in (b"~", b"%"):
            self._add_key_pattern(op)
        elif op[:1] == b"&":
            if self.allchannels:
                raise RuleError(ERR_CHANNELS_AFTER_ALL)
            pattern = op[1:]
            if has_spaces(pattern):
                raise RuleError(ERR_SYNTAX)
            if pattern not in self.channels:
                self.channels.append(pattern)
            self.allchannels = False
        elif op[:1] == b"+" and op[1:2] != b"@":
            self._allow_command(op[1:].decode("utf-8", "surrogateescape"))
        elif op[:1] == b"-" and op[1:2] != b"@":
            info = lookup_command(op[1:].decode("utf-8", "surrogateescape"))
            if info is None:
                raise RuleError(ERR_UNKNOWN)
            self.change_perm(info, False)
        elif op[:1] in (b"+", b"-") and op[1:2] == b"@":
            category = low[2:].decode("utf-8", "surrogateescape")
            if category not in CATEGORY_MEMBERS:
                raise RuleError(ERR_UNKNOWN)
            self.set_category(category, op[:1] == b"+")
        else:
            raise RuleError(ERR_SYNTAX)

    def _add_key_pattern(self, op: bytes) -> None:
        if self.allkeys:
            raise RuleError(ERR_KEYS_AFTER_ALL)
        flags = 0
        offset = 1
        if op[:1] == b"%":
            while offset < len(op):
                ch = op[offset:offset + 1].upper()
                if ch == b"R" and not flags & READ:
                    flags |= READ
                elif ch == b"W" and not flags & WRITE:
                    flags |= WRITE
                elif ch == b"~":
                    offset += 1
                    break
                else:
                    raise RuleError(ERR_SYNTAX)
                offset += 1
            if not flags:
                raise RuleError(ERR_SYNTAX)
        else:
            flags = ALL_PERMS
        pattern = op[offset:]
        if has_spaces(pattern):
            raise RuleError(ERR_SYNTAX)
        for existing in self.patterns:
            if existing[0] == pattern:
                existing[1] |= flags
                break
        else:
            self.patterns.append([pattern, flags])
        self.allkeys = False

    def _allow_command(self, name: str) -> None:
        if "|" not in name:
            info = lookup_command(name)
            if info is None:
                raise RuleError(ERR_UNKNOWN)
            self.change_perm(info, True)
            return
        base_name, _, first = name.rpartition("|")
        base = lookup_command(base_name)
        if base is None:
            raise RuleError(ERR_UNKNOWN)
        if base.container is not None:
            raise RuleError(ERR_SUB_FIRSTARG)
        if not first:
            raise RuleError(ERR_SYNTAX)
        if base.subcommands:
            sub = lookup_command(name)
            if sub is None:
                raise RuleError(ERR_UNKNOWN)
            self.change_perm(sub, True)
            return
        allowed = self.firstargs.setdefault(base.name, [])
        raw = first.encode("utf-8", "surrogateescape")
        if raw.lower() not in (a.lower() for a in allowed):
            allowed.append(raw)

    # -- describing ----------------------------------------------------------------------
    def describe_commands(self) -> str:
        """ACLDescribeSelectorCommandRules: ``+@all``/``-@all``, categories, single commands."""
        additive = not self.future
        words = ["-@all" if additive else "+@all"]
        fake = Selector(False, False)
        fake.set_all(not additive)
        temp = set(self.allowed)
        applied: set[str] = set()
        while True:
            best, mindiff, maxsame = None, 1 << 31, 0
            for cat in CATEGORIES:
                if cat in applied:
                    continue
                members = CATEGORY_MEMBERS[cat]
                on = sum(1 for n in members if n in temp)
                off = len(members) - on
                diff, same = (off, on) if additive else (on, off)
                if same > diff and (diff < mindiff or (diff == mindiff and same > maxsame)):
                    best, mindiff, maxsame = cat, diff, same
            if best is None:
                break
            fake.set_category(best, additive)
            # the temporary copy takes the inverse, so the category stops looking useful
            for name in CATEGORY_MEMBERS[best]:
                for n in (name, *_SUBS.get(name, ())):
                    if additive:
                        temp.discard(n)
                    else:
                        temp.add(n)
            words.append(("+@" if additive else "-@") + best)
            applied.add(best)
        for info in ORDERED:
            name = info.name
            user_bit = name in self.allowed
            if user_bit != (name in fake.allowed):
                words.append(("+" if user_bit else "-") + name)
                fake.change_perm(info, user_bit)
            if not user_bit:
                for arg in self.firstargs.get(name, ()):
                    words.append("+" + name + "|" + arg.decode("utf-8", "surrogateescape"))
        return " ".join(words)

    def key_words(self) -> list[bytes]:
        if self.allkeys:
            return [b"~*"]
        return [_PATTERN_PREFIX[flags] + pattern for pattern, flags in self.patterns]

    def channel_words(self) -> list[bytes]:
        if self.allchannels:
            return [b"&*"]
        return [b"&" + ch for ch in self.channels]

    def describe(self) -> bytes:
        """ACLDescribeSelector: keys, channels, commands (as ACL LIST prints them)."""
        words = self.key_words()
        if not self.allchannels:
            words.append(b"resetchannels")
        words += self.channel_words()
        words.append(self.describe_commands().encode())
        return b" ".join(words)

    # -- checking ------------------------------------------------------------------------
    def check(self, info: CommandInfo, argv: Sequence[bytes], match: Matcher,
              keys: list[tuple[int, int]] | None) -> tuple[int, int, list[tuple[int, int]] | None]:
        """ACLSelectorCheckCmd: (result, argument index, the key cache)."""
        if not self.allcommands and "no_auth" not in info.flags and info.name not in self.allowed:
            allowed = self.firstargs.get(info.name)
            if len(argv) < 2 or not allowed:
                return DENIED_CMD, 0, keys
            arg = argv[2 if info.container else 1].lower()
            if not any(arg == a.lower() for a in allowed):
                return DENIED_CMD, 0, keys
        if not self.allkeys and info.has_keys:
            if keys is None:
                keys = key_refs(info, argv)
            for pos, flags in keys:
                if not self._key_ok(argv[pos], flags, match):
                    return DENIED_KEY, pos, keys
        if not self.allchannels:
            spec = _CHANNEL_ARGS.get(info.name)
            if spec is not None:
                first, last, literal = spec
                for pos in range(first, len(argv) if last < 0 else last + 1):
                    if not self._channel_ok(argv[pos], literal, match):
                        return DENIED_CHANNEL, pos, keys
        return OK, 0, keys

    def _key_ok(self, key: bytes, flags: int, match: Matcher) -> bool:
        for pattern, pflags in self.patterns:
            if pflags & flags == flags and match(pattern, key):
                return True
        return False

    def _channel_ok(self, channel: bytes, literal: bool, match: Matcher) -> bool:
        for pattern in self.channels:
            if (pattern == channel) if literal else match(pattern, channel):
                return True
        return False


_PATTERN_PREFIX = {ALL_PERMS: b"~", READ: b"%R~", WRITE: b"%W~"}
# Commands whose arguments are channels ACL checks: (first, last (-1: to the end), literal)
_CHANNEL_ARGS = {
    "publish": (1, 1, False), "spublish": (1, 1, False),
    "subscribe": (1, -1, False), "ssubscribe": (1, -1, False),
    "psubscribe": (1, -1, True),
}


# -- users -----------------------------------------------------------------------------------
@dataclass
class Denial:
    """Why a check failed: ``reason`` (DENIED_*), and the argument index of the key/channel."""

    reason: int
    index: int


class User:
    """One ACL user."""

    def __init__(self, name: bytes, allchannels_default: bool = False) -> None:
        self.name = name
        self.enabled = False
        self.nopass = False
        self.sanitize: str | None = None  # "skip-sanitize-payload" / "sanitize-payload"
        self.passwords: list[str] = []  # SHA-256 hex
        # acl-pubsub-default when the rules are applied (reset, new selectors): the caller
        # keeps it current
        self.allchannels_default = allchannels_default
        self.selectors: list[Selector] = [Selector(True, allchannels_default)]

    @property
    def root(self) -> Selector:
        return self.selectors[0]

    def copy(self, name: bytes | None = None) -> User:
        u = User(self.name if name is None else name, self.allchannels_default)
        u.copy_from(self)
        return u

    def copy_from(self, src: User) -> None:
        """ACLCopyUser: take ``src``'s rules, keep the name."""
        self.enabled, self.nopass, self.sanitize = src.enabled, src.nopass, src.sanitize
        self.passwords = list(src.passwords)
        self.selectors = [s.copy() for s in src.selectors]

    @property
    def unrestricted(self) -> bool:
        """Can run every command on every key and channel (the check can be skipped)."""
        r = self.root
        return r.allcommands and r.allkeys and r.allchannels

    def apply(self, op: bytes) -> None:
        """ACLSetUser: one rule; raises RuleError with Redis' reason."""
        if not op:
            return
        low = op.lower()
        simple = _USER_RULES.get(low)
        if simple is not None:
            simple(self)
        elif op[:1] in (b">", b"#"):
            digest = _digest(op, b">")
            if digest not in self.passwords:
                self.passwords.append(digest)
            self.nopass = False
        elif op[:1] in (b"<", b"!"):
            digest = _digest(op, b"<")
            if digest not in self.passwords:
                raise RuleError(ERR_NO_SUCH_PASS)
            self.passwords.remove(digest)
        elif op[:1] == b"(" and op[-1:] == b")":
            selector = Selector(False, self.allchannels_default)
            for word in split_args(op[1:-1]) or []:
                selector.apply(word)
            self.selectors.append(selector)
        elif low == b"reset":
            self.passwords, self.nopass = [], False
            self.root.apply(b"resetkeys")
            self.root.apply(b"resetchannels")
            if self.allchannels_default:
                self.root.apply(b"allchannels")
            self.enabled = False
            self.sanitize = "sanitize-payload"
            del self.selectors[1:]
            self.root.set_all(False)
        else:
            self.root.apply(op)

    def apply_all(self, ops: Sequence[bytes]) -> None:
        for op in ops:
            try:
                self.apply(op)
            except RuleError as e:
                e.args = (op, e.args[0])
                raise

    def password_ok(self, password: bytes) -> bool:
        """ACLCheckUserCredentials for an existing user."""
        if not self.enabled:
            return False
        if self.nopass:
            return True
        return hash_password(password) in self.passwords

    def flag_words(self) -> list[str]:
        words = ["on" if self.enabled else "off"]
        if self.nopass:
            words.append("nopass")
        if self.sanitize:
            words.append(self.sanitize)
        return words

    def describe(self) -> bytes:
        """ACLDescribeUser: the rules after ``user <name>`` in ACL LIST and the ACL file."""
        out = " ".join(self.flag_words()).encode() + b" "
        for p in self.passwords:
            out += b"#" + p.encode() + b" "
        out += self.root.describe()
        for s in self.selectors[1:]:
            out += b" (" + s.describe() + b")"
        return out

    def check(self, info: CommandInfo, argv: Sequence[bytes], match: Matcher) -> Denial | None:
        """ACLCheckAllUserCommandPerm: None when allowed."""
        relevant, last_idx = DENIED_CMD, 0
        keys: list[tuple[int, int]] | None = None
        for s in self.selectors:
            result, idx, keys = s.check(info, argv, match, keys)
            if result == OK:
                return None
            if result > relevant or (result == relevant and idx > last_idx):
                relevant, last_idx = result, idx
        return Denial(relevant, last_idx)

    def reads_every_key(self, info: CommandInfo, argv: Sequence[bytes], match: Matcher) -> bool:
        """ACLUserCheckCmdWithUnrestrictedKeyAccess for reads: a selector that allows the
        command has ``allkeys`` or a read pattern ``*`` (what SORT's BY/GET patterns need)."""
        keys: list[tuple[int, int]] | None = None
        for s in self.selectors:
            result, _, keys = s.check(info, argv, match, keys)
            if result == OK and (s.allkeys or any(
                    p == b"*" and f & READ == READ for p, f in s.patterns)):
                return True
        return False

    def channels_allowed(self) -> list[bytes] | None:
        """Every channel pattern of every selector; None if one selector allows all."""
        out: list[bytes] = []
        for s in self.selectors:
            if s.allchannels:
                return None
            out.extend(s.channels)
        return out


def _digest(op: bytes, clear_prefix: bytes) -> str:
    """The SHA-256 hex of ``>pass``/``<pass``, or the hash given by ``#hash``/``!hash``."""
    if op[:1] == clear_prefix:
        return hash_password(op[1:])
    if not _valid_hash(op[1:]):
        raise RuleError(ERR_BAD_HASH)
    return op[1:].decode()


def _set_flag(attr: str, value: object) -> Callable[[User], None]:
    def apply(u: User) -> None:
        setattr(u, attr, value)
    return apply


def _nopass(u: User) -> None:
    u.nopass, u.passwords = True, []


def _resetpass(u: User) -> None:
    u.nopass, u.passwords = False, []


def _clearselectors(u: User) -> None:
    del u.selectors[1:]


_USER_RULES: dict[bytes, Callable[[User], None]] = {
    b"on": _set_flag("enabled", True),
    b"off": _set_flag("enabled", False),
    b"skip-sanitize-payload": _set_flag("sanitize", "skip-sanitize-payload"),
    b"sanitize-payload": _set_flag("sanitize", "sanitize-payload"),
    b"nopass": _nopass,
    b"resetpass": _resetpass,
    b"clearselectors": _clearselectors,
}


def default_user(allchannels_default: bool = False) -> User:
    """ACLCreateDefaultUser: on, nopass, every command, key and channel."""
    u = User(b"default", allchannels_default)
    u.apply_all([b"+@all", b"~*", b"&*", b"on", b"nopass"])
    return u


def check_channels(allowed: list[bytes] | None, channels: Sequence[bytes],
                   patterns: Sequence[bytes], match: Matcher) -> bool:
    """Whether a subscriber's channels and patterns all stay allowed (the pub/sub kill test of
    ACL SETUSER): patterns literally, channels by glob."""
    if allowed is None:
        return True
    for p in patterns:
        if p not in allowed:
            return False
    return all(any(match(a, ch) for a in allowed) for ch in channels)

