"""SORT / SORT_RO with BY and GET patterns through the proxy, against one redis-server.

The pattern keys carry no hash tag, so they lie in many slots over several masters; a cluster
node alone refuses such a SORT, the proxy fetches them and sorts. The same script goes to a
standalone redis-server 7.0 and to the proxy (in front of a real cluster, then of our nodes),
in RESP2 and RESP3, and with ``databases: 16`` in database 3; the raw replies must be equal.
``@`` in an argument stands for the run's key prefix.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.proxy import auth_support
from tests.proxy.test_databases import dbs_proxy  # noqa: F401 (the databases: 16 proxy)
from tests.support import ManagedProcess, RawClient, redis_server, running

SETUP = [
    "RPUSH @ids 3 1 2 4", "MSET @w_1 30 @w_2 10 @w_3 20 @n_1 one @n_2 two @n_3 three",
    "HSET @h_1 f x w 5", "HSET @h_2 f y w 9", "HSET @h_3 f z w 1", "SET @str x",
    "SADD @sids 2 1 3", "ZADD @zids 3 1 1 2 2 3", "SET @h_4 notahash",
]

SCRIPT = [
    "SORT @ids BY @w_*", "SORT @ids BY @w_* DESC", "SORT @ids BY @w_* GET # GET @n_*",
    "SORT @ids BY @w_* DESC GET @n_* GET # GET @h_*->f", "SORT @ids BY @h_*->w",
    "SORT @ids BY @h_*->f ALPHA DESC", "SORT @ids BY @nosort GET # GET @n_*",
    "SORT @ids BY nosort DESC GET @n_*", "SORT @ids BY nosort DESC LIMIT 1 2 GET #",
    "SORT @ids GET @n_*", "SORT @ids GET nostar", "SORT @ids BY @w_* LIMIT 1 2 GET #",
    "SORT @ids BY @w_* LIMIT -1 10", "SORT @ids BY @w_* LIMIT 10 2",
    "SORT @ids BY @w_* LIMIT x 1", "SORT @ids BY @w_* FOO", "SORT @ids BY @w_* GET",
    "SORT @str BY @w_*", "SORT @missing BY @w_* GET #", "SORT @ids BY @n_*",
    "SORT @ids BY @n_* ALPHA", "SORT @sids BY @w_* GET @n_*", "SORT @zids BY nosort GET @n_*",
    "SORT @zids BY nosort DESC LIMIT 0 2 GET # GET @w_*", "SORT @zids BY @w_* DESC",
    "SORT @ids BY @w_* GET @n_* STORE @dst", "LRANGE @dst 0 -1",
    "SORT @sids BY nosort GET @n_* STORE @dst", "LRANGE @dst 0 -1",
    "SORT @missing BY @w_* STORE @dst", "EXISTS @dst", "SORT_RO @ids BY @w_* GET @n_*",
    "SORT_RO @ids BY @w_* STORE @dst", "SORT @ids BY @w_* GET @h_*->", "SORT @ids ALPHA GET #",
    "SORT @ids GET # GET @h_*->w BY @h_*->w DESC", "SET @w_4 abc", "SORT @ids BY @w_*",
    "SORT @ids BY @w_* ALPHA LIMIT 0 3",
]


def _argv(line: str, prefix: str) -> list[str]:
    return line.replace("@", prefix).split()


def _run(port: int, proto: int, db: int) -> list[bytes]:
    prefix = f"s{uuid.uuid4().hex[:8]}:"
    with RawClient(port) as c:
        if proto == 3:
            assert c.call("HELLO", "3")[:1] == b"%"
        if db:
            assert c.call("SELECT", str(db)) == b"+OK\r\n"
        for line in SETUP:
            assert c.call(*_argv(line, prefix))[:1] in (b":", b"+")
        out = [c.call(*_argv(line, prefix)) for line in SCRIPT]
        c.call("DEL", *[w for line in SETUP + SCRIPT for w in _argv(line, prefix)
                        if w.startswith(prefix) and "*" not in w])
    return out


def _compare(got: list[bytes], want: list[bytes]) -> None:
    for line, g, w in zip(SCRIPT, got, want, strict=True):
        assert g == w, line


@pytest.mark.parametrize("proto", [2, 3])
def test_same_replies_as_one_redis_server(slotgate: ManagedProcess,
                                          redis_standalone: ManagedProcess, proto: int) -> None:
    _compare(_run(slotgate.port, proto, 0), _run(redis_standalone.port, proto, 0))


def test_patterns_name_keys_of_the_clients_database(dbs_proxy: ManagedProcess,  # noqa: F811
                                                    redis_standalone: ManagedProcess) -> None:
    _compare(_run(dbs_proxy.port, 2, 3), _run(redis_standalone.port, 2, 3))


ACL_USERS = ["u on >upw ~a* +@all", "v on >vpw %R~* ~a* +@all"]
ACL_LINES = [
    ("u", "SORT a1 BY w_*"), ("u", "SORT_RO a1 GET #"), ("u", "SORT a1 BY nosort"),
    ("u", "SORT a1 FOO BY w_*"), ("u", "SORT a1 BY w_* FOO"), ("u", "SORT a1 BY nosort GET #"),
    ("v", "SORT a1 BY w_* GET w_*"), ("v", "SORT a1 BY w_* GET # STORE a2"),
]


def _acl_run(port: int) -> list[bytes]:
    out = []
    for user, line in ACL_LINES:
        with RawClient(port) as c:
            c.call("RPUSH", "a1", "1", "2")
            assert c.call("AUTH", user, user + "pw") == b"+OK\r\n"
            out.append(c.call(*line.split()))
    return out


def test_patterns_need_read_access_to_every_key(real_cluster: list[ManagedProcess],
                                                tmp_path: Path) -> None:
    """The proxy's own check: one cluster kind is enough."""
    proxy = auth_support.proxy_with_users(tmp_path / "proxy", [n.port for n in real_cluster[:2]],
                                          ACL_USERS, None)
    real = redis_server(tmp_path, extra=["--user", *ACL_USERS[0].split(), "--user",
                                         *ACL_USERS[1].split()])
    with running(proxy, real):
        want = _acl_run(real.port)
        got = _acl_run(proxy.port)
        with RawClient(proxy.port) as c:
            c.call("DEL", "a1", "a2")
    for (_, line), g, w in zip(ACL_LINES, got, want, strict=True):
        assert g == w, line
