"""Fuzzing the proxy's configuration loader (proxy/ops/config.py): any file (the kept corpus
mangled, or random text) and any value under any known key (of any YAML type, huge numbers,
odd durations and addresses) gives a Config or ConfigError with its problems listed, never
another exception: an operator's typo is reported, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotgate.proxy.ops.config import KEYS, ConfigError, build, read_yaml
from tests.fuzz.corpus import bounded, corpus_params, fuzz_settings, mutated

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.floats(),
    st.text(max_size=20),
    st.sampled_from(("1s", "500ms", "0s", "-1s", "1e9s", "nan", "inf", "10", "1.5m",
                     "127.0.0.1:7000", "[::1]:7000", "host:0", "host:99999", ":7000",
                     "localhost", "on", "off", "yes", "refuse", "per_shard")),
)
VALUES = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=3)
                      | st.dictionaries(st.text(max_size=8), kids, max_size=3), max_leaves=6)


def loads_or_refuses(text: bytes, tmp: Path) -> None:
    path = tmp / "proxy.yaml"
    path.write_bytes(text)
    with bounded("config"):
        try:
            raw, problems = read_yaml(path)
            build(raw, problems=problems)
        except ConfigError as exc:
            assert exc.problems and all(isinstance(p, str) for p in exc.problems)


@fuzz_settings()
@given(st.dictionaries(st.sampled_from(sorted(KEYS)) | st.text(max_size=12), VALUES,
                       max_size=6))
def test_values(raw: dict[str, object]) -> None:
    raw.setdefault("seeds", ["127.0.0.1:7000"])
    try:
        build(raw)
    except ConfigError as exc:
        assert exc.problems


@pytest.mark.parametrize("data", corpus_params("config"))
def test_corpus(data: bytes, tmp_path: Path) -> None:
    loads_or_refuses(data, tmp_path)


@fuzz_settings()
@given(mutated("config"))
def test_files(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    loads_or_refuses(data, tmp_path_factory.mktemp("cfg", numbered=True))


def test_file_not_utf8(tmp_path: Path) -> None:
    """Found by fuzzing: a file that is not UTF-8 raised UnicodeDecodeError (a traceback at
    start-up, or a reload that died) instead of a configuration problem."""
    path = tmp_path / "proxy.yaml"
    path.write_bytes(b"seeds: [\"127.0.0.1:7000\"]\nlisten: \"\x80\"\n")
    with pytest.raises(ConfigError) as err:
        read_yaml(path)
    assert err.value.problems == [f"{path}: not UTF-8 text (byte 35)"]
