"""The node's commands: one module per data type / concern, all registered in one dict.

Extension API (read this before adding a command)
=================================================

Adding a module
---------------
Create ``node/commands/<type>.py`` and add ONE line to ``MODULES`` at the bottom of this file.
Importing the module registers its handlers; ``registry.build_table()`` joins them with the
shared command table (``protocol.commands``: arity, flags, key positions, from a real
redis-server 7.0), so a handler never re-states arity or flags. The dispatcher checks arity
(``ERR wrong number of arguments for 'x' command``), unknown commands/subcommands, auth,
MULTI queuing, pub/sub context, cluster routing — a handler only implements the command.

Registering a handler
---------------------
::

    from slotgate.node.commands.registry import command
    from slotgate.node.core.errors import CommandError, WRONGTYPE

    @command("lpush")                 # lower case; subcommands as "object|encoding"
    def lpush(c: Client, argv: list[bytes]) -> bytes:
        ...
        return integer(n)             # the encoded reply, appended to the client's output

A handler is a plain (non-async) function ``(c, argv) -> bytes``. ``argv[0]`` is the command
name as sent (any case). It returns the COMPLETE encoded reply (one RESP frame; more frames
concatenated only for commands that really send several, like SUBSCRIBE). Errors: ``raise
CommandError(TEXT)`` with the exact Redis text (constants in ``node/core/errors.py``); the
dispatcher encodes ``-TEXT\\r\\n``, counts it and flags an open MULTI where Redis would.

Keyspace access
---------------
``c.db`` is the client's ``Database`` (node/core/keyspace.py), ``c.ks`` the ``Keyspace`` (all dbs,
counters, hooks), ``c.server`` the server (config in ``c.server.config``).

- ``db.lookup_read(key)`` – value or None; lazily expires; counts hits/misses (read commands).
- ``db.lookup(key)``      – same without hit/miss stats (write commands, internal use).
- ``db.set(key, value, keep_ttl=False)`` – create/overwrite; drops the TTL unless keep_ttl;
  touches WATCH, wakes blocked clients on that key, maintains the cluster slot index.
- ``db.delete(key) -> bool`` – remove value + TTL; touches WATCH.
- ``db.modified(key)`` – REQUIRED after changing a mutable value in place (list push, hset…):
  this is Redis' signalModifiedKey (breaks WATCH).
- ``db.signal_ready(key)`` – after adding elements clients may block on (LPUSH, ZADD, XADD on
  an existing key; ``db.set`` of a new key already does it).
- ``db.expires`` (key -> absolute unix ms), ``db.set_expire(key, ms)``, ``db.get_expire(key)``,
  ``db.persist(key)``.
- ``c.ks.dirty += n`` – count changes. The dispatcher propagates a command to replication/AOF
  hooks iff it is a write and it changed ``dirty``. To propagate something other than the
  verbatim argv (SET EX -> SET PXAT, BLPOP -> LPOP), set ``c.propagate_as = [argv, ...]``.
- ``db.notify(NOTIFY_LIST, b"lpush", key)`` – keyspace notification (no-op unless enabled).
- An emptied container must be deleted (``db.delete``): keys never hold empty collections.
- String encodings for OBJECT ENCODING: a string written by an in-place edit is "raw" in Redis
  (``db.mark_raw(key)``, as APPEND/SETRANGE/SETBIT do); ``db.set`` resets it.

Types: a string is stored as ``bytes``. Any other type is your own class, registered once with
``keyspace.register_type(cls, b"list", encoding_fn, digest_fn, copy_fn)`` so TYPE, OBJECT
ENCODING, SCAN ... TYPE, COPY and DEBUG DIGEST work. Wrong type: ``type(v) is not MyClass`` ->
``raise CommandError(WRONGTYPE)``.

Client state
------------
``c.id``, ``c.name``, ``c.resp`` (2 or 3), ``c.null_bulk`` / ``c.null_array`` (the null for
this protocol), ``c.multi`` (queued commands or None), ``c.in_exec``, ``c.authenticated``,
``c.readonly``/``c.asking`` (cluster), ``c.subscriptions`` (pub/sub count: keep it right),
``c.out`` (pending output; append push frames for this client here and call ``c.wake()`` when
writing to ANOTHER client, e.g. PUBLISH). A feature's per-client state is a typed field of
``Client`` (node/core/client.py), owned by that feature's module. Fields the fast path depends on
(``Client.SLOW_INPUTS``: ``authenticated``, ``multi``, ``reply_mode``, ``subscriptions``,
``asking``, ``acl_user``) are changed only with their setters (``c.set_multi(...)``, ...), which keep
``c.slow`` right.

Replies (RESP2/RESP3)
---------------------
Use the encoders of ``protocol.resp`` (``bulk``, ``integer``, ``simple``, ``array_header``,
``map_header(n, c.resp)``, ``set_header(n, c.resp)``, ``double(x, c.resp)``,
``push_header(n, c.resp)``, ``verbatim(text, "txt", c.resp)`` …) and ``c.null_bulk`` /
``c.null_array``. Constants for hot replies are in ``node/commands/replies.py`` (OK, QUEUED,
integers 0/1).

Blocking commands (BLPOP-style)
-------------------------------
A handler first tries to serve at once. If it cannot, it parks the client::

    return c.block(keys, timeout_s, serve, argv)          # timeout_s 0 = forever

``serve(c, db, key) -> bytes | None`` is called when ``key`` got data (``db.signal_ready`` /
``db.set``): return the reply to unblock the client with it, or None to keep waiting. Clients
blocked on a key are tried in the order they blocked (FIFO), keys in the order they became
ready, right after the command that made them ready (after EXEC for a transaction), like
Redis 7.0. On timeout the client gets ``timeout_reply`` (default: ``c.null_array``). Inside
MULTI/EXEC ``c.block`` returns the timeout reply immediately (Redis never blocks in EXEC).
While parked the client's further pipelined commands wait; a disconnect unblocks it. Set
``c.propagate_as`` inside ``serve`` if what it did should replicate (BLPOP -> LPOP). A pop from
the first non-empty of several keys (BLPOP, BZPOPMIN, the MPOP forms) needs only its type's
lookup and pop step: ``node/types/blocking.py`` does the timeout, arguments and blocking.

Testing a command
-----------------
Differential tests compare raw reply bytes with a real redis-server 7.0: add ``Case`` lines to a
``tests/node/test_diff_*.py`` (see ``tests/node/diff.py``) and a family of generators to
``tests/node/gen.py`` so the random sequences exercise your commands too. Allowed differences
go to docs/COMPATIBILITY.md with their reason.

Hooks for later subsystems
--------------------------
- a subsystem: a module named in ``SUBSYSTEMS`` (node/core/server.py) with ``install(server)``,
  which sets the subsystem's own typed field of ``Server`` (declare one there:
  ``server.persistence``, ``server.replication``, ``server.cluster``).
- replication/AOF: ``server.add_propagate_hook(fn(db_index, argv))``.
- checks before every command off the fast path: ``server.add_command_check(fn(c, cmd,
  argv) -> bytes | None)`` / ``server.remove_command_check(fn)``.
- keyspace notifications: ``ks.notify_hook = fn(flag, event, key, db_index)``;
  ``ks.notify_flags`` from notify-keyspace-events.
- cluster routing: ``server.set_cluster_routing(fn(c, cmd, argv) -> bytes | None, ...)`` (an
  error reply such as MOVED, or None to run the command); called for every command off the
  fast path when cluster-enabled is yes.
- INFO: ``server.info_sections[name] = fn(server) -> list[tuple[str, object]]``.
- the per-slot key index (cluster mode): ``db.count_keys_in_slot(slot)``,
  ``db.keys_in_slot(slot)`` (an insertion-ordered dict of keys).
"""

