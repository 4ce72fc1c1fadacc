"""RESP -> Lua: a command's reply, as a script's ``redis.call`` returns it (Redis'
redisProtocolToLuaType). Lua -> RESP is done in Lua (``handle.encode`` in sandbox.py).

RESP2: integer -> number, bulk -> string, null bulk / null array -> false, status ->
``{ok=...}``, error -> ``{err=...}``, array -> table. RESP3 (after ``redis.setresp(3)``) adds
map -> ``{map={k=v}}``, set -> ``{set={k=true}}``, null -> nil, boolean -> true/false,
double -> ``{double=n}``, big number -> ``{big_number=s}``, verbatim ->
``{verbatim_string={format=f, string=s}}``; attributes are dropped.

Errors at the top level are not converted here: the engine hands their text to ``redis.call``
(which raises) or ``redis.pcall`` (which returns ``{err=...}``).
"""

from __future__ import annotations

from typing import Any

_OK, _ERR = b"ok", b"err"


def error_text(line: bytes) -> bytes:
    """luaPushErrorBuff for a reply ``-CODE msg``: the text a script sees (``CODE msg``; a
    message without a space gets the code ERR)."""
    body = line[1:] if line[:1] == b"-" else line
    if b" " not in body:
        return b"ERR " + body
    return body


class ReplyToLua:
    """Parses one complete RESP reply into Lua values of ``lua`` (a lupa runtime)."""

    __slots__ = ("lua", "table_from")

    def __init__(self, lua: Any) -> None:
        self.lua = lua
        self.table_from = lua.table_from

    def convert(self, data: bytes) -> Any:
        """(The engine's redis.call converts bulk strings, integers, status and errors
        itself, the common replies, and hands the rest here.)"""
        value, _ = self._parse(data, 0)
        return value

    def _line(self, data: bytes, pos: int) -> tuple[bytes, int]:
        end = data.index(b"\r\n", pos)
        return data[pos:end], end + 2

    def _parse(self, data: bytes, pos: int) -> tuple[Any, int]:
        kind = data[pos : pos + 1]
        line, pos = self._line(data, pos + 1)
        if kind == b"$" or kind == b"=":
            n = int(line)
            if n < 0:
                return False, pos
            body = data[pos : pos + n]
            pos += n + 2
            if kind == b"=":
                return self.table_from({b"verbatim_string": self.table_from(
                    {b"format": body[:3], b"string": body[4:]})}), pos
            return body, pos
        if kind == b":":
            return int(line), pos
        if kind == b"+":
            return self.table_from({_OK: line}), pos
        if kind == b"-":
            return self.table_from({_ERR: error_text(b"-" + line)}), pos
        if kind in (b"*", b"~", b"%", b">", b"|"):
            n = int(line)
            if n < 0:
                return False, pos
            if kind == b"%" or kind == b"|":
                pairs: dict[Any, Any] = {}
                for _ in range(n):
                    k, pos = self._parse(data, pos)
                    v, pos = self._parse(data, pos)
                    if k is not None:
                        pairs[k] = v
                if kind == b"|":  # an attribute: dropped, the value follows
                    return self._parse(data, pos)
                return self.table_from({b"map": self.table_from(pairs)}), pos
            items = []
            for _ in range(n):
                v, pos = self._parse(data, pos)
                items.append(v)
            if kind == b"~":
                return self.table_from({b"set": self.table_from(
                    {k: True for k in items if k is not None})}), pos
            return self.table_from(items), pos
        if kind == b"_":
            return None, pos
        if kind == b"#":
            return line == b"t", pos
        if kind == b",":
            return self.table_from({b"double": _double(line)}), pos
        if kind == b"(":
            return self.table_from({b"big_number": line}), pos
        raise ValueError(f"unexpected reply type {kind!r}")


def _double(text: bytes) -> float:
    if text == b"inf":
        return float("inf")
    if text == b"-inf":
        return float("-inf")
    return float(text)
