"""DEBUG subcommands beyond the basic ones of server_cmds.py: RELOAD, CHANGE-REPL-ID,
QUICKLIST-PACKED-THRESHOLD, LISTPACK, QUICKLIST, LOG, ERROR, PROTOCOL, STRINGMATCH-TEST,
REPLICATE, CONFIG-REWRITE-FORCE-ALL and the testing switches, plus the crash and allocator
subcommands that our node refuses."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from slotgate.node.commands.replies import OK
from slotgate.node.commands.server_cmds import DEBUG_SUBCOMMANDS, debug_unknown, write_config_file
from slotgate.node.core import errors
from slotgate.node.core import keyspace as K
from slotgate.node.core.errors import CommandError
from slotgate.node.persistence import snapshot
from slotgate.node.replication.master import NO_ID, new_replid
from slotgate.protocol.resp import array_header, simple

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

log = logging.getLogger("slotgate.node")

ERR_RELOAD_OPTION = "ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options."
ERR_RELOAD_LOAD = "ERR Error trying to load the RDB dump"
ERR_PACKED_THRESHOLD = "ERR argument must be a memory value bigger than 1 and smaller than 4gb"
ERR_NOT_LISTPACK = "ERR Not a listpack encoded object."
ERR_NOT_QUICKLIST = "ERR Not a quicklist encoded object."
ERR_PROTOCOL_TYPE = ("ERR Wrong protocol type name. Please use one of the following: "
                     "string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|"
                     "true|false")
ERR_REFUSED = "ERR DEBUG {} is not supported by this server (it would crash or restart it)"

PACKED_THRESHOLD_MAX_BYTES = (1 << 32) - (1 << 20)  # quicklistisSetPackedThreshold's cap
_MEM_UNITS = {b"": 1, b"b": 1, b"k": 1000, b"kb": 1024, b"m": 1000**2, b"mb": 1024**2,
              b"g": 1000**3, b"gb": 1024**3}
_MEM_RE = re.compile(rb"^(\d+)([a-z]*)$")

Handler = Callable[["Client", list[bytes]], bytes]


def _reload(c: Client, argv: list[bytes]) -> bytes:
    """Save the snapshot, empty the dataset, load it back. NOFLUSH without MERGE keeps the
    snapshot's value of a key present on both sides (Redis kills the server there)."""
    flush = save = True
    for opt in argv[2:]:
        o = opt.lower()
        if o == b"nosave":
            save = False
        elif o == b"noflush":
            flush = False
        elif o != b"merge":
            raise CommandError(ERR_RELOAD_OPTION)
    p, repl = c.server.persistence, c.server.replication
    assert p is not None and repl is not None  # installed with the server
    if save:
        try:
            p.save()
        except OSError as exc:
            log.warning("Failed saving the DB: %s", exc)
            raise CommandError("ERR") from None
    if flush:
        c.ks.dirty += c.ks.flushall()
    try:
        with open(p.rdb_path(), "rb") as f:
            data = f.read()
        res = snapshot.load_bytes(c.ks, data,
                                  drop_expired=repl.role == "master")
        p.load_functions(res.functions)
    except (OSError, snapshot.SnapshotError) as exc:
        log.warning("DEBUG RELOAD could not load the snapshot: %s", exc)
        raise CommandError(ERR_RELOAD_LOAD) from None
    log.warning("DB reloaded by DEBUG RELOAD")
    return OK


