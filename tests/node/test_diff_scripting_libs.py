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

def _bytes(*values: int) -> str:
    return "string.char(" + ",".join(str(v) for v in values) + ")"


def _tostrings(expr: str) -> str:
    """A script returning every value of ``expr`` through tostring (Lua's own %.14g)."""
    return _ev("local t={" + expr + "} for i=1,#t do t[i]=tostring(t[i]) end return t")


FF8 = (255,) * 8
# numbers beyond 2^53, 2^63 and 2^64, negative ones, integral floats, NaN bits: Lua's numbers
# are doubles in both servers, so what matters is which conversion rounds where
CJSON_NUMBERS = Case("cjson numbers", [
    *[_ev(s) for s in [
        "return cjson.encode({2^53, 2^53+1, -2^53-2, 2^63, -2^63, 2^64, 1.0, 3.0, -0.0, 1e15})",
        "return cjson.encode(123456789012345678)", "return cjson.encode({[2^53+1]=1})",
        "return cjson.encode({[1]=1,[2]=2,[2^31]=3})", "return cjson.encode({[1]=1,[2^31-1]=3})",
        "return cjson.encode({[-0.0]=1})",
        "return cjson.decode('[9007199254740993, -9223372036854775808, 9223372036854775807, "
        "18446744073709551616, 1e300, 12345678901234567, 1.0, 2e0, -0]')",
        "return cjson.decode('[0x10, -0x1F, 0x.8, 0x1.8p-1, 1., 01, -.5, 1.e5, +5, +.5]')",
    ]],
    _tostrings("cjson.decode('9007199254740993'), cjson.decode('-1e-400'), "
               "cjson.decode('123456789012345678901234567890'), cjson.decode('-0')"),
    _tostrings("cjson.decode('inf'), cjson.decode('-Infinity'), cjson.decode('nAn'), "
               "cjson.decode('+inf'), cjson.decode('nan(12ab)'), cjson.decode('nan()'), "
               "cjson.decode('Infinity'), cjson.decode('1e5000'), cjson.decode('-nan')"),
    *[_ev("return cjson.decode('" + text + "')") for text in [
        "-0x", "-", "+", "+-1", "--1", "-.", ".", "0x", "1e", "1e+", "0x1.8p", "00x1", "infx",
        "-infinit", "[nan(12ab", "nan(-)", "[1e5x]", "1.5.5",
    ]],
    *[_ev("cjson.decode_invalid_numbers(false) local r = {pcall(cjson.decode, '" + text + "')} "
          "cjson.decode_invalid_numbers(true) return r")
      for text in ["+1", "-0x1", "inf", "-0.5", "01"]],
])

