"""Generate ``docs/COMMANDS.md``: how the proxy handles every command of the command table.

Usage::

    python tools/gen_command_docs.py           # write docs/COMMANDS.md
    python tools/gen_command_docs.py --check   # exit 1 if the checked-in file is stale

Each row comes from ``protocol/commands.py`` (the table generated from redis-server 7.0, whose
``route``, ``merge`` and ``reason`` columns are set by ``protocol/overrides.py``); an
``unsupported`` row shows the refusal the proxy answers and the row's reason. ``NOTES`` adds a
sentence where a command's handling has a detail of its own.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from slotgate.protocol.commands import ALL_COMMANDS, REDIS_VERSION, CommandInfo  # noqa: E402
from slotgate.protocol.overrides import MAY_RUN_LONG  # noqa: E402
from slotgate.proxy.routing.blockmove import HANDLED as BLOCKMOVE_HANDLED  # noqa: E402
from slotgate.proxy.routing.blockmulti import HANDLED as BLOCK_HANDLED  # noqa: E402
from slotgate.proxy.routing.crossslot import SCRIPTS, SPECS  # noqa: E402
from slotgate.proxy.routing.xreadmulti import HANDLED as XREAD_HANDLED  # noqa: E402

OUTPUT = ROOT / "docs" / "COMMANDS.md"

ROUTE_TEXT: dict[str, str] = {
    "single": "to the master of its keys' slot (keys in several slots: `-CROSSSLOT`)",
    "keyless": "to one master (the same one for a given client)",
    "split": "split by slot: one sub-command per slot, parts to one node pipelined together",
    "all_masters": "sent to every master",
    "all_nodes": "sent to every master and every replica",
    "proxy": "answered by the proxy itself",
    "pubsub": "subscriber mode on node connections of the client's own",
    "transaction": "transaction handling: the session is pinned to one slot's master",
    "blocking": "waits for the client's earlier requests, then runs alone on a connection of "
                "its own to its keys' master (keys in several slots: see "
                "[Blocking pops across slots](#blocking-pops-across-slots))",
    "gather": "keys in one slot: as `single`; keys in several slots: run by a real node on "
              "copies next to one key (see [Multi-key commands across slots]"
              "(#multi-key-commands-across-slots))",
    "unsupported": "refused: `-ERR slotgate: '<name>' is not supported through the proxy`",
    "wait": "waits for the client's earlier requests, then runs on the client's own "
            "connection to the master of its last write (see [WAIT](#wait))",
    "functions": "after the client's earlier requests, on every master over the client's "
                 "own connections (see [Functions](#functions))",
    "cluster": "with `cluster_emulation.enabled`, answered as a cluster of the proxies that own "
               "all 16384 slots (docs/CONFIG.md, Cluster emulation)",
    "guarded": "may change the credentials the proxy logs in with: refused with `-NOPERM "
               "slotgate: '<what>' would change the credentials the proxy uses on the "
               "cluster's nodes; refused (set admin_commands: true …)` unless `admin_commands: "
               "true`, then sent to every master and every replica; every part must succeed",
}

ROUTE_ORDER = ("single", "split", "gather", "keyless", "all_masters", "all_nodes", "blocking",
               "wait", "functions", "transaction", "pubsub", "proxy", "cluster", "guarded", "unsupported")

MERGE_TEXT: dict[str, str] = {
    "mget": "values put back in the order of the client's keys",
    "all_ok": "every part must succeed: the common reply, else the first error",
    "one_ok": "success if any part succeeds",
    "sum": "integer replies summed",
    "min": "the smallest integer reply",
    "and": "element-wise AND of the 0/1 arrays",
    "concat": "arrays concatenated",
    "scan": "one cursor walks the masters one after another",
    "info": "the proxy's own server facts, the masters' combined (see [below]"
            "(#the-proxys-own-server-facts)), plus a `# Proxy` section",
    "any": "the first non-null reply",
}

# Scripts and functions: routed by their declared keys, like any single-slot command.
_KEYLESS_SCRIPT = ("Without keys{}: to the master that answers this client's keyless "
                   "commands (always the same one); the script may touch only keys of that "
                   "master's slots, else the node's `-ERR Script attempted to access a non "
                   "local key in a cluster node …`.")
_CACHED_ON_ONE = " The script is cached on that one master only."
# Routed ``single``, yet run across slots (proxy/front/routes.py).
_SINGLE_ACROSS = frozenset({*SCRIPTS, "migrate"})
_SCRIPT_ACROSS = (" `KEYS` in several slots: runs next to its first key on copies of the "
                  "others, each changed key written back to its own slot ([details]"
                  "(#scripts-functions-and-migrate-across-slots)).")
_SCRIPT_RO_ACROSS = (" `KEYS` in several slots: runs next to its first key on copies of the "
                     "others ([details](#scripts-functions-and-migrate-across-slots)).")
_NOSCRIPT = " `-NOSCRIPT` passes through unchanged."

NOTES: dict[str, str] = {
    "script|kill": "Each master gets it on a connection of its own (not behind the running "
                   "script): `+OK` if a master killed its script, else a master's "
                   "`-UNKILLABLE`, else `-NOTBUSY`.",
    "function|kill": "Each master gets it on a connection of its own (not behind the running "
                     "function): `+OK` if a master killed its function, else a master's "
                     "`-UNKILLABLE`, else `-NOTBUSY`.",
    "msetnx": "Not split: across slots, the keys outside the first key's slot are written "
              "back under WATCH, with compensation ([MSETNX](#msetnx-across-slots)).",
    "mset": "Each slot's part is atomic on its node; the whole is not (see [MSETNX]"
            "(#msetnx-across-slots)).",
    "del": "Parts per slot run independently; the count is their sum.",
    "migrate": ("`KEYS` in several slots: one MIGRATE per slot, replies merged as one server's "
                "([details](#scripts-functions-and-migrate-across-slots))."),
    "eval": _KEYLESS_SCRIPT.format(" (`EVAL script 0`)") + _CACHED_ON_ONE + _SCRIPT_ACROSS,
    "evalsha": _KEYLESS_SCRIPT.format("") + _NOSCRIPT + _SCRIPT_ACROSS,
    "eval_ro": _KEYLESS_SCRIPT.format("") + _CACHED_ON_ONE + _SCRIPT_RO_ACROSS,
    "evalsha_ro": _KEYLESS_SCRIPT.format("") + _NOSCRIPT + _SCRIPT_RO_ACROSS,
    "fcall": _KEYLESS_SCRIPT.format("") + _SCRIPT_ACROSS,
    "fcall_ro": _KEYLESS_SCRIPT.format("") + _SCRIPT_RO_ACROSS,
    "script|load": "Replicas do not get it: a replica promoted later answers `-NOSCRIPT` "
                   "for it until it is loaded again.",
    "function|load": "All or nothing: a master that refuses (`-ERR Library 'x' already "
                     "exists` where only some masters have it) has the others put back as "
                     "they were, and its error is the reply.",
    "function|list": "From one master, once every master's libraries are the same.",
    "function|dump": "From one master, once every master's libraries are the same.",
    "function|stats": "Every master's, combined as one server's: `running_script` of the "
                      "master running a function (if any), `engines` counts as most masters "
                      "have them (the agreed library set).",
    "sort": "Without patterns, `STORE` across slots: runs next to its destination, which is "
            "written atomically ([details](#multi-key-commands-across-slots)). With `BY`/`GET` "
            "patterns: fetched and sorted by the proxy, not atomic across shards "
            "([details](#sort-with-by-and-get-patterns)).",
    "sort_ro": "With `BY`/`GET` patterns: fetched and sorted by the proxy, not atomic across "
               "shards ([details](#sort-with-by-and-get-patterns)).",
    "spublish": "Routed by the slot of its shard channel.",
    "publish": "Always to the pub/sub home node (master of slot 0), where the proxy's "
               "subscribers are, so the count is that of one server.",
    "pubsub|channels": "To the pub/sub home node (master of slot 0).",
    "pubsub|numsub": "To the pub/sub home node (master of slot 0).",
    "pubsub|numpat": "To the pub/sub home node (master of slot 0).",
    "monitor": "Streams the commands the proxy's clients send, in Redis' line format (passwords "
               "redacted, admin commands and refused requests left out). Differences: a line is "
               "written when the proxy dispatches the request (a transaction's commands when "
               "queued, not at EXEC; between clients, in the order the proxy read them); the "
               "address is the client's, the database 0; a monitoring client's own requests "
               "are served as usual; with `workers: N`, a monitor sees every worker's clients (the "
               "lines of clients on different workers in the order the workers' links carry "
               "them). While anyone monitors, requests leave the proxy's fast routes.",
    "client|pause": "The proxy holds its own clients, as one server: WRITE holds writes, "
                    "PUBLISH, EVAL, FCALL, PFCOUNT, a write queued in MULTI and EXEC of one; ALL "
                    "holds every request, CLIENT UNPAUSE included (only the timeout ends it, as "
                    "in Redis 7.0); held requests run in order when it ends. A held client counts in "
                    "`blocked_clients` and shows flag `b` and the held command in CLIENT LIST, "
                    "as in 7.0.15. With workers, every worker's clients are held (the reply "
                    "comes once all hold them). The nodes are not paused: writes that do not "
                    "come through this proxy (other proxies, direct clients) still apply. While "
                    "paused, requests leave the fast routes.",
    "client|unpause": "Ends the proxy's pause (see CLIENT PAUSE).",
    "client|tracking": "The proxy keeps the tracking table itself, while every master feeds it "
                       "its changes (see [Client-side caching](#client-side-caching)).",
    "client|caching": "The proxy's (see [Client-side caching](#client-side-caching)).",
    "client|trackinginfo": "The proxy's (see [Client-side caching](#client-side-caching)).",
    "client|getredir": "The proxy's (see [Client-side caching](#client-side-caching)).",
    "ssubscribe": "On the master of the channel's slot, followed across reshards and "
                  "failovers (see [Pub/sub across the cluster](#pubsub-across-the-cluster)).",
    "subscribe": "Once answered, every later PUBLISH reaches and counts it; once an "
                 "UNSUBSCRIBE, RESET or QUIT is answered, none does. Differences: a RESP3 "
                 "subscriber's messages come over its link, apart from the replies to its other "
                 "commands, so a message may follow the reply of a command sent after it was "
                 "published. Keyspace channels and patterns are gathered from every master (see "
                 "[Pub/sub across the cluster](#pubsub-across-the-cluster)).",
    "scan": "The cursor packs the master's index and that master's own cursor; a key present "
            "for the whole scan is returned at least once.",
    "wait": "Counts the replicas that have the client's last write: see [WAIT](#wait).",
    "select": "Only database 0, as a cluster node.",
    "slowlog|get": "The proxy's own slow log: see [Slow log](#slow-log).",
    "slowlog|len": "The proxy's own slow log: see [Slow log](#slow-log).",
    "slowlog|reset": "The proxy's own slow log: see [Slow log](#slow-log).",
    **{f"latency|{sub}": "The proxy's own latency figures: see [Latency](#latency)."
       for sub in ("latest", "history", "reset", "histogram", "doctor", "graph", "help")},
    "config|get": "The proxy's own directives (`slowlog-log-slower-than`, `slowlog-max-len`, "
                  "`latency-monitor-threshold`, `latency-tracking`, "
                  "`latency-tracking-info-percentiles`, `tracking-table-max-keys`) with the proxy's values; asked only for those, answered by the proxy, else "
                  "by one master with those values replaced.",
    "readonly": "Accepted; reads still go to masters.",
    "xreadgroup": "When its stream MIGRATEs away while it blocks (the node answers `-UNBLOCKED "
                  "the stream key no longer exists`) and the node now redirects its keys, it "
                  "runs again on the new owner, for its whole BLOCK time; a stream deleted "
                  "otherwise still ends it with that error.",
    "client|list": "Every client of the proxy (with workers, of every worker, in id order), "
                   "in Redis' line format.",
    "client|kill": "Every filter of 7.0 (ID, TYPE, USER, ADDR, LADDR, SKIPME, the old addr "
                   "form) over the proxy's clients (with workers, every worker's).",
    "client|unblock": "Wakes a client blocked through the proxy (with workers, on any "
                      "worker): the node where its command waits ends it with its own TIMEOUT "
                      "or ERROR reply.",
    "client|reply": "ON/OFF/SKIP: the proxy drops the replies covered (pushes still arrive, "
                    "as in Redis 7.0); refused inside MULTI.",
    "client|no-evict": "Accepted and shown as flag `e`; the proxy evicts no client.",
    "hello": "The proxy says `mode:standalone` (`mode:cluster` with cluster emulation on); a "
             "RESP3 client gets RESP3 backend connections; `AUTH` logs in to the proxy's own "
             "users.",
    "auth": "Logs in to the proxy's own users (config section `auth`); with no "
            "`requirepass` the default user needs none, as on a server without one.",
    "reset": "Also logs the client back in as the default user (out, if it has a password).",
    **{f"acl|{sub}": "Over the proxy's own users (config section `auth`); nothing reaches "
                     "the nodes." for sub in ("cat", "dryrun", "genpass", "getuser", "help",
                                              "list", "log", "users", "whoami")},
    "acl|setuser": "Creates or changes one of the proxy's own users, in the memory of the "
                   "proxy process the client is connected to (until the next reload); a "
                   "changed user's connections take the new rules; nothing reaches the nodes.",
    "acl|deluser": "Deletes one of the proxy's own users (in that process's memory until the "
                   "next reload); its connections are closed; nothing reaches the nodes.",
    "acl|load": "Re-reads `auth.aclfile`.",
    "acl|save": "Writes the proxy process's users to `auth.aclfile`.",
    "command|getkeysandflags": "Answered by a master.",
    "command|help": "Answered by a master.",
    "info": "`cluster_enabled:0`: the proxy is one plain server to its clients (`1` with "
            "cluster emulation on).",
    "multi": "Queued commands are checked (arity, unknown command, cross-slot) and answered "
             "`+QUEUED` by the proxy.",
    "exec": "All queued keys must share one slot; `MULTI … EXEC` is sent pipelined to its "
            "master and resent whole after a MOVED/ASK.",
    "watch": "Opens the transaction's connection to the keys' master at once.",
    "cluster|slots": "Emulation off: to one master.",
    "cluster|shards": "Emulation off: to one master.",
    "cluster|nodes": "Emulation off: to one master.",
    "cluster|info": "Emulation off: to one master. On: `cluster_state:ok` while the proxy's slot "
                    "map covers every slot.",
    "cluster|myid": "Emulation off: to one master. On: this proxy's id (SHA-1 of its address).",
    "cluster|countkeysinslot": "On: to the slot's master. Off: refused (`-ERR slotgate: "
                               "'cluster|countkeysinslot' is not supported through the proxy`).",
    "cluster|getkeysinslot": "On: to the slot's master. Off: refused (`-ERR slotgate: "
                             "'cluster|getkeysinslot' is not supported through the proxy`).",
    "asking": "On: `+OK` (clients never see an ASK). Off: refused (`-ERR slotgate: 'asking' "
              "is not supported through the proxy`; the proxy follows ASK redirects itself).",
    "config|set": "Refused only with `requirepass`, `masterauth` or `masteruser` among its "
                  "parameters; with admin commands allowed, a new `requirepass` becomes the "
                  "proxy's own backend password before the reply. The proxy's own directives "
                  "(`slowlog-log-slower-than`, `slowlog-max-len`, `latency-monitor-threshold`, "
                  "`latency-tracking`, `latency-tracking-info-percentiles`) are checked and set in the "
                  "proxy (Redis' errors) and not sent on; the other parameters of the same "
                  "command go to the nodes after them (not atomic together).",
}


def handling(info: CommandInfo) -> str:
    """One command's handling, as a sentence (Markdown, safe inside a table cell)."""
    route, merge = info.route, info.merge
    if route == "unsupported":
        text = (f"refused: `-ERR slotgate: '{info.name}' is not supported through the proxy` "
                f"({info.reason})")
    elif merge == "scan":
        text = f"one master per call; {MERGE_TEXT[merge]}"
    elif merge is not None:
        text = f"{ROUTE_TEXT[route]}; {MERGE_TEXT[merge]}"
    elif info.name in _SINGLE_ACROSS:
        text = "to the master of its keys' slot"  # across slots: its note
    else:
        text = ROUTE_TEXT[route]
    text = text[0].upper() + text[1:] + "."
    note = NOTES.get(info.name) or _gather_note(info)
    if info.name in DATABASE_COMMANDS:
        note = (f"{note} " if note else "") + (
            "With `databases` above 1: per database, see [Numbered databases]"
            "(#numbered-databases).")
    if info.name in BLOCK_HANDLED:
        note = "Across slots: see [Blocking pops across slots](#blocking-pops-across-slots)."
    elif info.name in BLOCKMOVE_HANDLED:
        note = ("Across slots: waits on its source, then moves as LMOVE does "
                "([Blocking pops across slots](#blocking-pops-across-slots)).")
    elif info.name in XREAD_HANDLED:
        note = ("Across slots: each slot's streams read, replies merged in the client's order; "
                "BLOCK waits on every master ([Blocking pops across slots]"
                "(#blocking-pops-across-slots)).")
    if note:
        text = f"{text} {note}"
    return text.replace("|", "\\|")


