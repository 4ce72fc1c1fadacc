"""A tiny blocking RESP client over a plain socket, for byte-exact comparisons."""

from __future__ import annotations

import socket

from protocol.resp import ReplyFramer, encode_command


class RawClient:
    def __init__(self, port: int, timeout_s: float = 20.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.framer = ReplyFramer()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frames(self, n: int) -> list[bytes]:
        frames: list[bytes] = []
        while len(frames) < n:
            frame = self.framer.next_frame()
            if frame is not None:
                frames.append(frame[1])
                continue
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError(f"closed after {len(frames)} of {n} replies")
            self.framer.feed(data)
        return frames

    def call(self, *args: bytes | str | int) -> bytes:
        self.send(encode_command(*args))
        return self.read_frames(1)[0]

    def pipeline(self, commands: list[list[bytes]]) -> list[bytes]:
        self.send(b"".join(encode_command(*c) for c in commands))
        return self.read_frames(len(commands))

    def read_until_closed(self) -> bytes:
        chunks = []
        while True:
            data = self.sock.recv(1 << 16)
            if not data:
                return b"".join(chunks)
            chunks.append(data)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
