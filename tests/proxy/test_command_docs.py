"""docs/COMMANDS.md is generated from the command table and says what the proxy really does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from slotgate.protocol.commands import lookup_name
from tests.support import ManagedProcess, RawClient

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "COMMANDS.md"


def test_checked_in_file_is_up_to_date() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_command_docs.py"), "--check"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_command_has_a_row_and_msetnx_is_explained() -> None:
    text = DOC.read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([A-Z0-9_\- ]+) \| `(\w+)` \|", text, re.M)
    names = {name.lower().replace(" ", "|", 1) for name, _ in rows}
    assert len(rows) == len(names) > 300
    for name, route in rows:
        info = lookup_name(name.lower().replace(" ", "|", 1))
        assert info is not None and info.route == route, name
    assert "## MSETNX across slots" in text
    assert re.search(r"^\| MSETNX \| `gather` \|.*#msetnx-across-slots", text, re.M)


def _argv_for(name: str) -> list[bytes]:
    """The command with dummy arguments, enough to pass its arity check."""
    info = lookup_name(name)
    assert info is not None
    words = name.split("|")
    need = info.arity if info.arity > 0 else -info.arity
    return [w.encode() for w in words] + [b"x"] * max(0, need - len(words))


def test_documented_refusals_are_what_the_proxy_answers(slotgate: ManagedProcess) -> None:
    text = DOC.read_text(encoding="utf-8")
    refused = re.findall(r"Refused: `(-ERR slotgate: '([a-z_\-]+(?:\\\|[a-z_\-]+)?)' is not "
                         r"supported through the proxy)`", text)
    assert len(refused) > 30  # the regex finds the rows (fewer as the proxy learns more)
    commands = [_argv_for(name.replace("\\|", "|")) for _, name in refused]
    with RawClient(slotgate.port) as c:
        replies = c.pipeline(commands)
        assert c.call("PING") == b"+PONG\r\n"  # refusals cost nothing else
    for (want, _), got, argv in zip(refused, replies, commands, strict=True):
        assert got == want.replace("\\|", "|").encode() + b"\r\n", argv
