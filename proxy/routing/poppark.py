"""Pops across slots that never lose an element: each pop parks what it takes.

A pop over keys in several slots (``blockmulti.py``) never takes an element out of a key
straight into the proxy: every pop moves it, in one atomic step on the key's master, into a
*park*, a key of the same slot named ``{T}slotgate-pop:<token>:<n>:<how>:<key>`` (``T``
a hash tag of the key's slot, ``how`` ``L``/``R`` the list end it left, ``Z`` a sorted set,
``key`` the key it came from). The park is written by the same command (or script) as the
pop, so it is replicated with it: after a failover the promoted replica has the element
either in the key or in the park, never in neither.

- The winner's park is *committed*: a script deletes it and sets a marker (``moveundo``'s
  fate check settles a lost reply), then ``WAIT 1`` for a replica; only then is the client
  answered. A park found gone (pushed back meanwhile by a sweep) is not answered: the pop
  starts again, the element being back in its key.
- Every other park is *pushed back* by a script (``LMOVE park key RIGHT <end>`` until the
  park is empty; ``ZADD`` of each member with its score, then ``DEL``): idempotent, so it is
  sent again after a lost reply until it runs.
- ``sweep`` pushes back every park of every master: run at proxy start, it returns what a
  proxy that died mid-pop left parked. A park of a live request swept by mistake (another
  proxy starting) costs that request a new try, never an element: its commit finds the park
  gone.
"""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.pinned import _direct, on_owner_at
from slotgate.proxy.routing import crossslot, moveundo
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession
    from slotgate.proxy.ops.metrics import ProxyMetrics
    from slotgate.proxy.ops.settings import ProxySettings
    from slotgate.proxy.routing.topology import Topology

log = logging.getLogger(__name__)

PARK_PREFIX = b"slotgate-pop:"
_TOKEN = os.urandom(4).hex().encode()
_parks = [0]
POLL_S = 0.05
WRONGTYPE = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"

# KEYS: the run's keys, then one park each. ARGV: list|zset, LEFT|RIGHT|MIN|MAX, count.
# The first key that exists decides, as in Redis: {0, i} it has the wrong type; else up to
# count elements move into its park and {i, popped} is answered. None exists: nil.
TRY_SCRIPT = b"""
local n = #KEYS / 2
local want, where, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
for i = 1, n do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' then
    if t ~= want then return {0, i} end
    local park = KEYS[n + i]
    if want == 'list' then
      local got = {}
      for j = 1, count do
        local e = redis.call(where == 'LEFT' and 'LPOP' or 'RPOP', KEYS[i])
        if not e then break end
        redis.call('RPUSH', park, e)
        got[#got + 1] = e
      end
      return {i, got}
    end
    local r = redis.call(where == 'MIN' and 'ZPOPMIN' or 'ZPOPMAX', KEYS[i], count)
    for j = 1, #r, 2 do redis.call('ZADD', park, r[j + 1], r[j]) end
    return {i, r}
  end
end
return false
"""
# KEYS: park, marker. 1 committed (park deleted, marker set), 0 the park is gone, -1 the
# fate check already gave this commit up.
COMMIT_SCRIPT = b"""
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
"""
# KEYS: park, key. ARGV: L|R|Z. What the park holds goes back into the key (-1: the key
# has another type now; the park stays for a later sweep); the number of elements.
PUT_BACK_SCRIPT = b"""
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local t = redis.call('TYPE', KEYS[2]).ok
if ARGV[1] == 'Z' then
  if t ~= 'none' and t ~= 'zset' then return -1 end
  local r = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for j = 1, #r, 2 do redis.call('ZADD', KEYS[2], r[j + 1], r[j]) end
  redis.call('DEL', KEYS[1])
  return #r / 2
end
if t ~= 'none' and t ~= 'list' then return -1 end
local n = 0
local where = ARGV[1] == 'L' and 'LEFT' or 'RIGHT'
while redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', where) do n = n + 1 end
return n
"""


def park(key: bytes, how: bytes) -> bytes:
    """A fresh park for elements popped from ``key`` (``how``: L, R or Z)."""
    _parks[0] += 1
    return b"{%s}%s%s:%d:%s:%s" % (crossslot.tag_for_slot(key_slot(key)), PARK_PREFIX, _TOKEN,
                                   _parks[0], how, key)


def parsed(name: bytes) -> tuple[bytes, bytes] | None:
    """A park's ``(how, key)``; None if ``name`` is not a park."""
    at = name.find(PARK_PREFIX)
    if at < 0:
        return None
    parts = name[at + len(PARK_PREFIX):].split(b":", 3)
    if len(parts) != 4 or parts[2] not in (b"L", b"R", b"Z"):
        return None
    return parts[2], parts[3]


def eval_cmd(script: bytes, keys: list[bytes], args: list[bytes]) -> bytes:
    return encode_command(b"EVAL", script, b"%d" % len(keys), *keys, *args)


def put_back_cmd(name: bytes) -> bytes | None:
    got = parsed(name)
    if got is None:
        return None
    how, key = got
    return eval_cmd(PUT_BACK_SCRIPT, [name, key], [how])


