"""node/types/stream.py in-process: the listpack size of an element, computed without encoding
it, against the encoder it stands for (node/persistence/rdb_blobs.py's ``lp_entry``, whose
bytes are checked against redis-server's DUMPs in tests/node/test_streams_dump.py). The node
splits where those sizes say, so a wrong size moves entries to other listpacks."""

from __future__ import annotations

import random

from slotgate.node.persistence.rdb_blobs import lp_entry
from slotgate.node.types.stream import lp_size

EDGES = [
    b"", b"0", b"-", b"-0", b"00", b"01", b"-01", b"+1", b"1a", b"a1", b" 1", b"1 ", b"127",
    b"128", b"-1", b"4095", b"4096", b"-4096", b"-4097", b"32767", b"32768", b"-32768",
    b"-32769", b"8388607", b"8388608", b"-8388608", b"-8388609", b"2147483647", b"2147483648",
    b"-2147483648", b"-2147483649", b"999999999999999999", b"-99999999999999999",
    b"-999999999999999999", b"9223372036854775807", b"9223372036854775808",
    b"-9223372036854775808", b"-9223372036854775809", b"18446744073709551615",
    b"99999999999999999999", b"-1000000000000000000", b"123456789012345678901",
    b"x" * 21, b"x" * 63, b"x" * 64, b"x" * 125, b"x" * 126, b"x" * 4095, b"x" * 4096,
    b"x" * 16380, b"x" * 16385,
]


def test_lp_size_is_the_encoded_length() -> None:
    rng = random.Random(5)
    samples = list(EDGES)
    for _ in range(3000):
        digits = rng.randrange(1, 22)
        num = rng.choice([b"", b"-"]) + bytes(rng.choice(b"0123456789") for _ in range(digits))
        samples += [num, num.lstrip(b"0") or b"0", rng.randbytes(rng.randrange(30))]
    for s in samples:
        assert lp_size(s) == len(lp_entry(s)), s
