"""The operator checklist ``slotgate cluster check`` prints as findings (warnings with a fix
hint): facts gathered from every node (``gather``), judged by a pure function (``judge``).

Findings never change check's exit code: that stays 1 for the errors (open slots, uncovered
slots, nodes that disagree or are unreachable) and 0 otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import hiredis

from slotgate.proxy.ops.admin import Address, AdminError, Credentials, NodeClient, cluster_nodes

NODE_TIMEOUT_MIN_MS = 1000     # below: a busy network or a long fork flags healthy nodes
NODE_TIMEOUT_MAX_MS = 60000    # above: a dead master's slots stay unserved for minutes
BIGKEY_SAMPLE = 1000           # keys sampled per master (SCAN), as a bounded --bigkeys
BIGKEY_BYTES = 10 * 1024 * 1024
BIGKEY_ITEMS = 100_000
HOTKEY_FREQ = 64               # OBJECT FREQ at or above: a hot key (~17,000 recent hits at the
                               # default lfu-log-factor 10; the counter decays each minute)
HOTKEYS_PER_NODE = 16          # as redis-cli --hotkeys keeps its top 16
LFU_POLICIES = ("allkeys-lfu", "volatile-lfu")
PEER_BAD_FLAGS = ("fail", "fail?", "handshake", "noaddr")
LENGTH_BY_TYPE = {"string": "STRLEN", "list": "LLEN", "hash": "HLEN", "set": "SCARD",
                  "zset": "ZCARD", "stream": "XLEN"}


@dataclass
class NodeFacts:
    addr: str
    id: str
    role: str                    # "master" or "replica"
    master_id: str               # "-" for a master
    host: str
    config: dict[str, str] = field(default_factory=dict)
    bad_peers: list[str] = field(default_factory=list)  # "addr (flags)" this node cannot reach
    big_keys: list[str] = field(default_factory=list)   # "key: type, size"
    hot_keys: list[tuple[str, int]] = field(default_factory=list)  # (key, OBJECT FREQ)


def _config(c: NodeClient, name: str) -> str:
    reply = c.call("CONFIG", "GET", name)
    if isinstance(reply, list) and len(reply) == 2:
        return reply[1].decode(errors="replace") if isinstance(reply[1], bytes) else str(reply[1])
    return ""


@dataclass(frozen=True)
class Sampling:
    """What ``check`` samples on each master: SCAN ``keys`` keys, measure each as
    ``redis-cli --bigkeys`` does and, under an LFU policy, read OBJECT FREQ as ``--hotkeys``."""

    keys: int = BIGKEY_SAMPLE
    max_bytes: int = BIGKEY_BYTES
    max_items: int = BIGKEY_ITEMS
    hot_freq: int = HOTKEY_FREQ


def _sample_keys(c: NodeClient, s: Sampling, lfu: bool) -> tuple[list[str], list[tuple[str, int]]]:
    """(big keys, hot keys by falling frequency) among ``s.keys`` keys SCAN returns. The
    frequency is read first: OBJECT FREQ and TYPE do not touch a key, the length commands do."""
    big: list[str] = []
    hot: list[tuple[str, int]] = []
    cursor, seen = b"0", 0
    while seen < s.keys:
        reply = c.check("SCAN", cursor, "COUNT", 100)
        assert isinstance(reply, list)
        cursor, keys = reply[0], reply[1]
        for key in keys[: s.keys - seen]:
            name = key.decode(errors="replace")
            if lfu:
                freq = c.call("OBJECT", "FREQ", key)
                if isinstance(freq, int) and freq >= s.hot_freq:
                    hot.append((name, freq))
            kind = c.text("TYPE", key)
            length_cmd = LENGTH_BY_TYPE.get(kind)
            size = c.call(length_cmd, key) if length_cmd else 0
            if not isinstance(size, int):
                continue
            limit, unit = (s.max_bytes, "bytes") if kind == "string" else (s.max_items, "items")
            if size > limit:
                big.append(f"{name}: {kind}, {size} {unit}")
        seen += len(keys)
        if cursor == b"0":
            break
    hot.sort(key=lambda kv: (-kv[1], kv[0]))
    return big, hot[:HOTKEYS_PER_NODE]


def gather(entry: Address, auth: Credentials, sampling: Sampling = Sampling()) -> list[NodeFacts]:
    """Facts from every node ``entry`` knows that answers (the unreachable are check's errors)."""
    with NodeClient(entry, auth=auth) as c:
        lines = cluster_nodes(c)
    facts: list[NodeFacts] = []
    for ln in lines:
        host, _, port = ln.addr.rpartition(":")
        host = host or entry[0]
        role = "master" if "master" in ln.flags else "replica"
        f = NodeFacts(ln.addr, ln.id, role, ln.master_id, host)
        try:
            with NodeClient((host, int(port)), auth=auth) as n:
                for name in ("cluster-node-timeout", "min-replicas-to-write", "appendonly", "save",
                             "maxmemory-policy"):
                    f.config[name] = _config(n, name)
                f.bad_peers = [f"{p.addr} ({','.join(sorted(p.flags & set(PEER_BAD_FLAGS)))})"
                               for p in cluster_nodes(n) if p.flags & set(PEER_BAD_FLAGS)]
                if role == "master":
                    lfu = f.config["maxmemory-policy"] in LFU_POLICIES
                    f.big_keys, f.hot_keys = _sample_keys(n, sampling, lfu)
        except (AdminError, OSError, hiredis.ProtocolError):
            continue
        facts.append(f)
    return facts


def judge(facts: Sequence[NodeFacts]) -> list[str]:
    """The checklist's findings, each a problem and a fix hint (pure)."""
    out: list[str] = []
    masters = [f for f in facts if f.role == "master"]
    if masters and len(masters) % 2 == 0:
        out.append(f"{len(masters)} masters: an even number; a network split in half leaves "
                   "no majority to fail over. Hint: run an odd number of masters.")
    by_id = {f.id: f for f in facts}
    for r in facts:
        m = by_id.get(r.master_id)
        if r.role == "replica" and m is not None and m.host == r.host:
            out.append(f"replica {r.addr} and its master {m.addr} are on one host ({r.host}): "
                       "one machine failing loses both. Hint: put replicas on other hosts.")
    for f in facts:
        timeout = f.config.get("cluster-node-timeout", "")
        if timeout.isdigit() and not NODE_TIMEOUT_MIN_MS <= int(timeout) <= NODE_TIMEOUT_MAX_MS:
            out.append(f"{f.addr}: cluster-node-timeout {timeout} ms is outside "
                       f"{NODE_TIMEOUT_MIN_MS}..{NODE_TIMEOUT_MAX_MS} ms. Hint: "
                       "CONFIG SET cluster-node-timeout 15000 (the default).")
        if f.role == "master" and f.config.get("min-replicas-to-write") == "0":
            out.append(f"{f.addr}: min-replicas-to-write 0: a master cut off from its replicas "
                       "keeps accepting writes that a failover will lose. "
                       "Hint: CONFIG SET min-replicas-to-write 1.")
        if f.config.get("appendonly") == "no" and f.config.get("save") == "":
            out.append(f"{f.addr}: persistence is off (appendonly no, save \"\"): a restart "
                       "loses everything. Hint: CONFIG SET appendonly yes.")
        for peer in f.bad_peers:
            out.append(f"{f.addr} cannot reach {peer}: check that node's cluster-announce-ip/"
                       "-port/-bus-port and firewalls.")
        for key in f.big_keys:
            out.append(f"{f.addr}: big key {key}. Hint: split it; a big key blocks the node "
                       "while it is deleted or migrated.")
        for key, freq in f.hot_keys:
            out.append(f"{f.addr}: hot key {key} (OBJECT FREQ {freq}). Hint: cache it in the "
                       "application or spread it over several keys; one node serves it alone.")
    no_lfu = [f for f in masters if f.config.get("maxmemory-policy", "") not in LFU_POLICIES]
    if no_lfu:
        policies = sorted({f.config.get("maxmemory-policy", "") or "?" for f in no_lfu})
        out.append(f"hot keys not sampled on {', '.join(f.addr for f in no_lfu)}: "
                   f"maxmemory-policy {'/'.join(policies)} keeps no access frequency (An LFU "
                   "maxmemory policy is not selected, as redis-cli --hotkeys says). Hint: CONFIG "
                   "SET maxmemory-policy allkeys-lfu (or volatile-lfu) to find hot keys; "
                   "frequencies take a while to build up after a switch.")
    return out
