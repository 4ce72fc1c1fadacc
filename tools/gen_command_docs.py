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

OUTPUT = ROOT / "docs" / "COMMANDS.md"

ROUTE_TEXT: dict[str, str] = {
    "single": "to the master of its keys' slot (keys in several slots: `-CROSSSLOT`)",
    "keyless": "to one master (the same one for a given client)",
    "split": "split by slot: one sub-command per slot, parts to one node pipelined together",
    "all_masters": "sent to every master",
    "all_nodes": "sent to every master and every replica",
    "proxy": "answered by the proxy itself",
    "pubsub": "subscriber mode on a node connection of the client's own",
    "transaction": "transaction handling: the session is pinned to one slot's master",
    "blocking": "waits for the client's earlier requests, then runs alone on a connection of "
                "its own to its keys' master (keys in several slots: `-CROSSSLOT`)",
    "unsupported": "refused: `-ERR slotgate: '<name>' is not supported through the proxy`",
    "cluster": "with `cluster_emulation.enabled`, answered as a cluster of the proxies that own "
               "all 16384 slots (docs/CONFIG.md, Cluster emulation)",
    "guarded": "may change the credentials the proxy logs in with: refused with `-NOPERM "
               "slotgate: '<what>' would change the credentials the proxy uses on the "
               "cluster's nodes; refused (set admin_commands: true …)` unless `admin_commands: "
               "true`, then sent to every master and every replica; every part must succeed",
}

ROUTE_ORDER = ("single", "split", "keyless", "all_masters", "all_nodes", "blocking",
               "transaction", "pubsub", "proxy", "cluster", "guarded", "unsupported")

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