def _change_repl_id(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 2:
        raise CommandError(debug_unknown(argv[1]))
    log.warning("Changing replication IDs after receiving DEBUG change-repl-id")
    repl = c.server.replication
    assert repl is not None  # installed with the server
    repl.replid = new_replid()
    repl.replid2, repl.second_repl_offset = NO_ID, -1
    return OK


def _replicate(c: Client, argv: list[bytes]) -> bytes:
    """The command to the replicas only, in their current db: the data may diverge."""
    if len(argv) < 3:
        raise CommandError(debug_unknown(argv[1]))
    repl = c.server.replication
    assert repl is not None  # installed with the server
    repl.feed_command(repl.seldb, argv[2:])
    return OK


def _config_rewrite_force_all(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 2:
        raise CommandError(debug_unknown(argv[1]))
    cfg = c.server.config
    if not cfg.config_file:  # Redis' fopen(NULL) error
        raise CommandError("ERR CONFIG-REWRITE-FORCE-ALL failed: Bad address")
    try:
        write_config_file(cfg, cfg.config_file, force_all=True)
    except OSError as e:
        raise CommandError(f"ERR CONFIG-REWRITE-FORCE-ALL failed: {e.strerror}") from None
    return OK


def _packed_threshold(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 3:
        raise CommandError(debug_unknown(argv[1]))
    m = _MEM_RE.match(argv[2].lower())
    if m is None or m.group(2) not in _MEM_UNITS:
        raise CommandError(ERR_PACKED_THRESHOLD)
    if int(m.group(1)) * _MEM_UNITS[m.group(2)] > PACKED_THRESHOLD_MAX_BYTES:
        raise CommandError(ERR_PACKED_THRESHOLD)
    return OK  # our lists have no packed/plain nodes: the value has no effect


def _encoded(c: Client, argv: list[bytes], enc: bytes, err: str, what: str) -> bytes:
    v = c.db.lookup(argv[2])
    if v is None:
        raise CommandError(errors.NO_SUCH_KEY)
    if K.TYPES[type(v)].encoding(v) != enc:
        raise CommandError(err)
    log.info("DEBUG %s %r: %s of %d elements", what.upper(), argv[2], what,
             len(v) if hasattr(v, "__len__") else 0)
    return simple(f"{what.capitalize()} structure printed on stdout".encode())


def _listpack(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 3:
        raise CommandError(debug_unknown(argv[1]))
    return _encoded(c, argv, b"listpack", ERR_NOT_LISTPACK, "listpack")


def _quicklist(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) not in (3, 4):
        raise CommandError(debug_unknown(argv[1]))
    return _encoded(c, argv, b"quicklist", ERR_NOT_QUICKLIST, "quicklist")


def _log(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 3:
        raise CommandError(debug_unknown(argv[1]))
    log.warning("DEBUG LOG: %s", argv[2].decode("utf-8", "replace"))
    return OK


def _error(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 3:
        raise CommandError(debug_unknown(argv[1]))
    text = argv[2].decode("utf-8", "surrogateescape")
    raise CommandError(text.replace("\r", " ").replace("\n", " "))


_ATTRIB_TEXT = b"Some real reply following the attribute"
_PUSH_TEXT = b"Some real reply following the push reply"
_VERBATIM = b"This is a verbatim\nstring"
_BIGNUM = b"1234567999999999999999999999999999999"


def _bool(resp: int, value: bool) -> bytes:
    if resp == 3:
        return b"#t\r\n" if value else b"#f\r\n"
    return b":1\r\n" if value else b":0\r\n"


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _protocol_reply(name: bytes, resp: int) -> bytes | None:
    three = resp == 3
    items = b":0\r\n:1\r\n:2\r\n"
    replies: dict[bytes, Callable[[], bytes]] = {
        b"string": lambda: _bulk(b"Hello World"),
        b"integer": lambda: b":12345\r\n",
        b"double": lambda: b",3.141\r\n" if three else _bulk(b"3.141"),
        b"bignum": lambda: b"(" + _BIGNUM + b"\r\n" if three else _bulk(_BIGNUM),
        b"null": lambda: b"_\r\n" if three else b"$-1\r\n",
        b"array": lambda: b"*3\r\n" + items,
        b"set": lambda: (b"~3\r\n" if three else b"*3\r\n") + items,
        b"map": lambda: (b"%3\r\n" if three else b"*6\r\n") + b"".join(
            b":%d\r\n" % j + _bool(resp, j == 1) for j in range(3)),
        b"attrib": lambda: (b"|1\r\n" + _bulk(b"key-popularity") + b"*2\r\n"
                            + _bulk(b"key:123") + b":90\r\n" if three else b"")
        + _bulk(_ATTRIB_TEXT),
        b"push": lambda: (b">2\r\n" + _bulk(b"server-cpu-usage") + b":42\r\n"
                          + _bulk(_PUSH_TEXT)),
        b"verbatim": lambda: (b"=%d\r\ntxt:%s\r\n" % (len(_VERBATIM) + 4, _VERBATIM)) if three
        else _bulk(_VERBATIM),
        b"true": lambda: _bool(resp, True),
        b"false": lambda: _bool(resp, False),
    }
    fn = replies.get(name)
    return None if fn is None else fn()


def _protocol(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 3:
        raise CommandError(debug_unknown(argv[1]))
    if argv[2].lower() == b"push" and c.resp != 3:
        raise CommandError("ERR RESP2 is not supported by this command")
    reply = _protocol_reply(argv[2].lower(), c.resp)
    if reply is None:
        raise CommandError(ERR_PROTOCOL_TYPE)
    return reply


def _stringmatch_test(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 2:
        raise CommandError(debug_unknown(argv[1]))
    return simple(b"Apparently Redis did not crash: test passed")


def _atoi(arg: bytes) -> int:
    """C's atoi: optional blanks and sign, then the leading digits (0 when there are none)."""
    m = re.match(rb"\s*([+-]?\d+)", arg)
    return int(m.group(1)) if m else 0


def _skip_checksum(c: Client, argv: list[bytes]) -> bytes:
    """RESTORE accepts payloads whose CRC64 is wrong (version and length still checked)."""
    if len(argv) != 3:
        raise CommandError(debug_unknown(argv[1]))
    c.server.skip_checksum_validation = _atoi(argv[2]) != 0
    return OK


def _switch(c: Client, argv: list[bytes]) -> bytes:
    """PAUSE-CRON <0|1>: accepted, no effect on our node."""
    if len(argv) != 3:
        raise CommandError(debug_unknown(argv[1]))
    return OK


_HELP = [
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANGE-REPL-ID",
    "    Change the replication IDs of the instance.",
    "    Dangerous: should be used only for testing the replication subsystem.",
    "CONFIG-REWRITE-FORCE-ALL",
    "    Like CONFIG REWRITE but writes all configuration options, including",
    "    keywords not listed in original configuration file or default values.",
    "DIGEST",
    "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]",
    "    Output a hex signature of the values of all the specified keys.",
    "ERROR <string>",
    "    Return a Redis protocol error with <string> as message. Useful for clients",
    "    unit tests to simulate Redis errors.",
    "LOG <message>",
    "    Write <message> to the server log.",
    "REPLICATE <string>",
    "    Replicates the provided string to replicas, allowing data divergence.",
    "OBJECT <key>",
    "    Show low level info about `key` and associated value.",
    "DROP-CLUSTER-PACKET-FILTER <packet-type>",
    "    Drop all packets that match the filtered type. Set to -1 allow all packets.",
    "POPULATE <count> [<prefix>] [<size>]",
    "    Create <count> string keys named key:<num>. If <prefix> is specified then",
    "    it is used instead of the 'key' prefix.",
    "PROTOCOL <type>",
    "    Reply with a test value of the specified type. <type> can be: string,",
    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
    "    true, false.",
    "RELOAD [option ...]",
    "    Save the RDB on disk and reload it back to memory. Valid <option> values:",
    "    * MERGE: conflicting keys will be loaded from RDB.",
    "    * NOFLUSH: the existing database will not be removed before load.",
    "    * NOSAVE: the database will be loaded from an existing RDB file.",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Setting it to 0 disables expiring keys in background when they are not",
    "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
    "    default.",
    "QUICKLIST-PACKED-THRESHOLD <size>",
    "    Accepted for compatibility; no effect on this server.",
    "SET-SKIP-CHECKSUM-VALIDATION <0|1>",
    "    Enables or disables checksum checks for RESTORE's payload.",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
    "STRINGMATCH-TEST",
    "    Accepted for compatibility; no fuzz test is run.",
    "LISTPACK <key>",
    "    Show low level info about the listpack encoding of <key> (in the log).",
    "QUICKLIST <key> [<0|1>]",
    "    Show low level info about the quicklist encoding of <key> (in the log).",
    "PAUSE-CRON <0|1>",
    "    Accepted for compatibility; no effect on this server.",
    "HELP",
    "    Prints this help.",
]


def _help(c: Client, argv: list[bytes]) -> bytes:
    return array_header(len(_HELP)) + b"".join(simple(ln.encode()) for ln in _HELP)


def _refused(c: Client, argv: list[bytes]) -> bytes:
    raise CommandError(ERR_REFUSED.format(argv[1].decode("utf-8", "replace").upper()))


_HANDLERS: dict[bytes, Handler] = {
    b"reload": _reload,
    b"change-repl-id": _change_repl_id,
    b"replicate": _replicate,
    b"config-rewrite-force-all": _config_rewrite_force_all,
    b"quicklist-packed-threshold": _packed_threshold,
    b"listpack": _listpack,
    b"quicklist": _quicklist,
    b"log": _log,
    b"error": _error,
    b"protocol": _protocol,
    b"stringmatch-test": _stringmatch_test,
    b"set-skip-checksum-validation": _skip_checksum,
    b"pause-cron": _switch,
    b"help": _help,
}
for _name in (b"segfault", b"panic", b"restart", b"crash-and-recover", b"oom", b"assert",
              b"mallctl", b"mallctl-str", b"leak"):
    _HANDLERS[_name] = _refused
DEBUG_SUBCOMMANDS.update(_HANDLERS)
