"""LOLWUT as Redis 7.0: VERSION 5 draws Georg Nees' "Schotter" in Braille characters, VERSION 6
a canvas of ANSI-coloured cells, every other version only the version line."""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.util import parse_int
from slotgate.node.core.config import REDIS_VERSION
from slotgate.protocol.resp import verbatim

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

_SCHOTTER_FOOTER = "\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. "
_V6_FOOTER = ("\nDedicated to the 8 bit game developers of past and present.\n"
              "Original 8 bit image from Plaguemon by hikikomori. Redis ver. ")
# (foreground, background) ANSI codes of the four grey levels of VERSION 6
_V6_COLOURS = ((30, 40), (90, 100), (37, 47), (97, 107))


class _Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(width * height)

    def set(self, x: int, y: int) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            self.pixels[y * self.width + x] = 1

    def get(self, x: int, y: int) -> int:
        if 0 <= x < self.width and 0 <= y < self.height:
            return self.pixels[y * self.width + x]
        return 0

    def line(self, x1: int, y1: int, x2: int, y2: int) -> None:  # Bresenham
        dx, dy = abs(x2 - x1), abs(y2 - y1)
        sx, sy = (1 if x1 < x2 else -1), (1 if y1 < y2 else -1)
        err = dx - dy
        while True:
            self.set(x1, y1)
            if x1 == x2 and y1 == y2:
                return
            e2 = err * 2
            if e2 > -dy:
                err -= dy
                x1 += sx
            if e2 < dx:
                err += dx
                y1 += sy

    def square(self, x: int, y: int, size: float, angle: float) -> None:
        size = round(size / 1.4142135623)
        k = math.pi / 4 + angle
        pts = []
        for _ in range(4):
            pts.append((round(math.sin(k) * size + x), round(math.cos(k) * size + y)))
            k += math.pi / 2
        for j in range(4):
            self.line(*pts[j], *pts[(j + 1) % 4])


def _schotter(cols: int, per_row: int, per_col: int) -> str:
    width = cols * 2
    padding = 2 if width > 4 else 0
    side = (width - padding * 2) / per_row
    canvas = _Canvas(width, int(side * per_col + padding * 2))
    for y in range(per_col):
        for x in range(per_row):
            sx = int(x * side + side / 2 + padding)
            sy = int(y * side + side / 2 + padding)
            angle = 0.0
            if y > 1:  # rotate and shift more as the rows go down
                r1, r2, r3 = (random.random() / per_col * y * random.choice((-1, 1))
                              for _ in range(3))
                angle = r1
                sx = int(sx + r2 * side / 3)
                sy = int(sy + r3 * side / 3)
            canvas.square(sx, sy, side, angle)
    rows = []
    for y in range(0, canvas.height, 4):  # one Braille character per 2x4 pixels
        chars = []
        for x in range(0, canvas.width, 2):
            bits = (canvas.get(x, y) | canvas.get(x, y + 1) << 1 | canvas.get(x, y + 2) << 2
                    | canvas.get(x + 1, y) << 3 | canvas.get(x + 1, y + 1) << 4
                    | canvas.get(x + 1, y + 2) << 5 | canvas.get(x, y + 3) << 6
                    | canvas.get(x + 1, y + 3) << 7)
            chars.append(chr(0x2800 + bits))
        rows.append("".join(chars) + ("\n" if y != canvas.height - 1 else ""))
    return "".join(rows) + _SCHOTTER_FOOTER + REDIS_VERSION + "\n"


def _cells(cols: int, rows: int) -> str:
    """VERSION 6's canvas: rows of coloured cells, lighter towards the top."""
    out = []
    for y in range(rows):
        fg, bg = _V6_COLOURS[3 - min(3, y * 4 // max(rows, 1))]
        out.append(f"\033[0;{fg};{bg}m \033[0m" * cols + ("\n" if y != rows - 1 else ""))
    return "".join(out) + _V6_FOOTER + REDIS_VERSION + "\n"


def _clamped(argv: list[bytes], i: int, default: int, hi: int) -> int:
    n = parse_int(argv[i]) if len(argv) > i else default
    return max(1, min(hi, n))


@command("lolwut")
def lolwut(c: Client, argv: list[bytes]) -> bytes:
    version = 7
    args = argv
    if len(argv) >= 3 and argv[1].lower() == b"version":
        version = parse_int(argv[2]) % 2**32  # Redis prints it as unsigned
        args = argv[2:]  # the drawing's own arguments follow the version
    if version == 5:
        text = _schotter(_clamped(args, 1, 66, 1000), _clamped(args, 2, 8, 200),
                         _clamped(args, 3, 12, 200))
    elif version == 6:
        text = _cells(_clamped(args, 1, 80, 1000), _clamped(args, 2, 20, 1000))
    else:
        text = f"Redis ver. {REDIS_VERSION}\n"
    return verbatim(text, "txt", c.resp)
