"""The proxy as one server, about itself: the same scripts to a standalone redis-server 7.0 and
to the proxy (a real or bundled cluster behind it), compared reply for reply, RESP2 and RESP3:
INFO's fields about the server itself, the CLIENT family (LIST/INFO/ID/SETNAME/GETNAME/KILL/
UNBLOCK/REPLY/NO-EVICT) and commands refused inside MULTI.

Both servers here are this module's own (no other test's connections), so client counts
compare exactly."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ClusterBackend
from tests.support import (
    ManagedProcess,
    RawClient,
    redis_server,
    running,
    slotgate_proxy,
    wait_until,
)

PROTOCOLS = [2, 3]


@pytest.fixture(scope="module")
def pair(cluster_backend: ClusterBackend, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[dict[str, ManagedProcess]]:
    """{"proxy": a proxy of this module's own, "real": a redis-server of its own}."""
    work: Path = tmp_path_factory.mktemp("transparency")
    real = redis_server(work)
    proxy = slotgate_proxy(work, cluster_backend.ports[:2])
    with running(real, proxy):
        yield {"proxy": proxy, "real": real}


def both(pair: dict[str, ManagedProcess], script: Callable[[int], object]) -> None:
    """Run ``script(port)`` against each server; the results must be equal."""
    got = {name: script(server.port) for name, server in pair.items()}
    assert got["proxy"] == got["real"]


def _client(port: int, proto: int) -> RawClient:
    c = RawClient(port)
    if proto == 3:
        c.call("HELLO", "3")
    return c


def _text(raw: bytes) -> str:
    body = raw[raw.index(b"\r\n") + 2: -2]
    return (body[4:] if raw[:1] == b"=" else body).decode()


def _info(c: RawClient, *sections: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in _text(c.call("INFO", *sections)).split("\r\n"):
        if line.startswith("# "):
            current = out.setdefault(line[2:], {})
        elif line:
            key, _, value = line.partition(":")
            current[key] = value
    return out


def _field(c: RawClient, section: str, name: str) -> int:
    return int(_info(c, section)[section.capitalize()][name])


# --- INFO ------------------------------------------------------------------------------------
@pytest.mark.parametrize("proto", PROTOCOLS)
def test_info_sections_and_fields_are_one_servers(pair: dict[str, ManagedProcess],
                                                  proto: int) -> None:
    def script(port: int) -> object:
        with _client(port, proto) as c:
            raw = c.call("INFO")
            default = _info(c)
            default.pop("Proxy", None)  # the proxy's own extra section (docs/COMMANDS.md)
            every = _info(c, "everything")
            every.pop("Proxy", None)
            return (raw[:1], list(default), list(default["Server"]), list(default["Clients"]),
                    list(default["Stats"]), list(default["Persistence"]),
                    list(default["CPU"]), default["Cluster"], list(every))
    both(pair, script)


def test_info_server_is_the_proxys_own(pair: dict[str, ManagedProcess]) -> None:
    proxy = pair["proxy"]
    with RawClient(proxy.port) as c:
        server = _info(c, "server")["Server"]
        assert server["process_id"] == str(proxy.pid)
        assert server["tcp_port"] == str(proxy.port)
        assert server["redis_mode"] == "standalone"
        assert re.fullmatch("[0-9a-f]{40}", server["run_id"])
        assert int(server["uptime_in_seconds"]) < 3600


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_connected_and_blocked_clients(pair: dict[str, ManagedProcess], proto: int) -> None:
    """connected_clients counts the server's clients; blocked_clients counts a client blocked
    in BLPOP while it waits, and no more once CLIENT UNBLOCK woke it."""
    def script(port: int) -> object:
        with _client(port, proto) as c, _client(port, proto) as w:
            # An earlier test's closed connection can still be counted for a moment on a busy
            # machine: start from this script's own two.
            wait_until(lambda: _field(c, "clients", "connected_clients") == 2,
                       what=lambda: f"connected_clients {_field(c, 'clients', 'connected_clients')}")
            seen = [_field(c, "clients", "connected_clients")]
            others = [_client(port, proto) for _ in range(3)]
            for o in others:
                o.call("PING")  # accepted and served
            seen.append(_field(c, "clients", "connected_clients"))
            for o in others:
                o.close()
            wait_until(lambda: _field(c, "clients", "connected_clients") == seen[0])
            wid = int(w.call("CLIENT", "ID")[1:-2])
            w.send("BLPOP", "{tb}nolist", "0")
            wait_until(lambda: _field(c, "clients", "blocked_clients") == 1)
            seen.append(_field(c, "stats", "total_connections_received") > 0)
            seen.append(c.call("CLIENT", "UNBLOCK", str(wid), "ERROR"))
            seen.append(w.read())
            seen.append(_field(c, "clients", "blocked_clients"))
            w.send("BRPOP", "{tb}nolist", "0")
            wait_until(lambda: _field(c, "clients", "blocked_clients") == 1)
            seen.append(c.call("CLIENT", "UNBLOCK", str(wid)))
            seen.append(w.read())
            seen.append(c.call("CLIENT", "UNBLOCK", str(wid)))  # no longer blocked
            seen.append(_field(c, "clients", "blocked_clients"))
            return seen
    both(pair, script)


def test_pubsub_counts_in_info_stats(pair: dict[str, ManagedProcess]) -> None:
    def script(port: int) -> object:
        with RawClient(port) as c, RawClient(port) as sub:
            def counts() -> list[int]:
                stats = _info(c, "stats")["Stats"]
                return [int(stats[k]) for k in ("pubsub_channels", "pubsub_patterns")]
            before = counts()
            sub.call_frames("SUBSCRIBE", "ic1", "ic2", frames=2)
            sub.call_frames("PSUBSCRIBE", "ic*", frames=1)
            during = counts()
            sub.call_frames("UNSUBSCRIBE", frames=2)
            after = counts()
            return ([d - b for d, b in zip(during, before, strict=True)],
                    [a - b for a, b in zip(after, before, strict=True)])
    both(pair, script)


def test_killed_blocked_client_is_no_longer_blocked(pair: dict[str, ManagedProcess]) -> None:
    def script(port: int) -> object:
        with RawClient(port) as c, RawClient(port) as w:
            wid = w.call("CLIENT", "ID")[1:-2].decode()
            w.send("BLPOP", "{kb}nolist", "0")
            wait_until(lambda: _field(c, "clients", "blocked_clients") == 1)
            line = _text(c.call("CLIENT", "LIST", "ID", wid))
            shown = [f" {f} " in line for f in ("flags=b", "cmd=blpop", "idle=0")]
            killed = c.call("CLIENT", "KILL", "ID", wid)
            wait_until(lambda: _field(c, "clients", "blocked_clients") == 0)
            c.call("RPUSH", "{kb}nolist", "x")
            return shown, killed, _closed(w), c.call("LPOP", "{kb}nolist")  # nothing popped
    both(pair, script)


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_killed_subscriber_is_counted_by_no_publish(pair: dict[str, ManagedProcess],
                                                   proto: int) -> None:
    def script(port: int) -> object:
        out = []
        for kill in (["TYPE", "pubsub"], ["SKIPME", "yes"]):
            with RawClient(port) as c, _client(port, proto) as sub:
                sub.call_frames("SUBSCRIBE", "kch", frames=1)
                sub.call_frames("PSUBSCRIBE", "kc*", frames=1)
                out.append(c.call("PUBLISH", "kch", "m"))
                out.append(c.call("CLIENT", "KILL", *kill))
                out.append(c.call("PUBLISH", "kch", "m"))
        with RawClient(port) as c:
            out.append(c.call("CLIENT", "KILL", _text(c.call("CLIENT", "INFO")).split(" ")[1][5:]))
            out.append(c.read_until_closed())  # +OK, then the connection closes
        return out
    both(pair, script)


def test_keyspace_hits_and_errorstats(pair: dict[str, ManagedProcess]) -> None:
    def script(port: int) -> object:
        with RawClient(port) as c:
            before = _info(c, "stats", "errorstats", "commandstats")
            c.call("SET", "{ks}a", "1")
            c.call("GET", "{ks}a")
            c.call("GET", "{ks}missing")
            c.call("LPUSH", "{ks}a", "x")  # WRONGTYPE: a failed call
            c.call("NOSUCHCOMMAND")  # rejected, and no command's
            c.call("GET")  # rejected: arity
            after = _info(c, "stats", "errorstats", "commandstats")
            delta = {k: int(after["Stats"][k]) - int(before["Stats"][k])
                     for k in ("keyspace_hits", "keyspace_misses", "total_error_replies",
                               "total_commands_processed")}
            errors = {k: int(v.split("=")[1]) - int(
                before["Errorstats"].get(k, "count=0").split("=")[1])
                for k, v in after["Errorstats"].items()}
            c.call("DEL", "{ks}a")

            def calls(info: dict[str, dict[str, str]], name: str) -> list[int]:
                line = info["Commandstats"].get(f"cmdstat_{name}", "")
                fields = dict(p.split("=") for p in line.split(",") if p)
                return [int(fields.get(k, 0)) for k in ("calls", "rejected_calls", "failed_calls")]
            stats = {name: [a - b for a, b in zip(calls(after, name), calls(before, name),
                                                  strict=True)]
                     for name in ("get", "set", "lpush", "nosuchcommand")}
            return delta, {k: v for k, v in errors.items() if v}, stats
    both(pair, script)


def test_commandstats_time_the_calls(pair: dict[str, ManagedProcess]) -> None:
    """``usec`` and ``usec_per_call`` as Redis writes them; the proxy counts the time it took
    to serve each call end to end, so its ``usec`` grows with every call."""
    def script(port: int) -> object:
        with RawClient(port) as c:
            c.call("SET", "{us}a", "1")
            for _ in range(20):
                c.call("GET", "{us}a")
            c.call("DEL", "{us}a")
            line = _info(c, "commandstats")["Commandstats"]["cmdstat_get"]
        fields = dict(p.split("=") for p in line.split(","))
        usec, calls = int(fields["usec"]), int(fields["calls"])
        assert fields["usec_per_call"] == "%.2f" % (usec / calls)
        return list(fields), usec > 0 or port == pair["real"].port
    both(pair, script)


# --- CLIENT ----------------------------------------------------------------------------------
def _line_fields(line: str) -> list[str]:
    return [part.split("=", 1)[0] for part in line.split(" ")]


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_client_identity_commands(pair: dict[str, ManagedProcess], proto: int) -> None:
    def script(port: int) -> object:
        with _client(port, proto) as c:
            out: list[object] = [c.call("CLIENT", "GETNAME"),
                                 c.call("CLIENT", "SETNAME", "worker-1"),
                                 c.call("CLIENT", "GETNAME"),
                                 c.call("CLIENT", "SETNAME", "bad name")]
            my_id = int(c.call("CLIENT", "ID")[1:-2])
            info = _text(c.call("CLIENT", "INFO"))
            listed = _text(c.call("CLIENT", "LIST", "ID", str(my_id), "999999"))
            out += [_line_fields(info), info.count("\n"), listed.count("\n")]
            out += [f"id={my_id} " in info, "name=worker-1 " in info,
                    "cmd=client|info " in info, "flags=N " in info, f"resp={proto}" in info]
            out.append("cmd=client|list " in listed)
            for argv in (["LIST", "TYPE", "foo"], ["LIST", "ID", "abc"], ["LIST", "ID"],
                         ["LIST", "foo"], ["LIST", "TYPE", "normal", "ID", "1"],
                         ["LIST", "TYPE", "pubsub"], ["NO-EVICT", "maybe"], ["NO-EVICT", "on"],
                         ["REPLY", "maybe"], ["UNBLOCK", "abc"], ["UNBLOCK", "1", "foo"],
                         ["UNBLOCK", "1", "timeout", "x"], ["UNBLOCK", "999999"]):
                out.append(c.call("CLIENT", *argv))
            out.append("flags=e " in _text(c.call("CLIENT", "INFO")))
            return out
    both(pair, script)


def test_client_list_shows_every_client(pair: dict[str, ManagedProcess]) -> None:
    def script(port: int) -> object:
        with RawClient(port) as c, RawClient(port) as sub, RawClient(port) as tx:
            sub.call_frames("SUBSCRIBE", "cl1", "cl2", frames=2)
            tx.call("MULTI")
            tx.call("SET", "{cl}a", "1")
            lines = sorted(_text(c.call("CLIENT", "LIST")).splitlines())
            pubsub = _text(c.call("CLIENT", "LIST", "TYPE", "pubsub")).splitlines()
            tx.call("DISCARD")
            shapes = sorted((" flags=P " in ln, " sub=2 " in ln, " flags=x " in ln,
                             " multi=1 " in ln) for ln in lines)
            return len(lines), shapes, len(pubsub), " sub=2 " in pubsub[0]
    both(pair, script)


def _closed(c: RawClient) -> bool:
    try:
        c.call("PING")
    except (ConnectionError, OSError):
        return True
    return False


def test_client_kill_filters(pair: dict[str, ManagedProcess]) -> None:
    def script(port: int) -> object:
        out: list[object] = []
        with RawClient(port) as c:
            for argv in (["ID", "abc"], ["ID", "0"], ["MAXAGE", "10"], ["TYPE", "foo"],
                         ["USER", "nobody"], ["SKIPME", "maybe"], ["ADDR"], ["1.2.3.4:5"],
                         ["FOO", "bar"], ["ADDR", "1.2.3.4:5", "ID"], ["LADDR", "1.1.1.1:1"],
                         ["ID", "1", "ID", "999999"]):
                out.append(c.call("CLIENT", "KILL", *argv))
            kinds = {
                "id": lambda v: ["ID", str(int(v.call("CLIENT", "ID")[1:-2]))],
                "addr": lambda v: ["ADDR", _text(v.call("CLIENT", "INFO")).split(" ")[1][5:]],
                "old": lambda v: [_text(v.call("CLIENT", "INFO")).split(" ")[1][5:]],
            }
            for argv_of in kinds.values():
                victim = RawClient(port)
                victim.call("PING")
                out.append(c.call("CLIENT", "KILL", *argv_of(victim)))
                out.append(_closed(victim))
                victim.close()
            sub = RawClient(port)
            sub.call_frames("SUBSCRIBE", "killme", frames=1)
            out.append(c.call("CLIENT", "KILL", "TYPE", "pubsub"))
            out.append(_closed(sub))
            sub.close()
            laddr = _text(c.call("CLIENT", "INFO")).split(" ")[2][6:]
            victims = [RawClient(port) for _ in range(2)]
            for v in victims:
                v.call("PING")  # accepted and served
            out.append(c.call("CLIENT", "KILL", "LADDR", laddr))  # everyone but me
            out.append([_closed(v) for v in victims])
            for v in victims:
                v.close()
            victim = RawClient(port)
            victim.call("PING")
            out.append(c.call("CLIENT", "KILL", "USER", "default", "SKIPME", "yes"))
            out.append(_closed(victim))
            victim.close()
            out.append(c.call("PING"))
        with RawClient(port) as c:
            # Closed connections are gone once the server has seen them close.
            wait_until(lambda: _field(c, "clients", "connected_clients") == 1)
            c.send("CLIENT", "KILL", "USER", "default", "SKIPME", "no")
            out.append(c.read_until_closed())  # its own count, then the connection closes
        return out
    both(pair, script)


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_client_reply_off_on_skip(pair: dict[str, ManagedProcess], proto: int) -> None:
    def script(port: int) -> object:
        with _client(port, proto) as c:
            c.send_raw(b"".join(_enc(a) for a in (
                ["CLIENT", "REPLY", "OFF"], ["SET", "{rp}a", "1"], ["GET", "{rp}a"], ["NOSUCH"],
                ["MGET", "rp-x1", "rp-y2", "rp-z3"], ["DBSIZE"], ["EXISTS", "rp-x1", "rp-y2"],
                ["CLIENT", "REPLY", "SKIP"], ["MGET", "{rp}a", "{rp}b"],
                ["CLIENT", "REPLY", "ON"], ["GET", "{rp}a"],
                ["CLIENT", "REPLY", "SKIP"], ["MGET", "rp-x1", "rp-y2"],
                ["EXISTS", "rp-x1", "rp-y2", "rp-z3"],
                ["CLIENT", "REPLY", "SKIP"], ["GET", "{rp}a"], ["PING", "after-skip"],
                ["CLIENT", "REPLY", "SKIP"], ["CLIENT", "REPLY", "ON"],
                ["CLIENT", "REPLY", "OFF"], ["BLPOP", "{rp}l", "0.01"], ["RESET"],
                ["DEL", "{rp}a"])))
            out: list[object] = list(c.read_frames(7))
            out.append(c.nothing_pending(0.3))
            return out
    both(pair, script)


def test_client_reply_off_keeps_a_subscribers_pushes(pair: dict[str, ManagedProcess]) -> None:
    """Redis 7.0 sends pushes (confirmations, messages) even while replies are off."""
    def script(port: int) -> object:
        with _client(port, 3) as c, RawClient(port) as pub:
            c.send("CLIENT", "REPLY", "OFF")
            c.send("SUBSCRIBE", "quiet-ch")
            wait_until(lambda: pub.call("PUBLISH", "quiet-ch", "unheard") == b":1\r\n")
            c.send("CLIENT", "REPLY", "ON")
            # The confirmation, the message and +OK (a message travels from its node apart
            # from the replies: docs/COMMANDS.md).
            out: list[object] = [sorted(c.read_frames(3))]
            out.append(pub.call("PUBLISH", "quiet-ch", "heard"))
            out.append(c.read())
            out.append(c.call("UNSUBSCRIBE"))
            return out
    both(pair, script)


def _enc(argv: list[str]) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a.encode())
                                              for a in argv)


