"""Snapshot files: the whole keyspace in one checksummed file of our own format.

Used for ``SAVE``/``BGSAVE`` (``dbfilename``), the base of a rewritten append-only file and
the payload of a full resynchronisation. Values travel in node/persistence/rdb.py's object encoding, so
every type DUMP knows is covered; strings (the common case) are stored raw.

Layout (integers little-endian)::

    magic   b"SGSNAP01"
    records op(1) ...
      0xFA  AUX       u16 name_len, u32 value_len, name, value
      0xF5  FUNCTION  u32 code_len, code (one function library, as FUNCTION LOAD takes it)
      0xFE  SELECTDB  u32 db_index
      0x01  KEY       i64 expire_unix_ms (-1: none), u32 key_len, u32 obj_len, key, obj
                      obj = b"\\x00" + raw string bytes, or rdb.encode_object() of the value
      0xFF  EOF
    footer  u32 CRC32 (zlib) of everything before it

A file whose footer does not match, or that ends early, is refused as a whole
(``SnapshotError``); nothing is loaded from it.

Writing in the background forks (``fork_write``): the child sees the keyspace frozen at the
fork, writes ``path`` through a temporary file and a rename, and exits 0 (1 on error); the
parent keeps serving and polls the child with ``os.waitpid``.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from slotgate.node.commands import dump
from slotgate.node.core.keyspace import Database, Keyspace, now_ms
from slotgate.node.persistence import rdb

log = logging.getLogger("node.snapshot")

MAGIC = b"SGSNAP01"
OP_AUX, OP_SELECTDB, OP_KEY, OP_EOF = 0xFA, 0xFE, 0x01, 0xFF
OP_FUNCTION = 0xF5  # the RDB opcode of a function library
RAW_STRING = 0x00  # first byte of an obj holding a plain string (rdb type bytes are 1..18)
CHUNK_BYTES = 1 << 20  # output is produced in chunks of about this size
STREAM_CHUNK_BYTES = 16 * 1024  # ... and into a pipe (Redis' PROTO_IOBUF_LEN)

_KEY_HDR = struct.Struct("<qII")
_AUX_HDR = struct.Struct("<HI")


class SnapshotError(Exception):
    """A snapshot that cannot be loaded (bad magic, checksum, truncated, undecodable)."""


def _value_obj(value: Any) -> bytes:
    if type(value) is bytes:
        return b"\x00" + value
    dump._wire_types()
    adapter = dump.ADAPTERS.get(type(value))
    if adapter is None:
        raise SnapshotError(f"no snapshot encoding for values of type {type(value).__name__}")
    return rdb.encode_object(adapter.kind, adapter.to_rdb(value))


def _obj_value(obj: bytes) -> Any:
    if not obj:
        raise SnapshotError("empty value")
    if obj[0] == RAW_STRING:
        return obj[1:]
    dump._wire_types()
    try:
        kind, value = rdb.load(obj, verify=False)
    except (rdb.RdbError, IndexError, ValueError, struct.error) as exc:
        raise SnapshotError(f"undecodable value: {exc}") from None
    builder = dump.BUILDERS.get(kind)
    if builder is None:
        raise SnapshotError(f"no keyspace type for {kind}")
    return builder(value)


class KeyDelay:
    """Redis' debugDelay, run once per key by the test knobs ``key-load-delay`` and
    ``rdb-key-save-delay``: ``us`` > 0 sleeps that many microseconds; < 0 sleeps one
    microsecond every ``-us`` keys."""

    __slots__ = ("us", "_count")

    def __init__(self, us: int) -> None:
        self.us = us
        self._count = 0

    def __call__(self) -> None:
        if self.us > 0:
            time.sleep(self.us / 1e6)
        elif self.us < 0:
            self._count += 1
            if self._count >= -self.us:
                self._count = 0
                time.sleep(1e-6)


def iter_chunks(ks: Keyspace, aux: dict[str, bytes] | None = None,
                functions: Sequence[bytes] = (), key_delay_us: int = 0,
                chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The snapshot of ``ks`` and the function libraries' ``functions`` codes as byte chunks
    of about ``chunk_bytes`` (the last one ends with the CRC footer). ``key_delay_us``:
    ``rdb-key-save-delay``."""
    delay = KeyDelay(key_delay_us) if key_delay_us else None
    crc = 0
    parts: list[bytes] = [MAGIC]
    size = len(MAGIC)
    for name, value in (aux or {}).items():
        nb = name.encode()
        parts.append(bytes((OP_AUX,)) + _AUX_HDR.pack(len(nb), len(value)) + nb + value)
    for code in functions:
        parts.append(bytes((OP_FUNCTION,)) + struct.pack("<I", len(code)) + code)
        size += len(code) + 5
    pack = _KEY_HDR.pack
    op_key = bytes((OP_KEY,))
    for db in ks.dbs:
        if not db.data:
            continue
        parts.append(bytes((OP_SELECTDB,)) + struct.pack("<I", db.index))
        expires = db.expires
        for key, value in db.data.items():
            obj = b"\x00" + value if type(value) is bytes else _value_obj(value)
            parts.append(op_key + pack(expires.get(key, -1), len(key), len(obj)))
            parts.append(key)
            parts.append(obj)
            size += len(key) + len(obj) + 17
            if delay is not None:
                delay()
            if size >= chunk_bytes:
                chunk = b"".join(parts)
                crc = zlib.crc32(chunk, crc)
                yield chunk
                parts, size = [], 0
    parts.append(bytes((OP_EOF,)))
    chunk = b"".join(parts)
    crc = zlib.crc32(chunk, crc)
    yield chunk + struct.pack("<I", crc)


