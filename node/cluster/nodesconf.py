"""``nodes.conf``: the cluster config file, written and read as Redis 7.0 does.

Content: the CLUSTER NODES lines (handshake nodes left out), then
``vars currentEpoch <n> lastVoteEpoch <n>``. Saved atomically (as Redis 7.2 does; 7.0 writes
in place and a crash mid-write can leave a torn file): ``<file>.tmp-<pid>``, fsync when asked
(epoch changes, votes, role changes, RESET), rename over the file, and fsync of the directory
when asked. Saves are coalesced to one per event-loop batch by the caller, so the rename costs
little. The file is ``flock``ed for the life of the process so two nodes cannot share it.
``load`` applies Redis' load rules; a format error is fatal at start-up.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable

from slotgate.node.cluster import bus
from slotgate.node.cluster.state import FLAG_BY_WORD, ClusterState, Node, add_replica

log = logging.getLogger("node.cluster")


class ConfigFileError(Exception):
    """The cluster config file is unusable; ``str(e)`` is the message the node logs."""


CORRUPTED = "Unrecoverable error: corrupted cluster config file \"%s\"."


def render(state: ClusterState, myself_ports: tuple[int, int] | None = None) -> str:
    return (state.nodes_text(skip_handshake=True, myself_ports=myself_ports)
            + f"vars currentEpoch {state.current_epoch} lastVoteEpoch {state.last_vote_epoch}\n")


class ConfigFile:
    """The locked config file of one node."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Take the flock (creating the file if needed); ConfigFileError if another holds it."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            raise ConfigFileError(
                f"Sorry, the cluster configuration file {self.path} is already used by a "
                "different Redis Cluster node. Please make sure that different nodes use "
                "different cluster configuration files.") from e
        old, self._lock_fd = self._lock_fd, fd
        if old is not None:
            os.close(old)

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def save(self, text: str, fsync: bool) -> None:
        """Write ``text`` atomically (tmp + [fsync] + rename [+ dir fsync]). Raises OSError."""
        tmp = f"{self.path}.tmp-{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(text.encode())
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, self.path)
        if fsync:
            dfd = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        if self._lock_fd is not None:
            self.lock()  # the lock follows the new inode

    def read(self) -> str | None:
        """The file's text, or None when it is missing or empty (a new node)."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except FileNotFoundError:
            return None
        return text if text.strip() else None


def myself_is_replica(path: str) -> bool:
    """Whether the config file at ``path`` records this node as a replica: read before the
    data is loaded, which keeps expired keys on a replica (iAmMaster, rdbLoad)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in lines:
        words = line.split()
        if len(words) > 2 and "myself" in words[2].split(","):
            return "slave" in words[2].split(",")
    return False


def load(text: str, path: str, clock_ms: Callable[[], int]) -> ClusterState:
    """Build the state from nodes.conf ``text`` with clusterLoadConfig's rules."""
    now = clock_ms()
    nodes: dict[bytes, Node] = {}
    myself: Node | None = None
    current_epoch = last_vote_epoch = 0
    slots: list[tuple[Node, int]] = []
    migrating: dict[int, bytes] = {}
    importing: dict[int, bytes] = {}

    def get(name: bytes) -> Node:
        n = nodes.get(name)
        if n is None:
            n = nodes[name] = Node(name, 0, now)
        return n

    for line in text.split("\n"):
        argv = line.split()
        if not argv:
            continue
        if argv[0] == "vars":
            for i in range(1, len(argv) - 1, 2):
                if argv[i] == "currentEpoch":
                    current_epoch = int(argv[i + 1])
                elif argv[i] == "lastVoteEpoch":
                    last_vote_epoch = int(argv[i + 1])
                else:
                    log.warning("Skipping unknown cluster config variable '%s'", argv[i])
            continue
        if len(argv) < 8:
            raise ConfigFileError(CORRUPTED % path)
        n = get(argv[0].encode())
        addr = argv[1]
        if "," in addr:
            addr, n.hostname = addr.split(",", 1)[0], addr.split(",", 1)[1].split(",")[0]
        if ":" not in addr:
            raise ConfigFileError(CORRUPTED % path)
        n.ip, portpart = addr.rsplit(":", 1)
        port, _, busport = portpart.partition("@")
        try:
            n.port = int(port)
            n.cport = int(busport) if busport else n.port + 10000
        except ValueError:
            raise ConfigFileError(CORRUPTED % path) from None
        for word in argv[2].split(","):
            if word == "noflags":
                continue
            bit = FLAG_BY_WORD.get(word)
            if bit is None:
                raise ConfigFileError("Unknown flag in redis cluster config file")
            n.flags |= bit
            if bit == bus.F_MYSELF:
                myself = n
            elif bit == bus.F_FAIL:
                n.fail_time = now
        if argv[3] != "-":
            master = get(argv[3].encode())
            n.slaveof = master
            add_replica(master, n)
        if int(argv[4]):
            n.ping_sent = now
        if int(argv[5]):
            n.pong_received = now
        n.config_epoch = 0 if n.flags & bus.F_SLAVE else int(argv[6])
        for tok in argv[8:]:
            if tok.startswith("["):
                body = tok[1:-1]
                if "->-" in body:
                    num, target = body.split("->-")
                    migrating[int(num)] = target.encode()
                elif "-<-" in body:
                    num, source = body.split("-<-")
                    importing[int(num)] = source.encode()
                else:
                    raise ConfigFileError(CORRUPTED % path)
                continue
            a, _, b = tok.partition("-")
            start = int(a)
            end = int(b) if b else start
            for slot in range(start, end + 1):
                slots.append((n, slot))
    if myself is None:
        raise ConfigFileError(CORRUPTED % path)
    st = ClusterState(myself, clock_ms)
    st.nodes = {}
    for name, n in nodes.items():
        st.nodes[name] = n
    for n, slot in slots:
        st.add_slot(n, slot)
    for slot, name in migrating.items():
        st.migrating[slot] = get(name)
        st.nodes.setdefault(name, st.migrating[slot])
    for slot, name in importing.items():
        st.importing[slot] = get(name)
        st.nodes.setdefault(name, st.importing[slot])
    st.current_epoch = max(current_epoch, st.max_config_epoch())
    st.last_vote_epoch = last_vote_epoch
    return st
