"""``user`` lines: a user's rules as words (ACL SETUSER's arguments, a config file's or an ACL
file's line), with the ``(...)`` selectors that span several words joined, and the check a
config file's line gets when it is read (Redis' ACLAppendUserForLoading), and an ACL file's
users (ACLLoadFromFile)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slotgate.protocol.acl import ERR_DUPLICATE_USER, ERR_UNKNOWN, RuleError, User, has_spaces

BOTH_SOURCES = (
    "Configuring Redis with users defined in redis.conf and at the same setting an ACL file "
    "path is invalid. This setup is very likely to lead to configuration errors and security "
    "holes, please define either an ACL file or declare users directly in your redis.conf, "
    "but not both.")


def merge_selector_args(args: Sequence[bytes]) -> tuple[list[bytes], int | None]:
    """ACLMergeSelectorArguments: ``(`` ... ``)`` spread over several words joined by spaces.
    Returns (rules, None), or ([], index of the unclosed ``(`` word)."""
    out: list[bytes] = []
    opened: int | None = None
    current = b""
    for i, op in enumerate(args):
        if op[:1] == b"(" and op[-1:] != b")":
            current, opened = op, i
            continue
        if opened is not None:
            current += b" " + op
            if op[-1:] == b")":
                out.append(current)
                opened = None
            continue
        out.append(op)
    if opened is not None:
        return [], opened
    return out, None


def setuser(users: Mapping[bytes, User], argv: Sequence[bytes],
            allchannels_default: bool = False) -> tuple[User | None, User]:
    """ACL SETUSER name rule ...: (the existing user or None, a user with the new rules), the
    rules applied to a copy so that nothing changes on error. Raises ValueError with Redis'
    error text (``ERR ...``)."""
    name = argv[2]
    if has_spaces(name):
        raise ValueError("ERR Usernames can't contain spaces or null characters")
    rules, bad = merge_selector_args(argv[3:])
    if bad is not None:
        raise ValueError("ERR Unmatched parenthesis in acl selector starting at "
                         f"'{_shown(argv[3 + bad])}'.")
    existing = users.get(name)
    temp = existing.copy() if existing is not None else User(name, allchannels_default)
    temp.allchannels_default = allchannels_default  # for reset and new selectors
    for rule in rules:
        try:
            temp.apply(rule)
        except RuleError as e:
            raise ValueError(f"ERR Error in ACL SETUSER modifier '{_shown(rule)}': {e}") from None
    return existing, temp


def deluser(users: dict[bytes, User], names: Sequence[bytes]) -> list[User]:
    """ACL DELUSER name ...: the users taken out of ``users`` (the caller closes their
    connections). Raises ValueError (``ERR ...``) for ``default``, removing nothing."""
    if any(name == b"default" for name in names):
        raise ValueError("ERR The 'default' user cannot be removed")
    return [u for u in (users.pop(name, None) for name in names) if u is not None]


def file_text(users: Mapping[bytes, User]) -> bytes:
    """ACL SAVE's file: one ``user`` line per user, by name."""
    return b"".join(b"user " + n + b" " + users[n].describe() + b"\n" for n in sorted(users))


def channels_taken_away(old: User, new: User) -> list[bytes] | None:
    """ACLKillPubsubClientsIfNeeded's first test: the channel patterns ``new`` allows when it
    no longer allows all of ``old``'s (its subscribers must be checked), else None."""
    allowed = new.channels_allowed()
    if allowed is None:
        return None
    if all(ch in allowed for s in old.selectors for ch in s.channels):
        return None
    return allowed


def check_user_line(words: Sequence[bytes], defined: Sequence[bytes] = ()) -> list[bytes]:
    """ACLAppendUserForLoading: a config file's ``user <name> <rule> ...`` (``words`` without
    ``user``) checked on a scratch user; returns [name, merged rules...]. Unknown commands
    pass here (Redis reports them when it loads the users). Raises ValueError with Redis'
    ``Error in user declaration '<word>': <why>`` (the word shown is the line's word at the
    failing rule's index, as Redis prints it)."""
    line = [b"user", *words]
    if words[0] in defined:
        raise ValueError(f"Error in user declaration '{_shown(line[1])}': {ERR_DUPLICATE_USER}")
    rules, bad = merge_selector_args(words[1:])
    if bad is not None:
        raise ValueError(f"Error in user declaration '{_shown(line[bad])}': Wrong format")
    scratch = User(b"__fakeuser:0__")
    for j, rule in enumerate(rules):
        try:
            scratch.apply(rule)
        except RuleError as e:
            if str(e) != ERR_UNKNOWN:
                raise ValueError(f"Error in user declaration '{_shown(line[j])}': {e}") from None
    return [words[0], *rules]


def _shown(word: bytes) -> str:
    return word.decode("utf-8", "replace")


def parse_acl_file(text: bytes, shown: str, allchannels_default: bool = False) -> dict[bytes, User]:
    """ACLLoadFromFile's reading: the users of an ACL file's text (``shown``: the path as
    errors name it). Raises ValueError with Redis' text listing every error of the file."""
    errs = ""
    users: dict[bytes, User] = {}
    for linenum, raw in enumerate(text.split(b"\n"), start=1):
        line = raw.strip(b" \t\r\n")
        if not line:
            continue
        argv = line.split(b" ")
        if argv[0] != b"user" or len(argv) < 2:
            errs += (f"{shown}:{linenum} should start with user keyword followed by the "
                     "username. ")
            continue
        name = argv[1]
        if has_spaces(name):
            errs += (f"'{shown}:{linenum}: username '{_shown(name)}' contains invalid "
                     "characters. ")
            continue
        if name in users:
            errs += f"WARNING: Duplicate user '{_shown(name)}' found on line {linenum}. "
            continue
        u = users[name] = User(name, allchannels_default)
        rules, bad = merge_selector_args(argv[2:])
        if bad is not None:
            errs += f"{shown}:{linenum}: Unmatched parenthesis in selector definition."
        for rule in rules:
            try:
                u.apply(rule.strip(b"\t\r\n"))
            except RuleError as e:
                errs += f"{shown}:{linenum}: {e}. "
    if errs:
        raise ValueError(errs + "WARNING: ACL errors detected, no change to the previously "
                         "active ACL rules was performed")
    return users
