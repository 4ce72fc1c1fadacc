"""TLS at the proxy: clients over TLS (redis-cli --tls, redis-py ssl=True) next to plain ones,
the proxy to a real redis-server cluster that speaks TLS only (tls-port, tls-cluster,
tls-replication, client certificates required), ``slotgate cluster`` over TLS, certificate
rotation with SIGHUP under load, client-certificate checks, and our nodes (plain) behind a
TLS listener. Certificates are made at test time (tests/proxy/tls_support.py)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import yaml
from redis.backoff import NoBackoff
from redis.retry import Retry

from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy.ops import config
from slotgate.proxy.routing.topology import slot_map_from_shards
from tests.conftest import wait_replicas_up
from tests.proxy.test_backend_auth import metrics
from tests.proxy.test_replica_reads import reads_by_role
from tests.proxy.tls_support import (
    CA,
    Pair,
    cli_tls_args,
    form_cluster,
    make_ca,
    peer_certificate,
    tls_client,
    tls_nodes,
)
from tests.support import ManagedProcess, free_port, redis_cli, slotgate_proxy, wait_until

NO_RETRY = Retry(NoBackoff(), 0)  # (redis-py retries a failed connection 3 times by default)


@dataclass(frozen=True)
class Certs:
    ca: CA
    node: Pair  # the nodes' server certificate
    proxy: Pair  # the proxy's, towards its clients
    client: Pair  # clients' (and the proxy's towards the nodes)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    d = tmp_path_factory.mktemp("certs")
    ca = make_ca(d)
    return Certs(ca, ca.issue(d, "node", 10), ca.issue(d, "proxy", 1, "slotgate proxy 1"),
                 ca.issue(d, "client", 20))


@pytest.fixture(scope="module")
def tls_cluster(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ManagedProcess]]:
    nodes = tls_nodes(tmp_path_factory.mktemp("tls-cluster"), certs.ca, certs.node, 3)
    try:
        form_cluster(nodes, certs.ca, certs.client)
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def proxy_config(certs: Certs, seeds: list[int], *, backend_tls: bool = True,
                 **tls_keys: object) -> dict:
    doc: dict = {
        "seeds": [f"127.0.0.1:{p}" for p in seeds],
        "tls": {"port": free_port(), "cert_file": str(certs.proxy.cert),
                "key_file": str(certs.proxy.key), **tls_keys},
    }
    if backend_tls:
        doc["backend"] = {"tls": True, "tls_ca_file": str(certs.ca.cert),
                          "tls_cert_file": str(certs.client.cert),
                          "tls_key_file": str(certs.client.key)}
    return doc


def start_proxy(workdir: Path, doc: dict, cleanup: list[ManagedProcess]) -> tuple[ManagedProcess, int, int]:
    """(proxy, its TLS port, its metrics port), started."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "proxy.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    metrics_port = free_port()
    proc = slotgate_proxy(workdir, [], ["--config", str(cfg), "--metrics",
                                        f"127.0.0.1:{metrics_port}"])
    cleanup.append(proc)
    proc.start()
    return proc, doc["tls"]["port"], metrics_port


@pytest.fixture(scope="module")
def proxy(certs: Certs, tls_cluster: list[ManagedProcess],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ManagedProcess, int, int]]:
    procs: list[ManagedProcess] = []
    try:
        yield start_proxy(tmp_path_factory.mktemp("tls-proxy"),
                          proxy_config(certs, [n.port for n in tls_cluster]), procs)
    finally:
        for p in procs:
            p.stop()


def test_redis_cli_tls_through_proxy(certs: Certs, proxy: tuple[ManagedProcess, int, int]) -> None:
    proc, tls_port, _ = proxy
    cli = [*cli_tls_args(certs.ca, None), "-p", str(tls_port)]
    assert redis_cli(*cli, "SET", "tls:cli", "v1").stdout.strip() == "OK"
    assert redis_cli(*cli, "MSET", "a1", "1", "b2", "2", "c3", "3").stdout.strip() == "OK"
    assert redis_cli(*cli, "MGET", "a1", "b2", "c3").stdout.split() == ["1", "2", "3"]
    # The plain listener beside it serves the same data.
    assert redis_cli("-p", str(proc.port), "GET", "tls:cli").stdout.strip() == "v1"
    # A plain client on the TLS port gets no reply (its bytes are no TLS handshake).
    out = redis_cli("-p", str(tls_port), "PING", check=False, timeout_s=30)
    assert "PONG" not in out.stdout