CMSGPACK_NUMBERS = Case("cmsgpack numbers", [
    *[_ev(s) for s in [
        "return cmsgpack.pack(2^53, 2^53+1, 2^63, -2^63, 2^64, -2^64, 2^63-1024, -2^63+1024, "
        "-2^53-2, 2^60+3*2^10, 2^32, -2^31-1, 2^31, -2^31)",
        "return cmsgpack.pack(1.0, 3.0, -0.0, 0/0, -(0/0), 1/0, -1/0, 1e300, 2^70, 2^24+1)",
        "return cmsgpack.pack(2^-149, 2^-150, 3.4e38, 2^-130*(1+2^-23), 2^-130, 3*2^-149, "
        "2^127*(2-2^-23), 2^128, 2^128*(1-2^-25))",
        "return {cmsgpack.unpack(cmsgpack.pack(2^53+1, 2^63, -2^63, 2^64))}",
        "return {cmsgpack.unpack(" + _bytes(0xce, 255, 255, 255, 255, 0xcd, 255, 255, 0xcc, 255,
                                           0xd2, 255, 255, 255, 255, 0xd0, 128, 0xd1, 128, 0,
                                           0xce, 128, 0, 0, 0) + ")}",
        "return {cmsgpack.unpack(" + _bytes(0xcf, *FF8, 0xcf, 128, 0, 0, 0, 0, 0, 0, 1,
                                           0xd3, 128, *(0,) * 7) + ")}",
        "return cmsgpack.pack(cmsgpack.unpack(" + _bytes(0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1,
                                                          0xca, 0x7f, 0xc0, 0, 1) + "))",
        "return struct.pack('>d', cmsgpack.unpack(" + _bytes(0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1)
        + "))",
        "return cmsgpack.unpack(" + _bytes(0xcf, 0x7f) + ")",
        "return cmsgpack.unpack(" + _bytes(0xcb, 0x7f) + ")",
    ]],
    _tostrings("cmsgpack.unpack(" + _bytes(0xcf, *FF8, 0xcf, 128, 0, 0, 0, 0, 0, 0, 1,
                                          0xcf, 0, 32, 0, 0, 0, 0, 0, 1,
                                          0xd3, 255, 223, 255, 255, 255, 255, 255, 255) + ")"),
    _tostrings("cmsgpack.unpack(" + _bytes(0xcb, 0xff, 0xf8, 0, 0, 0, 0, 0, 0,
                                          0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1,
                                          0xca, 0x7f, 0xc0, 0, 1, 0xca, 0xff, 0x80, 0, 0,
                                          0xca, 0, 0, 0, 1) + ")"),
    *[_ev("return string.format('%.17g', cmsgpack.unpack(" + _bytes(*b) + "))") for b in [
        (0xcf, 0x7f, *FF8[:7]), (0xcf, 0, 0x3f, *FF8[:6]), (0xd3, 0xff, 0xc0, 0, 0, 0, 0, 0, 1),
        (0xd3, 0x40, 0, 0, 0, 0, 0, 2, 1), (0xcf, 0x40, 0, 0, 0, 0, 0, 2, 1),
        (0xd3, 0xbf, *FF8[:5], 0xfd, 0xff), (0xd3, 0, 0x20, 0, 0, 0, 0, 0, 3),
    ]],
    _ev("return {struct.pack('>f', 0/0), struct.pack('<d', 0/0), struct.pack('>f', 1e39), "
        "struct.pack('>f', -1e39), struct.pack('>f', 2^-150*3), struct.pack('<f', 1.1)}"),
    _tostrings("struct.unpack('>f<d>d', " + _bytes(0x7f, 0xc0, 0, 1, 1, 0, 0, 0, 0, 0, 0xf8, 0xff,
                                                  0x7f, 0xf0, 0, 0, 0, 0, 0, 0) + ")"),
])

