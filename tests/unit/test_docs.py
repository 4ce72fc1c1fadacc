"""Docs checked against the code: the node's missing commands, and bench/RESULTS.md's links.

Everything here runs in-process: the node's dispatch table is built by its ``Server``
constructor, no process is started.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from tools import node_missing_commands as nmc

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "RESULTS.md"


def test_compatibility_lists_exactly_the_commands_the_node_lacks() -> None:
    text = nmc.DOC.read_text(encoding="utf-8")
    assert nmc.checked_in_block(text) == nmc.render(nmc.node_commands()), (
        "docs/COMPATIBILITY.md is stale: python tools/node_missing_commands.py --write")


def test_the_list_follows_the_registry() -> None:
    have = nmc.node_commands()
    assert "FCALL" in nmc.missing(have - {"fcall"})["Scripting and functions"]
    assert "CLIENT TRACKING" in nmc.missing(have - {"client|tracking"})["Connection: CLIENT"]
    assert "FCALL" not in nmc.missing(have | {"fcall"}).get("Scripting and functions", [])
    assert "XADD" in nmc.missing(have - {"xadd"})["Streams"]
    assert "GEOADD" in nmc.missing(have - {"geoadd"})["Geospatial"]
    assert "PFADD" in nmc.missing(have - {"pfadd"})["HyperLogLog"]
    assert "GET" in nmc.missing(have - {"get"})["Strings"]
    assert "CLIENT LIST" in nmc.missing(have - {"client|list"})["Connection: CLIENT"]
    assert "| Strings | GET |" in nmc.render(have - {"get"})
    every = {info.name for info, _ in nmc._leaves()}
    assert "None: each of the 351" in nmc.render(have | every)
    assert "| family | missing |" not in nmc.render(have | every)


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading (github-slugger's rule): lower case; symbols,
    punctuation but ``-`` and connectors like ``_``, separators but the space, and numbers
    other than digits dropped; each space a hyphen."""
    kept = "".join(ch for ch in heading.strip().lower()
                   if ch in "- " or unicodedata.category(ch) in _ANCHOR_KEPT)
    return kept.replace(" ", "-")


_ANCHOR_KEPT = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "Pc"})


def _anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = re.match(r"#{1,6} (.+)", line)
        if m is None or in_code:
            continue
        base = github_anchor(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")  # GitHub numbers repeated headings
    return out


def test_github_anchor_matches_githubs_rule() -> None:
    assert github_anchor("Workers: two proxy processes (2026-11-30, 00:25 UTC)") == \
        "workers-two-proxy-processes-2026-11-30-0025-utc"
    assert github_anchor("INCR meets its -P 16 target: the counter's last value") == \
        "incr-meets-its--p-16-target-the-counters-last-value"
    assert github_anchor("Writes (02:20–02:30 UTC) µs × 2²") == "writes-02200230-utc-µs--2"
    assert _anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_every_link_in_results_resolves_to_a_heading() -> None:
    text = RESULTS.read_text(encoding="utf-8")
    anchors = _anchors(text)
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert sorted(set(links) - anchors) == []
    # The table of current figures comes first, and each row names the section explaining it.
    first = text.split("\n## ", 2)[1]
    assert first.startswith("Current figures\n")
    rows = [line for line in first.splitlines() if line.startswith("| ")][1:]
    assert len(rows) >= 15
    for row in rows:
        assert "](#" in row.rstrip(" |").rsplit(" | ", 1)[1], row
