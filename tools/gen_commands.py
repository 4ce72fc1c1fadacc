"""Generate ``protocol/commands.json`` from a real redis-server's ``COMMAND INFO`` / ``COMMAND DOCS``.

Usage::

    python tools/gen_commands.py                 # start /usr/bin/redis-server on a free port
    python tools/gen_commands.py --port 6379     # read from a server that is already running
    python tools/gen_commands.py --check         # exit 1 if the checked-in file differs

The replies are read raw over a socket in RESP3 and kept with their RESP types, so the node can
serve ``COMMAND``, ``COMMAND INFO`` and ``COMMAND DOCS`` byte-for-byte in RESP2 and RESP3.

Typed JSON form (see ``protocol/commands.py`` for the decoder and encoders):

- integer           -> JSON number
- simple string     -> JSON string starting with ``+`` (``"+readonly"``)
- bulk string       -> JSON string starting with ``$`` (``"$get"``)
- null              -> JSON null
- array             -> JSON list
- set               -> ``{"~": [...]}``
- map               -> JSON object (keys are the map's bulk-string keys, in reply order)

Redis keeps commands and subcommands in hash tables with a random seed, so their order differs
from run to run; the file lists commands, subcommands and docs' ``subcommands`` maps sorted by
name, which is one order a real server may produce, and makes the output deterministic.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REDIS_SERVER = "/usr/bin/redis-server"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "protocol" / "commands.json"
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0

Typed = Any  # the typed JSON value described in the module docstring


class RespError(Exception):
    """An error reply from the server."""


class _Reader:
    """A minimal blocking RESP3 reader that keeps the type of every value."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._pos = 0

    def _fill(self) -> None:
        chunk = self._sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("server closed the connection")
        del self._buf[: self._pos]
        self._pos = 0
        self._buf += chunk

    def _line(self) -> bytes:
        while True:
            end = self._buf.find(b"\r\n", self._pos)
            if end >= 0:
                line = bytes(self._buf[self._pos : end])
                self._pos = end + 2
                return line
            self._fill()

    def _exact(self, n: int) -> bytes:
        while len(self._buf) - self._pos < n + 2:
            self._fill()
        data = bytes(self._buf[self._pos : self._pos + n])
        self._pos += n + 2
        return data

    def read(self) -> Typed:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return "+" + rest.decode()
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else "$" + self._exact(n).decode()
        if kind == b":":
            return int(rest)
        if kind == b"_":
            return None
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        if kind == b"~":
            return {"~": [self.read() for _ in range(int(rest))]}
        if kind == b"%":
            out: dict[str, Typed] = {}
            for _ in range(int(rest)):
                key = self.read()
                if not (isinstance(key, str) and key.startswith("$")):
                    raise ValueError(f"map key is not a bulk string: {key!r}")
                out[key[1:]] = self.read()
            if list(out) == ["~"]:
                raise ValueError("a map with the single key '~' would read back as a set")
            return out
        raise ValueError(f"unexpected RESP type in {line!r}")


def _command(sock: socket.socket, reader: _Reader, *args: str) -> Typed:
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        raw = a.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    sock.sendall(b"".join(parts))
    return reader.read()


def _name(value: str) -> str:
    return value[1:]


def _normalize_info(entry: list[Typed]) -> list[Typed]:
    """Sort an info entry's subcommands (index 9) by name, recursively."""
    subs = entry[9]
    items = subs["~"] if isinstance(subs, dict) else subs
    items = sorted((_normalize_info(s) for s in items), key=lambda s: _name(s[0]))
    entry = list(entry)
    entry[9] = {"~": items} if isinstance(subs, dict) else items
    return entry


def _normalize_docs(doc: dict[str, Typed]) -> dict[str, Typed]:
    if "subcommands" in doc:
        subs = doc["subcommands"]
        doc = dict(doc)
        doc["subcommands"] = {k: _normalize_docs(subs[k]) for k in sorted(subs)}
    return doc


def fetch(port: int, host: str = "127.0.0.1") -> dict[str, Typed]:
    """Read version, COMMAND INFO and COMMAND DOCS from a running server."""
    with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as sock:
        sock.settimeout(READ_TIMEOUT_S)
        reader = _Reader(sock)
        hello = _command(sock, reader, "HELLO", "3")
        info = _command(sock, reader, "COMMAND", "INFO")
        docs = _command(sock, reader, "COMMAND", "DOCS")
    by_name = {_name(e[0]): _normalize_info(e) for e in info if e is not None}
    return {
        "redis_version": _name(hello["version"]),
        "info": {k: by_name[k] for k in sorted(by_name)},
        "docs": {k: _normalize_docs(docs[k]) for k in sorted(docs)},
    }


def render(data: dict[str, Typed]) -> str:
    """Deterministic text: one command per line inside ``info`` and ``docs``."""
    def dump(v: Typed) -> str:
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))

    lines = ["{", f'"redis_version":{dump(data["redis_version"])},']
    for section, last in (("info", False), ("docs", True)):
        lines.append(f'"{section}":{{')
        names = list(data[section])
        for i, name in enumerate(names):
            comma = "," if i < len(names) - 1 else ""
            lines.append(f"{dump(name)}:{dump(data[section][name])}{comma}")
        lines.append("}" if last else "},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"redis-server not listening on {port} after {timeout_s}s")


def fetch_from_new_server(server: str = REDIS_SERVER) -> dict[str, Typed]:
    """Start a throw-away redis-server on a free loopback port, read it, stop it by PID."""
    with tempfile.TemporaryDirectory(prefix="gen-commands-") as workdir:
        port = _free_port()
        argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", workdir, "--daemonize", "no"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL)
        try:
            _wait_for_port(port, proc, CONNECT_TIMEOUT_S)
            return fetch(port)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, help="read from a running server on 127.0.0.1:PORT")
    parser.add_argument("--server", default=REDIS_SERVER, help="redis-server binary to start")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if --out differs from the server's table")
    args = parser.parse_args(argv)
    data = fetch(args.port) if args.port else fetch_from_new_server(args.server)
    text = render(data)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} differs from the server's command table", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}: {len(data['info'])} commands, redis {data['redis_version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
