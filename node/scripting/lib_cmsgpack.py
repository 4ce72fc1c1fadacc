"""``cmsgpack`` (lua-cmsgpack 0.4.0 as Redis 7.0 ships it), in Lua: pack/unpack with its type
choices (smallest integer form, float32 when exact, str8, array when keys are 1..n, nesting
limit 16) and error texts; ``unpack_one``/``unpack_limit`` return the next offset first.
"""

from __future__ import annotations

CMSGPACK_LUA = r"""
local h = ...
local entry, argerror, bare_error = h.entry, h.argerror, h.bare_error
local type, select, next, floor, frexp, ldexp, huge = type, select, next, math.floor,
                                                      math.frexp, math.ldexp, math.huge
local char, byte, sub, concat = string.char, string.byte, string.sub, table.concat
local MAX_NESTING = 16

local M = {}
M._NAME, M._VERSION = 'cmsgpack', 'lua-cmsgpack 0.4.0'
M._COPYRIGHT = 'Copyright (C) 2012, Salvatore Sanfilippo'
M._DESCRIPTION = 'MessagePack C implementation for Lua'

local function be(v, size)  -- big-endian bytes of the low `size` bytes (two's complement)
  local out = {}
  for k = size, 1, -1 do  -- floored % keeps negative values exact (two's complement)
    local b = v % 256
    out[k] = char(b)
    v = (v - b) / 256
  end
  return concat(out)
end
local float_bits = h.float_bytes  -- (x, size): big-endian IEEE bytes, NaN bits kept
-- C's (double)(float)x == x: a NaN never, infinities always, else 24 significant bits and a
-- multiple of 2^-149 (the float subnormals' step) below 2^128
local function is_float32(x)
  if x ~= x then return false end
  if x == huge or x == -huge or x == 0 then return true end
  local fr, ex = frexp(x)
  if ex > 128 or ex < -148 then return false end
  local scaled, steps = ldexp(fr, 24), ldexp(x, 149)
  return scaled == floor(scaled) and steps == floor(steps)
end

local function enc_int(n)
  if n >= 0 then
    if n < 128 then return char(n) end
    if n < 256 then return '\204' .. char(n) end
    if n < 65536 then return '\205' .. be(n, 2) end
    if n < 4294967296 then return '\206' .. be(n, 4) end
    return '\207' .. be(n, 8)
  end
  if n >= -32 then return char(256 + n) end
  if n >= -128 then return '\208' .. char(256 + n) end
  if n >= -32768 then return '\209' .. be(65536 + n, 2) end
  if n >= -2147483648 then return '\210' .. be(4294967296 + n, 4) end
  return '\211' .. be(n, 8)
end
local function enc_str(s)
  local l = #s
  if l < 32 then return char(0xa0 + l) .. s end
  if l < 256 then return '\217' .. char(l) .. s end
  if l < 65536 then return '\218' .. be(l, 2) .. s end
  return '\219' .. be(l, 4) .. s
end
local encode
local function is_array(t)
  local max, count = 0, 0
  for k in next, t do
    if type(k) == 'number' and k > 0 and floor(k) == k then
      if k > max then max = k end
      count = count + 1
    else
      return false
    end
  end
  return max == count, max
end
local function header(n, fix, small, big, base)
  if n < 16 then return char(base + n) end
  if n < 65536 then return small .. be(n, 2) end
  return big .. be(n, 4)
end
encode = function(out, v, level)
  local t = type(v)
  if t == 'string' then out[#out + 1] = enc_str(v)
  elseif t == 'boolean' then out[#out + 1] = v and '\195' or '\194'
  elseif t == 'number' then
    if floor(v) == v and v >= -9223372036854775808 and v < 9223372036854775808 then
      out[#out + 1] = enc_int(v)
    elseif is_float32(v) then
      out[#out + 1] = '\202' .. float_bits(v, 4)
    else
      out[#out + 1] = '\203' .. float_bits(v, 8)
    end
  elseif t == 'table' and level < MAX_NESTING then
    local arr, n = is_array(v)
    if arr then
      out[#out + 1] = header(n, nil, '\220', '\221', 0x90)
      for i = 1, n do encode(out, v[i], level + 1) end
    else
      local count = 0
      for _ in next, v do count = count + 1 end
      out[#out + 1] = header(count, nil, '\222', '\223', 0x80)
      for k, x in next, v do
        encode(out, k, level + 1)
        encode(out, x, level + 1)
      end
    end
  else
    out[#out + 1] = '\192'
  end
end
entry(M, 'pack', function(...)
  local n = select('#', ...)
  if n == 0 then argerror(0, 'pack', 'MessagePack pack needs input.') end
  local out = {}
  for i = 1, n do encode(out, (select(i, ...)), 0) end
  return concat(out)
end)

-- unpack ----------------------------------------------------------------------------------
local MISSING, BAD = 'Missing bytes in input.', 'Bad data format in input.'
local function need(s, pos, n) if pos + n - 1 > #s then error(MISSING, 0) end end
local function ube(s, pos, size)
  need(s, pos, size)
  local v = 0
  for k = pos, pos + size - 1 do v = v * 256 + byte(s, k) end
  return v
end
local function sbe(s, pos, size)
  need(s, pos, size)
  if byte(s, pos) < 128 then return ube(s, pos, size) end
  local v = 0
  for k = pos, pos + size - 1 do v = v * 256 + (255 - byte(s, k)) end
  return -v - 1
end
local function ufloat(s, pos, size)
  need(s, pos, size)
  return h.bytes_float(sub(s, pos, pos + size - 1), size)
end
-- 64-bit integers as two 32-bit halves: one rounding to a double, as C's conversion. lua-cmsgpack
-- reads uint 64 as a signed value too (0xcf ff..ff is -1)
local function int64(s, pos)
  need(s, pos, 8)
  local hi = ube(s, pos, 4)
  if hi >= 2147483648 then hi = hi - 4294967296 end
  return hi * 4294967296 + ube(s, pos + 4, 4)
end
local decode
local function dec_str(s, pos, n)
  need(s, pos, n)
  return sub(s, pos, pos + n - 1), pos + n
end
local function dec_array(s, pos, n)
  local t = {}
  for i = 1, n do t[i], pos = decode(s, pos) end
  return t, pos
end
local function dec_map(s, pos, n)
  local t = {}
  for _ = 1, n do
    local k, v
    k, pos = decode(s, pos)
    v, pos = decode(s, pos)
    if k == nil then bare_error('table index is nil') end  -- lua_settable's own errors
    if k ~= k then bare_error('table index is NaN') end
    t[k] = v
  end
  return t, pos
end
decode = function(s, pos)
  need(s, pos, 1)
  local c = byte(s, pos)
  pos = pos + 1
  if c < 0x80 then return c, pos end
  if c >= 0xe0 then return c - 256, pos end
  if c >= 0xa0 and c <= 0xbf then return dec_str(s, pos, c - 0xa0) end
  if c >= 0x90 and c <= 0x9f then return dec_array(s, pos, c - 0x90) end
  if c >= 0x80 and c <= 0x8f then return dec_map(s, pos, c - 0x80) end
  if c == 0xc0 then return nil, pos end
  if c == 0xc2 then return false, pos end
  if c == 0xc3 then return true, pos end
  if c == 0xcc then return ube(s, pos, 1), pos + 1 end
  if c == 0xcd then return ube(s, pos, 2), pos + 2 end
  if c == 0xce then return ube(s, pos, 4), pos + 4 end
  if c == 0xcf then return int64(s, pos), pos + 8 end
  if c == 0xd0 then return sbe(s, pos, 1), pos + 1 end
  if c == 0xd1 then return sbe(s, pos, 2), pos + 2 end
  if c == 0xd2 then return sbe(s, pos, 4), pos + 4 end
  if c == 0xd3 then return int64(s, pos), pos + 8 end
  if c == 0xca then return ufloat(s, pos, 4), pos + 4 end
  if c == 0xcb then return ufloat(s, pos, 8), pos + 8 end
  -- 0.4.0 knows str 8/16/32 only: bin (0xc4-0xc6) and ext are a bad format
  if c == 0xd9 then local n = ube(s, pos, 1) return dec_str(s, pos + 1, n) end
  if c == 0xda then local n = ube(s, pos, 2) return dec_str(s, pos + 2, n) end
  if c == 0xdb then local n = ube(s, pos, 4) return dec_str(s, pos + 4, n) end
  if c == 0xdc then return dec_array(s, pos + 2, ube(s, pos, 2)) end
  if c == 0xdd then return dec_array(s, pos + 4, ube(s, pos, 4)) end
  if c == 0xde then return dec_map(s, pos + 2, ube(s, pos, 2)) end
  if c == 0xdf then return dec_map(s, pos + 4, ube(s, pos, 4)) end
  error(BAD, 0)
end
-- mp_unpack_full: everything when limit and offset are both 0, else up to ``limit`` values
-- from ``offset`` preceded by the next offset (-1 at the end); its error names the input's
-- length as the limit, as lua-cmsgpack 0.4.0 does
local function as_int32(v)  -- what C's %d prints of a 64-bit value: its low 32 bits, signed
  v = v % 4294967296
  if v >= 2147483648 then v = v - 4294967296 end
  return v
end
local function unpack_full(fname, present, s, limit, offset)
  if type(s) == 'number' then s = tostring(s)
  elseif type(s) ~= 'string' then
    argerror(1, fname, 'string expected, got ' .. (present and type(s) or 'no value'))
  end
  local len = #s
  if offset < 0 or limit < 0 then
    error('Invalid request to unpack with offset of ' .. as_int32(offset) .. ' and limit of '
          .. len .. '.', 0)
  end
  if offset > len then
    error('Start offset ' .. as_int32(offset) .. ' greater than input length ' .. len .. '.', 0)
  end
  local all = limit == 0 and offset == 0
  local res, n, pos = {}, 0, offset + 1
  while pos <= len and (all or n < limit) do
    n = n + 1
    res[n], pos = decode(s, pos)
  end
  if not all then
    return (pos <= len) and (pos - 1) or -1, unpack(res, 1, n)
  end
  return unpack(res, 1, n)
end
-- luaL_checkinteger / luaL_optinteger: a 64-bit lua_Integer (truncated; NaN and out of range
-- INT64_MIN), which this lua-cmsgpack keeps whole
local function int_arg(fname, n, v, optional)
  if v == nil and optional then return 0 end
  local x = tonumber(v)
  if x == nil then
    argerror(n, fname, 'number expected, got ' .. (v == nil and 'no value' or type(v)))
  end
  if x ~= x or x >= 9223372036854775808 or x < -9223372036854775808 then
    return -9223372036854775808
  end
  if x >= 0 then return floor(x) end
  return -floor(-x)
end
entry(M, 'unpack', function(...)
  return unpack_full('unpack', select('#', ...) > 0, (...), 0, 0)
end)
entry(M, 'unpack_one', function(...)
  local s, offset = ...
  offset = int_arg('unpack_one', 2, offset, true)
  return unpack_full('unpack_one', select('#', ...) > 0, s, 1, offset)
end)
entry(M, 'unpack_limit', function(...)
  local s, limit, offset = ...
  limit = int_arg('unpack_limit', 2, limit, false)
  offset = int_arg('unpack_limit', 3, offset, true)
  return unpack_full('unpack_limit', select('#', ...) > 0, s, limit, offset)
end)
return M
"""
