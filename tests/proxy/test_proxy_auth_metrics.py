"""Clients' refused logins at the proxy on /metrics: slotgate_client_auth_failures_total by
reason (wrong password, disabled user, no such user), for AUTH and HELLO ... AUTH. The proxy
answers AUTH itself, so no cluster is needed behind it."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.proxy.auth_support import REQUIREPASS, USERS
from tests.proxy.test_backend_auth import metrics
from tests.support import ManagedProcess, RawClient, free_port, slotgate_proxy

FAMILY = "slotgate_client_auth_failures_total"


def failures(metrics_port: int) -> dict[str, float]:
    return {dict(labels)["reason"]: v for (name, labels), v in metrics(metrics_port).items()
            if name == FAMILY}


def test_refused_logins_counted_by_reason(tmp_path: Path, cleanup: list[ManagedProcess]) -> None:
    cfg = tmp_path / "proxy.yaml"
    cfg.write_text(yaml.safe_dump({"seeds": [f"127.0.0.1:{free_port()}"],
                                   "auth": {"requirepass": REQUIREPASS, "users": USERS}}))
    metrics_port = free_port()
    proc = slotgate_proxy(tmp_path, [], ["--config", str(cfg), "--metrics",
                                         f"127.0.0.1:{metrics_port}"])
    cleanup.append(proc)
    proc.start()
    assert failures(metrics_port) == {"wrong_password": 0, "disabled_user": 0, "no_such_user": 0}
    c = RawClient(proc.port)
    try:
        sent = [
            (("AUTH", "wrong"), b"-WRONGPASS"),  # the default user
            (("AUTH", "alice", "wrong"), b"-WRONGPASS"),
            (("AUTH", "bob", "bobpw"), b"-WRONGPASS"),  # bob is off
            (("AUTH", "nosuch", "x"), b"-WRONGPASS"),
            (("HELLO", "3", "AUTH", "nosuch", "x"), b"-WRONGPASS"),
            (("HELLO", "2", "AUTH", "alice", "nope"), b"-WRONGPASS"),
            (("AUTH", "alice", "alicepw"), b"+OK"),  # not a failure
            (("AUTH", REQUIREPASS), b"+OK"),
        ]
        for argv, start in sent:
            c.send(*argv)
            assert c.read().startswith(start), argv
    finally:
        c.close()
    assert failures(metrics_port) == {"wrong_password": 3, "disabled_user": 1, "no_such_user": 2}
