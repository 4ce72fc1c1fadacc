"""Fuzzing of what a peer controls (see tests/fuzz/targets.py): the RESP request reader and the
reply framer, the proxy's config loader, the cluster bus and RESTORE payloads. Each target
replays its whole kept corpus, then runs a bounded number of hypothesis examples, each input
within tests/fuzz/bounds.py's time and memory bounds: raw bytes,
mutations of the corpus and (config) random YAML documents, derandomized so that CI runs the
same examples each time (a failure reproduces). Longer and fresh runs: bench/fuzz.py.

The findings so far, each kept in the corpus as ``finding-*`` and checked by name below:
a type byte right after a bulk payload's two unchecked bytes was taken by the hiredis path
(Redis answers "expected '$'"); a dead request's arguments were still counted as buffered
after a protocol error; a config file that is not UTF-8, a ``!!float`` tag with no value and
a mapping under ``tls.auth_clients`` raised Python errors instead of ConfigError; with the
memory bound, a multibulk header of 6 digits (or nested headers) had hiredis allocate the
claimed list up front (8 MB for 16 bytes, 64 MB for 79).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slotgate.protocol.resp import ProtocolError, RequestReader, encode_command
from slotgate.proxy.ops import config
from tests.fuzz import bounds, targets

EXAMPLES = {"resp": 400, "framer": 400, "config": 150, "bus": 200, "rdb": 400}
_SETTINGS = settings(deadline=None, database=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _inputs(target: str) -> st.SearchStrategy[bytes]:
    seeds = targets.corpus(target)
    mutated = st.tuples(st.sampled_from(seeds), st.randoms(use_true_random=False)).map(
        lambda s: targets.mutate(s[0], s[1]))
    parts = [st.binary(max_size=600), mutated, mutated]
    if target == "config":
        parts.append(st.randoms(use_true_random=False).map(targets.random_config))
    return st.one_of(parts)


@pytest.mark.parametrize("target", sorted(targets.TARGETS))
def test_corpus_replays(target: str) -> None:
    kept = targets.corpus(target)
    assert any(True for _ in kept), f"no corpus for {target}"
    stats = bounds.Stats()
    for data in kept:
        bounds.run_bounded(targets.TARGETS[target], data, stats)
    print(f"{target} corpus: {stats}")


@pytest.mark.parametrize("target", sorted(targets.TARGETS))
def test_fuzz(target: str) -> None:
    stats = bounds.Stats()

    @settings(_SETTINGS, max_examples=EXAMPLES[target])
    @given(data=_inputs(target))
    def run(data: bytes) -> None:
        bounds.run_bounded(targets.TARGETS[target], data, stats)

    run()
    print(f"{target}: {stats}")


def test_a_hang_or_a_blow_up_is_a_finding_naming_its_input() -> None:
    """The bounds themselves: an input that loops (stopped by the CPU alarm, not waited for)
    or allocates far beyond its size fails, naming the input."""
    def loops(data: bytes) -> None:
        while True:
            pass

    def hoards(data: bytes) -> None:
        kept = [bytes(1 << 20) for _ in range(8)]
        assert kept

    with pytest.raises(bounds.BoundExceeded, match="CPU: finding-[0-9a-f]{12} b'spin'"):
        bounds.run_bounded(loops, b"spin", bound_s=0.2)
    with pytest.raises(bounds.BoundExceeded, match="limit .*b'hoard'"):
        bounds.run_bounded(hoards, b"hoard")
    bounds.run_bounded(hoards, bytes(64 << 10))  # in proportion to a big input: fine


def test_seeds_are_kept() -> None:
    """Every seed write_seeds makes is in the corpus (bench/fuzz.py --write-seeds rewrites
    them; a set's DUMP follows its iteration order, so bytes may differ between runs)."""
    for target, make in targets.SEEDS.items():
        for name in make():
            assert (targets.CORPUS_DIR / target / f"seed-{name}").is_file(), (target, name)


def test_mutate_changes_inputs() -> None:
    rng = random.Random(3)
    seed = targets.corpus("resp")[0]
    assert sum(targets.mutate(seed, rng) != seed for _ in range(50)) > 40


# -- the findings, by name ------------------------------------------------------------------------
def test_type_byte_after_payload_is_refused_on_the_hiredis_path() -> None:
    data = (targets.CORPUS_DIR / "resp" / "finding-type-byte-after-payload").read_bytes()
    for use_hiredis in (True, False):
        reader = RequestReader()
        reader.use_hiredis = use_hiredis
        reader.feed(data)
        with pytest.raises(ProtocolError, match="expected '\\$', got '\\+'"):
            reader.get_requests()


def test_dead_request_is_not_counted_after_an_error() -> None:
    data = (targets.CORPUS_DIR / "resp" / "finding-args-held-after-error").read_bytes()
    reader = RequestReader()
    reader.feed(data)
    assert reader.get_requests() == [[b"SET", b"k", b"v"]]
    assert reader.buffered_bytes() <= len(data)


@pytest.mark.parametrize("name", ["finding-count-allocated-up-front",
                                  "finding-nested-counts-allocated-up-front"])
def test_a_count_is_not_allocated_up_front(name: str) -> None:
    """hiredis builds each array of the claimed size as soon as it reads the header: 16 bytes
    made the reader allocate 8 MB, 79 bytes of nested headers 64 MB (Redis preallocates 1024
    arguments at most). A span whose count claims more arguments than its bytes can hold goes
    to the exact parser; the memory bound holds, and a whole request that big still parses."""
    data = (targets.CORPUS_DIR / "resp" / name).read_bytes()
    bounds.run_bounded(targets.fuzz_resp, data)
    reader = RequestReader()
    reader.feed(data)
    if b"*999999\r\n*" in data:
        with pytest.raises(ProtocolError, match="expected '\\$', got '\\*'"):
            reader.get_requests()
    else:
        assert reader.get_requests() == []  # waiting for the other arguments, as Redis does
    whole = encode_command("DEL", *[b"k%d" % i for i in range(10_000)])
    reader = RequestReader()
    reader.feed(whole)
    assert [len(r) for r in reader.get_requests()] == [10_001]


@pytest.mark.parametrize(("name", "problem"), [
    ("finding-not-utf8", "not UTF-8 text (byte 1)"),
    ("finding-empty-float-tag", "invalid YAML: IndexError"),
    ("finding-unhashable-auth-clients", "tls.auth_clients: expected one of"),
])
def test_config_findings_are_config_errors(tmp_path, name: str, problem: str) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_bytes((targets.CORPUS_DIR / "config" / name).read_bytes())
    with pytest.raises(config.ConfigError) as exc:
        config.load(path)
    assert any(problem in p for p in exc.value.problems), exc.value.problems