async def push_back(s: RouteSession, parks: list[bytes]) -> None:
    """Whatever ``parks`` hold back into their keys: sent until it runs, up to the retry
    deadline (the script is idempotent; a park still holding elements then is swept at the
    next proxy start)."""
    deadline = trio.current_time() + s.settings.retry_deadline_ms / 1000
    for name in parks:
        cmd = put_back_cmd(name)
        if cmd is None:
            continue
        slot = key_slot(name)
        while True:
            raw, _ = await on_owner_at(s, slot, cmd, 1, False, partial(_direct, s))
            if raw[:1] == b":" or trio.current_time() >= deadline:
                if raw[:1] != b":" or raw.startswith(b":-"):
                    log.warning("pop across slots: park %r not pushed back: %r", name, raw)
                break
            await trio.sleep(POLL_S)


async def commit(s: RouteSession, name: bytes) -> tuple[bool | None, str]:
    """The winner's park deleted, with a marker; True: the client may be answered; False:
    not committed, the park pushed back (the pop starts again); None: the fate of the
    commit is unknown. With the node the commit was sent to (the client's own connection
    there carries the write policies' WAIT)."""
    slot = key_slot(name)
    mark = crossslot.marker(slot)
    cmd = eval_cmd(COMMIT_SCRIPT, [name, mark],
                   [crossslot.MARK_DONE, b"%d" % crossslot.MARK_TTL_MS])
    raw, node = await on_owner_at(s, slot, cmd, 1, False, partial(_direct, s))
    if raw == b":1\r\n":
        if await moveundo.after_write(s, slot, mark, True):
            return True, node
        ran = await moveundo.fate(s, slot, mark)  # its master went silent: did it survive?
    elif raw[:1] == b":":
        await moveundo.drop_marker(s, slot, mark)
        ran = False
    else:  # lost reply, or no master in time
        ran = await moveundo.fate(s, slot, mark)
    if ran is None or ran:
        return ran, node
    await push_back(s, [name])
    return False, node


def text(raw: bytes) -> bytes:
    """A bulk string's, a simple string's or a number's bytes."""
    if raw[:1] == b"$":
        return raw[raw.index(b"\r\n") + 2:-2]
    return raw[1:-2]


def popped(raw: bytes) -> list[bytes]:
    """The elements of a script's array (a list's elements, or members and scores)."""
    if raw[:1] not in (b"*", b"~") or raw.startswith(b"*-1"):
        return []
    return [text(e) for e in array_elements(raw)]


def _bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


def reply(name: str, key: bytes, items: list[bytes], proto: int) -> bytes:
    """The client's reply to pop ``name`` that took ``items`` (elements; or members and
    scores, flat) from ``key``, as Redis writes it."""
    if name in ("blpop", "brpop"):
        return b"*2\r\n" + _bulk(key) + _bulk(items[0])
    if name in ("blmpop", "lmpop"):
        return b"*2\r\n%s*%d\r\n%s" % (_bulk(key), len(items), b"".join(map(_bulk, items)))

    def score(raw: bytes) -> bytes:
        return b",%s\r\n" % raw if proto == 3 else _bulk(raw)

    if name in ("bzpopmin", "bzpopmax"):
        return b"*3\r\n" + _bulk(key) + _bulk(items[0]) + score(items[1])
    pairs = [b"*2\r\n" + _bulk(items[i]) + score(items[i + 1]) for i in range(0, len(items), 2)]
    return b"*2\r\n%s*%d\r\n%s" % (_bulk(key), len(pairs), b"".join(pairs))


async def sweep(settings: ProxySettings, metrics: ProxyMetrics, masters: list[str]) -> int:
    """Every park on ``masters`` pushed back (at proxy start); how many were found."""
    found = 0
    for node in masters:
        found += await _sweep_node(settings, metrics, node)
    return found


async def _sweep_node(settings: ProxySettings, metrics: ProxyMetrics, node: str) -> int:
    found = 0
    try:
        conn = await DirectConnection.open(node, 2, settings, metrics)
    except (BackendError, OSError):
        log.warning("park sweep: %s unreachable", node)
        return 0

    async def call(payload: bytes) -> bytes:
        with trio.fail_after(settings.command_timeout_ms / 1000):
            return (await conn.roundtrip(payload, 1))[0][1]

    try:
        cursor = b"0"
        while True:
            raw = await call(encode_command(b"SCAN", cursor, b"MATCH",
                                            b"*" + PARK_PREFIX + b"*", b"COUNT", b"1000"))
            if raw[:1] != b"*":
                break
            head, names = array_elements(raw)
            for name in popped(names):
                cmd = put_back_cmd(name)
                if cmd is not None:
                    found += 1
                    await call(cmd)
            cursor = text(head)
            if cursor == b"0":
                break
    except (BackendError, trio.TooSlowError) as exc:
        log.warning("park sweep of %s: %r", node, exc)
    finally:
        with trio.CancelScope(shield=True):
            await conn.aclose()
    return found


async def sweep_at_start(settings: ProxySettings, metrics: ProxyMetrics,
                         topology: Topology) -> None:
    """``sweep`` once the masters are known: what a proxy that died mid-pop left parked
    goes back into its keys."""
    while not topology.slot_map.masters:
        await topology.refreshed.wait()
    found = await sweep(settings, metrics, list(topology.slot_map.masters))
    if found:
        log.info("pushed back %d parked pop(s) left by an earlier proxy", found)
