"""The memory accounting of one key and its value (pure): what MEMORY USAGE and MEMORY STATS
report.

Our values are Python objects whose real footprint says little about what Redis would hold, so
the estimate is modelled on Redis 7.0's ``objectComputeSize``: the bytes the same value takes
in Redis' own structures (robj headers, sds strings, listpacks, quicklist nodes, dict tables
and entries, skiplist nodes, stream radix trees), each allocation rounded up to a jemalloc
size class. Big collections are sampled as Redis does: the first ``samples`` elements (or
quicklist nodes, or stream listpacks) are measured and the average is scaled by the count;
``samples == 0`` measures everything. See docs/COMPATIBILITY.md ("MEMORY") for how far the
figures are from redis-server's and from the process RSS.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from slotgate.node.core.keyspace import TYPES
from slotgate.node.types.stream import lp_size

DEFAULT_SAMPLES = 5  # OBJ_COMPUTE_SIZE_DEF_SAMPLES

# Sizes of Redis' structures on a 64-bit build (bytes).
ROBJ = 16  # redisObject
DICT_ENTRY = 24  # dictEntry: key, value, next
DICT = 56  # dict (7.0): type, two tables, two used counts, rehashidx, pauses, size exps
DICT_MIN_SLOTS = 4  # DICT_HT_INITIAL_SIZE
CLUSTER_ENTRY_METADATA = 16  # a key's previous/next links in its slot's key list
QUICKLIST = 40
QUICKLIST_NODE = 40
QUICKLIST_NODE_OVERHEAD = 11  # SIZE_ESTIMATE_OVERHEAD: room kept when filling a node
QUICKLIST_SAFETY_LIMIT = 8192  # SIZE_SAFETY_LIMIT, the byte cap of count-limited nodes
LISTPACK_EMPTY = 7  # header (total bytes, count) and end byte
INTSET_HEADER = 8  # encoding and length
ZSET = 16  # zset: dict and skiplist pointers
ZSKIPLIST = 32
ZSKIPLIST_HEADER = 24 + 32 * 16  # a node with ZSKIPLIST_MAXLEVEL levels
ZSKIPLIST_NODE = 24  # a skiplist node without its levels (16 bytes each, 1 to 32 of them)
STREAM = 80  # stream: rax, length, last/first/max-deleted ids, entries added, groups
STREAM_ID = 16
RAX_NODE = 4 + 8 * 30  # raxNode header plus the fixed overhead Redis counts per node
STREAM_LISTPACK_PREALLOC = 4096  # STREAM_LISTPACK_MAX_PRE_ALLOCATE
STREAM_CG = 40
STREAM_NACK = 24
STREAM_CONSUMER = 24

# list-max-listpack-size -1 .. -5: the byte cap of one quicklist node.
LIST_NODE_BYTES = {-1: 4096, -2: 8192, -3: 16384, -4: 32768, -5: 65536}


def jemalloc_size(n_bytes: int) -> int:
    """The size class jemalloc serves for a request of ``n_bytes`` (zmalloc_size)."""
    if n_bytes <= 8:
        return 8
    if n_bytes <= 128:
        return (n_bytes + 15) & ~15
    step = 1 << ((n_bytes - 1).bit_length() - 3)  # four classes per doubling
    return (n_bytes + step - 1) // step * step


def sds_size(n_bytes: int) -> int:
    """sdsZmallocSize of an sds made by sdsnewlen: header by length, data, terminator."""
    hdr = 1 if n_bytes < 32 else 3 if n_bytes < 256 else 5 if n_bytes < 65536 else 9
    return jemalloc_size(hdr + n_bytes + 1)


def dict_table_slots(n: int) -> int:
    """The buckets of a dict that ``n`` insertions grew (none while empty; not counting a
    rehash in progress, which holds both tables for a while)."""
    return 0 if n == 0 else max(DICT_MIN_SLOTS, 1 << (n - 1).bit_length())


def string_size(s: bytes, encoding: bytes) -> int:
    """A string value's robj and its bytes (``encoding``: OBJECT ENCODING's)."""
    if encoding == b"int":
        return ROBJ
    if encoding == b"embstr":
        return jemalloc_size(ROBJ + 3 + len(s) + 1)
    return ROBJ + sds_size(len(s))


def _dict_base(n: int) -> int:
    slots = DICT_MIN_SLOTS if n <= DICT_MIN_SLOTS else 1 << (n - 1).bit_length()
    return ROBJ + DICT + 8 * slots


def _scaled(sizes: Iterable[int], count: int, samples: int) -> int:
    """Redis' sampling: the mean of the first ``samples`` sizes times ``count`` (float maths,
    truncated as Redis' size_t assignment does)."""
    total = n = 0
    for size in islice(sizes, samples):
        total += size
        n += 1
    return int(total / n * count) if n else 0


def _listpack(elements: Iterable[bytes]) -> int:
    return LISTPACK_EMPTY + sum(lp_size(e) for e in elements)


def _score_text(score: float) -> bytes:
    """A score as zzlInsertAt writes it (d2string: integers without a fraction)."""
    if score.is_integer() and abs(score) < 2**53:
        return b"%d" % int(score)
    return b"%.17g" % score


def _quicklist_nodes(items: Iterable[bytes], fill: int) -> Iterator[tuple[int, int]]:
    """(listpack bytes, entries) of each quicklist node, in order, as pushes fill them."""
    cap = LIST_NODE_BYTES.get(fill, QUICKLIST_SAFETY_LIMIT)
    max_count = fill if fill > 0 else 1 << 62
    size, count = LISTPACK_EMPTY, 0
    for it in items:
        el = lp_size(it)
        # _quicklistNodeAllowInsert weighs the element's raw length, not its listpack size
        if count and (size + len(it) + QUICKLIST_NODE_OVERHEAD > cap or count >= max_count):
            yield size, count
            size, count = LISTPACK_EMPTY, 0
        size += el
        count += 1
    if count:
        yield size, count


