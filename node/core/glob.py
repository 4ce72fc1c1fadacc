"""Redis glob patterns: the matcher lives in ``protocol/glob.py`` (the proxy's ACL uses it too);
the node's modules keep importing it from here."""

from __future__ import annotations

from slotgate.protocol.glob import Glob as Glob
from slotgate.protocol.glob import compile_glob as compile_glob
from slotgate.protocol.glob import glob_match as glob_match
from slotgate.protocol.glob import held_glob_match as held_glob_match
