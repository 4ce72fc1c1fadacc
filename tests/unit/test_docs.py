"""Docs checked against the code: the node's missing commands.

Everything here runs in-process: the node's dispatch table is built by its ``Server``
constructor, no process is started.
"""

from __future__ import annotations

from tools import node_missing_commands as nmc


def test_compatibility_lists_exactly_the_commands_the_node_lacks() -> None:
    text = nmc.DOC.read_text(encoding="utf-8")
    assert nmc.checked_in_block(text) == nmc.render(nmc.node_commands()), (
        "docs/COMPATIBILITY.md is stale: python tools/node_missing_commands.py --write")


def test_the_list_follows_the_registry() -> None:
    have = nmc.node_commands()
    families = nmc.missing(have)
    assert "PFADD" in families["HyperLogLog"]
    assert "CLIENT TRACKING" in families["Connection: CLIENT"]
    assert "PFADD" not in nmc.missing(have | {"pfadd"}).get("HyperLogLog", [])
    assert "GET" in nmc.missing(have - {"get"})["Strings"]
    assert "CLIENT LIST" in nmc.missing(have - {"client|list"})["Connection: CLIENT"]

