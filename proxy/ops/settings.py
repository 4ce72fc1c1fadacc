"""Proxy settings: one plain dataclass, filled by the CLI (and later by the config loader).

Every duration carries its unit in its name. Nothing here does I/O; ``validate()`` names the bad
field in its message so a config layer can pass it straight to the user.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any

from slotgate.protocol.acl_lines import BOTH_SOURCES

Address = tuple[str, int]
READ_POLICIES = ("master", "prefer-master", "replica", "prefer-replica", "nearest")
# What a user or a listener may set for its own clients (policy_users, policy_tls).
POLICY_FIELDS = ("read_from", "read_your_writes", "durable_writes")


def parse_address(text: str) -> Address:
    """``"host:port"`` -> ``(host, port)``; raises ``ValueError`` naming the bad text."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad address {text!r}: expected host:port")
    return host, int(port)


@dataclass
class ProxySettings:
    listen_host: str = "127.0.0.1"
    listen_port: int = 7777
    seeds: list[Address] = field(default_factory=list)

    # Backend connections.
    backend_connections_per_node: int = 1
    connect_timeout_ms: int = 1000
    # A pipelined backend connection whose oldest request waits longer than this is declared
    # dead (its sent writes get the unknown-fate error). Blocking commands are exempt.
    command_timeout_ms: int = 5000
    reconnect_backoff_min_ms: int = 10
    reconnect_backoff_max_ms: int = 1000

    # Redirects and retries.
    max_redirects: int = 16
    # How long one request may spend retrying (CLUSTERDOWN, TRYAGAIN, lost connections,
    # unserved slots) before its error is returned. Longer than a typical failover.
    retry_deadline_ms: int = 10000
    retry_backoff_min_ms: int = 10
    retry_backoff_max_ms: int = 500

    # Topology.
    topology_refresh_interval_ms: int = 5000
    # MOVED storms and dying connections trigger at most one refresh per this gap.
    topology_refresh_min_gap_ms: int = 100

    # The proxy's own slow log (Redis' directives, proxy/front/slowlog.py).
    slowlog_log_slower_than_us: int = 10000
    slowlog_max_len: int = 128
    # The proxy's own LATENCY and INFO latencystats (Redis' directives, proxy/front/latency.py).
    latency_monitor_threshold_ms: int = 0
    latency_tracking: bool = True
    latency_tracking_info_percentiles: tuple[float, ...] = (50.0, 99.0, 99.9)
    # CLIENT TRACKING: the proxy's table of tracked keys (Redis' tracking-table-max-keys).
    tracking_table_max_keys: int = 1_000_000

    # Client limits.
    max_clients: int = 10000
    # Replies a client may have outstanding before the proxy stops reading its socket.
    max_pipeline_depth: int = 1000
    max_bulk_len: int = 512 * 1024 * 1024
    max_inline_len: int = 64 * 1024
    # Redis accepts up to INT_MAX elements in a request (memory is bounded by what arrives).
    max_multibulk_len: int = 2**31 - 1

    # Shutdown.
    shutdown_grace_ms: int = 5000

    # Credentials the proxy presents to the nodes (AUTH on every connection it opens):
    # cluster-wide, and per node address ("host:port" -> (username or None, password)).
    backend_username: str | None = None
    backend_password: str | None = None
    backend_node_auth: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    # Not a configuration key: the password before one the proxy adopted at run time
    # (front/guard.py), tried when the current one is refused (a node that missed the change).
    backend_password_before: str | None = None
    # Commands that change the nodes' credentials or users pass through (else refused).
    admin_commands: bool = False
    # A MULTI whose commands touch several slots: "refuse" or "per_shard" (front/shardtx.py).
    cross_slot_transactions: str = "refuse"
    # Numbered databases: SELECT 0..databases-1 (front/databases.py); 1: database 0 only.
    databases: int = 1

    # Cluster emulation: CLUSTER SLOTS/SHARDS/NODES/... answered as a cluster of the proxies.
    cluster_emulation: bool = False
    # The address announced for this proxy (None: the address each client connected to).
    cluster_announce: Address | None = None
    # Every proxy to list (this one included); empty: this proxy alone.
    cluster_proxies: list[Address] = field(default_factory=list)

    # Auth at the proxy (the ``auth`` section; proxy/front/users.py): the default user's
    # password, users as Redis ACL rule lines, an ACL file.
    auth_requirepass: str | None = None
    auth_users: tuple[str, ...] = ()
    auth_aclfile: str | None = None

    # TLS (proxy/ops/tls.py). Clients: a TLS listener on listen_host:tls_port beside the plain
    # one; Redis' tls-auth-clients (no/optional/yes); protocol names as Redis' tls-protocols.
    tls_port: int | None = None
    tls_only: bool = False  # no plain listener (listen_host is the TLS listener's host)
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_ca_file: str | None = None
    tls_auth_clients: str = "no"
    tls_protocols: tuple[str, ...] = ()
    tls_ciphers: str | None = None
    # Nodes: every connection the proxy opens; verify "full" (CA and name), "ca" or "none".
    backend_tls: bool = False
    backend_tls_ca_file: str | None = None
    backend_tls_cert_file: str | None = None
    backend_tls_key_file: str | None = None
    backend_tls_verify: str = "full"
    backend_tls_server_name: str | None = None
    # Not configuration keys: the contexts built from the above (tls.load), again at every
    # reload, so that a certificate file replaced in place is read anew.
    tls_context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    backend_tls_context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    # Replica reads and durable writes (front/readwrite.py, docs/PROXY.md "Replica reads").
    # read_from: master | prefer-master | replica | prefer-replica | nearest.
    read_from: str = "master"
    max_replica_lag_ms: int = 5000
    read_your_writes: bool = False
    replica_check_interval_ms: int = 100
    # durable_writes: N > 0: a write is acknowledged once N replicas have it (WAIT N timeout).
    durable_writes: int = 0
    durable_timeout_ms: int = 1000
    # The same three (POLICY_FIELDS) per user name and for the TLS listener's clients, each
    # overriding only the fields it names (the user's over the listener's over the above).
    policy_users: dict[str, dict[str, Any]] = field(default_factory=dict)
    policy_tls: dict[str, Any] = field(default_factory=dict)

    def replica_reads_anywhere(self) -> bool:
        """Some client may read from replicas (the replicas' checks must run)."""
        overrides = [self.policy_tls, *self.policy_users.values()]
        return self.read_from != "master" or any(
            o.get("read_from", "master") != "master" for o in overrides)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field."""
        if not self.seeds:
            raise ValueError("seeds: at least one seed address is required")
        if not 0 <= self.listen_port < 65536:
            raise ValueError(f"listen_port: {self.listen_port} is not a TCP port")
        positive = (
            "backend_connections_per_node", "connect_timeout_ms", "command_timeout_ms",
            "reconnect_backoff_min_ms", "reconnect_backoff_max_ms", "max_redirects",
            "retry_deadline_ms", "retry_backoff_min_ms", "retry_backoff_max_ms",
            "topology_refresh_interval_ms", "max_clients", "max_pipeline_depth",
            "max_bulk_len", "max_inline_len", "max_multibulk_len", "max_replica_lag_ms",
            "replica_check_interval_ms", "durable_timeout_ms",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if self.read_from not in READ_POLICIES:
            raise ValueError(f"read_from: one of {', '.join(READ_POLICIES)}, got {self.read_from!r}")
        if self.durable_writes < 0:
            raise ValueError(f"durable_writes: must be >= 0, got {self.durable_writes}")
        for where, policy in [("policy_tls", self.policy_tls),
                              *((f"policy_users.{u}", p) for u, p in self.policy_users.items())]:
            for name, value in policy.items():
                if name not in POLICY_FIELDS:
                    raise ValueError(f"{where}: unknown field {name!r}")
                if name == "read_from" and value not in READ_POLICIES:
                    raise ValueError(f"{where}.read_from: one of {', '.join(READ_POLICIES)}")
        if self.backend_username is not None and self.backend_password is None:
            raise ValueError("backend_username: set without backend_password")
        if self.auth_users and self.auth_aclfile:
            raise ValueError(f"auth.aclfile: {BOTH_SOURCES}")
        if self.tls_port is not None and not 0 <= self.tls_port < 65536:
            raise ValueError(f"tls_port: {self.tls_port} is not a TCP port")
        if self.tls_only and self.tls_port is None:
            raise ValueError("tls.only: needs tls.port too")
        for name in ("topology_refresh_min_gap_ms", "shutdown_grace_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
