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
local function int_bytes(n, size, big)
  -- little-endian bytes of the low `size` bytes of n (two's complement when negative)
  local out = {}
  for k = 1, size do  -- floored % keeps negative values exact (two's complement)
    local b = n % 256
    out[k] = char(b)
    n = (n - b) / 256
  end
  if big then
    local r = {}
    for k = 1, size do r[k] = out[size + 1 - k] end
    out = r
  end
  return concat(out)
end
local function bytes_int(data, pos, size, big, signed)
  local function at(k) return byte(data, big and (pos + size - 1 - k) or (pos + k)) end
  local negative = signed and size <= 8 and at(size - 1) >= 128
  local v, p = 0, 1
  for k = 0, size - 1 do
    local b = at(k)
    if negative then b = 255 - b end
    v = v + b * p
    p = p * 256
  end
  if negative then v = -v - 1 end
  return v
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
