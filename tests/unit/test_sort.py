"""protocol/sort.py: SORT's options, pattern targets and order, without any server."""

from __future__ import annotations

import pytest

from slotgate.protocol import sort
from slotgate.protocol.errors import NOT_INTEGER, SYNTAX
from slotgate.protocol.sort import ELEMENT, SCORE_ERR, SortArgs, Target


def _args(line: str, readonly: bool = False) -> SortArgs:
    got = sort.parse([w.encode() for w in ("SORT k " + line).split()], readonly)
    assert isinstance(got, SortArgs), got
    return got


def _order(line: str, kind: str, elements: list[str],
           by: list[str | None] | None = None) -> list[str] | str:
    args = sort.effective(_args(line), kind.encode())
    by_values = None if by is None else [None if v is None else v.encode() for v in by]
    got = sort.order(args, kind.encode(), [e.encode() for e in elements], by_values)
    return got if isinstance(got, str) else [e.decode() for e in got]


@pytest.mark.parametrize(("line", "error"), [
    ("FOO", SYNTAX), ("LIMIT 1", SYNTAX), ("LIMIT x 1", NOT_INTEGER), ("LIMIT 1 01", NOT_INTEGER),
    ("GET", SYNTAX), ("BY", SYNTAX), ("STORE", SYNTAX),
])
def test_parse_errors(line: str, error: str) -> None:
    assert sort.parse([w.encode() for w in ("SORT k " + line).split()], False) == error


def test_parse_options_and_what_a_cluster_node_refuses() -> None:
    a = _args("by w_* DESC alpha limit 1 2 get # GET n_* store d asc")
    assert (a.desc, a.alpha, a.dontsort, a.sortby) == (False, True, False, b"w_*")
    assert (a.limit_start, a.limit_count, a.store, a.gets) == (1, 2, b"d", [b"#", b"n_*"])
    assert a.needs_lookups
    assert not _args("BY nosort").needs_lookups and _args("BY nosort").dontsort
    assert not _args("ALPHA STORE d").needs_lookups
    assert _args("GET #").needs_lookups
    argv = [b"SORT", b"k", b"BY", b"w_*", b"FOO"]
    assert sort.parse(argv, False) == SYNTAX
    assert sort.parse(argv, False, cluster=True) == sort.BY_DENIED
    assert sort.parse([b"SORT", b"k", b"GET", b"#"], False, cluster=True) == sort.GET_DENIED
    no_acl = {"reads_every_key": False}
    assert sort.parse([b"SORT", b"k", b"GET", b"#"], False, **no_acl) == sort.GET_ACL
    assert sort.parse([b"SORT", b"k", b"BY", b"w_*"], False, True, **no_acl) == sort.BY_DENIED
    assert isinstance(sort.parse([b"SORT", b"k", b"BY", b"w"], False, **no_acl), SortArgs)
    # SORT_RO has no STORE: the word is a syntax error.
    assert sort.parse([b"SORT_RO", b"k", b"STORE", b"d"], True) == SYNTAX


def test_pattern_targets() -> None:
    assert sort.pattern_target(b"#", b"e") == ELEMENT
    assert sort.pattern_target(b"nostar", b"e") is None
    assert sort.pattern_target(b"w_*", b"e") == Target(b"w_e", None)
    assert sort.pattern_target(b"h_*_x->f->g", b"e") == Target(b"h_e_x", b"f->g")
    assert sort.pattern_target(b"h_*->", b"e") == Target(b"h_e->", None)  # no field after ->
    assert sort.pattern_target(b"a->b*c", b"e") == Target(b"a->bec", None)  # -> before '*'
    assert sort.pattern_target(b"a**", b"e") == Target(b"ae*", None)  # the first '*' only


@pytest.mark.parametrize(("raw", "score"), [
    (b"", 0.0), (b" 1.5", 1.5), (b"0x10", 16.0), (b"1e2", 100.0), (b"-inf", float("-inf")),
    (b"12\0junk", 12.0), (b"1 ", None), (b"1e400", None), (b"1e-400", None), (b"nan", None),
    (b"abc", None), (b"1_0", None),
])
def test_strtod(raw: bytes, score: float | None) -> None:
    assert sort.strtod_score(raw) == score


def test_numeric_and_alpha_orders() -> None:
    assert _order("", "list", ["3", "1", "10", "2"]) == ["1", "2", "3", "10"]
    assert _order("ALPHA", "list", ["3", "1", "10", "2"]) == ["1", "10", "2", "3"]
    assert _order("DESC LIMIT 1 2", "list", ["3", "1", "10", "2"]) == ["3", "2"]
    assert _order("", "list", ["1", "x"]) == SCORE_ERR
    assert _order("LIMIT 0 1", "list", ["1", "x"]) == SCORE_ERR  # outside LIMIT too
    # Equal scores: the elements byte-wise, negated by DESC.
    assert _order("BY w_*", "list", ["b", "a", "c"], [None, "1", None]) == ["b", "c", "a"]
    assert _order("BY w_* DESC", "list", ["b", "a", "c"], [None, "1", None]) == ["a", "c", "b"]
    # ALPHA BY: missing values first; equal ones keep the collection's order.
    assert _order("BY w_* ALPHA", "list", ["1", "2", "3"], ["b", None, "a"]) == ["2", "3", "1"]
    assert _order("BY w_* ALPHA DESC", "list", ["1", "2", "3"], ["a", None, "a"]) == \
        ["1", "3", "2"]


def test_no_sorting_keeps_the_collections_order() -> None:
    assert _order("BY nosort", "list", ["b", "a", "c"]) == ["b", "a", "c"]
    assert _order("BY nosort DESC LIMIT 1 5", "list", ["b", "a", "c"]) == ["a", "b"]
    assert _order("BY nosort DESC", "zset", ["low", "mid", "high"]) == ["high", "mid", "low"]
    assert _order("BY nosort DESC", "set", ["2", "1", "3"]) == ["2", "1", "3"]
    # A set stored with no sorting is sorted ALPHA, so that replicas agree.
    assert _order("BY nosort STORE d", "set", ["2", "10", "1"]) == ["1", "10", "2"]


@pytest.mark.parametrize(("limit", "length", "want"), [
    ((0, -1), 4, (0, 3)), ((-5, 2), 4, (0, 1)), ((2, -1), 4, (2, 3)), ((10, 2), 4, (3, 2)),
    ((1, 10), 4, (1, 3)), ((0, 0), 4, (0, -1)), ((0, -1), 0, (-1, -2)),
])
def test_limits(limit: tuple[int, int], length: int, want: tuple[int, int]) -> None:
    args = _args(f"LIMIT {limit[0]} {limit[1]}")
    assert sort.limits(args, length) == want