def write_file(ks: Keyspace, path: str, aux: dict[str, bytes] | None = None,
               fsync: bool = True, functions: Sequence[bytes] = (),
               key_delay_us: int = 0) -> int:
    """Write a snapshot of ``ks`` to ``path`` atomically (temp file, fsync, rename).
    Returns the size in bytes; raises OSError (the temp file is removed)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    size = 0
    try:
        with open(tmp, "wb") as f:
            for chunk in iter_chunks(ks, aux, functions, key_delay_us):
                f.write(chunk)
                size += len(chunk)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return size


def fork_write(ks: Keyspace, path: str, aux: dict[str, bytes] | None = None,
               before_write: Callable[[], None] | None = None,
               functions: Sequence[bytes] = (), key_delay_us: int = 0) -> int:
    """Fork a child that writes ``ks`` (as of now) to ``path``; returns the child's pid.

    The child never returns: it exits 0 after the rename, 1 on any error. Raises OSError when
    fork fails."""
    def work() -> None:
        if before_write is not None:
            before_write()
        write_file(ks, path, aux, functions=functions, key_delay_us=key_delay_us)

    return _fork(work)


def fork_stream(ks: Keyspace, fd: int, aux: dict[str, bytes] | None = None,
                functions: Sequence[bytes] = (), key_delay_us: int = 0) -> int:
    """Fork a child that writes the snapshot of ``ks`` (as of now) into the file descriptor
    ``fd`` (a pipe's write end; the caller closes its own copy) in writes of about
    ``STREAM_CHUNK_BYTES``, as Redis' child flushes its buffer; returns the child's pid."""
    def work() -> None:
        for chunk in iter_chunks(ks, aux, functions, key_delay_us, STREAM_CHUNK_BYTES):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]

    return _fork(work)


def _fork(work: Callable[[], None]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        work()
        code = 0
    except BaseException as exc:  # noqa: BLE001 - report and exit, never return into the server
        try:
            os.write(2, f"snapshot child failed: {exc!r}\n".encode())
        except OSError:
            pass
    finally:
        os._exit(code)
    return 0  # not reached


def child_status(pid: int) -> int | None:
    """None while child ``pid`` runs; its exit code (signals as 128+n) once it ended."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return 1
    if done == 0:
        return None
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class LoadResult:
    """What ``load_bytes`` found: counts, the AUX fields and the function libraries' codes
    (for the caller to load)."""

    __slots__ = ("keys_loaded", "keys_expired", "aux", "functions")

    def __init__(self) -> None:
        self.keys_loaded = 0
        self.keys_expired = 0
        self.aux: dict[str, bytes] = {}
        self.functions: list[bytes] = []


def verify(data: bytes | memoryview) -> None:
    """Raise SnapshotError unless ``data`` has our magic and a matching CRC footer."""
    if len(data) < len(MAGIC) + 5 or bytes(data[: len(MAGIC)]) != MAGIC:
        raise SnapshotError("not a snapshot file (bad magic or too short)")
    want = struct.unpack_from("<I", data, len(data) - 4)[0]
    if zlib.crc32(data[:-4]) != want:
        raise SnapshotError("snapshot checksum mismatch")


def load_bytes(ks: Keyspace, data: bytes, *, drop_expired: bool = True) -> LoadResult:
    """Verify ``data`` and load it into ``ks`` (which the caller has emptied).

    A master drops keys already expired (``drop_expired``); a replica keeps them and waits
    for its master's DEL, as Redis does."""
    res = LoadResult()
    for _ in iter_load(ks.dbs, data, res, drop_expired=drop_expired):
        pass
    return res


def iter_load(dbs: Sequence[Database], data: bytes, res: LoadResult, *,
              drop_expired: bool = True,
              on_key: Callable[[int, LoadResult], None] | None = None,
              every_bytes: int = 0) -> Iterator[int]:
    """``load_bytes`` a step at a time: yields the offset reached each time another
    ``every_bytes`` bytes were loaded (never when 0), so that the caller can serve its
    clients meanwhile (Redis' ``loading-process-events-interval-bytes``); ``res`` is filled.
    ``on_key(offset, res)`` runs after each key (``key-load-delay``)."""
    verify(data)
    next_yield = len(MAGIC) + every_bytes if every_bytes > 0 else len(data) + 1
    mv = memoryview(data)
    end = len(data) - 4
    pos = len(MAGIC)
    db = dbs[0]
    now = now_ms()
    unpack_key = _KEY_HDR.unpack_from
    try:
        while pos < end:
            op = data[pos]
            pos += 1
            if op == OP_KEY:
                expire, klen, olen = unpack_key(data, pos)
                pos += 16
                key = bytes(mv[pos : pos + klen])
                pos += klen
                obj = mv[pos : pos + olen]
                pos += olen
                if pos > end:
                    raise SnapshotError("snapshot truncated inside a key")
                value = bytes(obj[1:]) if obj[0] == RAW_STRING else _obj_value(bytes(obj))
                if expire >= 0 and drop_expired and expire <= now:
                    res.keys_expired += 1
                    continue
                db.set(key, value)
                if expire >= 0:
                    db.set_expire(key, expire)
                res.keys_loaded += 1
                if on_key is not None:
                    on_key(pos, res)
                if pos >= next_yield:
                    next_yield = pos + every_bytes
                    yield pos
            elif op == OP_SELECTDB:
                (idx,) = struct.unpack_from("<I", data, pos)
                pos += 4
                if idx >= len(dbs):
                    raise SnapshotError(f"snapshot uses db {idx}, only {len(dbs)} configured")
                db = dbs[idx]
            elif op == OP_AUX:
                nlen, vlen = _AUX_HDR.unpack_from(data, pos)
                pos += 6
                name = bytes(mv[pos : pos + nlen]).decode("utf-8", "replace")
                pos += nlen
                res.aux[name] = bytes(mv[pos : pos + vlen])
                pos += vlen
            elif op == OP_FUNCTION:
                (clen,) = struct.unpack_from("<I", data, pos)
                pos += 4
                if pos + clen > end:
                    raise SnapshotError("snapshot truncated inside a function library")
                res.functions.append(bytes(mv[pos : pos + clen]))
                pos += clen
            elif op == OP_EOF:
                return
            else:
                raise SnapshotError(f"unknown snapshot record type {op}")
    except (struct.error, IndexError) as exc:
        raise SnapshotError(f"snapshot truncated: {exc}") from None
    raise SnapshotError("snapshot has no EOF record")


def load_file(ks: Keyspace, path: str, *, drop_expired: bool = True) -> LoadResult:
    """``load_bytes`` of the file at ``path`` (OSError if it cannot be read)."""
    with open(path, "rb") as f:
        data = f.read()
    return load_bytes(ks, data, drop_expired=drop_expired)


def is_snapshot(head: bytes) -> bool:
    return head.startswith(MAGIC)