# lua-cjson's configuration functions: argument checks, C int conversion, enumerated options,
# and their effect; the last lines put the defaults back (the interpreter keeps them)
CJSON_CONFIG = Case("cjson configuration", [_ev(s) for s in [
    'return {cjson.encode_number_precision()}',
    'return {cjson.encode_number_precision(3)}',
    'return cjson.encode(1/3)',
    'return {cjson.encode_number_precision(14)}',
    'return {cjson.encode_number_precision(15)}',
    'return {cjson.encode_number_precision(0)}',
    "return {cjson.encode_number_precision('x')}",
    'return {cjson.encode_number_precision({})}',
    'return {cjson.encode_number_precision(true)}',
    'return {cjson.encode_number_precision(2.9)}',
    'return cjson.encode(1/3)',
    "return {cjson.encode_number_precision('5')}",
    'return cjson.encode(1/3)',
    'return {cjson.encode_number_precision(2^32+7)}',
    'return cjson.encode(1/3)',
    'return {cjson.encode_number_precision(2^64)}',
    'return {cjson.encode_number_precision(-2^32+3)}',
    'return cjson.encode(1/3)',
    'return {cjson.encode_number_precision(14, 1)}',
    'return {cjson.encode_number_precision(14, nil)}',
    'return {cjson.encode_number_precision(nil)}',
    'return {cjson.encode_max_depth()}',
    'return {cjson.encode_max_depth(0)}',
    'return {cjson.encode_max_depth(2)}',
    'return cjson.encode({{{1}}})',
    'return {cjson.encode_max_depth(1000)}',
    'return {cjson.decode_max_depth(2^31)}',
    'return {cjson.decode_max_depth(2)}',
    "return cjson.decode('[[[1]]]')",
    'return {cjson.decode_max_depth(1000)}',
    'return {cjson.encode_sparse_array()}',
    'return {cjson.encode_sparse_array(true, 3, 5)}',
    'return cjson.encode({[1]=1,[30]=3})',
    "return {cjson.encode_sparse_array('on')}",
    "return {cjson.encode_sparse_array('x')}",
    'return {cjson.encode_sparse_array({})}',
    'return {cjson.encode_sparse_array(1)}',
    'return {cjson.encode_sparse_array(false, -1)}',
    'return {cjson.encode_sparse_array(false, 2, -1)}',
    'return {cjson.encode_sparse_array()}',
    'return {cjson.encode_sparse_array(false, 2, 10, 1)}',
    'return {cjson.encode_sparse_array(false, 2, 10)}',
    'return {cjson.encode_keep_buffer()}',
    "return {cjson.encode_keep_buffer('off')}",
    'return {cjson.encode_keep_buffer(true)}',
    'return {cjson.encode_invalid_numbers()}',
    "return {cjson.encode_invalid_numbers('null')}",
    'return cjson.encode({0/0, 1/0, -1/0, 1})',
    'return {cjson.encode_invalid_numbers(true)}',
    'return cjson.encode({0/0, 1/0, -1/0, -(0/0)})',
    "return {cjson.encode_invalid_numbers('on')}",
    "return {cjson.encode_invalid_numbers('nul')}",
    'return {cjson.encode_invalid_numbers(false)}',
    'return {cjson.decode_invalid_numbers()}',
    "return {cjson.decode_invalid_numbers('off')}",
    "return {cjson.decode_invalid_numbers('on')}",
    'return {cjson.decode_invalid_numbers(1)}',
    "return {cjson.decode_invalid_numbers('null')}",
    'return {cjson.decode_invalid_numbers(true)}',
    'return {cjson.encode_number_precision(14), cjson.encode_max_depth(1000), cjson.decode_max_depth(1000), cjson.encode_keep_buffer(true), cjson.encode_invalid_numbers(false), cjson.decode_invalid_numbers(true)}',
    'return {cjson.encode_sparse_array(false, 2, 10)}',
    'return cjson.encode({1/3, {[1]=1,[30]=3}})',
]])

