"""Test certificates made at test time with the ``openssl`` command (never committed), and a
TLS-only cluster of real redis-servers.

The ``openssl`` command comes with the Debian image the tests run on (redis-server's TLS is
OpenSSL's), so no Python package is added for it.
"""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.support import ManagedProcess, redis_cli, redis_server, start_all, wait_until

SAN = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _new_key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-out", str(path))


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class CA:
    cert: Path
    key: Path

    def issue(self, out_dir: Path, name: str, serial: int, cn: str | None = None) -> Pair:
        """A certificate for 127.0.0.1 and localhost (server and client use), signed here."""
        out_dir.mkdir(parents=True, exist_ok=True)
        key, csr, cert = (out_dir / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        ext = out_dir / f"{name}.ext"
        ext.write_text(SAN)
        _new_key(key)
        _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={cn or name}")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
                 "-set_serial", str(serial), "-days", "2", "-out", str(cert), "-extfile", str(ext))
        return Pair(cert, key)


def make_ca(out_dir: Path, name: str = "ca") -> CA:
    out_dir.mkdir(parents=True, exist_ok=True)
    key, cert = out_dir / f"{name}.key", out_dir / f"{name}.crt"
    _new_key(key)
    _openssl("req", "-x509", "-new", "-key", str(key), "-out", str(cert), "-days", "2",
             "-subj", f"/CN=slotgate test {name}")
    return CA(cert, key)


def client_context(ca: CA, pair: Pair | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    if pair is not None:
        ctx.load_cert_chain(str(pair.cert), str(pair.key))
    return ctx


def cli_tls_args(ca: CA, pair: Pair | None) -> list[str]:
    """redis-cli's TLS flags."""
    args = ["--tls", "--cacert", str(ca.cert)]
    if pair is not None:
        args += ["--cert", str(pair.cert), "--key", str(pair.key)]
    return args


def tls_client(port: int, ca: CA, pair: Pair | None, **kw: object) -> redis.Redis:
    """redis-py over TLS (``ssl=True``), verifying the server's certificate and name."""
    extra = {"ssl_certfile": str(pair.cert), "ssl_keyfile": str(pair.key)} if pair else {}
    return redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(ca.cert),
                       ssl_cert_reqs="required", ssl_check_hostname=True, **extra,
                       **kw)  # type: ignore[arg-type]


def tls_nodes(workdir: Path, ca: CA, server: Pair, count: int) -> list[ManagedProcess]:
    """``count`` real cluster-enabled redis-servers speaking TLS only (plain port 0, TLS on the
    cluster bus and replication too), client certificates required; started, not yet formed."""
    nodes = []
    for _ in range(count):
        n = redis_server(workdir, cluster=True)
        n.argv += ["--port", "0", "--tls-port", str(n.port), "--tls-cert-file", str(server.cert),
                   "--tls-key-file", str(server.key), "--tls-ca-cert-file", str(ca.cert),
                   "--tls-auth-clients", "yes", "--tls-cluster", "yes",
                   "--tls-replication", "yes"]
        nodes.append(n)
    return start_all(nodes)


def form_cluster(nodes: Sequence[ManagedProcess], ca: CA, client: Pair) -> None:
    """The real ``redis-cli --tls --cluster create``, then every node reports ok."""
    redis_cli(*cli_tls_args(ca, client), "--cluster", "create",
              *(f"127.0.0.1:{n.port}" for n in nodes), "--cluster-yes", timeout_s=60)

    def all_ok() -> bool:
        for n in nodes:
            info = tls_client(n.port, ca, client, socket_timeout=2).execute_command("CLUSTER", "INFO")
            if b"cluster_state:ok" not in info:
                return False
        return True

    wait_until(all_ok, 60, "cluster_state:ok on every TLS node", interval_s=0.1,
               ignore=(redis.RedisError,))


def peer_certificate(port: int, ca: CA) -> dict:
    """The certificate a fresh TLS connection to ``port`` is shown (verified)."""
    import socket

    ctx = client_context(ca)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        cert = s.getpeercert()
    assert cert is not None
    return cert
