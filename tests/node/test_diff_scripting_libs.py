"""The Lua libraries Redis 7.0 loads (cjson, cmsgpack, bit, struct): round trips and errors,
identical raw replies to redis-server 7.0."""

from __future__ import annotations

import pytest

from tests.node.diff import Case, Pair, check_cases


def _ev(script: str) -> str:
    return 'EVAL "' + script + '" 0'


BIT = Case("bit", [_ev(s) for s in [
    "local t={} for k,v in pairs(bit) do t[#t+1]=k end table.sort(t) return t",
    "return {bit.band(0xff, 0x0f), bit.tohex(255), bit.tohex(-1, 4), bit.lshift(1, 31), "
    "bit.bnot(0), bit.tobit(2^32+5), bit.bswap(0x12345678), bit.rol(1, 33), bit.arshift(-8, 1), "
    "bit.rshift(-8, 1), bit.bxor(5,3), bit.bor(1,2,4), bit.tohex(255, -2), bit.ror(1,1)}",
    "return {bit.tobit(1.5), bit.tobit(2.5), bit.tobit(-1.5), bit.tobit(2^31), "
    "bit.rol(0x80000001, 1), bit.ror(0x80000001, 4), bit.lshift(-1, 4), "
    "bit.arshift(0x80000000, 31)}",
    "return bit.band('12', 4)", "return bit.band('x')", "return bit.band()",
    "return bit.tohex(1, 20)", "return bit.bor(1, {})",
]])

STRUCT = Case("struct", [_ev(s) for s in [
    "local t={} for k,v in pairs(struct) do t[#t+1]=k end table.sort(t) return t",
    "return struct.pack('>I2', 258)", "return {struct.unpack('>I2', struct.pack('>I2', 258))}",
    "return struct.size('i4i8')", "return struct.size('!8bd')", "return struct.pack('z', 'abc')",
    "return struct.pack('bBhHlLfdc0s', -1, 255, -2, 65535, -3, 4, 1.5, 2.5, 3, 'abc', 'x')",
    "return {struct.unpack('bBhHlLfdc0s', struct.pack('bBhHlLfdc0s', -1, 255, -2, 65535, -3, "
    "4, 1.5, 2.5, 3, 'abc', 'x'))}",
    "return {struct.pack('>d', -0.1), struct.pack('<f', 3.25), struct.pack('>l', -2^40), "
    "struct.pack('<i8', -1), tostring(struct.unpack('>d', struct.pack('>d', 1/3)))}",
    "return {struct.unpack('<d', struct.pack('<d', 0.1))}", "return struct.pack('Q', 1)",
    "return struct.unpack('>I4', 'ab')", "return struct.pack('!4bi', 1, 2)",
    "return struct.pack('!3i', 1)", "return struct.pack('i40', 1)", "return struct.size('s')",
    "return struct.size('c0')", "return struct.unpack('s', 'abc')",
    "return {struct.unpack('i2', 'abcd', 3)}", "return struct.pack('c3', 'ab')",
    "return struct.pack('i')",
]])

CMSGPACK = Case("cmsgpack", [_ev(s) for s in [
    "local t={} for k,v in pairs(cmsgpack) do t[#t+1]=k end table.sort(t) return t",
    "return cmsgpack.pack({1,2,3})", "return cmsgpack.pack({a=1})",
    "return cmsgpack.pack(1.5, 'x', true, nil, -1, 300, -300, 70000, 2^40)",
    "return cmsgpack.pack(0.1, -2^40, 1e30, string.rep('x', 40), string.rep('y', 300), "
    "-2^62, 2^62)",
    "return {cmsgpack.unpack(cmsgpack.pack(0.1, -2^40, 1e30, -2^62, 2^62, -5, -200))}",
    "local a, b = cmsgpack.unpack(cmsgpack.pack(0.1, 1/3)) return {tostring(a), tostring(b)}",
    "return {cmsgpack.unpack(cmsgpack.pack(1,'a',{1,2}))}", "return cmsgpack.unpack('')",
    "return cmsgpack.pack()", "return cmsgpack.unpack(string.char(0xc1))",
    "return cmsgpack.unpack(string.char(0xcd, 1))",
    "return {cmsgpack.unpack_one(cmsgpack.pack(1,2))}",
    "return {cmsgpack.unpack_limit(cmsgpack.pack(1,2,3), 2)}",
    "local t = cmsgpack.unpack(cmsgpack.pack({a={b={1,2}}, c=0.25})) "
    "return {t.a.b[2], tostring(t.c)}",
    "return cmsgpack.pack({}, {[1]=1, [3]=3}, {x={y={z={}}}})",
]])

CJSON = Case("cjson", [_ev(s) for s in [
    "local t={} for k,v in pairs(cjson) do t[#t+1]=k end table.sort(t) return t",
    "return cjson.encode({1,2,{a=1}})", "return cjson.decode('[1,2')",
    "return cjson.encode({a={b={1,2}}, c='x\\\"y', d=1.5, e=true, f=cjson.null})",
    "return cjson.encode({})", "return cjson.encode({[1]=1,[3]=3})",
    "return cjson.encode({[1]=1,[30]=3})", "return cjson.encode(0.1)",
    "return cjson.encode(1/3)", "return cjson.encode(function() end)",
    "return cjson.encode(string.char(1, 47, 9, 127, 200))",
    "local t = cjson.decode('{\\\"a\\\":[1,2,{\\\"b\\\":null}],\\\"c\\\":1.5e3}') "
    "return {t.a[1], t.a[3].b == cjson.null, t.c, type(t.a[3].b)}",
    "return cjson.decode('nope')", "return cjson.decode('{\\\"a\\\":1} x')",
    "return cjson.decode()", "return cjson.encode()", "return cjson.decode('{1:2}')",
    "return cjson.decode('{\\\"a\\\" 2}')", "return cjson.decode('{\\\"a\\\":2 3}')",
    "return cjson.decode('\\\"abc')", "return cjson.decode('[1,]')",
    "return cjson.encode({[true]=1})", "return cjson.encode(0/0)",
    "return cjson.encode({1, 2, x=1})", "return cjson.encode({[1.5]=1})",
    "return cjson.encode(cjson.decode('{\\\"k\\\":[true,false,null,\\\"s\\\",-1.25e-3]}'))",
    "return cjson.decode('  [ ]  ')[1]",
    "local t = {} local c = t for i=1,1100 do c[1] = {} c = c[1] end return cjson.encode(t)",
    "return cjson.decode(string.rep('[', 1100))",
    "return cjson.encode(cjson.decode('[\\\"\\\\u00e9\\\\ud83d\\\\ude00\\\", \\\"\\\\n\\\"]'))",
    "return cjson.decode('\\\"a\\\\qb\\\"')",
]])

CASES = [BIT, STRUCT, CMSGPACK, CJSON]


@pytest.mark.parametrize("proto", [2, 3])
def test_libraries_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)