# integers past 32 and 64 bits and out of range in struct (its 64-bit word, x86's conversions,
# sizes past 8 bytes), bit (the low word of the rounded double) and cmsgpack (bin types, nil
# keys, unpack_one/unpack_limit arguments kept as 64-bit integers)
EDGES = Case("struct, bit and cmsgpack edges", [_ev(s) for s in [
    'local t = {} local c = t for i=1,20 do c[1] = {} c = c[1] end return cmsgpack.pack(t)',
    'local t = {} local c = t for i=1,20 do c.x = {} c = c.x end return cmsgpack.pack(t)',
    'return cmsgpack.pack({[1]=1, [2]=2, [4]=4})',
    'return cmsgpack.pack({[0]=1})',
    'return cmsgpack.pack({[1.5]=1})',
    'return cmsgpack.pack({[-1]=1})',
    'return cmsgpack.pack({[2^31]=1})',
    'return cmsgpack.pack({[2^32]=1})',
    'return cmsgpack.pack({true, false})',
    'return cmsgpack.pack(function() end)',
    'return cmsgpack.pack(cjson.null)',
    'return cmsgpack.pack({a=function() end})',
    "return cmsgpack.pack(string.rep('x', 31), string.rep('x', 32), string.rep('x', 255), string.rep('x', 256))",
    "return #cmsgpack.pack(string.rep('x', 65536))",
    'local t = {} for i=1,16 do t[i]=i end return cmsgpack.pack(t)',
    'local t = {} for i=1,65536 do t[i]=1 end return #cmsgpack.pack(t)',
    "local t = {} for i=1,16 do t['k'..i]=1 end return #cmsgpack.pack(t)",
    'return cmsgpack.unpack(string.char(0xc4, 2, 65, 66))',
    'return cmsgpack.unpack(string.char(0xc7, 1, 1, 65))',
    'return cmsgpack.unpack(string.char(0xd4, 1, 65))',
    'return cmsgpack.unpack(string.char(0xc1))',
    'return cmsgpack.unpack(string.char(0x92, 1))',
    'return cmsgpack.unpack(string.char(0x81, 1))',
    'return {cmsgpack.unpack(string.char(0x82, 1, 2, 1, 3))}',
    'return cmsgpack.unpack(string.char(0xdc, 0, 2, 1, 2))',
    'return cmsgpack.unpack(string.char(0xdd, 0, 0, 0, 1, 7))',
    'return cmsgpack.unpack(string.char(0xde, 0, 1, 0xa1, 97, 5)).a',
    'return cmsgpack.unpack(string.char(0xdb, 0, 0, 0, 2, 65, 66))',
    'return cmsgpack.unpack(string.char(0xdb, 255, 255, 255, 255, 65))',
    'return {cmsgpack.unpack_one(string.char(1, 2, 3), 1)}',
    'return {cmsgpack.unpack_one(string.char(1, 2, 3), 3)}',
    'return {cmsgpack.unpack_one(string.char(1, 2, 3), -1)}',
    "return {cmsgpack.unpack_one(string.char(1, 2, 3), 'x')}",
    'return {cmsgpack.unpack_limit(string.char(1, 2, 3), 0)}',
    'return {cmsgpack.unpack_limit(string.char(1, 2, 3), -1)}',
    'return {cmsgpack.unpack_limit(string.char(1, 2, 3), 2, 1)}',
    'return {cmsgpack.unpack_limit(string.char(1, 2, 3), 5, 2)}',
    'return {cmsgpack.unpack(1)}',
    'return {cmsgpack.unpack({})}',
    'return {cmsgpack.unpack()}',
    'return {cmsgpack.unpack_one()}',
    "return {cmsgpack.unpack('', 1)}",
    'return cmsgpack.pack(1, 2, nil)',
    'return {cmsgpack.unpack(cmsgpack.pack(nil, nil))}',
    "return {struct.pack('>i8', 2^63), struct.pack('>i8', -2^63), struct.pack('>I8', 2^64), struct.pack('<i8', 2^53+1)}",
    "return {struct.unpack('>i8', string.char(255,255,255,255,255,255,255,255))}",
    "return {struct.unpack('>I8', string.char(255,255,255,255,255,255,255,255))}",
    "return {struct.unpack('>I8', string.char(128,0,0,0,0,0,0,1))}",
    "return {struct.unpack('>i8', string.char(0,32,0,0,0,0,0,1))}",
    "return {struct.unpack('<I8', string.char(1,2,0,0,0,0,0,128))}",
    "return struct.pack('>I4', 2^32)",
    "return struct.pack('>i4', -2^31-1)",
    "return struct.pack('>I4', -1)",
    "return struct.pack('B', 256)",
    "return struct.pack('b', 1.9)",
    "return struct.pack('b', -1.9)",
    "return struct.pack('>I2', 0/0)",
    "return {struct.unpack('>i16', string.rep(string.char(255), 16))}",
    "return {struct.unpack('>I16', string.rep(string.char(255), 16))}",
    "return {struct.unpack('>I9', string.rep(string.char(1), 9))}",
    "return struct.pack('>i9', -1)",
    "return struct.pack('>I9', 2^64)",
    'return {bit.tobit(2^53+1), bit.tobit(-2^63), bit.tobit(2^64), bit.tobit(1e300), bit.tobit(0/0)}',
    'return {bit.band(2^53+3, 0xff), bit.bor(-2^40, 1), bit.tohex(2^40+255)}',
    "return {struct.unpack('>i9', string.char(0,0,0,0,0,0,0,0,128))}",
    "return {struct.unpack('>i9', string.char(255,0,0,0,0,0,0,0,127))}",
    "return {struct.unpack('<i12', string.rep(string.char(200), 12))}",
    "return {struct.unpack('>i5', string.char(128,0,0,0,1))}",
    "return {struct.unpack('<i7', string.char(1,2,3,4,5,6,255))}",
    "return {struct.unpack('>I3', string.char(255,255,255))}",
    "return {struct.pack('>i8', 0/0), struct.pack('>i8', -1e300), struct.pack('>I8', 1e300), struct.pack('<i3', -2^40-5), struct.pack('>I8', 2^63+2048), struct.pack('>i8', -2^63+1024)}",
    "return {struct.pack('>i12', -2), struct.pack('<I10', 2^60+1)}",
    'return {bit.tobit(2^51), bit.tobit(2^51-1), bit.tobit(-2^51), bit.tobit(-2^51-1), bit.tobit(-2^52-7), bit.tobit(2^52+3), bit.tobit(0.5), bit.tobit(1.5), bit.tobit(-0.5), bit.tobit(1/0), bit.tobit(-1/0), bit.tobit(2^-1074)}',
    'return {bit.bnot(1e300), bit.lshift(2^60, 1), bit.rshift(1e20, 2), bit.tohex(1e300), bit.bxor(2^55+7, 3), bit.rol(1e18, 3), bit.bswap(7e15)}',
    'return {cmsgpack.unpack_one(string.char(1, 2, 3), 4)}',
    'return {cmsgpack.unpack_one(string.char(1, 2, 3), 2.9)}',
    "return {cmsgpack.unpack_one(string.char(1, 2, 3), '1')}",
    'return {cmsgpack.unpack_one(string.char(1, 2, 3), nil)}',
    'return {cmsgpack.unpack_one(nil, 1)}',
    "return {cmsgpack.unpack_one({}, 'x')}",
    'return {cmsgpack.unpack_limit(string.char(1, 2, 3))}',
    'return {cmsgpack.unpack_limit(string.char(1, 2, 3), 0, 1)}',
    'return {cmsgpack.unpack_limit(string.char(1, 2, 3), 0, 3)}',
    'return {cmsgpack.unpack_limit(string.char(1, 2, 3), 2^32+1)}',
    'return {cmsgpack.unpack_limit(string.char(1, 2, 3), 1, 2^32+1)}',
    'return {cmsgpack.unpack(string.char(0xc5, 0, 1, 65))}',
    'return {cmsgpack.unpack(string.char(0xc6, 0, 0, 0, 1, 65))}',
    'return {cmsgpack.unpack(string.char(0xd9, 1, 65, 0xda, 0, 1, 66))}',
    'return {cmsgpack.unpack(string.char(0x92, 0xc4))}',
    "return {struct.unpack('<i7', string.char(1,2,3,4,5,6,255)), struct.unpack('>i7', string.char(128,0,0,0,0,0,1)), struct.unpack('>i7', string.char(255,255,255,255,255,255,255)), struct.unpack('>i6', string.char(128,0,0,0,0,0))}",
    "return {struct.unpack('>i13', string.char(9,9,9,9,9,128,0,0,0,0,0,0,3))}",
    "return {struct.unpack('>i13', string.char(9,9,9,9,9,255,255,255,255,255,255,255,253))}",
    "return {struct.unpack('>i11', string.char(9,9,9,128,0,0,0,0,0,0,3))}",
    'return {cmsgpack.unpack()}',
    'return {cmsgpack.unpack(nil)}',
    'return {cmsgpack.unpack_limit()}',
    "return {cmsgpack.unpack_limit('x')}",
    'return {cmsgpack.unpack_limit(string.char(1,2,3), 1, -2^32)}',
    'return {cmsgpack.unpack_limit(string.char(1,2,3), 0/0)}',
]])