def _gather_note(info: CommandInfo) -> str | None:
    """Across slots: which of the three kinds of the cross-slot section the command is."""
    spec = SPECS.get(info.name)
    if info.route != "gather" or spec is None:
        return None
    if spec.writes == "first":
        return ("Across slots: a move, the source first (under WATCH), then the destination "
                "([moves](#moves-across-slots)).")
    where = "its last key" if spec.anchor == -1 else "its first key"
    if "write" in info.flags:
        return (f"Across slots: runs next to {where} (its destination), which is written "
                "atomically ([details](#multi-key-commands-across-slots)).")
    return (f"Across slots: runs next to {where}; reads each slot's keys at its own instant "
            "([details](#multi-key-commands-across-slots)).")


def _name(info: CommandInfo) -> str:
    return info.name.upper().replace("|", " ")


def _rows() -> list[CommandInfo]:
    return sorted((i for i in ALL_COMMANDS.values() if not i.subcommands),
                  key=lambda i: i.name)


HEADER = f"""\
# Commands through the proxy

<!-- Generated by tools/gen_command_docs.py from protocol/commands.py; do not edit by hand.
     Regenerate with: python tools/gen_command_docs.py -->

How the slotgate proxy handles every command of Redis {REDIS_VERSION}'s command table. The
`route` and `merge` columns are those of `protocol/commands.py` (set in
`protocol/overrides.py`); docs/PROXY.md describes the machinery behind each route.

Common to all routes: an unknown command gets Redis' unknown-command error and a wrong
argument count Redis' arity error, both without a round trip; `MOVED` and `ASK` are followed
by the proxy and never reach the client, `TRYAGAIN`/`CLUSTERDOWN`/`LOADING`/`BUSY` are retried
until the request's deadline (docs/PROXY.md). Inside `MULTI`: see
[Inside MULTI](#inside-multi).

With a password or users configured (config section `auth`, docs/CONFIG.md), every command
is checked by the proxy before it is routed, as redis-server 7.0 checks it: `-NOAUTH` until
the client logs in (only `AUTH`, `HELLO`, `QUIT` and `RESET` pass before), then `-NOPERM`
unless the user's rules allow the command, its keys (read or write) and its channels; the
refusals are in `ACL LOG`. The default user with no password and every permission (the
usual case) is not checked at all. EXEC checks its queued commands again, as Redis does (a
command the rules no longer allow is not sent; its place in EXEC's reply holds Redis' NOPERM
text), and ACL SETUSER that takes channels away closes the user's subscriber connections
that hold one of them.
"""

BLOCKING_CROSS = """\
## Blocking pops across slots

`BLPOP`, `BRPOP`, `BZPOPMIN`, `BZPOPMAX`, `BLMPOP` and `BZMPOP` over keys in several slots
(keys in one slot: unchanged, one connection to that slot's master), and the non-blocking
`LMPOP` and `ZMPOP` (steps 0 and 1 only: all keys empty, the null reply). Code:
`proxy/routing/blockmulti.py`, `proxy/routing/poppark.py`,
`proxy/routing/keywake.py` (the wake-ups); tests: `tests/proxy/test_blocking_crossslot.py`,
`tests/proxy/test_crossslot_pops.py`, `tests/proxy/test_crossslot_pop_faults.py`,
`tests/proxy/test_crossslot_pop_wake.py`, `tests/node/test_diff_tracking_waits.py`.

**No element is ever lost, whatever connection drops or node dies.** No pop takes an element
out of a key straight into the proxy: each one moves what it takes, in one atomic step on the
key's master (a script), into a *park*: a list or sorted set of the key's own slot
named `{T}slotgate-pop:<token>:<n>:<L|R|Z>:<key>` (`T` a hash tag of the slot; the name says
which key and which end it came from). The park is replicated with the pop, so after a
failover the element is in its key or in its park, never in neither. The client is answered
only once its park is *committed* (a script deletes the park and sets a marker, then `WAIT 1
500` for a replica; a lost reply is settled by the marker, as for
[moves](#moves-across-slots)); every other park is *pushed back* into its key (`LMOVE park
key RIGHT <end>` until empty: the elements return to the end they left, in their order;
`ZADD` with their scores), by a script that is sent again after a lost reply. Every proxy
pushes back all parks it finds on the masters when it starts (`SCAN … MATCH
*slotgate-pop:*`): a proxy killed mid-pop leaves at most a park, returned then. A park of a
live pop swept by another proxy starting costs that pop a new try: its commit finds the park
gone and tries again, the element being back in its key.

0. **Check.** On the first key's master, `MULTI`, the command over an always-empty key of
   that slot, `EXEC`: Redis' own argument errors (timeout, direction, `COUNT`), byte for byte.
1. **Try, in Redis' key order.** Each run of consecutive keys of one slot, by one script on
   that slot's master: the first key that exists decides, as in Redis (another type:
   `WRONGTYPE`; else up to `COUNT` elements move into its park). The first run that pops is
   the reply once committed (written by the proxy as Redis writes it, RESP2 or RESP3).
   A run finding nothing costs one round trip.
2. **Wait, woken by the nodes.** No Redis command blocks until one of several keys (or a
   sorted set at all) gets an element without taking it, so the proxy uses Redis' own
   client-side caching: one connection per master, shared by every waiting pop of the proxy
   process, in RESP3 with `CLIENT TRACKING ON` (no server configuration needed). A pop that
   found nothing *arms* its keys (`EXISTS k …` on that connection, one command per slot: the
   master now remembers them) and runs step 1 again: an element that arrived before the read
   is found now, one that arrives after it makes the master send an `invalidate` push naming
   the key (any change: `ZADD`, `RPUSH`, `ZUNIONSTORE`/`RENAME`/`COPY`/`RESTORE` onto it, a
   transaction, a script, expiry, `FLUSHALL`; `tests/node/test_diff_tracking_waits.py` checks
   that our nodes send the same as redis-server). The pop then sleeps: no connection of its
   own, no blocked client on the master, nothing sent, until a push names one of its keys,
   its tracking connection is lost (a failover, `CLIENT KILL`), or a topology refresh finds
   one of its slots owned by another node (a waited key's empty slot moved by a reshard:
   the pop learns it at the next refresh, which a `MOVED` seen by any client of the proxy
   brings forward). Then it arms again (the master tracks a key once
   per read) and runs step 1 again, until the timeout. A key that cannot be armed (no owner
   known, `MOVED`/`ASK`, its master unreachable): step 1 again every 50 ms. All null: the
   null reply (`*-1` in RESP2, `_` in RESP3) after the timeout. A commit that finds its park
   gone: step 1 again. A client that goes away while waiting has every park pushed back.

**What another client may observe.** A park (its key name, `SCAN`, `KEYS`, `DBSIZE` one
higher) while a pop is settled; an element absent from its key between a losing pop and its
push back (the list shorter for that moment; it returns to the end it left, after elements
pushed meanwhile to that end); keyspace events of the pop and of the park (`lpop`/`rpush`,
`lmove`, `zpopmin`/`zadd`, `del`). On each master, one connection per proxy process with
tracking on (`CLIENT LIST` flags `t`), its `EXISTS` reads of the waited keys (`MONITOR`,
`INFO commandstats`) and an `invalidate` push to it for every change of a waited key. A proxy
user whose ACL refuses `CLIENT TRACKING` or `HELLO` makes those waits run step 1 again every
50 ms, as before (logged once per master).

**What differs from one server.** Every try takes from the first key in the command's order
that holds data at that moment; Redis serves a blocked client from the key that got its
element first (the same unless several keys get elements between two tries). A pop is
served one wake-up after its element arrives: the push reaches the proxy, which arms and
tries (about four round trips to the masters, where Redis answers at once). A change of a
key wakes one of the pops waiting on it (the longest armed first), as Redis serves one
blocked client per element: its own pop from the key is a change that wakes the next one,
and a pop that ends without taking from the key (it took from another, timed out, its client
left) wakes the next one in its place; so a crowd of waiters on one key costs two or three
tries per element, not one per waiter per change nor per 50 ms.
If a master dies after a commit ran but before a replica has it (`WAIT` fell short of 500 ms),
the promoted replica may bring the element back (Redis' asynchronous replication, as for any
acknowledged write). A commit whose fate no master tells before the retry deadline is answered
`ERR slotgate: connection to <node> lost; write may or may not have been applied`. `CLIENT
UNBLOCK` through the proxy does not reach a cross-slot wait; `blocked_clients` is not counted
for it.

### BLMOVE and BRPOPLPUSH across slots

A source and a destination in different slots (`proxy/routing/blockmove.py`). No element ever
leaves the source except by the move of [Moves across slots](#moves-across-slots), so a
failure while waiting loses nothing:

1. **Check.** On the source's master, `MULTI`, the client's command over an always-empty key
   of the source's slot (as source and destination), `EXEC`: Redis' own argument errors
   (direction syntax, timeout), nothing else, and nothing changed.
2. **Move.** `LMOVE` (`RPOPLPUSH`) across slots, as the moves above: the element, or
   `WRONGTYPE` of either key, is the reply.
3. **Wait.** The source was empty: it is armed on its master's shared tracking connection
   and step 2 runs again, then the move sleeps until the master says the source changed
   (as the pops' step 2 above: no connection of its own, nothing changed on the source,
   nothing sent meanwhile), and steps 2 and 3 run again, until the timeout: its null is the
   reply, `*-1` in RESP2, `_` in RESP3, as Redis. A move whose source changed under each of
   its tries is tried again while the timeout lasts.

Differs from one server: an element pushed while the client waits may be taken by another
client between the wake-up and the move (the move then waits again).

### XREAD and XREADGROUP across slots

Streams in several slots (`proxy/routing/xreadmulti.py`):

1. **Read.** Each run of consecutive streams of one slot, with their IDs, is sent in the
   client's order to the slot's master inside `MULTI … EXEC` (`BLOCK` never blocks there).
   Redis checks every stream (type, then ID) in key order before reading: the first run that
   answers an error gives the client's reply, byte for byte. XREAD's `$` IDs are resolved in
   the same transaction (the stream's last entry, `XREVRANGE k + - COUNT 1`; `0-0` when it has
   none), so step 3 misses no entry added after the read.
2. **Merge.** Every stream with entries, in the client's order (repeated names included), in
   one reply: an array of `[stream, entries]` pairs, a map in RESP3. None and no `BLOCK`: the
   null reply.
3. **Wait.** With `BLOCK`, each slot's streams wait at once on a connection of their own to
   its master, with what is left of the block time (`0` stays `0`). When one answers, the
   others are ended (`CLIENT UNBLOCK`) and every stream that received entries meanwhile is in
   the reply too, in the client's order: an XREADGROUP's entries read with `>` were delivered
   (added to the consumer's pending list) by the node that answered, so none is dropped.

Differs from one server: the runs are read one after another, not at one instant; an
XREADGROUP with `>` whose later stream has an error (`NOGROUP`, `WRONGTYPE`) has already
delivered the earlier streams' entries to the consumer (they are in its pending list, as
after a lost reply) while the client gets the error; a woken wait may carry entries of
several streams where Redis would give those of the stream that woke it.

"""


