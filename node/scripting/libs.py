"""The Lua libraries Redis 7.0 loads beside the standard ones (cjson, cmsgpack, bit, struct),
as Lua sources run by the sandbox (each gets the sandbox's helpers and returns its table)."""

from __future__ import annotations

from slotgate.node.scripting.lib_bit import BIT_LUA
from slotgate.node.scripting.lib_cjson import CJSON_LUA
from slotgate.node.scripting.lib_cmsgpack import CMSGPACK_LUA
from slotgate.node.scripting.lib_struct import STRUCT_LUA

SOURCES: dict[bytes, bytes] = {
    b"bit": BIT_LUA.encode(),
    b"cjson": CJSON_LUA.encode(),
    b"cmsgpack": CMSGPACK_LUA.encode(),
    b"struct": STRUCT_LUA.encode(),
}
