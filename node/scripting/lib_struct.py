"""``struct`` (Roberto Ierusalimschy's struct 0.2 as Redis 7.0 ships it), in Lua.

Formats: ``> < = !n x b B h H l L T i[n] I[n] c[n] s f d`` and spaces; integers of up to 8
bytes (values beyond 2^53 lose precision, as Lua numbers do), floats through the sandbox's IEEE helpers.
"""

from __future__ import annotations

STRUCT_LUA = r"""
local h = ...
local entry, argerror = h.entry, h.argerror
local floor = math.floor
local char, byte, sub, find = string.char, string.byte, string.sub, string.find
local concat, select, tonumber, type, tostring = table.concat, select, tonumber, type, tostring
local MAXINTSIZE, MAXALIGN = 32, 8

local M = {}

-- the format reader -----------------------------------------------------------------------
local function getnum(fmt, i, df)
  local s, e = find(fmt, '^%d+', i)
  if not s then return df, i end
  local a = 0
  for k = s, e do
    local d = byte(fmt, k) - 48
    if a > 214748364 or a * 10 > 2147483647 - d then error('integral size overflow', 0) end
    a = a * 10 + d
  end
  return a, e + 1
end
local SIZES = {b = 1, B = 1, h = 2, H = 2, l = 8, L = 8, T = 8, f = 4, d = 8, x = 1}
local function optsize(fname, opt, fmt, i)
  local sz = SIZES[opt]
  if sz then return sz, i end
  if opt == 'c' then return getnum(fmt, i, 1) end
  if opt == 'i' or opt == 'I' then
    local n, j = getnum(fmt, i, 4)
    if n > MAXINTSIZE then
      error(('integral size %d is larger than limit of %d'):format(n, MAXINTSIZE), 0)
    end
    return n, j
  end
  return 0, i
end
local function toalign(len, align, opt, size)
  if size == 0 or opt == 'c' then return 0 end
  if size > align then size = align end
  return (size - len % size) % size
end
-- controloptions: returns the new endianness and alignment, or raises
local function control(fname, opt, fmt, i, st)
  if opt == ' ' then return i end
  if opt == '>' then st.big = true return i end
  if opt == '<' or opt == '=' then st.big = false return i end
  if opt == '!' then
    local a, j = getnum(fmt, i, MAXALIGN)
    local p2 = a
    while p2 > 1 and p2 % 2 == 0 do p2 = p2 / 2 end
    if p2 ~= 1 then
      error(('alignment %d is not a power of 2'):format(a), 0)
    end
    st.align = a
    return j
  end
  argerror(1, fname, "invalid format option '" .. opt .. "'")
end

-- numbers <-> bytes -----------------------------------------------------------------------
-- integers go through struct.c's 64-bit Uinttype: (uint64)n, or (uint64)(int64)n when negative,
-- with x86's answers out of range (NaN and -2^63 and below: the top bit alone; 2^64 and up: 0);
-- kept as two exact 32-bit words
local TWO32 = 4294967296
local function word64(n)
  if n ~= n or n < -9223372036854775808 then return 2147483648, 0 end
  if n < 0 then  -- two's complement of the truncated magnitude
    local m = floor(-n)
    local mh = floor(m / TWO32)
    local ml = m - mh * TWO32
    if ml == 0 then return (TWO32 - mh) % TWO32, 0 end
    return TWO32 - 1 - mh, TWO32 - ml
  end
  if n >= 18446744073709551616 then return 0, 0 end
  n = floor(n)
  local hi = floor(n / TWO32)
  return hi, n - hi * TWO32
end
local function int_bytes(n, size, big)
  local hi, lo = word64(n)
  local out = {}
  for k = 1, size do  -- least significant first; bytes past the 8th are shifted out: 0
    local b = 0
    if k <= 4 then b = lo % 256; lo = (lo - b) / 256
    elseif k <= 8 then b = hi % 256; hi = (hi - b) / 256 end
    out[k] = char(b)
  end
  if big then
    local r = {}
    for k = 1, size do r[k] = out[size + 1 - k] end
    out = r
  end
  return concat(out)
end
-- getinteger: the bytes shifted through a 64-bit word (only the 8 least significant stay); a
-- signed value is sign-extended from bit (size*8 - 1) mod 64, x86's shift count
local function bytes_int(data, pos, size, big, signed)
  local hi, lo = 0, 0
  for k = (size < 8 and size or 8) - 1, 0, -1 do  -- k: 0 = the least significant byte
    local b = byte(data, big and (pos + size - 1 - k) or (pos + k))
    if k >= 4 then hi = hi * 256 + b else lo = lo * 256 + b end
  end
  if not signed then return hi * TWO32 + lo end
  local p = (size * 8 - 1) % 64
  if p == 63 then
    if hi >= 2147483648 then hi = hi - TWO32 end
    return hi * TWO32 + lo
  end
  if p < 32 then  -- no more than 32 significant bits: exact
    local v = lo % 2 ^ p
    if hi > 0 or lo >= 2 ^ p then return v - 2 ^ p end
    return v
  end
  local top = 2 ^ (p - 32)
  local lh = hi % top
  if hi < top then return lh * TWO32 + lo end  -- one rounding
  -- negative: -(2^p - (lh:lo)), its magnitude as words, one rounding
  if lo == 0 then return -(top - lh) * TWO32 end
  return -((top - lh - 1) * TWO32 + (TWO32 - lo))
end
local function float_bytes(x, size, big)  -- C's cast to float or double, bits as stored
  local b = h.float_bytes(x, size)
  if big then return b end
  return b:reverse()
end
local function bytes_float(data, pos, size, big)
  local b = sub(data, pos, pos + size - 1)
  if not big then b = b:reverse() end
  return h.bytes_float(b, size)
end

local function checknumber(fname, n, v)
  local x = tonumber(v)
  if x == nil or (type(v) ~= 'number' and type(v) ~= 'string') then
    argerror(n, fname, 'number expected, got ' .. type(v))
  end
  return x
end
local function checkstring(fname, n, v)
  if type(v) == 'number' then return tostring(v) end
  if type(v) ~= 'string' then
    argerror(n, fname, 'string expected, got ' .. type(v))
  end
  return v
end

entry(M, 'pack', function(...)
  local args = {n = select('#', ...), ...}
  local fmt = checkstring('pack', 1, args[1])
  local st = {big = false, align = 1}
  local out, total, arg, i = {}, 0, 2, 1
  while i <= #fmt do
    local opt = sub(fmt, i, i)
    i = i + 1
    local size
    size, i = optsize('pack', opt, fmt, i)
    local pad = toalign(total, st.align, opt, size)
    total = total + pad
    if pad > 0 then out[#out + 1] = string.rep('\0', pad) end
    if opt == 'b' or opt == 'B' or opt == 'h' or opt == 'H' or opt == 'l' or opt == 'L'
       or opt == 'T' or opt == 'i' or opt == 'I' then
      local n = checknumber('pack', arg, args[arg])
      arg = arg + 1
      if n < 0 then n = -floor(-n) else n = floor(n) end
      out[#out + 1] = int_bytes(n, size, st.big)
    elseif opt == 'x' then
      out[#out + 1] = '\0'
    elseif opt == 'f' or opt == 'd' then
      local n = checknumber('pack', arg, args[arg])
      arg = arg + 1
      out[#out + 1] = float_bytes(n, size, st.big)
    elseif opt == 'c' or opt == 's' then
      local s = checkstring('pack', arg, args[arg])
      local l = #s
      if size == 0 then size = l end
      if l < size then argerror(arg + 1, 'pack', 'string too short') end
      arg = arg + 1
      out[#out + 1] = sub(s, 1, size)
      if opt == 's' then
        out[#out] = s .. '\0'
        size = l + 1
      end
    else
      i = control('pack', opt, fmt, i, st)
    end
    total = total + size
  end
  return concat(out)
end)

entry(M, 'unpack', function(...)
  local fmt = checkstring('unpack', 1, (...))
  local data = checkstring('unpack', 2, (select(2, ...)))
  local ld = #data
  local pos = 0
  if select('#', ...) >= 3 and select(3, ...) ~= nil then
    pos = floor(checknumber('unpack', 3, (select(3, ...)))) - 1
  end
  local st = {big = false, align = 1}
  local res, i = {}, 1
  local n = 0
  while i <= #fmt do
    local opt = sub(fmt, i, i)
    i = i + 1
    local size
    size, i = optsize('unpack', opt, fmt, i)
    pos = pos + toalign(pos, st.align, opt, size)
    if pos + size > ld and opt ~= 'c' then argerror(2, 'unpack', 'data string too short') end
    if opt == 'b' or opt == 'h' or opt == 'l' or opt == 'i' or opt == 'B' or opt == 'H'
       or opt == 'L' or opt == 'T' or opt == 'I' then
      local signed = (opt == 'b' or opt == 'h' or opt == 'l' or opt == 'i')
      n = n + 1
      res[n] = bytes_int(data, pos + 1, size, st.big, signed)
    elseif opt == 'x' then
      -- padding
    elseif opt == 'f' or opt == 'd' then
      n = n + 1
      res[n] = bytes_float(data, pos + 1, size, st.big)
    elseif opt == 'c' then
      if size == 0 then
        if n == 0 or type(res[n]) ~= 'number' then error("format `c0' needs a previous size", 0) end
        size = res[n]
        res[n] = nil
        n = n - 1
      end
      if pos + size > ld then argerror(2, 'unpack', 'data string too short') end
      n = n + 1
      res[n] = sub(data, pos + 1, pos + size)
    elseif opt == 's' then
      local e = find(data, '\0', pos + 1, true)
      if e == nil then error('unfinished string in data', 0) end
      size = e - pos
      n = n + 1
      res[n] = sub(data, pos + 1, e - 1)
    else
      i = control('unpack', opt, fmt, i, st)
    end
    pos = pos + size
  end
  n = n + 1
  res[n] = pos + 1
  return unpack(res, 1, n)
end)

entry(M, 'size', function(...)
  local fmt = checkstring('size', 1, (...))
  local st = {big = false, align = 1}
  local total, i = 0, 1
  while i <= #fmt do
    local opt = sub(fmt, i, i)
    i = i + 1
    local size
    size, i = optsize('size', opt, fmt, i)
    total = total + toalign(total, st.align, opt, size)
    if opt == 's' then
      argerror(1, 'size', "option 's' has no fixed size")
    elseif opt == 'c' and size == 0 then
      argerror(1, 'size', "option 'c0' has no fixed size")
    end
    if SIZES[opt] == nil and opt ~= 'c' and opt ~= 'i' and opt ~= 'I' then
      i = control('size', opt, fmt, i, st)
    end
    total = total + size
  end
  return total
end)
return M
"""