DATABASE_COMMANDS = frozenset({"select", "move", "swapdb", "copy", "keys", "scan", "dbsize",
                               "flushdb", "randomkey"})

DATABASES = """\
## Numbered databases

With `databases: N` above 1 (docs/CONFIG.md, Numbered databases), `SELECT 0..N-1` works as on
one server; the keys of database `d > 0` are stored as `{T}slotgate-db<d>:<key>` (`T`: a hash
tag of the key's own slot, so each key keeps its slot), database 0 as is. Code:
`proxy/front/databases.py`; tests: `tests/proxy/test_databases.py` (a script of SELECT, MOVE,
COPY … DB, SWAPDB, KEYS, DBSIZE, RANDOMKEY, FLUSHDB, blocking pops and moves in several
databases, scripts returning their keys, keyspace notifications, INFO keyspace, against one
redis-server, RESP2 and RESP3; redis-py's MOVE/COPY/SWAPDB usage; SWAPDB seen atomically).

- **Every keyed command** of a client in database `d > 0` has its keys (`COMMAND GETKEYS`'
  positions) prefixed, then is routed as usual (one slot, split, across slots). Replies that
  carry key names have the prefix taken off: `BLPOP`, `BRPOP`, `BZPOPMIN`, `BZPOPMAX`,
  `BLMPOP`, `BZMPOP`, `LMPOP`, `ZMPOP`, `XREAD`, `XREADGROUP`, `EVAL`, `EVALSHA`, `EVAL_RO`,
  `EVALSHA_RO`, `FCALL`, `FCALL_RO` (every bulk string of the reply, at any depth, and every
  simple string, that starts with this database's prefix: a value that itself starts with
  it is cut too), inside `EXEC` too.
  Such a client takes no fast route (one dictionary lookup more per request).
- **Whole-database commands** are the proxy's in every database (database 0 leaves out the
  other databases' keys): `KEYS` (`KEYS {*}slotgate-db<d>:<pattern>` on every master, prefix
  taken off; database 0: every key without a prefix), `DBSIZE`, `RANDOMKEY` and `FLUSHDB`
  (from that list: O(N) on every master, `FLUSHDB` then `UNLINK`s per slot, not atomic),
  `SCAN` (one master after another, `MATCH` prefixed; the cursor is the node's cursor times
  1024 plus the master's index; its guarantees hold while the slot map does not change).
- **`MOVE key db`**: Redis' argument errors, then `RENAMENX` of the two stored names in the
  key's slot (`:1` moved, `:0` absent or already in the target; TTL kept, as Redis).
- **`COPY src dst DB d [REPLACE]`**: Redis' argument errors, then `COPY` of the two stored
  names (in two slots: as [Multi-key commands across slots](#multi-key-commands-across-slots)).
- **`SWAPDB a b`**: Redis' argument errors, then (`proxy/front/db_swap.py`) the proxy
  holds its other clients of databases `a` and `b`: every request of theirs, and any
  client's `EXEC`, `MOVE`, `COPY`, `SWAPDB` and `FLUSHALL` (which may reach another
  database than the client's), waits until the swap ends, then runs in order (every
  session leaves its fast routes while a swap runs); the requests of those clients already
  on their way are answered first (at most 1 s; a blocked command is not waited for). With
  `workers: N` the workers agree: one `SWAPDB` at a time over all of them (a lock key on
  the cluster, as moves across slots take, `movelock.py`), and the swapping worker asks
  every other to hold its clients the same way before it starts (each answers once it
  does) and tells them when it ends; another worker holds its clients 30 s at most (the
  lock's life: a longer swap, or a swapping worker that dies, lets them go then). Then the
  keys of both databases are listed (`KEYS` on every master, as above; database 0's names
  of the proxy's own, `{T}slotgate-…`, stay), and per key of either, in its slot, one
  `MULTI`, the `RENAME`s that swap it (through a temporary `{T}slotgate-swapdb:<key>` when
  both hold it), `EXEC`. What it guarantees: for the clients of the proxy, the swap is
  atomic (each of their requests runs wholly before or wholly after it; tested with an
  `MGET` of 300 keys over every master during the swap, from the swapper's worker and from
  another), and each key is swapped atomically for everyone (its two stored names change
  in one transaction, so no client ever sees a key in both databases or in none). A client
  blocked on a key (`BLPOP` & co.) of either database is served when the swap brings a
  value there, as Redis serves it (the node wakes it on the `RENAME`). It runs to its end
  even if its client goes away meanwhile (no half-swapped databases left). What it does
  not: clients of the nodes themselves and of other proxies are not held: they may see
  some keys swapped and others not, and a key they create in either database after the
  listing is not swapped. Cost: O(N) in the keys of both databases, one round trip per
  key, the held clients waiting that long.
- **`RESET`** returns the client to database 0.
- **Inside `MULTI`** (the database a command runs in is the one in effect when it is
  queued, as on one server): `SELECT d` is queued as `SELECT 0` (a cluster node answers
  `+OK`) and the commands queued after it take database `d`'s keys; at `EXEC` the client
  moves to `d` (not after `DISCARD`, a failed `WATCH` or `EXECABORT`), and an invalid
  `SELECT` answers Redis' error in its place. `MOVE` is queued as the `RENAMENX` of the two
  stored names (its "no such key" answered `:0`; a bad target Redis' error at `EXEC`);
  `COPY … DB d` as the `COPY` of the two stored names (a bad `DB` argument is refused
  while queuing). `EXEC`'s replies to `BLPOP`, scripts & co. have the prefix taken off
  (the database of the command's first prefixed key). `KEYS`,
  `SCAN`, `RANDOMKEY`, `DBSIZE`, `FLUSHDB` and `SWAPDB` are refused while queuing with
  `ERR slotgate: '<name>' cannot run inside MULTI through the proxy` (`EXEC` then answers
  `EXECABORT`): a transaction runs on one node, where they would see part of the keys.
  `tests/proxy/test_databases.py` compares a script of them with one redis-server.
- **Keyspace notifications**: a subscription to `__keyspace@<d>__:<key>` (channel, or a
  pattern whose database is a number) is held on the nodes as
  `__keyspace@0__:{T}slotgate-db<d>:<key>` (a pattern: `{*}` for the tag), one to
  `__keyevent@<d>__:<event>` as `__keyevent@0__:<event>`; each notification reaches the
  client as one server sends it: the database number from the stored name's prefix, the
  prefix taken off the channel (keyspace) or the message (keyevent), only to the
  subscriptions of that database (a `pmessage` once per matching pattern). A pattern that
  may match a keyspace channel of any database (its database part a wildcard:
  `__keyspace@*__:…`, `__keyspace@?__:…`, `__key*__:*`, `*`) is held on every master as
  itself and as `__keyspace@0__:{*}slotgate-db*`, which carries every database's keyspace
  notifications: each reaches the client once per matching pattern, translated
  (`__keyspace@<d>__:<key>`), the pattern matched against the translated channel (a
  database 0 notification through the pattern itself, another database's through the
  carrier); `__keyevent@*__:…` sees every database's events, translated. The carrier is
  one pattern more in the home master's `PUBSUB NUMPAT` while a client holds such a
  pattern, and that client's link receives every keyspace notification of the databases
  above 0 (the proxy drops what its pattern does not match).
- **`CLIENT LIST` / `CLIENT INFO`** show each client's database in `db=`.
- **`CLIENT TRACKING`**: keys are tracked by the name the client gives (as Redis, whatever
  the database: a write of the same name in another database invalidates it too), and
  invalidations name them so.
- **Lua scripts and functions**: the keys passed as `KEYS` are prefixed as any command's
  keys; key names a script builds itself (from `ARGV`, by concatenation) are used as they
  are, that is in database 0; key names a script returns (`return KEYS[1]`, in an array,
  as a status reply) come back as the client named them, as above. The proxy
  cannot see inside a script: a script that must work in another database than 0 takes
  every key it touches in `KEYS`, which Redis Cluster requires anyway.
- **`INFO`'s Keyspace section** (`INFO`, `INFO keyspace`, `default`, `all`, `everything`)
  has one line per non-empty database, as Redis formats it (`db3:keys=2,expires=1,
  avg_ttl=99874`): the nodes have database 0 only, so the proxy walks every master's keys
  for it (`proxy/front/db_info.py`), per master `DBSIZE`, then `SCAN … COUNT 1000` with one
  `PTTL` per name in the same round trip, until the scan ends or 100,000 names were seen.
  Cost per such `INFO`: O(keys) on the nodes, about two round trips per 1,000 keys per
  master, the client's later requests waiting meanwhile (an `INFO` without that section
  walks nothing). What is exact: `keys` and `expires` while each master holds at most
  100,000 keys and the keyspace does not change during the walk (a key written or removed
  meanwhile may be counted or not, as with `SCAN`). What is approximate: `avg_ttl` is the
  mean remaining TTL in ms of the keys walked (Redis' own is an estimate from its expire
  cycle's samples); above 100,000 keys on a master, that master's counts are the walked
  names' scaled by its `DBSIZE`. A master that cannot be walked leaves the masters'
  summed lines (every database's keys as `db0`). `DBSIZE` in a database gives its own
  exact count.
- **Cost of `DBSIZE`, `RANDOMKEY`, `KEYS`, `FLUSHDB`, `SWAPDB`**: with `databases` above 1
  they list the database's keys with `KEYS` on every master: O(N) in all the cluster's keys
  on the nodes (each master blocked while its `KEYS` runs, as a `KEYS` on one server), and
  the names held in the proxy's memory for the command. Use `SCAN` (per master, bounded by
  `COUNT`) where the keyspace is large. With `databases: 1` they are the masters' own
  (`DBSIZE` O(1)).

`FLUSHALL` empties every database (as Redis).

"""

