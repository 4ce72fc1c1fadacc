"""``redis-cli --cluster add-node`` copies the cluster's function libraries to the new node
(FUNCTION DUMP on an existing node, FUNCTION RESTORE on the new one), on our nodes."""

from __future__ import annotations

from pathlib import Path

from tests.node.test_cluster_tools import addr
from tests.support import redis_cli, start_nodes, wait_cluster_ok

LIB = ("#!lua name=clib\nredis.register_function{function_name='cget', flags={'no-writes'}, "
       "callback=function(k, a) return redis.call('get', k[1]) end}")


def test_add_node_copies_the_libraries(tmp_path: Path) -> None:
    nodes = start_nodes(tmp_path, 4)
    try:
        masters, new = nodes[:3], nodes[3]
        redis_cli("--cluster", "create", *[addr(n) for n in masters], "--cluster-yes",
                  timeout_s=120)
        wait_cluster_ok(masters)
        for m in masters:
            assert m.client().execute_command("FUNCTION", "LOAD", LIB) == b"clib"
        assert new.client().execute_command("FUNCTION", "LIST") == []
        out = redis_cli("--cluster", "add-node", addr(new), addr(masters[0]), timeout_s=60)
        assert "[OK] New node added correctly." in out.stdout, out.stdout[-2000:]
        listing = new.client().execute_command("FUNCTION", "LIST", "WITHCODE")
        assert listing == masters[0].client().execute_command("FUNCTION", "LIST", "WITHCODE")
        assert [lib[b"library_name"] for lib in listing] == [b"clib"]
    finally:
        for n in nodes:
            n.stop()
