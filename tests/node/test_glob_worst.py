"""Issue 12's pattern-matching figure: 50 worst-case patterns of up to 256 bytes
(tests/node/glob_worst.py) against keys of up to 1 KB each answer within 10 ms on the node, as
KEYS, SCAN MATCH, PUBLISH to pattern subscribers and ACL key patterns, while another client's
PINGs keep being answered; every reply is redis-server 7.0.15's.

A command's time is its round trip seen by the client, the best of five tries (this 2-core
machine is shared: with a load average of 10, best of three saw up to 8 ms), each try with the
node's cache of compiled patterns flushed first, so KEYS and SCAN pay for compiling the
pattern every time. Patterns the node holds are compiled when they arrive and kept: PSUBSCRIBE's
with the subscription, ACL key patterns in a cache of their own that clients' patterns cannot
push out (protocol/glob.py ``held_glob_match``), so PUBLISH and ACL checks time the matching.
bench/bench_glob.py prints the same figures beside redis-server's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.node.diff import Pair, norm_scan, norm_sorted
from tests.node.glob_worst import best_times, worst_keys, worst_patterns
from tests.support import RawArg, RawClient

BOUND_S = 0.010
TRIES = 5
PING_BOUND_S = 1.0  # a PING waits for at most the command being served (and the machine)
KEYS = worst_keys()
PATTERNS = worst_patterns()


class Pinger:
    """Another client sending PING after PING while the patterns run: its slowest answer."""

    def __init__(self, port: int) -> None:
        self.client = RawClient(port)
        self.pongs = 0
        self.slowest_s = 0.0
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                assert self.client.call(b"PING") == b"+PONG\r\n"
                self.slowest_s = max(self.slowest_s, time.perf_counter() - t0)
                self.pongs += 1
                time.sleep(0.001)  # a client's pace, not a flood
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.failure = e

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()


@pytest.fixture(scope="module")
def loaded(diff_pair: Pair) -> Iterator[Pair]:
    for port in (diff_pair.ours_port, diff_pair.real_port):
        with RawClient(port) as c:
            c.call(b"FLUSHALL")
            assert c.call(b"MSET", *[x for k in KEYS for x in (k, b"1")]) == b"+OK\r\n"
    yield diff_pair


def _timed_as_redis(pair: Pair, commands: list[list[RawArg]], norm: object,
                    sub_patterns: list[bytes] | None = None) -> list[float]:
    """Each command's best time on our node (PINGs answered meanwhile), its replies checked
    against redis-server's."""
    with RawClient(pair.real_port) as real:
        want = [norm(r) for r in real.pipeline(commands)]  # type: ignore[operator]
    wrong: list[str] = []

    def check(i: int, reply: bytes) -> None:
        if norm(reply) != want[i]:  # type: ignore[operator]
            wrong.append(f"{commands[i][:2]!r}...")

    with RawClient(pair.ours_port) as c, Pinger(pair.ours_port) as pinger:
        best = best_times(c, commands, TRIES, check)
    assert pinger.failure is None, pinger.failure
    assert pinger.pongs > 0
    print(f"worst best-of-{TRIES}: {max(best) * 1000:.2f} ms; slowest PING meanwhile "
          f"{pinger.slowest_s * 1000:.1f} ms over {pinger.pongs} PINGs")
    assert wrong == []
    assert pinger.slowest_s < PING_BOUND_S
    return best


def _over(commands: list[list[RawArg]], best: list[float]) -> list[str]:
    return [f"{cmd[:2]!r}: {t * 1000:.1f} ms" for cmd, t in zip(commands, best, strict=True)
            if t > BOUND_S]


def test_corpus_is_the_issues() -> None:
    assert len(PATTERNS) == 50 and max(map(len, PATTERNS)) == 256
    assert max(map(len, KEYS)) == 1024


def test_keys_with_worst_patterns_within_10ms(loaded: Pair) -> None:
    commands: list[list[RawArg]] = [[b"KEYS", p] for p in PATTERNS]
    best = _timed_as_redis(loaded, commands, norm_sorted)
    assert _over(commands, best) == []


def test_scan_match_with_worst_patterns_within_10ms(loaded: Pair) -> None:
    commands: list[list[RawArg]] = [[b"SCAN", b"0", b"MATCH", p, b"COUNT", b"1000"]
                                    for p in PATTERNS]
    best = _timed_as_redis(loaded, commands, norm_scan)
    assert _over(commands, best) == []


def test_publish_to_worst_pattern_subscribers_within_10ms(loaded: Pair) -> None:
    """One subscriber on all 50 patterns; each PUBLISH to a 1 KB channel matches them all."""
    subs = {port: RawClient(port) for port in (loaded.ours_port, loaded.real_port)}
    try:
        for sub in subs.values():
            sub.call_frames(b"PSUBSCRIBE", *PATTERNS, frames=len(PATTERNS))
        commands: list[list[RawArg]] = [[b"PUBLISH", k, b"m"] for k in KEYS]
        best = _timed_as_redis(loaded, commands, lambda r: r)
        assert _over(commands, best) == []
    finally:
        for sub in subs.values():
            sub.close()


def test_acl_key_patterns_worst_within_10ms(loaded: Pair) -> None:
    """A user whose key permissions are the 50 patterns: ACL DRYRUN of a read of each key."""
    for port in (loaded.ours_port, loaded.real_port):
        with RawClient(port) as c:
            rules = [b"~" + p for p in PATTERNS]
            assert c.call(b"ACL", b"SETUSER", b"globber", b"on", b"nopass", b"+@all",
                          *rules) == b"+OK\r\n"
    commands: list[list[RawArg]] = [[b"ACL", b"DRYRUN", b"globber", b"GET", k] for k in KEYS]
    best = _timed_as_redis(loaded, commands, lambda r: r)
    assert _over(commands, best) == []