OWN_FACTS = """\
## The proxy's own server facts

What a server says about itself is, through the proxy, the proxy's own: `CLIENT ID`, `LIST`,
`INFO`, `KILL`, `UNBLOCK`, `SETNAME`/`GETNAME`, `REPLY`, `NO-EVICT` act on the proxy's client
connections, with redis-server 7.0.15's line format, argument rules and errors (7.0 has no
`MAXAGE` filter: a syntax error, as there). INFO keeps 7.0.15's sections, fields and order:

| section | through the proxy |
|---|---|
| Server | the first master's, with the proxy's `process_id`, `run_id`, `tcp_port`, `server_time_usec`, `uptime_in_seconds`/`_days`, `executable`, `config_file` (empty) and `redis_mode:standalone` |
| Clients | the proxy's: `connected_clients`, `maxclients` (`max_clients`), `blocked_clients` (clients waiting in a blocking command through the proxy, or held by CLIENT PAUSE), `tracking_clients`; the buffer fields are 0 |
| Memory | integer fields summed over the masters, `*_human` recomputed from the sum; ratios, percentages and names are the first master's |
| Persistence | a status is `ok` only if every master's is; `loading`, `*_in_progress`, `*_scheduled`, `aof_enabled`, `*_time_sec`: the largest; `rdb_last_save_time`: the oldest; other integers summed |
| Stats | the proxy's: `total_connections_received`, `total_commands_processed` (rejected requests not counted, as in Redis), `instantaneous_ops_per_sec` (between two INFO calls at least 100 ms apart), `rejected_connections`, `total_error_replies`; every other integer summed over the masters (`keyspace_hits`/`misses`, expired and evicted keys, pub/sub channels, net bytes ...) |
| Replication, Modules | the first master's |
| CPU | the proxy process' own (getrusage) |
| Commandstats | counted by the proxy: `calls`, `usec` and `usec_per_call` (the time from reading the request to its reply being ready, end to end through the nodes), `rejected_calls` (unknown, wrong arity, not allowed here) and `failed_calls` per command |
| Errorstats | the error replies the proxy sent, by their first word |
| Latencystats | the proxy's own: its requests' percentiles (see [Latency](#latency)) |
| Cluster | `cluster_enabled:0` |
| Keyspace | keys and expires summed per database, `avg_ttl` weighted by keys |

Remaining differences, and why:
- CLIENT LIST's `qbuf`, `qbuf-free`, `argv-mem`, `multi-mem`, `rbs`, `rbp`, `obl`, `oll`,
  `omem`, `tot-mem` are 0 and `events` is `r`: the proxy keeps no such per-client buffers.
  Flags shown: `P`, `x`, `b`, `e` or `N`.
- `blocked_clients` counts a client from the moment its blocking command is sent until its
  reply, whether or not the node had to block it.
- `CLIENT REPLY OFF`/`SKIP` drop the replies to requests; a subscriber's confirmations and
  messages still arrive, as Redis 7.0 sends pushes; `CLIENT` subcommands about the client
  itself are refused inside MULTI (below).
- Commandstats' `usec` is the proxy's end-to-end time (node round trips included), not a
  node's execution time; a command refused by the proxy's own routing (CROSSSLOT, a refused
  row) counts as a failed call, where a server would have run it.
- With workers (`workers: N`), INFO's `connected_clients`, `blocked_clients` and
  `tracking_clients` are summed over every worker (asked before the masters); every other
  value of the proxy's own (stats, commandstats, errorstats, latencystats, `run_id`,
  `process_id`, uptime) is that of the worker the connection landed on. CLIENT LIST, KILL,
  UNBLOCK, PAUSE, UNPAUSE and MONITOR cover every worker's clients (docs/PROXY.md
  "Workers"); combined values are on /metrics.
"""

WAIT = """\
## WAIT

A master's `WAIT` counts the replicas that acknowledged the replication offset where the
asking connection's previous command ended (Redis' `c->woff`); the proxy's shared node
connections carry every client's commands, so the proxy remembers the slot of each client's
last write and, once the client's earlier requests have their replies, sends on the client's
own connection to that slot's master `FUNCTION RESTORE <an empty payload> APPEND` (replicated,
changes nothing: that connection's offset is now the master's, past the client's write) and
then the client's `WAIT`: the count is the replicas that have the client's write. A client
with no write yet gets `WAIT` as the first command of its own connection to the master of its
keyless commands: answered at once with that master's replicas (or after the timeout, with
fewer than asked), as a server with nothing pending for the client answers. While it waits
the client counts in `blocked_clients` and `CLIENT UNBLOCK` ends it, as in Redis. Code:
`proxy/front/wait.py`; tests: `tests/proxy/test_transparency_wait.py`.

**What differs from one server.** A write that reached several masters (`MSET`/`DEL` across
slots, a command sent to every master such as `FLUSHALL`, a multi-key command across slots)
is waited for on one of them only (the first part's, or the destination's); the replicas
counted are that master's. The backend user needs `FUNCTION RESTORE` (the default user has
it); if it is refused, the `WAIT` counts from the connection's earlier offset.

"""


FUNCTIONS = """\
## Functions

Every master holds the same function libraries, so that `FCALL` finds its function on
whichever master its keys live. Code: `proxy/routing/functions.py`; tests:
`tests/proxy/test_functions_through_proxy.py`. Each step runs after the client's earlier
requests, on the client's own connections to the masters (not behind a long script on the
shared ones):

- `FUNCTION LOAD`, `DELETE`, `FLUSH`, `RESTORE`: all or nothing. Every master's
  `FUNCTION DUMP` is saved, then the command goes to every master at once; if one refuses (or
  cannot be reached), every master that took it gets its saved dump back
  (`FUNCTION RESTORE <dump> FLUSH`, which its replicas follow) and the refusal is the reply.
- `FUNCTION LIST`, `DUMP`: every master's `FUNCTION LIST WITHCODE` is compared (as sets: a
  server lists its libraries in no fixed order); when they agree, the command goes to one
  master (the one of the client's keyless commands); when they differ, the reply is
  `-ERR slotgate: the masters' function libraries differ (<masters> | <masters>); 'slotgate
  cluster fix' gives every master the most common set`. `slotgate cluster fix` does that: it
  copies the libraries of the largest group of agreeing masters to the others
  (`FUNCTION RESTORE <dump> FLUSH`).
- `FUNCTION STATS`: `running_script` of the master running a function (if one is), the
  engines' library and function counts as most masters have them (the agreed set, the one
  `slotgate cluster fix` copies; equal on every master when they agree).

**What differs from one server.** The masters change one after another, not at one instant:
an `FCALL` sent meanwhile by another client may find the new library on one master and not
yet on another. A `FUNCTION` change made by another client between the saved dump and a
rollback is rolled back with it.

"""


SLOWLOG = """\
## Slow log

`SLOWLOG GET/LEN/RESET` are the proxy's own: requests as the proxy served them, timed from
reading the request to its reply being ready (node round trips, redirects and retries
included), with the directives a server has, `slowlog-log-slower-than` (µs; -1 off, 0 every
request) and `slowlog-max-len`, set in the config file (`slowlog.log_slower_than_us`,
`slowlog.max_len`, docs/CONFIG.md) or with `CONFIG SET`/`CONFIG GET` through the proxy. An
entry has Redis' six fields and limits (32 arguments, 128 bytes each, AUTH and HELLO AUTH
redacted); its client-name field is the client's name followed by ` node=<host:port>`, the
master that served the request (client names have no spaces), or the name alone for a request
the proxy answered itself or sent to several nodes. Blocking commands, `WAIT` and `EXEC` are
not logged (Redis logs execution time, not waiting). Code: `proxy/front/slowlog.py`,
`proxy/front/own_config.py`; tests: `tests/proxy/test_transparency_slowlog.py`.

The nodes' own slow logs: `slotgate cluster call HOST:PORT SLOWLOG GET` runs it on every node
(docs/ADMIN.md).

**What differs from one server.** The times are end to end, not a node's execution time; the
client-name field carries the node; a request sent to several nodes (a split `MGET`, a fan-out)
has one entry.

"""


LATENCY = """\
## Latency

`LATENCY LATEST/HISTORY/RESET/DOCTOR/GRAPH/HISTOGRAM/HELP` and INFO `latencystats` are the
proxy's own: requests timed as for the [Slow log](#slow-log) (end to end), with the directives a
server has, `latency-monitor-threshold` (ms, 0 off), `latency-tracking` (yes/no) and
`latency-tracking-info-percentiles`, set in the config file (`latency.monitor_threshold_ms`,
`latency.tracking`, `latency.tracking_info_percentiles`, docs/CONFIG.md) or with `CONFIG
SET`/`CONFIG GET` through the proxy. Latency events are Redis' `command` (a request at or
above the threshold) and `fast-command` (the same for a command Redis flags `fast`): 160
samples per event, one per second, as Redis keeps them; DOCTOR's report and GRAPH's sparkline
are Redis' own texts for those two events (the slow log's directives choose DOCTOR's advice).
HISTOGRAM's replies have Redis' shape (`calls`, `histogram_usec` with the keys redis-server 7.0
gives its power-of-2 levels: 1, 2, 4, 8, 16, 33, 66, 132, ...), RESP2 and RESP3. Requests
refused before running (unknown command, wrong arity ...) are not counted, as in Redis. Code:
`proxy/front/latency.py`, `proxy/front/own_config.py`; tests:
`tests/proxy/test_transparency_latency.py`.

The nodes' own latency figures: `slotgate cluster call HOST:PORT LATENCY LATEST` (or
`LATENCY HISTOGRAM`, `INFO latencystats` ...) runs it on every node (docs/ADMIN.md).

**What differs from one server.** The times are end to end (node round trips, redirects and
retries included), not a node's execution time. A histogram keeps only the power-of-2 levels
HISTOGRAM reports (Redis' HdrHistogram is finer), so INFO `latencystats` percentiles are the
key of the level the percentile falls in (`p50=4.000`) rather than Redis' finer value
(`p50=4.015`). Histograms of blocking commands and `WAIT`
include the time waited (Redis counts only execution); they make no latency event. Events are
only `command` and `fast-command` (no `fork`, `aof-*`, `expire-cycle` ...: the proxy has none
of those). With several workers, each worker has its own figures (of the connections it
serves).

"""


