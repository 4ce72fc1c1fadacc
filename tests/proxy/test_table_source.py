"""The command table is the only source of routing and merge facts: the proxy's code names no
route or merge the table does not have, handles every one it has, and knows no command's split
shape except from its row."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from slotgate.protocol.commands import ALL_COMMANDS, lookup
from slotgate.protocol.overrides import FAN_OUT_ROUTES, MERGES, ROUTES
from slotgate.proxy.front import local, pinned, pubsub, routes, session
from slotgate.proxy.routing import fanout, splitter

PROXY_DIR = Path(__file__).resolve().parents[2] / "proxy"
_ROUTE_MODULES = (session, routes, fanout, pinned, pubsub, local)


def _literals(node: ast.expr) -> Iterator[str]:
    """The string constants of ``"x"`` or of a tuple / list / set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        for elt in node.elts:
            yield from _literals(elt)


def _compared_with(field: str) -> Iterator[tuple[str, int, str]]:
    """(file, line, literal) for every ``<x>.<field> == "lit"`` / ``in ("a", "b")`` in proxy/."""
    for path in sorted(PROXY_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == field for s in sides):
                for side in sides:
                    for lit in _literals(side):
                        yield path.name, node.lineno, lit


def test_route_and_merge_names_in_proxy_code_are_the_tables() -> None:
    unknown = [(f, line, lit) for f, line, lit in _compared_with("route") if lit not in ROUTES]
    unknown += [(f, line, lit) for f, line, lit in _compared_with("merge") if lit not in MERGES]
    assert unknown == []
    assert {lit for _, _, lit in _compared_with("route")} >= {"unsupported", "all_nodes"}


def _route_tables() -> Iterator[tuple[str, dict[str, object]]]:
    """Dicts keyed by route names, at module level or in a class of the routing modules."""
    for module in _ROUTE_MODULES:
        spaces = [vars(module)] + [vars(v) for v in vars(module).values() if isinstance(v, type)]
        for space in spaces:
            for name, value in space.items():
                if (isinstance(value, dict) and value
                        and all(isinstance(k, str) for k in value) and set(value) & ROUTES):
                    yield f"{module.__name__}.{name}", value


def test_every_route_has_a_handler_and_no_other() -> None:
    tables = dict(_route_tables())
    assert tables, "no route table found in the proxy"
    for name, table in tables.items():
        assert set(table) == ROUTES, name


def test_every_merge_of_the_table_has_a_handler_and_no_other() -> None:
    assert fanout._unhandled_rows() == []
    assert set(fanout.SPLIT_MERGES) | fanout.FAN_MERGES == MERGES
    assert set(splitter.ALL_MERGES) <= MERGES
    used = {(i.route, i.merge) for i in ALL_COMMANDS.values() if i.route in FAN_OUT_ROUTES}
    assert {m for r, m in used if r == "split"} == set(fanout.SPLIT_MERGES)
    assert {m for r, m in used if r != "split"} == fanout.FAN_MERGES


def test_split_shapes_come_from_the_rows() -> None:
    assert not hasattr(splitter, "SPLIT_SHAPES")
    shapes = {i.name: (i.first_key, i.step, i.merge)
              for i in ALL_COMMANDS.values() if i.route == "split"}
    assert shapes == {"mget": (1, 1, "mget"), "mset": (1, 2, "all_ok"), "del": (1, 1, "sum"),
                      "unlink": (1, 1, "sum"), "exists": (1, 1, "sum"), "touch": (1, 1, "sum")}
    for name in shapes:
        info = ALL_COMMANDS[name.encode()]
        # The legacy range is the whole key set: one key-spec, from first_key to the end.
        assert info.last_key == -1 and len(info.key_specs) == 1, name
        spec = info.key_specs[0]
        assert (spec.index, spec.lastkey, spec.keystep) == (info.first_key, -1, info.step), name
        argv = [name.encode(), *[b"k%d" % i for i in range(3 * info.step)]]
        plan = splitter.split_by_slot(argv, info.first_key, info.step)
        assert sorted(k for p in plan for k in p.argv[1::info.step]) == sorted(
            argv[info.first_key::info.step])


def test_refused_fan_out_commands_are_unsupported_rows_with_their_reason() -> None:
    # response_policy:special without a merge: refused at lookup, before any fan-out.
    for argv in ([b"MEMORY", b"STATS"], [b"MEMORY", b"DOCTOR"], [b"MEMORY", b"MALLOC-STATS"]):
        info = lookup(argv)
        assert info is not None
        assert (info.route, info.merge) == ("unsupported", None), argv
        assert info.reason == "no merge combines the nodes' replies into one server's"
    info = lookup([b"INFO"])
    assert info is not None and (info.route, info.merge, info.reason) == ("all_masters", "info",
                                                                          None)
    for info in ALL_COMMANDS.values():
        if info.subcommands:
            continue
        assert (info.route == "unsupported") == bool(info.reason), info.name