from __future__ import annotations

import importlib

MODULES = [
    "slotgate.node.commands.connection",
    "slotgate.node.commands.server_cmds",
    "slotgate.node.commands.debug_cmds",
    "slotgate.node.commands.info",
    "slotgate.node.commands.keys",
    "slotgate.node.types.strings",
    "slotgate.node.types.lcs",
    "slotgate.node.types.sort",
    "slotgate.node.types.bitmaps",
    "slotgate.node.commands.transactions",
    "slotgate.node.commands.dump", "slotgate.node.commands.pubsub",
    "slotgate.node.types.lists",
    "slotgate.node.types.hashes",
    "slotgate.node.types.sets",
    "slotgate.node.commands.cluster",
    "slotgate.node.commands.migrate",
    "slotgate.node.types.zsets",
    "slotgate.node.types.zsetops",
    "slotgate.node.types.hyperloglog",
    "slotgate.node.types.geo",
    "slotgate.node.types.streams",
    "slotgate.node.types.xread",
    "slotgate.node.types.xgroups",
    "slotgate.node.types.xinfo",
    "slotgate.node.commands.module", "slotgate.node.commands.lolwut",
    "slotgate.node.commands.latency_cmds",
    "slotgate.node.commands.memory_cmds",
]


def load_all() -> None:
    """Import every command module (registration happens at import)."""
    for mod in MODULES:
        importlib.import_module(mod)