IN_MULTI = """\
## Inside MULTI

Like redis-server 7.0.15: an unknown command or a wrong argument count is refused at once and
`EXEC` then answers `-EXECABORT Transaction discarded because of previous errors.`; so are
`SAVE`, `SHUTDOWN`, `SYNC` and `PSYNC`, with Redis' own `-ERR Command not allowed inside a
transaction`. Redis queues every other command, `AUTH` included: the proxy answers a queued
`AUTH` itself at `EXEC`, in its place in `EXEC`'s reply, and checks the commands after it as
the user it logged in (a failed `WATCH` runs nothing, the login included). The proxy refuses
some commands at queue time (the transaction then ends in `EXECABORT`, as for Redis' own
refusals):

| commands | proxy's error | why |
|---|---|---|
| `all_masters` and `all_nodes` rows (DBSIZE, KEYS, FLUSHALL, CONFIG SET ...); with `cross_slot_transactions: per_shard` and `databases: 1`, only SCAN, RANDOMKEY, INFO, SCRIPT KILL, FUNCTION KILL and CONFIG SET | `-ERR slotgate: '<name>' cannot run inside MULTI through the proxy` | a transaction runs on one master: on one node they would be silently partial. With `per_shard` the others (DBSIZE, KEYS, FLUSHALL, FLUSHDB, MEMORY PURGE, SCRIPT EXISTS, FLUSH, LOAD) run at `EXEC` on every master ([Transactions across slots](#transactions-across-slots)) |
| `unsupported` rows (BGSAVE, DEBUG, CLUSTER ...) | `-ERR slotgate: '<name>' is not supported through the proxy` | the same reason as outside MULTI (the row's) |
| `pubsub` rows (SUBSCRIBE ...) | `-ERR slotgate: '<name>' is not supported through the proxy` | subscriber mode lives on a link of its own, not on the transaction's connection |
| CLIENT ID, INFO, LIST, KILL, UNBLOCK, NO-EVICT, REPLY, SETNAME, GETNAME, PAUSE, UNPAUSE, TRACKING, CACHING, GETREDIR, TRACKINGINFO; HELLO; MONITOR; LATENCY, SLOWLOG and ACL (every subcommand) | `-ERR slotgate: '<name>' cannot run inside MULTI through the proxy` | they answer or change the proxy's own client state, figures or users, which the node running the transaction cannot see; there they would pause the node, track or monitor on the transaction's own connection, or answer with the node's log and users (HELLO would change the protocol of that connection). Redis runs them in EXEC (MONITOR there answers `-ERR MONITOR isn't allowed for DENY BLOCKING client`) |
| with `cross_slot_transactions: refuse` (the default): a command whose own keys span slots that the proxy runs across slots outside `MULTI`: the `split` rows (MGET, MSET, DEL, UNLINK, EXISTS, TOUCH), the `gather` rows (SUNIONSTORE, RENAME, LMOVE, MSETNX, BITOP, SORT … STORE …), `EVAL`, `EVALSHA`, `FCALL` (and their `_RO` forms) whose `KEYS` span slots, `MIGRATE … KEYS`, the blocking pops and moves (BLPOP, BRPOP, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP, BLMOVE, BRPOPLPUSH), XREAD and XREADGROUP | `-CROSSSLOT Keys in request don't hash to the same slot (slotgate: this command's keys span slots; set cross_slot_transactions: per_shard to run it inside MULTI)` | a transaction runs on one master (Redis Cluster refuses it when queued too). With `per_shard` they are queued and run at `EXEC`, each at its place ([Transactions across slots](#transactions-across-slots), `tests/proxy/test_cross_slot_tx.py`) |
| in either mode: a `split` row over several slots with an odd argument count | `-CROSSSLOT Keys in request don't hash to the same slot` | one node's own error, as outside `MULTI` |
| with `cross_slot_transactions: refuse` (the default): commands or watched keys in different slots | `-CROSSSLOT Keys in request don't hash to the same slot (slotgate: this transaction's keys span slots; set cross_slot_transactions: per_shard to run one MULTI/EXEC per slot)`, as `EXEC`'s reply (nothing ran) | a transaction runs on one master |

### Transactions across slots

With `cross_slot_transactions: per_shard` (docs/CONFIG.md; code in `proxy/front/shardtx.py`)
commands of any slot are queued, and a `split` command over several slots becomes one
command per slot. So is every command whose own keys span slots that the proxy runs across
slots outside `MULTI` — the `gather` rows (SUNIONSTORE, ZUNIONSTORE, BITOP, PFMERGE, COPY,
RENAME, LMOVE, SMOVE, MSETNX, SORT … STORE, GEOSEARCHSTORE, LMPOP …), scripts and
functions whose `KEYS` span slots, `MIGRATE … KEYS`, the blocking pops and moves and
`XREAD`/`XREADGROUP` (below) — and a `SORT` with `BY`/`GET` patterns, even in one slot, and (with
`databases: 1`) `DBSIZE`, `KEYS`, `FLUSHALL`, `FLUSHDB`, `MEMORY PURGE`, `SCRIPT EXISTS`,
`SCRIPT FLUSH`, `SCRIPT LOAD`: `+QUEUED`, an unknown command or a wrong argument count
refused when queued as Redis does (then `EXECABORT`).

At `EXEC` the proxy cuts the queue into *segments*: each command of the last paragraph (keys
in several slots, a `SORT` with patterns, `DBSIZE` …) is a segment of its own, run *alone*;
the commands
between them form the other segments. The segments run one after the other, in the
client's order, so every command sees the writes of the commands queued before it, as on
one server. In a segment of one-slot commands the proxy groups the commands by slot (Redis
Cluster runs a `MULTI … EXEC` only over keys of one slot), in the order each slot first
appears in the segment; a command without keys joins the segment's first group (no keys at
all: one group on the client's usual master). Each group is one `MULTI … EXEC` on the
client's own connection to the slot's master; the groups run one after the other, never in
parallel. An alone command runs exactly as outside `MULTI` (sections [Multi-key commands
across slots](#multi-key-commands-across-slots), [Moves across slots](#moves-across-slots),
[MSETNX across slots](#msetnx-across-slots), [Scripts, functions and MIGRATE across
slots](#scripts-functions-and-migrate-across-slots), [SORT with BY and GET
patterns](#sort-with-by-and-get-patterns)). A blocking pop or move over keys of several
slots runs without blocking, as Redis runs it inside `EXEC`: first the command itself over
an always-empty key of its first key's slot, inside `MULTI … EXEC` on that slot's master
(Redis' own argument errors: timeout, direction, `COUNT`; nothing blocks nor changes),
then its form without a timeout across slots: `BLMOVE` as `LMOVE`, `BRPOPLPUSH` as
`RPOPLPUSH`, `BLMPOP`/`BZMPOP` as `LMPOP`/`ZMPOP`, `BLPOP`/`BRPOP`/`BZPOPMIN`/`BZPOPMAX`
as `LMPOP`/`ZMPOP` of one element, its reply given their form (every key empty: the null
reply), `XREAD`/`XREADGROUP` without `BLOCK` (an `XREADGROUP` check meeting the empty key's
`NOGROUP` goes on: the real streams tell). `DBSIZE`, `KEYS`, `FLUSHDB` … run on every
master, one after another, over the client's own connections, their replies merged as
outside `MULTI` (a `FLUSHDB` empties one master after another; a `KEYS` reads each master at
its own instant). `EXEC` answers every command's reply in the
client's order: an error inside a group (`WRONGTYPE` …) stays in its place as Redis puts
it, an alone command's error (`WRONGTYPE`, a syntax error, `ERR no such key`, a script's
error, the proxy's own such as the lost-connection error) too, and the commands after it
still run, as after an error inside `EXEC` on one server; a split command's parts merge as
outside MULTI. With write policies (docs/PROXY.md), an alone command's writes meet them
before the next segment runs; a `WAIT` that falls short is `EXEC`'s reply, as for the
groups' writes.

`WATCH` watches each key on its own master. Every watch is checked in the first segment,
before any alone command and any later segment runs: first an empty `MULTI EXEC` on every
watched master with no group in the first segment (always the case when the transaction
begins with an alone command: then nothing at all has run when a watch fails), then the
first group of every watched master, then the first segment's other groups. A watched key
that changed makes `EXEC` answer nil and nothing after that check runs.

What is atomic: each group, i.e. the commands of one slot between two alone commands; and
each alone command as far as its own section says (a `SUNIONSTORE`'s destination goes from
its old value to the result at once; a move's element is in neither key for a moment; an
`MSETNX` or a script writes its other slots one after another). What is not: the
transaction as a whole. Another client may see one group's commands done and another's not
yet, act between two groups of one slot separated by an alone command, or between a group
and an alone command; a watched key that changed makes `EXEC` answer nil and the groups not
yet run are not sent, but a group that already committed stays committed (no rollback);
watched keys are checked when their master's first group runs, so the watch of a master
checked later does not cover the groups that ran before it, and no watch covers what runs
after the first segment (a watched key another client changes after its check does not
make `EXEC` nil). A group refused whole (`EXECABORT`, or the lost-connection error) ends
`EXEC` with that error, the same caveat applying to the groups and alone commands before it.
`MOVED`/`ASK` are followed as for a one-slot transaction: an unwatched group is sent again
whole (nothing of it ran); a group on a watched master follows nothing. `DISCARD`,
`UNWATCH`, `RESET` and the end of `EXEC` unwatch every master. A watched master whose
connection was lost meanwhile (or replaced after `HELLO` changed the protocol) counts as a
changed watch: `EXEC` answers nil.
"""

MSETNX = """\
## MSETNX across slots

`MSETNX k1 v1 k2 v2 …` sets all the keys only if none of them exists. It is not split by
slot: each part would decide on its own keys only, and a part could set its keys while
another finds one present. Across slots every key is written: the keys outside the first
key's slot are gathered under `WATCH` (step 1), the real `MSETNX` runs on the first key's
master over copies of them (step 2: the keys in that slot are set there, atomically with
the check of all the keys), and each other slot's keys are then written on their master,
one `MULTI … EXEC` per slot under its `WATCH` (step 3); steps 2 and 3 each set a marker
as the moves' steps do (`proxy/routing/gather.py`, `moveundo.py`). An answer of 0 changes
nothing anywhere.

Not atomic as a whole: between step 2 and the last commit another client can read some of
the keys set and others not yet. If a key is created or changed meanwhile by another
client, its slot's `EXEC` answers null: every key already written (the first slot's, the
slots committed before) is deleted again — each only if it still holds the value written,
under `WATCH` — and the command runs again, so it then answers 0 as one server would after
that client's write. A master failing during step 2 or a commit: the step's marker tells
whether it ran. Step 2 not run: "not done", nothing changed; step 2 run (its reply lost):
`MSETNX` runs again on copies of what step 2 started from, to learn what it wrote, and that
is taken back ("not done"); a commit not run: what was written is taken back, then the
client gets `ERR slotgate: 'msetnx' across slots not done: the master of its source (<node>)
failed before the source was updated; nothing was changed`. A key written by the proxy and
changed since by another client cannot be taken back: `ERR slotgate: move across slots half
done: …`, the key holding that client's value.
`tests/proxy/test_crossslot_faults.py` covers the concurrent creation; the differential test
covers the replies (set, not set, repeated keys, odd arguments, keys of other types).

**A proxy that dies half-way** (`proxy/routing/msetnxjournal.py`). Step 2's `MSETNX` also
sets, as two more of its own keys, a journal entry `{T}slotgate-journal:<token>:<n>` of the
first key's slot (the command, and each step 3 write's marker and keys) and its lease
(given its expiry in the same transaction; a script there adds the entry to its slot's index
`{T}slotgate-jindex` if `MSETNX` set it): the entry exists exactly when `MSETNX` set its
keys, and replicates with them. The proxy deletes it (and its index member) once every step 3 write ran, or before
it takes anything back. A sweep ([the moves'](#a-proxy-that-dies-mid-move-the-journal))
finding one left by a dead proxy asks each step 3 write's marker whether it ran; those that
did not are done now (*rolled forward*: under `WATCH` of their keys, only if none of them
exists), so the command ends with all its keys set, as its reply `1` would have said. If
one of those keys exists by then (another client created it after the proxy died), all
cannot be set any more: the sweep *rolls back*, deleting every key the command wrote that
still holds the value it wrote (the first slot's in the transaction that deletes the
entry). `tests/proxy/test_move_journal.py` kills a proxy (SIGKILL) right after an
`MSETNX`'s first slot was written, over keys on three masters: a proxy started next sets the
two others; and settles an entry one of whose keys another client created meanwhile (the
first key deleted again, the other client's key untouched).

`MSET`, by contrast, is split by slot: it has no all-or-nothing condition, and its per-slot
parts compose into the same result as one server would give (not atomic as a whole, which
a client can only observe by reading concurrently).
"""


