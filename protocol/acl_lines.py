"""``user`` lines: a user's rules as words (ACL SETUSER's arguments, a config file's or an ACL
file's line), with the ``(...)`` selectors that span several words joined, and the check a
config file's line gets when it is read (Redis' ACLAppendUserForLoading), and an ACL file's
users (ACLLoadFromFile)."""

from __future__ import annotations

from collections.abc import Sequence

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
