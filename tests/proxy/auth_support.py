"""What the proxy auth tests share: the users (as proxy config and as redis-server options),
a standalone redis-server with them, the proxy with them in front of a cluster, and the
differential runner (the same lines to both, raw replies compared)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import hiredis
import yaml

from slotgate.protocol.resp import array_header, bulk, map_header
from tests.node.diff import Line, show_difference, split_line
from tests.support import ManagedProcess, RawClient, redis_server, running, slotgate_proxy

REQUIREPASS = "topsecret"
USERS = [
    "alice on >alicepw ~app:* +@read",
    "bob off >bobpw ~* &* +@all",
    "carol on >carolpw %R~ro:* %W~wo:* ~rw:* resetchannels +@all -@dangerous",
    "dave on >davepw resetchannels &news.* -@all +subscribe +psubscribe +publish +ping "
    "+unsubscribe +punsubscribe",
    "erin on >erinpw ~* -@all +get +set +client|setname +acl|whoami",
    "frank on >frankpw ~* -@all +get (~sel:* +set)",
    "admin on >adminpw ~* &* +@all",
    # a password given by its SHA-256 (of "ginapw"), and a second password
    "gina on #5fcd99591ed5531f6d226b33e3f2ad89668980c5d5d5479ce79513a2df9199b9 >other ~* +@read",
]


def redis_user_args(users: Sequence[str], requirepass: str) -> list[str]:
    """redis-server's command line for the same users: ``--user`` then one word each."""
    out = ["--requirepass", requirepass]
    for line in users:
        out += ["--user", *shlex.split(line)]
    return out


def standalone(workdir: Path, users: Sequence[str] = USERS,
               requirepass: str = REQUIREPASS) -> ManagedProcess:
    return redis_server(workdir, extra=redis_user_args(users, requirepass))


def write_config(path: Path, seeds: Sequence[int], users: Sequence[str] = USERS,
                 requirepass: str | None = REQUIREPASS) -> Path:
    doc = {"seeds": [f"127.0.0.1:{p}" for p in seeds],
           "auth": {"requirepass": requirepass, "users": list(users)}}
    path.write_text(yaml.safe_dump(doc))
    return path


def proxy_with_users(workdir: Path, seeds: Sequence[int], users: Sequence[str] = USERS,
                     requirepass: str | None = REQUIREPASS) -> ManagedProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    conf = write_config(workdir / "proxy.yaml", seeds, users, requirepass)
    return slotgate_proxy(workdir, [], extra=["--config", str(conf)])


@contextmanager
def pair(workdir: Path, seeds: Sequence[int]) -> Iterator[tuple[ManagedProcess, ManagedProcess]]:
    """(proxy, redis-server), both with ``USERS`` and ``REQUIREPASS``."""
    proxy = proxy_with_users(workdir / "proxy", seeds)
    real = standalone(workdir)
    with running(proxy, real):
        yield proxy, real


# -- normalizing what differs by nature --------------------------------------------------------
def _render(value: object, proto: int) -> bytes:
    if isinstance(value, list):
        return array_header(len(value)) + b"".join(_render(v, proto) for v in value)
    if isinstance(value, dict):
        return map_header(len(value), proto) + b"".join(
            _render(k, proto) + _render(v, proto) for k, v in value.items())
    if isinstance(value, int):
        return b":%d\r\n" % value
    return bulk(value if isinstance(value, bytes) else str(value).encode())


def norm_acl_log(raw: bytes) -> bytes:
    """ACL LOG: every field but age-seconds and client-info (the client's address, id and
    timing differ between the two servers by nature)."""
    reader = hiredis.Reader()
    reader.feed(raw)
    entries = reader.gets()
    if not isinstance(entries, list):
        return raw
    kept = []
    for e in entries:
        items = e.items() if isinstance(e, dict) else zip(e[::2], e[1::2], strict=True)
        kept.append({k: v for k, v in items if k not in (b"age-seconds", b"client-info")})
    return _render(kept, 2)


def norm_type(raw: bytes) -> bytes:
    """Only the reply's type: HELLO's map (id, version) differs by nature."""
    return raw[:1]


def norm_sorted_lines(raw: bytes) -> bytes:
    """ACL CAT <category>: Redis lists a category's commands in its dict's order."""
    reader = hiredis.Reader()
    reader.feed(raw)
    value = reader.gets()
    if not isinstance(value, list):
        return raw
    return _render(sorted(value), 2)


def _sort_singles(value: object) -> object:
    if isinstance(value, list):
        return [_sort_singles(v) for v in value]
    if isinstance(value, dict):
        return {k: _sort_singles(v) for k, v in value.items()}
    if not isinstance(value, bytes):
        return value
    words = value.split(b" ")
    at = [i for i, w in enumerate(words) if w[:1] in b"+-" and w[1:2] != b"@"]
    for i, w in zip(at, sorted(words[i] for i in at), strict=True):
        words[i] = w
    return b" ".join(words)


def norm_rules(raw: bytes) -> bytes:
    """ACL LIST / GETUSER: single +command / -command words sorted among themselves (Redis
    prints them in its command dict's random order, the proxy sorted)."""
    reader = hiredis.Reader()
    reader.feed(raw)
    value = reader.gets()
    if not isinstance(value, (list, dict)):
        return raw
    return _render(_sort_singles(value), 2)


def norm_ids(raw: bytes) -> bytes:
    """HELLO replies inside a reply (EXEC's): the client id differs by nature."""
    return re.sub(rb"(\$2\r\nid\r\n):\d+\r\n", rb"\1:0\r\n", raw)


NORMS = {"acl_log": norm_acl_log, "type": norm_type, "sorted": norm_sorted_lines,
         "rules": norm_rules, "ids": norm_ids}


def run_script(proxy_port: int, real_port: int, lines: Sequence[Line], proto: int) -> list[str]:
    """The lines on one fresh connection to each; ``proto`` 3: the first line that logs in is
    sent as ``HELLO 3 AUTH ...`` instead of ``AUTH ...``. The mismatches, as text."""
    ours, real = RawClient(proxy_port), RawClient(real_port)
    problems: list[str] = []
    try:
        for item in lines:
            text, norm = (item, None) if isinstance(item, str) else item
            argv = split_line(text)
            real.send(*argv)
            ours.send(*argv)
            if norm == "noreply":
                continue
            r, o = real.read(), ours.read()
            fn = NORMS.get(norm or "")
            if (fn(o) != fn(r)) if fn is not None else (o != r):
                problems.append(f"RESP{proto} {text!r}:\n      {show_difference(o, r)}")
    finally:
        ours.close()
        real.close()
    return problems


def login_lines(user: str, password: str, proto: int) -> list[Line]:
    if proto == 3:
        return [(f"HELLO 3 AUTH {user} {password}", "type")]
    return [f"AUTH {user} {password}"]