SCRIPTS_ACROSS = """\
## Scripts, functions and MIGRATE across slots

`EVAL`, `EVALSHA`, `FCALL` whose declared `KEYS` span slots run as `MSETNX` does, every
declared key counting as written (`proxy/routing/crossslot.py`, `gather.py`): the keys
outside the first key's slot are gathered under `WATCH` (step 1); the script runs on the
first key's master in one transaction with those `KEYS` replaced by temporaries holding
copies (step 2); every declared key whose value or TTL the script changed (a TTL added,
removed, or set apart from its decay since the gather) is then written back on its own
master, one `MULTI … EXEC` per slot under its `WATCH` (step 3), a key the script deleted is
deleted there. `EVAL_RO`, `EVALSHA_RO`, `FCALL_RO` gather without `WATCH`,
run, and write nothing back. With every `KEYS` in one slot (or none) nothing of this runs:
the command is forwarded as before, with the same cost. Inside `MULTI` such a script is
queued with `cross_slot_transactions: per_shard` and runs alone, at its place in `EXEC`'s
order, as here ([Transactions across slots](#transactions-across-slots)); with `refuse` it
is refused when queued (`-CROSSSLOT …`, naming the setting; then `EXECABORT`).

Replies and errors are the node's own: `-NOSCRIPT`, compile errors, `error()` and
`redis.error_reply`, `WRONGTYPE` and other errors of `redis.call` with their `script: <sha>,
on @user_script:…` suffix, `redis.pcall`'s error replies, RESP3 replies after
`redis.setresp(3)`, the read-only forms' refusal of writes. A reply holding a temporary's
name as a whole string (`return KEYS`) gets the key's own name back.
`tests/proxy/test_crossslot_scripts.py` compares all of them with one redis-server, RESP2
and RESP3, behind a real cluster and behind our nodes.

**What a script can touch.** Only its declared keys are copied. A key name the script
builds itself (from `ARGV`, by concatenation) is looked up on the first key's master as it
is, under that node's cluster rules for scripts: a key of a slot it does not serve gets
`-ERR Script attempted to access a non local key in a cluster node …`; one of another slot
it serves, `-ERR Script attempted to access keys that do not hash to the same slot` unless
the script allows cross-slot keys (`EVAL` without a `#!lua` line, the flag
`allow-cross-slot-keys`). Such keys are real keys, not copies: never written back nor put
back. Names sharing the first key's hash tag always work. `EVALSHA` and `FCALL` need the
script (`SCRIPT LOAD`, which the proxy sends to every master) or the library (`FUNCTION
LOAD`, every master) on the first key's master.

**Atomicity and what others observe.** The script itself runs atomically on the copies and
on the first key's slot. The keys of other slots are each read at their slot's gather, a
little earlier, and written back after the script, one slot after another: between step 2
and the last commit another client can read the script's writes in some slots and not yet
in others. If another client changes a declared key of another slot meanwhile, its slot's
`EXEC` answers null: every key already written back and every declared key of the first
key's slot is put back as it was (each only if it still holds what the script left, under
`WATCH`), and the script runs again from step 1, 3 times at most, then `ERR slotgate:
'<name>' across slots: its source kept changing meanwhile; nothing was changed`. Writes to
keys the script did not declare are not put back. When another client changed a declared
key of the first key's slot too, after the script, that key cannot be put back: the client
gets `ERR slotgate: move across slots half done: …`, and what could not be put back holds
what the script and that client left (the tests cover the first case: a deterministic one
in `tests/proxy/test_crossslot_faults.py`, and concurrent script moves against a writer of
the other slots' keys in `tests/proxy/test_crossslot_scripts.py`).

**A node failing half-way** is handled as for MSETNX (markers, taking back): a
gather that fails changes nothing; the first key's master failing after step 2 was sent is
resolved by step 2's marker — not run: "not done", nothing changed; run: the script runs a
second time on copies of what step 2 started from (in one transaction that deletes them) to
learn what it left in its declared keys, and those of the first key's slot are put back
(the client gets "not done"); a master of another slot failing during its commit is resolved by that commit's
marker; neither known before the retry deadline: the unknown-fate error. A script whose
result depends on more than its declared keys (time, randomness, undeclared keys) may give
a different result in that second run, and its writes to undeclared keys happen twice. The errors are
MSETNX's (`… across slots not done: …`, `… half done …`): in them, the
*destination* is the first key's slot and a *source* a declared key of another slot.

**MIGRATE … KEYS** (`proxy/routing/migrateroute.py`). A cluster node refuses keys of
several slots in one `MIGRATE`, even when it serves them all. The proxy sends one `MIGRATE`
per slot with that slot's keys (key order kept) and every other argument as the client gave
it (`COPY`, `REPLACE`, `AUTH`, `AUTH2`, the target, its database, the timeout), slots of one
master one after another, masters in parallel, and answers as one server: the first error
of the parts (in the order of their slots' first keys: `-BUSYKEY`, `-IOERR`, the target's
refusal), else `+OK` if any key
moved, else `+NOKEY`. Not atomic across slots (nor is `MIGRATE` on one server: keys are
deleted at the source after the target acknowledged them): when one part fails, the keys of
the parts that succeeded are moved, as with a failed batch on one server; a source master
failing during its part gets the usual error and leaves its keys at the source or at the
target, as `MIGRATE` does. The differential test compares replies and the target's keys.

### Why scripts and MSETNX are not written source first

A move can be written source first because the proxy knows, before it runs, which key
loses the element and which gains it, and because the real command run beside the source
over a copy of the destination changes the source exactly as the move will (step 2), while
the same command beside the destination over a copy of the source changes the destination
exactly as the move will (step 3): two runs, each writing one side, that agree. A script
has neither property. Any declared key may be read, written or both, in an order and with
values that the script decides as it runs and that depend on what it read of the other
keys; it may take from one key and add to another (a move), or add to both, or neither.
Run once per slot, the runs would not agree in general (a script that reads `TIME`,
`RANDOMKEY`, an undeclared key, or a counter it increments), so the proxy runs it once,
over copies, and writes its results back slot by slot; no order of those write-backs is
"the source first" for every script, since the proxy cannot tell which key a script took
from (it would have to compare values it does not parse: `DUMP` payloads). `MSETNX` has no
source at all: every key gains a value, and the all-or-nothing condition is on all of them.

What the proxy guarantees instead (above, and [MSETNX across slots](#msetnx-across-slots)):
every declared key of another slot is under `WATCH` from its gather to its write-back, so a
write-back never overwrites another client's write (its `EXEC` fails, what was written is
taken back, the command runs again); a key is taken back only if it still holds what the
proxy wrote there (compare and write, under `WATCH`); every step's fate is known from its
marker; the client is told `… half done …` with the key's name when something could not be
taken back, which needs another client to have written that very key in the instant
between the script and the take-back. What it does not guarantee: a script moving an
element between two slots while other clients write both keys can leave it in both (`…
half done …`); and a proxy that dies between a script's step 2 and its last write-back
leaves its writes in some slots and not in others, with no journal entry: nothing settles
them (a script's writes are known only after it ran, and a write-back cannot be checked
against what other clients did since without the step 1 `WATCH` that died with the proxy).

`MSETNX` has a journal entry ([above](#msetnx-across-slots)): a proxy that dies half-way
leaves it all set (rolled forward) or, when another client created one of its keys
meanwhile, none set (rolled back), except for a key that client also overwrote, which keeps
that client's value. What remains: clients reading the keys of an `MSETNX` in flight see
them appear slot by slot, as before; an `MSETNX` whose keys other clients create while it
runs answers `0` or is taken back, never left half done, unless one of the keys it already
wrote was overwritten meanwhile (`… half done …`, naming it). Holding every key under a
lock across proxy processes first (`movelock.py`'s keys, as moves do with `workers: N`)
would make the roll forward certain for the proxy's own clients; direct clients of the
nodes would still not be held back.

"""