# --- MULTI -----------------------------------------------------------------------------------
@pytest.mark.parametrize("proto", PROTOCOLS)
@pytest.mark.parametrize("refused", [["SAVE"], ["SHUTDOWN"], ["SHUTDOWN", "NOSAVE"], ["SYNC"],
                                     ["PSYNC", "?", "-1"], ["WATCH", "{mx}a"], ["MULTI"],
                                     ["NOSUCHCOMMAND"], ["GET"], ["PING"]])
def test_multi_refuses_as_redis(pair: dict[str, ManagedProcess], refused: list[str],
                                proto: int) -> None:
    def script(port: int) -> object:
        with _client(port, proto) as c:
            return c.pipeline([["MULTI"], ["SET", "{mx}a", "1"], refused, ["GET", "{mx}a"],
                               ["EXEC"], ["EXISTS", "{mx}a"], ["DEL", "{mx}a"]])
    both(pair, script)


def test_blocked_client_is_woken_while_others_are_served(pair: dict[str, ManagedProcess]) -> None:
    """CLIENT UNBLOCK through the proxy reaches the node even as other clients keep going."""
    proxy = pair["proxy"]
    with RawClient(proxy.port) as c, RawClient(proxy.port) as w:
        wid = w.call("CLIENT", "ID")[1:-2].decode()
        w.send("BLPOP", "{wk}nolist", "0")
        wait_until(lambda: _field(c, "clients", "blocked_clients") == 1)
        stop = threading.Event()

        def traffic() -> None:
            with RawClient(proxy.port) as t:
                while not stop.is_set():
                    t.call("INCR", "{wk}n")
        worker = threading.Thread(target=traffic)
        worker.start()
        try:
            assert c.call("CLIENT", "UNBLOCK", wid) == b":1\r\n"
            assert w.read() == b"*-1\r\n"
        finally:
            stop.set()
            worker.join()
        c.call("DEL", "{wk}n")