NOTES: dict[str, str] = {
    "msetnx": "Not split across slots: see [MSETNX](#why-msetnx-is-not-split).",
    "mset": "Each slot's part is atomic on its node; the whole is not (see [MSETNX]"
            "(#why-msetnx-is-not-split)).",
    "del": "Parts per slot run independently; the count is their sum.",
    "eval": "Without keys (`EVAL script 0`): to one master.",
    "evalsha": "Without keys: to one master.",
    "eval_ro": "Without keys: to one master.",
    "evalsha_ro": "Without keys: to one master.",
    "fcall": "Without keys: to one master.",
    "fcall_ro": "Without keys: to one master.",
    "spublish": "Routed by the slot of its shard channel.",
    "publish": "Always to the pub/sub home node (master of slot 0), where the proxy's "
               "subscribers are, so the count is that of one server.",
    "pubsub|channels": "To the pub/sub home node (master of slot 0).",
    "pubsub|numsub": "To the pub/sub home node (master of slot 0).",
    "pubsub|numpat": "To the pub/sub home node (master of slot 0).",
    "ssubscribe": "All shard channels of one client must live on one node.",
    "subscribe": "Once answered, every later PUBLISH reaches and counts it; once an "
                 "UNSUBSCRIBE, RESET or QUIT is answered, none does. Differences: a RESP3 "
                 "subscriber's messages come over its link, apart from the replies to its other "
                 "commands, so a message may follow the reply of a command sent after it was "
                 "published; a client whose link was opened by SSUBSCRIBE on another node than "
                 "the pub/sub home subscribes there, where PUBLISH does not count it.",
    "scan": "The cursor packs the master's index and that master's own cursor; a key present "
            "for the whole scan is returned at least once.",
    "wait": "Measures nothing useful: the masters' connections are shared by all clients.",
    "select": "Only database 0, as a cluster node.",
    "readonly": "Accepted; reads still go to masters.",
    "client|list": "Every client of the proxy (of its worker), in Redis' line format.",
    "client|kill": "Every filter of 7.0 (ID, TYPE, USER, ADDR, LADDR, SKIPME, the old addr "
                   "form) over the proxy's clients.",
    "client|unblock": "Wakes a client blocked through the proxy: the node where its command "
                      "waits ends it with its own TIMEOUT or ERROR reply.",
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
                  "proxy's own backend password before the reply.",
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
    else:
        text = ROUTE_TEXT[route]
    text = text[0].upper() + text[1:] + "."
    note = NOTES.get(info.name)
    if note:
        text = f"{text} {note}"
    return text.replace("|", "\\|")


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
by the proxy and never reach the client, `TRYAGAIN`/`CLUSTERDOWN`/`LOADING` are retried until
the request's deadline (docs/PROXY.md). Inside `MULTI`: see
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

OWN_FACTS = """\
## The proxy's own server facts

What a server says about itself is, through the proxy, the proxy's own: `CLIENT ID`, `LIST`,
`INFO`, `KILL`, `UNBLOCK`, `SETNAME`/`GETNAME`, `REPLY`, `NO-EVICT` act on the proxy's client
connections, with redis-server 7.0.15's line format, argument rules and errors (7.0 has no
`MAXAGE` filter: a syntax error, as there). INFO keeps 7.0.15's sections, fields and order:

| section | through the proxy |
|---|---|
| Server | the first master's, with the proxy's `process_id`, `run_id`, `tcp_port`, `server_time_usec`, `uptime_in_seconds`/`_days`, `executable`, `config_file` (empty) and `redis_mode:standalone` |
| Clients | the proxy's: `connected_clients`, `maxclients` (`max_clients`), `blocked_clients` (clients waiting in a blocking command through the proxy); the buffer and tracking fields are 0 |
| Memory | integer fields summed over the masters, `*_human` recomputed from the sum; ratios, percentages and names are the first master's |
| Persistence | a status is `ok` only if every master's is; `loading`, `*_in_progress`, `*_scheduled`, `aof_enabled`, `*_time_sec`: the largest; `rdb_last_save_time`: the oldest; other integers summed |
| Stats | the proxy's: `total_connections_received`, `total_commands_processed` (rejected requests not counted, as in Redis), `instantaneous_ops_per_sec` (between two INFO calls at least 100 ms apart), `rejected_connections`, `total_error_replies`; every other integer summed over the masters (`keyspace_hits`/`misses`, expired and evicted keys, pub/sub channels, net bytes ...) |
| Replication, Modules | the first master's |
| CPU | the proxy process' own (getrusage) |
| Commandstats | counted by the proxy: `calls`, `rejected_calls` (unknown, wrong arity, not allowed here) and `failed_calls` per command; `usec` is 0 |
| Errorstats | the error replies the proxy sent, by their first word |
| Latencystats | empty |
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
- Commandstats have no `usec` (the proxy keeps one latency histogram for all commands, on
  /metrics); a command refused by the proxy's own routing (CROSSSLOT, a refused row) counts
  as a failed call, where a server would have run it.
- With workers (`workers: N`), every value of the proxy's own is that of the worker the
  connection landed on, and CLIENT LIST/KILL/UNBLOCK reach that worker's clients only
  (docs/PROXY.md "Workers"); combined values are on /metrics.
"""

IN_MULTI = """\
## Inside MULTI

Like redis-server 7.0.15: an unknown command or a wrong argument count is refused at once and
`EXEC` then answers `-EXECABORT Transaction discarded because of previous errors.`; so are
`SAVE`, `SHUTDOWN`, `SYNC` and `PSYNC`, with Redis' own `-ERR Command not allowed inside a
transaction`. Redis queues every other command; the proxy refuses some of them at queue time
(the transaction then ends in `EXECABORT`, as for Redis' own refusals):

| commands | proxy's error | why |
|---|---|---|
| `all_masters` and `all_nodes` rows (DBSIZE, KEYS, FLUSHALL, CONFIG SET ...) | `-ERR slotgate: '<name>' cannot run inside MULTI through the proxy` | a transaction runs on one master: on one node they would be silently partial |
| `unsupported` rows (BGSAVE, DEBUG, MONITOR, CLUSTER ..., CLIENT PAUSE ...) | `-ERR slotgate: '<name>' is not supported through the proxy` | the same reason as outside MULTI (the row's) |
| `pubsub` rows (SUBSCRIBE ...) | `-ERR slotgate: '<name>' is not supported through the proxy` | subscriber mode lives on a link of its own, not on the transaction's connection |
| CLIENT ID, INFO, LIST, KILL, UNBLOCK, NO-EVICT, REPLY, SETNAME, GETNAME; HELLO | `-ERR slotgate: '<name>' cannot run inside MULTI through the proxy` | they answer or change the proxy's own client state, which the node running the transaction cannot see (HELLO there would change the protocol of the transaction's own connection) |
| a command whose own keys span slots | `-CROSSSLOT Keys in request don't hash to the same slot` | a transaction runs on one master |
| commands whose keys are in different slots | the same `-CROSSSLOT`, as `EXEC`'s reply (nothing ran) | a transaction runs on one master |
"""

MSETNX = """\
## Why MSETNX is not split

`MSETNX k1 v1 k2 v2 …` sets all the keys only if none of them exists, atomically: either
every key is set, or none is. Split by slot, each part would run on its own node with no
coordination between them. One part could find its keys free and set them while another
finds a key already present and sets nothing; the client would get a "not set" answer
although some keys were written, and nothing can undo them: a node cannot take back a
write that other clients may already have read, and a part that was written cannot be
rolled back if a later part fails or its node is unreachable. Checking every part first
(EXISTS) and writing afterwards leaves a gap in which another client can create one of the
keys. Redis Cluster itself offers no multi-node transaction to close that gap.

So MSETNX is routed `single`: keys in one slot (use a hash tag, `{user1}:a {user1}:b`) run
atomically on their master; keys in several slots get Redis Cluster's own
`-CROSSSLOT Keys in request don't hash to the same slot`, as a cluster node would answer.
MSET and DEL, by contrast, have no all-or-nothing condition: their per-slot parts compose
into the same result as one server would give (MSET is then not atomic as a whole, which a
client can only observe by reading concurrently).
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
    out.append(MSETNX)
    out.append(OWN_FACTS)
    out.append(IN_MULTI)
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