CROSS_SLOT = """\
## Multi-key commands across slots

The commands routed `gather` take keys that Redis Cluster requires in one slot. Through the
proxy their keys may be anywhere: when they span slots the proxy copies the keys that live
elsewhere next to one key of the command (the *anchor*: the destination of a command that
writes one, else the first key), lets that key's master run the real command on the copies,
and returns its reply. Replies and errors (`WRONGTYPE`, syntax and range errors, missing or
empty keys) are therefore the node's own, byte for byte; `tests/proxy/test_crossslot.py`
compares them with one standalone redis-server, RESP2 and RESP3, behind a real cluster and
behind our nodes. Code: `proxy/routing/crossslot.py` (the plan) and `gather.py` (the I/O).

1. **Gather.** Each slot's foreign keys are read on their master in one transaction,
   `MULTI PTTL k DUMP k … EXEC` (value and TTL from one instant), through the usual
   redirect/retry path. A move's source is read instead under `WATCH`, on a connection
   opened for the command.
2. **Run.** On the anchor's master, one transaction: `MULTI`, `RESTORE` of every gathered
   value (with its TTL) under a temporary key, the client's command with its foreign keys
   replaced by the temporaries, `DEL` of the temporaries, `EXEC`.
3. **Commit** (moves only): see below.

**Temporaries** are named `{T}slotgate-tmp:<process token>:<n>`, `T` being a short hash tag
of the anchor's slot, so the node runs them with the anchor in one command. They are created
and deleted by the same `MULTI … EXEC`: no other client can ever read one (a transaction is
not interleaved), and no failure can leave one behind — a transaction the node did not
receive whole is never run (the node drops an unfinished `MULTI` when the connection
closes, which is what a proxy crash does), and replicas and the AOF get it whole. So no
`PEXPIRE` safety net is needed; they carry the source's own TTL, which `COPY` and `RENAME`
then keep as one server does. The test checks `KEYS *slotgate-tmp*` is empty after every
script. The prefix is reserved: a client key of that exact name in the anchor's slot would
be overwritten and deleted by the command.

**Atomicity.** The anchor's side is one transaction: the destination goes from its old value
to the command's result with nothing in between, and the sources in the anchor's slot are
read at that same instant. The sources in other slots are each read at the instant of their
slot's gather transaction, a little earlier: a write to such a source between its gather
and the run is not seen by the command (as if that write came just after it). Read-only
commands (`SINTER`, `ZUNION`, `PFCOUNT`, `LCS` …) change nothing; nothing of the proxy's
work is observable to other clients for any of these commands.

**A node failing half-way.** A source's master failing during the gather: the reads are
retried (after the failover, on the new master) until the retry deadline, then the client
gets the proxy's error and nothing was written. The anchor's master failing during the run:
before the transaction was sent it is retried the same way; after it was sent the client
gets `ERR slotgate: connection to <node> lost; write may or may not have been applied`, and
the destination holds either its old value or the whole result (a replica promoted after a
failover has either all of the transaction or none of it).

**Cost.** One round trip per foreign slot (the slots of one master one after another, the
masters in parallel), then one on the anchor, and the values travel through the proxy
twice (DUMP out, RESTORE in), held in its memory while the command runs: measured in
bench/RESULTS.md. The client's later requests wait meanwhile, as behind a transaction.

**What differs from one server.** What the nodes themselves report shows the work:
`MONITOR` and the slow log of the anchor's master show the `MULTI`, `RESTORE`, the command
on temporaries and `DEL`; keyspace notifications there name the temporaries (`restore`,
`del`; a move runs its command on each side, so its source and its destination get the
events one server gives them — `rename_from`, `lpop`, `srem` at the source, `rename_to`,
`rpush`, `sadd` at the destination — besides those of the temporaries); `OBJECT IDLETIME`/`FREQ` of a key renamed or copied across slots start afresh
(a `RESTORE` without `IDLETIME`/`FREQ`), and its encoding is the one `RESTORE` gives.

Handled elsewhere: `LMPOP`, `ZMPOP`, `BLMOVE`, `BRPOPLPUSH` and the other blocking pops
([Blocking pops across slots](#blocking-pops-across-slots)), `XREAD`/`XREADGROUP` over
streams of several slots, `SORT … BY/GET` patterns (next section), `COPY … DB` with
`databases` above 1 ([Numbered databases](#numbered-databases); with `databases: 1` a
node's own refusal), scripts and functions whose `KEYS` span slots and `MIGRATE … KEYS`
([Scripts, functions and MIGRATE across slots]
(#scripts-functions-and-migrate-across-slots)).

## SORT with BY and GET patterns

A cluster node refuses `SORT`/`SORT_RO` with `BY` naming a pattern with `*` or with any
`GET` (`-ERR BY option of SORT denied in Cluster mode.`): the keys the patterns name lie in
any slot. The proxy runs such a `SORT` itself (`proxy/routing/sortroute.py`, the pure part
in `protocol/sort.py`, shared with the node), after the client's earlier replies:
`MULTI; TYPE k; SORT k BY nosort; EXEC` on the key's master gives the collection in its own
order (`WRONGTYPE` is the node's); each element's `BY` key (`pre*post`, or a hash field
`pre*post->field`) is read where it lives: per slot one `MGET` and an `HGET` per field, one
master's slots pipelined in one round trip, the masters in parallel; the elements are sorted with Redis' rules (numeric by strtod, `ALPHA`
in byte order, `DESC`, `LIMIT`, `BY` without `*` keeping the collection's order, missing
values as 0 or first, a set stored unsorted sorted `ALPHA`); then the `GET` values of the
chosen elements are read the same way. `STORE dest` writes the result on dest's master in
one `MULTI; DEL dest; RPUSH dest …; EXEC` (nil `GET` values as empty strings; an empty
result deletes dest) and replies the count. With `databases: N`, the patterns' keys are the
client's database's. `SORT` without patterns is forwarded as before.

**What differs from one server.** Not atomic across shards: each slot is read at its own
instant, so a client writing the collection or the pattern keys meanwhile may see a result
that mixes values from before and after its writes (and a `STORE` may overwrite dest after
another client's later write). `ALPHA` with `BY` orders equal values (missing ones included)
in the collection's order, where Redis' `qsort`/`pqsort` may order them otherwise. The
collection and every looked-up value are held in the proxy's memory while it sorts. As in
Redis, a user whose ACL does not let it read every key gets `-ERR BY option of SORT denied
due to insufficient ACL permissions.` (`GET` likewise).

## Moves across slots

`RENAME`, `RENAMENX`, `LMOVE`, `RPOPLPUSH` and `SMOVE` change their source too (their
blocking forms: [below](#blmove-and-brpoplpush-across-slots); `MSETNX`:
[below](#msetnx-across-slots)). The source is written first, then the destination, so the
moved element is never in both keys: no other client can take it from each
(`proxy/routing/sourcefirst.py`). Order of steps:

1. **Gather** the source under `WATCH` on a connection of its own (`WATCH src marker`,
   `PTTL`, `DUMP`), and the destination (`MULTI PTTL dst DUMP dst EXEC`), on their masters
   at once.
2. **Source.** On the watching connection, one transaction: `SET` of the source's marker,
   `RESTORE` of the destination's copy under a temporary beside the source, the client's
   command over the real source and that copy, the move's *journal entry* and its lease
   ([below](#a-proxy-that-dies-mid-move-the-journal)), `DEL` of the copy, `EXEC`. The command's
   reply tells what the move does: a null (empty source), `:0` (`RENAMENX` onto an existing
   key, `SMOVE` of a missing member) or an error (`WRONGTYPE` of either key, `ERR no such
   key`) changed nothing and is the client's reply; otherwise the element (the member, the
   value) has left the source.
3. **Destination.** On the destination's master, one transaction under `WATCH` of a marker
   of its own (named in the journal entry; the same for every try of the step): `RESTORE` of
   the source as step 1 read it under a temporary, the command over that copy and the real
   destination, `RENAME` of what the command left of the copy to `<marker>:left` (so that
   it can be told afterwards whether the command moved the element), `SET` of the marker.
   Its reply is
   step 2's (the same element): the destination has it, the move is done. Another reply
   (the destination changed type meanwhile, a `RENAMENX` target created meanwhile): the
   destination was not changed; the element is put back into the source (below) and the
   client gets that reply, as if the move had run at that instant.

Once a step's reply is in, its marker is deleted, after a `WAIT 1 500` when that master has
a replica, so that a failover right after the step keeps it. If that master goes silent
instead, the marker, asked of the promoted replica, tells whether the step survived. Step
3's marker (and its `:left`) is deleted only after the journal entry, once the move is
settled.

**Markers.** Steps 2 and 3 each set a *marker* in their transaction: a key
`{T}slotgate-mark:<process token>:<n>` of the slot they write, set to `1` with a 10-minute
expiry, under that transaction's `WATCH`. A step whose reply is lost (its connection
closed, its master failed, no reply within `command_timeout_ms`) has a fate the proxy can
always learn: it sends `SET marker 0 NX GET PX …` to that slot's master of now (after a
failover, the promoted replica, which has the marker exactly when it has the step: one
transaction) until the retry deadline. `1`: the step ran. Null (or the `0` of this check,
sent again): it did not, and never will, since the check wrote a key the step's `WATCH`
covers. Either answer is final, whatever other clients did to the keys meanwhile. The
marker is then deleted. It exists only while its step's fate is being learned (a `KEYS` at
that instant may list it; a proxy that dies leaves it to expire); the prefix is reserved as
`slotgate-tmp:` is.

**When a step does not go as planned** (every case leaves each element in exactly one
place, whatever other clients do to either key meanwhile):

- Step 1 fails: nothing was written; the client gets the error.
- Step 2's `EXEC` answers null (another client wrote the source since step 1): nothing was
  written; the command runs again from step 1, 3 times at most, then `ERR slotgate:
  '<name>' across slots: its source kept changing meanwhile; nothing was changed`. Refused
  (`EXECABORT`, say of a `CLUSTERDOWN` during a failover; a redirect is answered
  `TRYAGAIN`): nothing was written; the client gets the refusal.
- Step 2's reply lost (the source's master died, say): its marker tells. Not run: nothing
  was written, the command runs again from step 1 (on the promoted replica after a
  failover). Run: the same command runs again on copies of what step 2 started from (made
  and deleted in one transaction, it changes nothing), which gives step 2's reply; the move
  goes on with step 3.
- Step 3 not run (its reply lost and its marker absent, or refused, or its master
  unreachable): it is sent again (its marker deleted after each try found not run) until
  it runs or the retry deadline passes; the element is in neither key meanwhile. Step 3's
  reply lost and its marker there: what it left of its copy of the source (`:left`) tells
  whether it moved the element: yes, the move is done, the client gets step 2's reply; no
  (the destination changed meanwhile), the element is put back (below) and the client gets
  the "not done" error.
- Step 3 never ran before the deadline, or ran and changed nothing: the element is *put
  back* into the source, whatever happened to it since — pushed back at the end it left
  (`LPUSH`/`RPUSH`), the member added back (`SADD`), the value restored if the name is
  free (`RESTORE` without `REPLACE`) — in a transaction with a marker of its own, until
  the retry deadline. Then the client gets `ERR slotgate: '<name>' across slots not done:
  the master of its destination (<node>) failed during the move; nothing was changed` (or
  the destination's own reply, above). Only if the source refuses the element (another
  client made it a key of another type, or created the renamed name again, meanwhile) or
  its master stays unreachable is the client told `ERR slotgate: move across slots half
  done: the element left '<src>' but could be neither written to '<dst>' nor put back`:
  the element is then lost, and the client knows it; unless the put back was never
  answered: the journal entry then stays, and a sweep settles it (below).
- When neither master answers a fate check before the deadline: `ERR slotgate: connection
  to <node> lost; write may or may not have been applied`.

**What others observe.** Between steps 2 and 3 the element is in neither key: a client
reading both may miss it for that moment (one round trip, more during a failover of the
destination's master), never see it twice. A `WATCH` of the source or the destination by
another client is touched by the step that writes it. An element put back lands at the end
it left, after anything other clients pushed there meanwhile; a list emptied by the move
and put back has no TTL. A move whose proxy died between steps 2 and 3 shows the element in
neither key until a sweep settles it (below). Scripts and `MSETNX` keep the other order (the
first key's slot, then the others), for reasons given [below](#why-scripts-and-msetnx-are-not-written-source-first).

### A proxy that dies mid-move: the journal

Step 2's transaction also writes, in the source's slot (`proxy/routing/journal.py`):

- `{T}slotgate-journal:<process token>:<n>`, a hash: the client's command (`argc`, `a0` …),
  the source and the destination as step 1 read them (`DUMP` payloads and `PTTL`s), step
  3's marker and step 2's;
- `{T}slotgate-jlease:<process token>:<n>`, its lease: the owner's token, expiring after the
  retry deadline plus two command timeouts (20 s by default), renewed before each new try
  of step 3 and before a put back;
- `{T}slotgate-jindex`, the slot's index: a set of the names of its entries (the entry's
  name added to it; every transaction that deletes an entry removes it from it too).

Being in step 2's transaction, the entry exists exactly when step 2 ran, and a replica that
has step 2 has it. The owner deletes it when the move is settled: after step 3 and its
`WAIT` (then step 3's marker and `:left` go), or in the same transaction as a put back, or
at once when step 2 moved nothing. The prefixes are reserved as `slotgate-mark:` is; a
`KEYS` or `SCAN` may list an entry, or an index, while its move runs. Its cost: step 2 carries one more
copy of both keys (for a big list, its whole `DUMP`), and the move one round trip more at
its end (+17 % proxy CPU for a `RENAME` of a 100-byte string: bench/RESULTS.md).

**Who settles what a dead proxy left.** Every proxy (its first worker, with `workers: N`)
sweeps the masters at start and every 60 s: one pipelined round trip per master, `SMEMBERS`
of the index of each slot it owns (its cost grows with the slots, not with the keys: about
6 ms of a master's CPU for 5,461 slots, against 0.8 s for a `SCAN` of 1,000,000 keys,
bench/RESULTS.md), settles the entries listed, and removes an index member whose entry is
gone. It looks again at each entry whose lease was live when that lease ends. An entry
is settled only by the one that takes its ended lease (`SET lease <token> NX PX …`, in a
script that takes it only while the entry exists): two
proxies, or a proxy and a live owner, never settle one entry at once; an owner stalled for
longer than its lease may find its move settled by another proxy. Settling:

1. The command runs again on copies of the source and the destination as step 1 read them
   (made and deleted in one transaction): its reply is step 2's. Nothing moved (a `RENAMENX`
   onto an existing key, `WRONGTYPE`, an empty source): the entry is deleted.
2. The fate check of step 3's marker (`SET marker 0 NX GET`, as above). Not run: step 3 is
   run now, the same transaction the owner would have sent: the move is *finished*, the
   element lands in the destination. The client never got a reply; a move that ran is one
   outcome one server could have given it, and it is the command the client asked for.
   Run: `:left` tells whether it moved the element.
3. The destination refused the element (it became another type, a `RENAMENX` target was
   created meanwhile; now, or when step 3 ran): the element is put back into the source as
   above, in one transaction with the entry's deletion. Else the entry is deleted, then
   the marker and `:left`.

Each of these can run again after a reply lost or a sweeper that died: the entry stays until
one settling ends, and what was done is read from the keys and markers, never guessed. A key
named as an entry that no proxy wrote (unreadable) is logged and left alone.

| the proxy dies … | what it leaves | settled by |
|---|---|---|
| during step 1 | nothing written (its `WATCH`es end with its connections) | nothing to do |
| with step 2 sent, not run | nothing | nothing to do |
| after step 2 (element moved) | the element in neither key; the entry; step 2's marker | a sweep after the lease: step 3 run (or the element put back); the entry and markers deleted |
| after step 2 that moved nothing | the entry | a sweep: step 2's reply recomputed, the entry deleted |
| after step 3 ran | the element in the destination; the entry; step 3's marker and `:left` | a sweep: marker `1`, `:left` says moved: the entry and markers deleted |
| after step 3 ran and was refused | the element in neither key; the entry, marker, `:left` | a sweep: `:left` says not moved: the element put back |
| during a put back | the element put back with the entry's deletion, or neither | nothing to do, or a sweep as above |
| after the entry's deletion | step 3's marker and `:left` | they expire (10 minutes) |

A failover between the steps keeps the entry with step 2 (one transaction, `WAIT`ed for
before step 3); a master that fails with an entry not yet on any replica loses step 2 with
it (nothing moved). With `databases: N` the entry holds the stored (prefixed) key names.

What is proven by tests: every move's replies and results against one server, including the
emptied source (`RPOPLPUSH` of the last element, `SMOVE` of the last member), TTLs
(`RENAME` keeps it) and `MSETNX`'s cases (`tests/proxy/test_crossslot.py`); 600 concurrent
random moves through the proxy, each element found once at the end (same file); with a
real cluster of 3 masters and 3 replicas (`tests/proxy/test_crossslot_faults.py`): an
`LMOVE` whose source another client writes before step 2 (the command runs again, each
element found once); an `LMOVE` whose step 2 meets other clients' writes of both lists (a
push onto each; or a push onto the destination and a pop of the source's first element,
the step's connection then cut before it runs) — the interleaving that left a duplicate
when the destination was written first: each element found once, in the lists or in the
other client's hands; an `LMOVE` whose source's master is killed as step 2 is sent (after
the failover the move runs again on the promoted replica: the element moved, once); an
`LMOVE` whose step 2 connection the node closes (`QUIT`) after it ran while another client
then writes the source (the marker says it ran: the client gets the element), or before it
while another client writes the destination (it did not: the move runs again); an `LMOVE`
whose destination's master is killed before step 3 (after the failover step 3 runs on the
promoted replica: the element is in the destination, once), whose step 3 loses its reply
because that master is killed after running it or before it arrives (the marker tells; run
again if needed), or whose step 3 ran but lost its reply while another client wrote the
destination (the marker says it ran); each element once; and a soak: eight clients make
random `LMOVE`, `RPOPLPUSH`, `BLMOVE`, `BRPOPLPUSH` and `BLPOP` over three lists (the
client pushing the element to another list) between lists on every master, while the first
move with a list on a replicated master after a third of them has that master killed as it
writes its source (its writes paused with `CLIENT PAUSE WRITE` and `WAIT`ed for first, so
that the failover loses no write it acknowledged: Redis' asynchronous replication would
otherwise bring back, say, the element of a `BLPOP` it answered just before dying, which no
proxy can prevent); after the failover every element is counted, and the test requires none
lost and none duplicated (400 operations between 40 lists in CI; 10,000 between 200 lists
with `--run-slow`: 1,000 elements, none lost, none
duplicated; 3 error replies during the failover, all "no connection" refusals before any
write; 27 s, compiled build, load average 13). The journal (`tests/proxy/test_move_journal.py`):
an `LMOVE`, an `RPOPLPUSH`, an `SMOVE`, a `RENAME` and a `BLMOVE`, each sent to a real proxy process
that kills itself with SIGKILL right after the source's write (a fault-injection point
enabled by `SLOTGATE_FAULT=kill-after-move-source` in its environment at start: the only
way to stop a process exactly between two writes without a race); the element is then in
neither key; a proxy started next settles all five: each element in its destination, once,
no entry left. And the states a dead proxy leaves, built on a real cluster and settled:
step 3 already run (nothing moves again), step 2 that moved nothing (`RENAMENX` onto a key
deleted since: nothing renamed), a destination that became a string before step 3 ran or
when it ran (the element put back), an entry whose lease another proxy holds (left alone
until it ends), two sweepers meeting one entry at once (settled once); and a step 3 that
ran while its destination had just become a string and whose reply was lost (the owner
reads `:left`: the element put back, the client told "not done"). A proxy whose sweep
period is shortened (`SLOTGATE_JOURNAL_SWEEP_S`, seconds, read from its environment at
start; 60 by default) settles an entry listed in its slot's index after its start-up sweep,
removes an index member whose entry is gone, and the masters count no `SCAN` meanwhile
(`INFO commandstats`). Not proven: a replica lagging when a master dies right after
a step (the `WAIT` is bounded by 500 ms, then the move goes on as any acknowledged write).
"""