# errors a C library function raises as Lua 5.1 makes them: luaL_argerror names the function
# as its caller does ('?' when the caller is C code: pcall, xpcall, gsub), lua_settable's
# errors have no position; and a library function kept in a local outlives the errors it raised
NIL_KEY = _bytes(0x81, 0xc0, 1)
NAN_KEY = _bytes(0x81, 0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0, 1)
C_ERRORS = Case("errors as C functions raise them", [_ev(s) for s in [
    "return {pcall(bit.band, {})}", "return {pcall(cjson.encode)}",
    "return {pcall(struct.pack, 'i40', 1)}", "return {pcall(math.random, 0)}",
    "return {pcall(cmsgpack.unpack_one, {}, 'x')}",
    "local f = bit.band; f({})", "return bit:band()", "local t = {x = bit.bor}; return t.x({})",
    "return bit.band({})", "return string.gsub('a', '.', bit.band)",
    "local ok, e = pcall(function() return bit.band({}) end) return e",
    "return {xpcall(bit.band, function(e) return 'h:' .. e end)}",
    "return {xpcall(function() local q = bit.bor; q({}) end, function(e) return 'h:' .. e end)}",
    "return {pcall(cmsgpack.unpack, " + NIL_KEY + ")}", "return cmsgpack.unpack(" + NIL_KEY + ")",
    "return {pcall(function() return cmsgpack.unpack(" + NIL_KEY + ") end)}",
    "return cmsgpack.unpack(" + NAN_KEY + ")",
    "local f = redis.call; pcall(f, 'nosuch'); return f('ping')",
    "local f = bit.band; return {pcall(f, {}), pcall(f, 1)}",
    "local c = coroutine.create(function() redis.call('nosuch') end) coroutine.resume(c) "
    "return redis.call('ping')",
    "local f = cjson.decode; local r = {pcall(f, '[')} r[#r+1] = f('[1]')[1] return r",
    "return coroutine.wrap(1)", "return coroutine.create()", "return coroutine.create(string.rep)",
    "return {pcall(coroutine.create, bit.band)}", "return {pcall(coroutine.wrap(bit.band), {})}",
    "local f = coroutine.wrap(function() error('boom') end) return {pcall(f)}",
    # the base functions the sandbox replaces (next, pairs, rawget, rawset and setmetatable
    # not tail-called: see docs/COMPATIBILITY.md)
    "local x = rawset(1, 2, 3) return x", "local x = rawget(1, 2) return x",
    "local x = next(1) return x", "local p = pairs; p(nil)", "local x = setmetatable(1, {}) return x",
    "return getmetatable()", "return load(1)",
    "local ok, e = xpcall(function() return 1 end) return e", "return {pcall(rawset, 1)}",
    "return {pcall(next, 1)}", "return {pcall(pairs)}", "local x = rawset({}, nil, 1) return x",
    "return {pcall(rawset, {}, 0/0, 1)}", "local x = rawset(_G, 'x', 1) return x",
    "return {pcall(rawset, string, 'x', 1)}", "local x = setmetatable({}, 1) return x",
    "local t = setmetatable({}, {__metatable = 'no'}) local x = setmetatable(t, {}) return x",
    "local t = setmetatable({}, {__metatable = 'no'}) return getmetatable(t)",
    "local x = rawget({}) return x", "local x = rawset({}, 1) return x",
    "local t = {} rawset(t, 'a', 1) return {rawget(t, 'a'), next(t), getmetatable('').__index == string}",
    "local i = 0 local f = load(function() i = i + 1 if i == 1 then return 'return 42' end end) "
    "return f()",
    "return loadstring()", "return {pcall(loadstring)}", "return loadstring({})",
    "return {loadstring('return 1', {})}", "return loadstring(12)()",
    "return loadstring('return 5', 'name')()",
]])

CASES = [BIT, STRUCT, CMSGPACK, CJSON, CJSON_NUMBERS, CMSGPACK_NUMBERS, CJSON_CONFIG, EDGES,
         C_ERRORS]


@pytest.mark.parametrize("proto", [2, 3])
def test_libraries_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)
