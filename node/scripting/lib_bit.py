"""``bit`` (LuaBitOp 1.0 as Redis 7.0 ships it), in Lua on 32-bit signed integers.

Arguments are normalised as LuaBitOp does (round to nearest, keep the low 32 bits, signed);
a non-number is ``bad argument #n to 'f' (number expected, got T)``.
"""

from __future__ import annotations

BIT_LUA = r"""
local h = ...
local entry, argerror, typename_at = h.entry, h.argerror, h.typename_at
local floor, frexp, huge, tonumber, select, type = math.floor, math.frexp, math.huge, tonumber,
                                                  select, type
local TWO32, TWO31 = 4294967296, 2147483648
local MAGIC = 6755399441055744.0  -- 2^52 + 2^51: the sum rounds to an integer

local M = {}

local function unsigned(fname, n, ...)
  local x = select(n, ...)
  local v = tonumber(x)
  if v == nil or (type(x) ~= 'number' and type(x) ~= 'string') then
    argerror(n, fname, 'number expected, got ' .. typename_at(n, ...))
  end
  -- LuaBitOp keeps the low 32 bits of the double (v + 2^52 + 2^51) as stored: the integer
  -- itself while the sum is below 2^53, else bits of a rounded or scaled mantissa
  local y = v + MAGIC
  if y >= 4503599627370496 and y < 9007199254740992 then return y % TWO32 end
  if y ~= y or y == 0 or y == huge or y == -huge then return 0 end  -- the default NaN: 0
  local m = frexp(y)
  if m < 0 then m = -m end
  return ((m * 2 - 1) * 4503599627370496) % TWO32
end
local function signed(u)
  if u >= TWO31 then return u - TWO32 end
  return u
end

local function bitop(a, b, op)  -- op: 1 and, 2 or, 3 xor (a, b unsigned)
  local r, p = 0, 1
  for _ = 1, 32 do
    local x, y = a % 2, b % 2
    local bit
    if op == 1 then bit = (x == 1 and y == 1) and 1 or 0
    elseif op == 2 then bit = (x == 1 or y == 1) and 1 or 0
    else bit = (x ~= y) and 1 or 0 end
    r = r + bit * p
    a, b, p = (a - x) / 2, (b - y) / 2, p * 2
  end
  return r
end

local function fold(fname, op)
  return function(...)
    local r = unsigned(fname, 1, ...)
    for i = 2, select('#', ...) do r = bitop(r, unsigned(fname, i, ...), op) end
    return signed(r)
  end
end

entry(M, 'tobit', function(...) return signed(unsigned('tobit', 1, ...)) end)
entry(M, 'bnot', function(...) return signed(TWO32 - 1 - unsigned('bnot', 1, ...)) end)
entry(M, 'band', fold('band', 1))
entry(M, 'bor', fold('bor', 2))
entry(M, 'bxor', fold('bxor', 3))
entry(M, 'lshift', function(...)
  local a, n = unsigned('lshift', 1, ...), unsigned('lshift', 2, ...) % 32
  return signed((a * 2 ^ n) % TWO32)
end)
entry(M, 'rshift', function(...)
  local a, n = unsigned('rshift', 1, ...), unsigned('rshift', 2, ...) % 32
  return signed(floor(a / 2 ^ n))
end)
entry(M, 'arshift', function(...)
  local a, n = unsigned('arshift', 1, ...), unsigned('arshift', 2, ...) % 32
  return floor(signed(a) / 2 ^ n)
end)
entry(M, 'rol', function(...)
  local a, n = unsigned('rol', 1, ...), unsigned('rol', 2, ...) % 32
  local hi = floor(a / 2 ^ (32 - n))
  return signed((a * 2 ^ n) % TWO32 + hi)
end)
entry(M, 'ror', function(...)
  local a, n = unsigned('ror', 1, ...), unsigned('ror', 2, ...) % 32
  local lo = a % 2 ^ n
  return signed(floor(a / 2 ^ n) + lo * 2 ^ (32 - n))
end)
entry(M, 'bswap', function(...)
  local a = unsigned('bswap', 1, ...)
  local b0, b1, b2, b3 = a % 256, floor(a / 256) % 256, floor(a / 65536) % 256, floor(a / 16777216)
  return signed(((b0 * 256 + b1) * 256 + b2) * 256 + b3)
end)
entry(M, 'tohex', function(...)
  local a = unsigned('tohex', 1, ...)
  local n = 8
  if select('#', ...) >= 2 and select(2, ...) ~= nil then n = signed(unsigned('tohex', 2, ...)) end
  local digits = '0123456789abcdef'
  if n < 0 then n = -n; digits = '0123456789ABCDEF' end
  if n > 8 then n = 8 end
  local out = {}
  for i = n, 1, -1 do
    local d = a % 16
    out[i] = digits:sub(d + 1, d + 1)
    a = (a - d) / 16
  end
  return table.concat(out)
end)
return M
"""
