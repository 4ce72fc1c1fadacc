"""protocol/acl.py and acl_keys.py without a server: descriptions that set back give the same
permissions (Redis asserts this when it describes a user), and the check's choices."""

from __future__ import annotations

import random

import pytest

from slotgate.protocol import acl
from slotgate.protocol.acl_keys import READ, WRITE, key_refs
from slotgate.protocol.acl_lines import merge_selector_args
from slotgate.protocol.commands import lookup
from slotgate.protocol.glob import glob_match

_RULE_POOL = (
    [b"+@" + c.encode() for c in acl.CATEGORIES] + [b"-@" + c.encode() for c in acl.CATEGORIES]
    + [b"+get", b"-get", b"+config", b"-config|set", b"+config|get", b"+client", b"-client|kill",
       b"+select|0", b"+debug|object", b"-flushall", b"+@all", b"-@all", b"allcommands",
       b"nocommands"])


def _rebuilt(sel: acl.Selector) -> acl.Selector:
    fresh = acl.Selector(True, False)
    for word in sel.describe_commands().split():
        fresh.apply(word.encode())
    return fresh


@pytest.mark.parametrize("seed", range(40))
def test_a_description_sets_back_the_same_commands(seed: int) -> None:
    rng = random.Random(seed)
    sel = acl.Selector(True, False)
    for _ in range(rng.randint(1, 12)):
        sel.apply(rng.choice(_RULE_POOL))
    again = _rebuilt(sel)
    assert again.allowed == sel.allowed
    assert again.future == sel.future
    assert {k: [a.lower() for a in v] for k, v in again.firstargs.items() if k not in again.allowed} \
        == {k: [a.lower() for a in v] for k, v in sel.firstargs.items() if k not in sel.allowed}


def test_user_description_round_trips_through_rules() -> None:
    u = acl.User(b"u")
    u.apply_all([b"on", b">pw", b"%R~r*", b"%W~w*", b"~rw*", b"&ch", b"-@all", b"+@read",
                 b"-get", b"(+set ~x* &y)"])
    text = u.describe()
    rules, bad = merge_selector_args(text.split(b" "))
    assert bad is None
    v = acl.User(b"u")
    v.apply_all(rules)
    assert v.describe() == text


def test_the_check_reports_the_largest_denial() -> None:
    u = acl.User(b"u")
    u.apply_all([b"on", b"nopass", b"-@all", b"+get", b"~a*", b"(+set ~b*)"])
    get, set_ = lookup([b"get", b"x"]), lookup([b"set", b"x", b"1"])
    assert get is not None and set_ is not None
    assert u.check(get, [b"get", b"a1"], glob_match) is None
    denial = u.check(get, [b"get", b"b1"], glob_match)
    assert denial is not None and (denial.reason, denial.index) == (acl.DENIED_KEY, 1)
    assert u.check(set_, [b"set", b"b1", b"1"], glob_match) is None
    denial = u.check(set_, [b"set", b"a1", b"1"], glob_match)
    assert denial is not None and denial.reason == acl.DENIED_KEY


def test_rule_errors_carry_redis_reasons() -> None:
    u = acl.User(b"u")
    for rule, reason in [(b"+nosuch", acl.ERR_UNKNOWN), (b"bogus", acl.ERR_SYNTAX),
                         (b"#abc", acl.ERR_BAD_HASH), (b"<x", acl.ERR_NO_SUCH_PASS),
                         (b"+config|get|x", acl.ERR_SUB_FIRSTARG), (b"%~x", acl.ERR_SYNTAX)]:
        with pytest.raises(acl.RuleError, match=".*") as info:
            u.apply(rule)
        assert str(info.value) == reason


def test_key_refs_carry_read_and_write_needs() -> None:
    def refs(*argv: bytes) -> list[tuple[int, int]]:
        info = lookup(list(argv))
        assert info is not None
        return key_refs(info, list(argv))

    assert refs(b"get", b"k") == [(1, READ)]
    assert refs(b"set", b"k", b"v") == [(1, WRITE)]
    assert refs(b"set", b"k", b"v", b"GET") == [(1, READ | WRITE)]
    assert refs(b"copy", b"a", b"b") == [(1, READ), (2, WRITE)]
    assert refs(b"sort", b"a", b"STORE", b"b") == [(1, READ), (3, WRITE)]
    assert refs(b"bitfield", b"k", b"GET", b"u8", b"0") == [(1, READ)]
    assert refs(b"bitfield", b"k", b"SET", b"u8", b"0", b"1") == [(1, READ | WRITE)]