PUBSUB = """\
## Pub/sub across the cluster

A subscriber's subscriptions live on links of its own, one per node that must hold some of
them (`proxy/front/pubsub.py`, `pubsub_link.py`):

| subscription | held by | why |
|---|---|---|
| `SUBSCRIBE` channel, `PSUBSCRIBE` pattern | the pub/sub home (master of slot 0) | `PUBLISH` goes there, so its count is one server's; a `PUBLISH` reaches every node over the cluster bus |
| keyspace channel (`__keyspace@…`, `__keyevent@…`), pattern that may match one | the home and every other master | each node notifies only its own keys' events; from the other masters only those notifications are passed on |
| `SSUBSCRIBE` shard channel | the master of the channel's slot | one client may hold shard channels on every master |

The confirmations are the proxy's, counted as one server counts the client's subscriptions,
and sent once every node that must hold the subscription has confirmed it (or, for the
unsubscribe family, its end). Messages arriving while a subscribe is being placed wait until
its confirmations are out.

Shard channels follow their slot: when a reshard (`SETSLOT … NODE`, `slotgate cluster
reshard`) or a failover takes the slot from a node, that node pushes `sunsubscribe`; the
proxy keeps the push from the client, finds the slot's new master (`MOVED` patches the slot
map, a refresh follows) and subscribes the channel there. The client hears `sunsubscribe`
only if the channel cannot be placed again within the retry deadline (`retry.deadline`), as
from a server whose slot went away. A lost link (its node died) is replaced the same way once
a replica has taken over; when the pub/sub home cannot be reached within the deadline the
client's connection is closed, as a server going away would close it. The placement is
checked again after every topology refresh, so a new master gets the keyspace subscriptions.
Messages published while a subscription is being moved are lost (as for a cluster client
that resubscribes); `tests/proxy/test_pubsub_follow.py` counts every message published
after each move of a three-master subscriber, real Redis and bundled nodes.

Keyspace notifications: `CONFIG SET notify-keyspace-events …` through the proxy reaches
every node (replicas too, so a promoted replica keeps notifying). `PSUBSCRIBE
__keyspace@0__:*` then gets the events of every master; `tests/proxy/test_keyspace_events.py`
compares them with one redis-server's for the same script (as multisets, and per key in
order: the order between masters is not one server's). Differences: a client's own
`PUBLISH` to a keyspace channel reaches a subscriber once per master; events of the
temporaries that multi-key commands across slots use are seen (see above); `SSUBSCRIBE` and
`SUNSUBSCRIBE` naming channels of several slots get `-CROSSSLOT`, as from a cluster node.

"""

TRACKING = """\
## Client-side caching

`CLIENT TRACKING` (default mode, `BCAST` with `PREFIX`, `OPTIN`/`OPTOUT` with `CLIENT
CACHING`, `NOLOOP`, `REDIRECT` to another client of the proxy), `CLIENT CACHING`, `CLIENT
TRACKINGINFO` and `CLIENT GETREDIR` are answered by the proxy as one server
(`proxy/front/tracking.py`; arguments, checks and replies shared with the node in
`protocol/tracking.py`). A client's reads travel on node connections shared by many clients,
so no node can tell whose read it served; the proxy sees every request and keeps the tracking
table itself: the keys of a tracking client's read-only commands (subject to OPTIN/OPTOUT and
CLIENT CACHING), forgotten once invalidated. The changes come from the nodes: while any
client tracks, the proxy holds one connection per master in RESP3 `CLIENT TRACKING ON BCAST`
(no prefix), which that master answers with an `invalidate` push for every key it changes
(any client's writes, other proxies', expiry, eviction; `FLUSHALL` as a null key list). The
proxy sends each invalidation to the clients that read the key (one message per key, as
Redis' default mode) and to the `BCAST` clients whose prefixes match (the keys of one push
together): a RESP3 push, or for a client that redirects, the `__redis__:invalidate` message
to the redirect target if it is subscribed (RESP2), or a push if it speaks RESP3;
`tracking-redir-broken` when the target is gone. `tests/proxy/test_transparency_tracking.py`
compares the invalidations and replies with one redis-server's, real Redis and bundled nodes
behind the proxy.

Differences: while a client tracks, its requests leave the proxy's fast routes (its keys
must be seen: slower requests, for that client only); keys are remembered when the request
is dispatched (a read racing a write may bring one invalidation too many, never one too
few); inside MULTI the queued reads are remembered once EXEC's reply shows they ran (as
Redis remembers them when EXEC runs them); with NOLOOP, a write of the client
through the proxy ends its tracking of the key at once and the change's invalidation is not
sent to it; a feed that is lost, or a new master,
sends every tracking client an invalidation of everything (a null key list), since changes
may have been missed meanwhile; the proxy's table is bound by `tracking-table-max-keys`
(config `tracking.table_max_keys`, CONFIG SET/GET through the proxy): over it, keys are
dropped and their readers sent an invalidation, with Redis' effort per check (100 keys, then
200 ...), when a tracking client sends its next request (Redis checks before any client's
command), the oldest keys first (Redis picks them at random); INFO's `tracking_clients` and
`tracking_total_keys`/`items`/`prefixes` are the proxy's table's; every master pushes every change to the proxy while any client tracks (network cost on the
nodes, none when nobody tracks). With `workers: N`, REDIRECT may name a client of another
worker: `CLIENT TRACKING` answers once a worker said it has that client (Redis' error if none
has), and the invalidations travel to it through the supervisor (a request pipelined right
after such a `CLIENT TRACKING ON` may be served before tracking is on, so its keys are not
remembered; `tracking-redir-broken` comes once no worker has the target any more).

"""



def _slow_commands() -> str:
    names = ", ".join(f"`{n.upper()}`" for n in sorted(MAY_RUN_LONG))
    return f"""\
## Slow commands

A node connection is declared dead when its oldest request has had no reply for
`backend.command_timeout` (docs/CONFIG.md), except when that request may run long: every
command flagged `blocking` and {names} (all subcommands of a container; the list is
`MAY_RUN_LONG` in `protocol/overrides.py`). A stalled connection whose oldest request is
something else is still not dead while its node answers a `PING` on a connection of its own
(a script running on another connection keeps the node silent until its busy threshold).

A node running a script or function answers `-BUSY` to other connections: the proxy retries
such requests, as it does `TRYAGAIN`, until the request's retry deadline (`retry.deadline`);
the node is not marked down. `SCRIPT KILL` and `FUNCTION KILL` reach every master on a
connection of their own; the client of the killed script gets the node's own error.

"""


def render() -> str:
    rows = _rows()
    out = [HEADER]
    counts = Counter(i.route for i in rows)
    out.append("## Routes\n")
    out.append("| route | commands | handling |")
    out.append("|---|---|---|")
    for route in ROUTE_ORDER:
        out.append(f"| `{route}` | {counts.get(route, 0)} | {ROUTE_TEXT[route]} |")
    out.append(f"\n{len(rows)} commands and subcommands in all.\n")
    out.append(CROSS_SLOT)
    out.append(MSETNX)
    out.append(SCRIPTS_ACROSS)
    out.append(BLOCKING_CROSS)
    out.append(DATABASES)
    out.append(OWN_FACTS)
    out.append(IN_MULTI)
    out.append(PUBSUB)
    out.append(TRACKING)
    out.append(WAIT)
    out.append(FUNCTIONS)
    out.append(SLOWLOG)
    out.append(LATENCY)
    out.append(_slow_commands())
    out.append("## Every command\n")
    out.append("| command | route | merge | handling |")
    out.append("|---|---|---|---|")
    for info in rows:
        merge = f"`{info.merge}`" if info.merge else ""
        out.append(f"| {_name(info)} | `{info.route}` | {merge} | {handling(info)} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/COMMANDS.md differs from what would be generated")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run python tools/gen_command_docs.py")
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