def _list_size(v: Any, samples: int, fill: int) -> int:
    total_entries = len(v)
    sizes: list[int] = []
    counted = 0
    for lp_bytes, n in _quicklist_nodes(v, fill):
        sizes.append(QUICKLIST_NODE + jemalloc_size(lp_bytes))
        counted += n
        if len(sizes) >= samples:
            break
    if not sizes:
        return ROBJ + QUICKLIST
    # Redis knows its node count; ours is the sampled nodes' entries per node, scaled.
    nodes = len(sizes) if counted >= total_entries else -(-total_entries * len(sizes) // counted)
    return ROBJ + QUICKLIST + int(sum(sizes) / len(sizes) * nodes)


def _hash_size(h: Any, samples: int) -> int:
    if not h.ht:
        return ROBJ + jemalloc_size(_listpack(x for kv in h.items() for x in kv))
    per = (sds_size(len(f)) + sds_size(len(v)) + DICT_ENTRY for f, v in h.items())
    return _dict_base(len(h)) + _scaled(per, len(h), samples)


def _set_size(s: Any, samples: int) -> int:
    if not s.ht:
        widest = max((int(m).bit_length() + 1 for m in s), default=0)
        width = 2 if widest <= 16 else 4 if widest <= 32 else 8
        return ROBJ + jemalloc_size(INTSET_HEADER + width * len(s))
    per = (sds_size(len(m)) + DICT_ENTRY for m in s)
    return _dict_base(len(s)) + _scaled(per, len(s), samples)


def _zset_size(z: Any, samples: int) -> int:
    n = len(z)
    if not z.big:
        return ROBJ + jemalloc_size(
            _listpack(x for m, sc in z.scores.items() for x in (m, _score_text(sc))))
    base = (_dict_base(n) + ZSET + ZSKIPLIST + jemalloc_size(ZSKIPLIST_HEADER))
    per = (sds_size(len(m)) + DICT_ENTRY for m in z.scores)
    return base + _scaled(per, n, samples) + int(_SKIPLIST_NODE_MEAN * n)


# Node levels are random (zslRandomLevel: one more level with p = 1/4): Redis measures the
# sampled nodes; we take the mean allocation over the level distribution.
_SKIPLIST_NODE_MEAN = sum(0.75 * 0.25 ** (lv - 1) * jemalloc_size(ZSKIPLIST_NODE + 16 * lv)
                          for lv in range(1, 33))


def _rax_size(n_elements: int) -> int:
    """streamRadixTreeMemoryUsage; the node count is not kept, so it is estimated: the head,
    and one and a half nodes per 16-byte id (fitted on redis-server's trees of stream ids)."""
    return n_elements * STREAM_ID + (n_elements + n_elements // 2 + 1) * RAX_NODE


def _lp_alloc(nbytes: int) -> int:
    return jemalloc_size(max(nbytes, STREAM_LISTPACK_PREALLOC))


def _stream_size(s: Any, samples: int) -> int:
    nodes = s.nodes
    asize = ROBJ + STREAM + _rax_size(len(nodes))
    # The open (last) listpack keeps its 4 KB preallocation; full ones were shrunk to fit.
    sampled = [jemalloc_size(node.nbytes()) for node in nodes[:samples]]
    if nodes and len(sampled) == len(nodes):
        sampled[-1] = _lp_alloc(nodes[-1].nbytes())
    if len(nodes) <= len(sampled):
        asize += sum(sampled)
    elif sampled:
        asize += sum(sampled) // len(sampled) * (len(nodes) - 1) + _lp_alloc(nodes[-1].nbytes())
    for group in s.groups.values():
        asize += STREAM_CG + _rax_size(len(group.pel)) + STREAM_NACK * len(group.pel)
        for name, consumer in group.consumers.items():
            asize += STREAM_CONSUMER + len(name) + _rax_size(len(consumer.pel))
    return asize


def value_size(value: Any, encoding: bytes, samples: int, list_fill: int) -> int:
    """objectComputeSize: the estimated bytes of one value (``samples`` 0: no sampling)."""
    if samples <= 0:
        samples = 1 << 62
    kind = TYPES[type(value)].name
    if kind == b"string":
        return string_size(value, encoding)
    if kind == b"list":
        return _list_size(value, samples, list_fill)
    if kind == b"hash":
        return _hash_size(value, samples)
    if kind == b"set":
        return _set_size(value, samples)
    if kind == b"zset":
        return _zset_size(value, samples)
    if kind == b"stream":
        return _stream_size(value, samples)
    return ROBJ


def key_size(key: bytes, cluster: bool) -> int:
    """What MEMORY USAGE adds for the key itself: its sds, the dict entry, and in cluster mode
    the entry's slot-list metadata."""
    return sds_size(len(key)) + DICT_ENTRY + (CLUSTER_ENTRY_METADATA if cluster else 0)


def usage(key: bytes, value: Any, encoding: bytes, samples: int, list_fill: int,
          cluster: bool) -> int:
    """MEMORY USAGE's figure for ``key`` holding ``value``."""
    return value_size(value, encoding, samples, list_fill) + key_size(key, cluster)


def dict_overhead(n_keys: int) -> int:
    """The table of a keyspace dict with ``n_keys`` keys (MEMORY STATS' overhead.hashtable.*):
    the entries and the bucket array."""
    if n_keys == 0:
        return 0
    return n_keys * DICT_ENTRY + 8 * (1 << max(2, (n_keys - 1).bit_length()))