def test_redis_py_ssl_through_proxy(certs: Certs, proxy: tuple[ManagedProcess, int, int],
                                    tls_cluster: list[ManagedProcess]) -> None:
    _, tls_port, _ = proxy
    c = tls_client(tls_port, certs.ca, None, socket_timeout=10)
    assert c.ping()
    pipe = c.pipeline(transaction=False)
    for i in range(300):
        pipe.set(f"tls:py:{i}", i)
    pipe.execute()
    assert c.mget([f"tls:py:{i}" for i in range(300)]) == [str(i).encode() for i in range(300)]
    # Many TLS records each way: a value larger than the socket buffers, and a deep pipeline.
    big = os.urandom(3 * 1024 * 1024)
    c.set("tls:big", big)
    assert c.get("tls:big") == big
    pipe = c.pipeline(transaction=False)
    for i in range(3000):
        pipe.get(f"tls:py:{i % 300}")
    assert pipe.execute() == [str(i % 300).encode() for i in range(3000)]
    with c.pipeline(transaction=True) as tx:  # MULTI/EXEC on a connection of its own
        tx.incr("{tls}n").incr("{tls}n")
        assert tx.execute() == [1, 2]
    assert c.blpop(["tls:empty"], timeout=0.1) is None  # a blocking command's own connection
    sub = c.pubsub()
    sub.subscribe("tls:chan")  # a subscriber link of its own
    wait_until(lambda: c.publish("tls:chan", "hi") >= 1, 10, "the subscription")
    msg = wait_until(lambda: sub.get_message(ignore_subscribe_messages=True, timeout=0.2), 10,
                     "the message")
    assert msg["data"] == b"hi"
    sub.close()
    # The keys are on the TLS nodes.
    total = sum(tls_client(n.port, certs.ca, certs.client).dbsize() for n in tls_cluster)
    assert total >= 301
    c.close()


def test_slotgate_cluster_over_tls(certs: Certs, tls_cluster: list[ManagedProcess]) -> None:
    argv = [sys.executable, "-m", "slotgate.proxy.ops.cli", "cluster", "info",
            f"127.0.0.1:{tls_cluster[0].port}", "--tls", "--cacert", str(certs.ca.cert),
            "--cert", str(certs.client.cert), "--key", str(certs.client.key)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(" keys | slots ") == 3
    plain = subprocess.run(argv[:6], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 1  # a TLS-only node refuses a plain connection


def test_rotation_with_sighup_under_load(certs: Certs, tls_cluster: list[ManagedProcess],
                                         tmp_path: Path, cleanup: list[ManagedProcess]) -> None:
    """Clients keep working over TLS while the certificate file is replaced and SIGHUP sent; a
    new connection then sees the new certificate."""
    live = Pair(tmp_path / "live.crt", tmp_path / "live.key")
    shutil.copy(certs.proxy.cert, live.cert)
    shutil.copy(certs.proxy.key, live.key)
    doc = proxy_config(certs, [tls_cluster[0].port], cert_file=str(live.cert),
                       key_file=str(live.key))
    proc, tls_port, _ = start_proxy(tmp_path / "proxy", doc, cleanup)
    assert peer_certificate(tls_port, certs.ca)["serialNumber"] == "01"
    new = certs.ca.issue(tmp_path / "new", "proxy2", 2, "slotgate proxy 2")

    stop = threading.Event()
    errors: list[BaseException] = []
    done = [0] * 4

    def work(t: int) -> None:
        c = tls_client(tls_port, certs.ca, None, socket_timeout=10)
        i = 0
        try:
            while not stop.is_set():
                key = f"rot:{t}:{i % 50}"
                c.set(key, i)
                assert c.get(key) == str(i).encode()
                i += 1
                done[t] = i
        except BaseException as exc:  # every failure counts
            errors.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    try:
        wait_until(lambda: all(done), 20, "every client running")
        time.sleep(1.0)  # load before the rotation, and (below) after it
        for src, dst in ((new.cert, live.cert), (new.key, live.key)):
            shutil.copy(src, str(dst) + ".tmp")
        os.replace(str(live.key) + ".tmp", live.key)
        os.replace(str(live.cert) + ".tmp", live.cert)
        os.kill(proc.pid, signal.SIGHUP)
        wait_until(lambda: peer_certificate(tls_port, certs.ca)["serialNumber"] == "02", 20,
                   "the new certificate on new connections")
        cert = peer_certificate(tls_port, certs.ca)
        assert ((("commonName", "slotgate proxy 2"),)) in cert["subject"]
        before = list(done)
        wait_until(lambda: all(d > b + 20 for d, b in zip(done, before, strict=True)), 20,
                   "requests after the reload on the old connections")
        time.sleep(1.0)
    finally:
        stop.set()
        for th in threads:
            th.join(30)
    assert not errors, errors[:3]
    assert "reload: applied" in proc.log_text()
    # A certificate file that does not load refuses the reload; the running one stays.
    live.cert.write_text("not a certificate\n")
    os.kill(proc.pid, signal.SIGHUP)
    wait_until(lambda: "tls.cert_file/tls.key_file: not a certificate" in proc.log_text(), 20,
               "the refused reload in the log")
    assert peer_certificate(tls_port, certs.ca)["serialNumber"] == "02"


def test_client_certificates_required(certs: Certs, tls_cluster: list[ManagedProcess],
                                      tmp_path: Path, cleanup: list[ManagedProcess]) -> None:
    doc = proxy_config(certs, [tls_cluster[0].port], auth_clients="yes",
                       ca_file=str(certs.ca.cert), protocols="TLSv1.2 TLSv1.3")
    proc, tls_port, metrics_port = start_proxy(tmp_path, doc, cleanup)
    cli = ["-p", str(tls_port)]
    ok = redis_cli(*cli_tls_args(certs.ca, certs.client), *cli, "PING")
    assert ok.stdout.strip() == "PONG"
    c = tls_client(tls_port, certs.ca, None, socket_timeout=5, retry=NO_RETRY)
    with pytest.raises((redis.ConnectionError, ssl.SSLError)):
        c.ping()
    failures = metrics(metrics_port)[("slotgate_tls_handshake_failures_total", ())]
    assert failures >= 1
    other_ca = make_ca(tmp_path / "other", "other")
    stranger = other_ca.issue(tmp_path / "other", "stranger", 5)
    c = tls_client(tls_port, certs.ca, stranger, socket_timeout=5, retry=NO_RETRY)
    with pytest.raises((redis.ConnectionError, ssl.SSLError)):
        c.ping()
    # Reloaded as optional: a client without a certificate is served, a refused one is not.
    doc["tls"]["auth_clients"] = "optional"
    (tmp_path / "proxy.yaml").write_text(yaml.safe_dump(doc))
    os.kill(proc.pid, signal.SIGHUP)
    wait_until(lambda: tls_client(tls_port, certs.ca, None, socket_timeout=5,
                                  retry=NO_RETRY).ping(), 20, "a client without a certificate",
               ignore=(redis.ConnectionError,))
    c = tls_client(tls_port, certs.ca, stranger, socket_timeout=5, retry=NO_RETRY)
    with pytest.raises((redis.ConnectionError, ssl.SSLError)):
        c.ping()


def test_bundled_nodes_behind_a_tls_listener(certs: Certs, bundled_cluster: list[ManagedProcess],
                                             tmp_path: Path, cleanup: list[ManagedProcess]) -> None:
    """Our nodes speak no TLS (docs/COMPATIBILITY.md): clients use TLS to the proxy, the proxy
    plain TCP to the nodes."""
    doc = proxy_config(certs, [bundled_cluster[0].port], backend_tls=False)
    _, tls_port, _ = start_proxy(tmp_path, doc, cleanup)
    c = tls_client(tls_port, certs.ca, None, socket_timeout=10)
    c.mset({f"tls:b:{i}": i for i in range(50)})
    assert c.mget([f"tls:b:{i}" for i in range(50)]) == [str(i).encode() for i in range(50)]
    assert bundled_cluster[0].client().ping()
    c.close()


def test_tls_only_with_the_tls_listener_policy(certs: Certs, real_cluster: list[ManagedProcess],
                                               tmp_path: Path,
                                               cleanup: list[ManagedProcess]) -> None:
    """tls.only: the plain port is not listened on; policies.tls_listener: the TLS listener's
    clients read from replicas (the proxy-wide policy is master)."""
    wait_replicas_up(real_cluster)
    doc = proxy_config(certs, [real_cluster[0].port], backend_tls=False, only=True)
    doc["reads"] = {"check_interval": "50ms"}
    doc["policies"] = {"tls_listener": {"read_from": "replica"}}
    cfg = tmp_path / "proxy.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    mport = free_port()
    proc = slotgate_proxy(tmp_path, [], ["--config", str(cfg), "--metrics",
                                         f"127.0.0.1:{mport}"])
    plain_port, proc.port = proc.port, doc["tls"]["port"]  # started once the TLS port is up
    cleanup.append(proc)
    proc.start()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", plain_port), timeout=5).close()
    c = tls_client(proc.port, certs.ca, None, socket_timeout=10)
    keys = [f"tlsonly:{i}" for i in range(30)]
    c.mset({k: k for k in keys})

    def on_replicas() -> bool:
        before = sum(reads_by_role(mport)["replica"].values())
        for k in keys:
            assert c.get(k) == k.encode()
        return sum(reads_by_role(mport)["replica"].values()) - before == len(keys)

    wait_until(on_replicas, what="the TLS client's reads on replicas")
    c.close()


# -- configuration errors name the key ---------------------------------------------------------
@pytest.mark.parametrize(("tls", "expected"), [
    ({"tls.port": 7390}, "tls.port: needs tls.cert_file too"),
    ({"tls.port": 7390, "tls.cert_file": "/nonexistent.crt", "tls.key_file": "/x.key"},
     "tls.cert_file: cannot read '/nonexistent.crt'"),
    ({"tls.protocols": "TLSv1.1 TLSv1.3"}, "tls.protocols: expected a range without gaps"),
    ({"tls.protocols": "SSLv3"}, "tls.protocols: expected protocol names from TLSv1, TLSv1.1"),
    ({"tls.protocols": [[]]}, "tls.protocols: expected protocol names from TLSv1, TLSv1.1"),
    ({"tls.auth_clients": "maybe"}, "tls.auth_clients: expected one of no, optional, yes"),
    ({"tls.auth_clients": ["yes"]}, "tls.auth_clients: expected one of no, optional, yes"),
    ({"backend.tls_verify": "some"}, "backend.tls_verify: expected one of full, ca, none"),
    ({"backend.tls": True, "backend.tls_ca_file": "/nonexistent-ca.crt"},
     "backend.tls_ca_file: cannot load CA certificates from '/nonexistent-ca.crt'"),
    ({"backend.tls_key_file": "/x.key"}, "backend.tls_key_file: needs backend.tls_cert_file"),
    ({"tls.only": True}, "tls.only: needs tls.port too"),
    ({"workers": 2, "tls.port": 0, "tls.cert_file": "/x.crt", "tls.key_file": "/x.key"},
     "tls.port: 0 (any free port) cannot be shared by workers"),
])
def test_config_errors_name_the_key(tls: dict, expected: str) -> None:
    with pytest.raises(config.ConfigError) as exc:
        config.build({"seeds": ["127.0.0.1:7000"], **tls})
    assert any(p.startswith(expected) for p in exc.value.problems), exc.value.problems


def test_config_tls_with_files(certs: Certs) -> None:
    raw = {"seeds": ["127.0.0.1:7000"], "tls.port": 7390, "tls.cert_file": str(certs.proxy.cert),
           "tls.key_file": str(certs.client.key), "tls.auth_clients": True}
    with pytest.raises(config.ConfigError) as exc:
        config.build(raw)
    assert exc.value.problems[0].startswith(
        "tls.cert_file/tls.key_file: not a certificate and its private key"), exc.value.problems
    raw["tls.key_file"] = str(certs.proxy.key)
    with pytest.raises(config.ConfigError) as exc:
        config.build(raw)
    assert exc.value.problems == ["tls.auth_clients: yes needs tls.ca_file (the CA that signed "
                                  "the clients' certificates)"]
    raw["tls.ca_file"] = str(certs.ca.cert)
    raw["tls.protocols"] = "TLSv1.3 TLSv1.2"
    s = config.build(raw).proxy
    assert (s.tls_port, s.tls_auth_clients, s.tls_protocols) == (7390, "yes",
                                                                 ("TLSv1.2", "TLSv1.3"))


def test_nodes_with_plain_and_tls_ports_are_reached_on_the_tls_one() -> None:
    """CLUSTER SHARDS lists both ports of a node that has both; with backend.tls the proxy
    takes its tls-port."""
    entry = [b"id", b"a" * 40, b"port", 7000, b"tls-port", 7100, b"ip", b"10.0.0.1",
             b"endpoint", b"10.0.0.1", b"role", b"master", b"replication-offset", 1,
             b"health", b"online"]
    reply = [[b"slots", [0, SLOT_COUNT - 1], b"nodes", [entry]]]
    assert slot_map_from_shards(reply, "h", tls=True).masters == ["10.0.0.1:7100"]
    assert slot_map_from_shards(reply, "h").masters == ["10.0.0.1:7000"]


def test_workers_share_the_tls_port(certs: Certs, tls_cluster: list[ManagedProcess],
                                    tmp_path: Path, cleanup: list[ManagedProcess]) -> None:
    """With workers, every worker listens on tls.port too (SO_REUSEPORT, as on listen)."""
    doc = proxy_config(certs, [tls_cluster[0].port])
    doc["workers"] = 2
    _, tls_port, _ = start_proxy(tmp_path, doc, cleanup)

    def pings() -> bool:
        for i in range(8):  # fresh connections, spread over the workers by the kernel
            c = tls_client(tls_port, certs.ca, None, socket_timeout=5, retry=NO_RETRY)
            try:
                c.set(f"tls:w:{i}", i)
                if c.get(f"tls:w:{i}") != str(i).encode():
                    return False
            finally:
                c.close()
        return True

    wait_until(pings, 30, "every worker serving TLS", ignore=(redis.ConnectionError,))


def test_node_name_check(certs: Certs, tls_cluster: list[ManagedProcess], tmp_path: Path,
                         cleanup: list[ManagedProcess]) -> None:
    """backend.tls_verify full checks the name in the nodes' certificates (127.0.0.1 and
    localhost here): another name fails with one clear log line; verify ca takes the chain
    alone, and a reload applies it."""
    doc = proxy_config(certs, [tls_cluster[0].port])
    doc["backend"]["tls_server_name"] = "wrong.example"
    doc["retry"] = {"deadline": "1s"}  # how long the request below waits for a master
    proc, tls_port, _ = start_proxy(tmp_path, doc, cleanup)
    wait_until(lambda: "TLS handshake with node" in proc.log_text(), 20, "the log line")
    assert "wrong.example" in proc.log_text()
    c = tls_client(tls_port, certs.ca, None, socket_timeout=20, retry=NO_RETRY)
    with pytest.raises(redis.ResponseError):
        c.get("tls:name")  # no node reachable: the slot has no master
    doc["backend"]["tls_verify"] = "ca"
    (tmp_path / "proxy.yaml").write_text(yaml.safe_dump(doc))
    os.kill(proc.pid, signal.SIGHUP)
    wait_until(lambda: c.set("tls:name", "ok"), 30, "the nodes reached after the reload",
               ignore=(redis.ResponseError,))
    assert c.get("tls:name") == b"ok"
    c.close()


def test_node_client_certificate_rotation(certs: Certs, tls_cluster: list[ManagedProcess],
                                          tmp_path: Path, cleanup: list[ManagedProcess]) -> None:
    """The client certificate the proxy shows the nodes is read again on SIGHUP: one the nodes
    do not trust fails the node connections opened after the reload, while the open ones keep
    serving; a good one again lets new connections through."""
    live = Pair(tmp_path / "node-client.crt", tmp_path / "node-client.key")
    shutil.copy(certs.client.cert, live.cert)
    shutil.copy(certs.client.key, live.key)
    doc = proxy_config(certs, [tls_cluster[0].port])
    doc["backend"].update(tls_cert_file=str(live.cert), tls_key_file=str(live.key))
    doc["retry"] = {"deadline": "1s"}  # how long the refused transaction below retries
    proc, tls_port, _ = start_proxy(tmp_path / "proxy", doc, cleanup)
    c = tls_client(tls_port, certs.ca, None, socket_timeout=20, retry=NO_RETRY)
    assert c.set("{rot}k", "v")  # the shared node connection is open now

    def rotate(pair: Pair, reloads: int) -> None:
        shutil.copy(pair.key, live.key)
        shutil.copy(pair.cert, live.cert)
        os.kill(proc.pid, signal.SIGHUP)
        wait_until(lambda: proc.log_text().count("reload: applied") >= reloads, 20, "the reload")

    stranger_ca = make_ca(tmp_path / "other", "other")
    rotate(stranger_ca.issue(tmp_path / "other", "stranger", 7), 1)
    assert c.get("{rot}k") == b"v"  # the open connection stays
    with pytest.raises(redis.RedisError):
        with c.pipeline(transaction=True) as tx:  # a connection of its own: refused by the node
            tx.incr("{rot}n").execute()
    rotate(certs.ca.issue(tmp_path / "new", "client2", 21), 2)
    with c.pipeline(transaction=True) as tx:
        assert tx.incr("{rot}n").execute() == [1]
    c.close()
