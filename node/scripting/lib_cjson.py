"""``cjson`` (lua-cjson 2.1.0 as Redis 7.0 ships it), in Lua: encode and decode with its
defaults (numbers as ``%.14g``, sparse-array and nesting limits, ``cjson.null``) and its error
texts. The configuration functions answer with the defaults and accept new values for the
limits that the code honours (depths, sparse arrays, number precision).
"""

from __future__ import annotations

CJSON_LUA = r"""
local h = ...
local entry, argerror = h.entry, h.argerror
local type, select, tostring, tonumber, next, rawget = type, select, tostring, tonumber, next, rawget
local floor, huge = math.floor, math.huge
local sfmt, byte, char, sub, find, lower, concat = string.format, string.byte, string.char,
                                                  string.sub, string.find, string.lower, table.concat
local INT_MIN = -2147483648

local M = {}
local null = newproxy(false)
M.null = null
M._NAME, M._VERSION = 'cjson', '2.1.0'
local cfg = {
  -- the enumerated settings by index: 0 off, 1 on (2: null, for encode_invalid)
  sparse_convert = 0, sparse_ratio = 2, sparse_safe = 10,
  encode_max_depth = 1000, decode_max_depth = 1000, precision = 14,
  encode_invalid = 0, decode_invalid = 1, keep_buffer = 1,
}

-- encode ----------------------------------------------------------------------------------
local ESC = {['"'] = '\\"', ['\\'] = '\\\\', ['/'] = '\\/', ['\b'] = '\\b', ['\f'] = '\\f',
             ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t', ['\127'] = '\\u007f'}
for i = 0, 31 do
  local c = char(i)
  if not ESC[c] then ESC[c] = sfmt('\\u%04x', i) end
end
local function enc_string(s) return '"' .. s:gsub('[%c"\\/\127]', ESC) .. '"' end
local function enc_number(x)
  if x ~= x or x == huge or x == -huge then
    local mode = cfg.encode_invalid
    if mode == 0 then error('Cannot serialise number: must not be NaN or Inf', 0) end
    if mode == 2 then return 'null' end
    if x ~= x then return 'nan' end
    return x > 0 and 'inf' or '-inf'
  end
  return sfmt('%.' .. cfg.precision .. 'g', x)
end
local function array_length(t)
  local max, items = 0, 0
  for k in next, t do
    if type(k) == 'number' and k >= 1 and floor(k) == k then
      -- the maximum is a C int: a key from 2^31 up converts to INT_MIN (x86), so a table
      -- with such a key (met after the others) is no array
      if k > max then max = (k < 2147483648) and k or INT_MIN end
      items = items + 1
    else
      return -1
    end
  end
  if cfg.sparse_ratio > 0 and max > items * cfg.sparse_ratio and max > cfg.sparse_safe then
    if cfg.sparse_convert == 0 then error('Cannot serialise table: excessively sparse array', 0) end
    return -1
  end
  return max
end
local encode_value
local function enc_table(out, t, depth)
  depth = depth + 1
  if depth > cfg.encode_max_depth then
    error(sfmt('Cannot serialise, excessive nesting (%d)', depth), 0)
  end
  local len = array_length(t)
  if len > 0 then
    out[#out + 1] = '['
    for i = 1, len do
      if i > 1 then out[#out + 1] = ',' end
      encode_value(out, rawget(t, i), depth)
    end
    out[#out + 1] = ']'
  else
    out[#out + 1] = '{'
    local first = true
    for k, v in next, t do
      if not first then out[#out + 1] = ',' end
      first = false
      local kt = type(k)
      if kt == 'string' then out[#out + 1] = enc_string(k)
      elseif kt == 'number' then out[#out + 1] = '"' .. enc_number(k) .. '"'
      else error('Cannot serialise ' .. kt .. ': table key must be a number or string', 0) end
      out[#out + 1] = ':'
      encode_value(out, v, depth)
    end
    out[#out + 1] = '}'
  end
end
encode_value = function(out, v, depth)
  local t = type(v)
  if t == 'string' then out[#out + 1] = enc_string(v)
  elseif t == 'number' then out[#out + 1] = enc_number(v)
  elseif t == 'boolean' then out[#out + 1] = v and 'true' or 'false'
  elseif t == 'nil' or v == null then out[#out + 1] = 'null'
  elseif t == 'table' then enc_table(out, v, depth)
  else error('Cannot serialise ' .. t .. ': type not supported', 0) end
end
entry(M, 'encode', function(...)
  if select('#', ...) ~= 1 then argerror(1, 'encode', 'expected 1 argument') end
  local out = {}
  encode_value(out, (...), 0)
  return concat(out)
end)

-- decode ----------------------------------------------------------------------------------
-- tokens: {type, value, index}; types as lua-cjson names them
local function utf8(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 + floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64,
              0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
end
local SIMPLE = {['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n',
                r = '\r', t = '\t'}
-- numbers: lua-cjson hands the text at the token to C strtod and takes what it converts;
-- strtod_end finds the end of that prefix (sign, inf/infinity, nan(chars), hexadecimal with
-- p exponent, decimal with e exponent), tonumber (strtod again) gives the value
local function digits_end(s, j, class)  -- index after [class]*[.[class]*], and digit count
  local _, e = find(s, '^' .. class .. '*', j)
  local n = e - j + 1
  if sub(s, e + 1, e + 1) == '.' then
    local _, f = find(s, '^' .. class .. '*', e + 2)
    n, e = n + f - e - 1, f
  end
  return e + 1, n
end
local function strtod_end(s, i)
  local j = i
  local c = sub(s, j, j)
  if c == '+' or c == '-' then j = j + 1 end
  local word = lower(sub(s, j, j + 7))
  if word == 'infinity' then return j + 8 end
  word = sub(word, 1, 3)
  if word == 'inf' then return j + 3 end
  if word == 'nan' then
    local _, pe = find(s, '^%([%w_]*%)', j + 3)
    return (pe or j + 2) + 1
  end
  if find(s, '^0[xX]', j) then
    local e, n = digits_end(s, j + 2, '%x')
    if n == 0 then return j + 1 end  -- "0x" without digits: the 0 alone
    local _, pe = find(s, '^[pP][%+%-]?%d+', e)
    return pe and pe + 1 or e
  end
  local e, n = digits_end(s, j, '%d')
  if n == 0 then return nil end
  local _, pe = find(s, '^[eE][%+%-]?%d+', e)
  return pe and pe + 1 or e
end
local function number_token(s, i)
  local e = strtod_end(s, i)
  if e == nil then return 'T_ERROR', 'invalid number', i end
  return 'T_NUMBER', tonumber(sub(s, i, e - 1)), i, e
end
-- json_is_invalid_number: what JSON forbids among the texts strtod reads
local function invalid_number(s, i)
  local c = byte(s, i)
  if c == 43 then return true end  -- '+'
  if c == 45 then i = i + 1; c = byte(s, i) end  -- '-'
  if c == 48 then  -- '0' followed by x, X or a digit
    return find(s, '^[xX%d]', i + 1) ~= nil
  end
  if c == nil or c <= 57 or c >= 128 then return false end  -- C's signed char <= '9'
  local word = lower(sub(s, i, i + 2))
  return word == 'inf' or word == 'nan'
end
local function next_token(s, i)
  local _, e = find(s, '^[ \t\n\r]*', i)
  i = e + 1
  local c = sub(s, i, i)
  if c == '' then return 'T_END', nil, i end
  if c == '{' then return 'T_OBJ_BEGIN', nil, i, i + 1 end
  if c == '}' then return 'T_OBJ_END', nil, i, i + 1 end
  if c == '[' then return 'T_ARR_BEGIN', nil, i, i + 1 end
  if c == ']' then return 'T_ARR_END', nil, i, i + 1 end
  if c == ':' then return 'T_COLON', nil, i, i + 1 end
  if c == ',' then return 'T_COMMA', nil, i, i + 1 end
  if c == '"' then
    local parts, j = {}, i + 1
    while true do
      local q = find(s, '["\\]', j)
      if q == nil then return 'T_ERROR', 'unexpected end of string', #s + 1 end
      parts[#parts + 1] = sub(s, j, q - 1)
      if sub(s, q, q) == '"' then return 'T_STRING', concat(parts), i, q + 1 end
      local x = sub(s, q + 1, q + 1)
      if SIMPLE[x] then
        parts[#parts + 1] = SIMPLE[x]
        j = q + 2
      elseif x == 'u' then
        local hex = sub(s, q + 2, q + 5)
        if not find(hex, '^%x%x%x%x$') then return 'T_ERROR', 'invalid unicode escape code', q end
        local cp = tonumber(hex, 16)
        j = q + 6
        if cp >= 0xD800 and cp <= 0xDBFF then
          local lo = sub(s, j, j + 5)
          if not find(lo, '^\\u%x%x%x%x$') then return 'T_ERROR', 'invalid unicode escape code', q end
          local low = tonumber(sub(lo, 3), 16)
          if low < 0xDC00 or low > 0xDFFF then return 'T_ERROR', 'invalid unicode escape code', q end
          cp = 0x10000 + (cp - 0xD800) * 1024 + (low - 0xDC00)
          j = j + 6
        elseif cp >= 0xDC00 and cp <= 0xDFFF then
          return 'T_ERROR', 'invalid unicode escape code', q
        end
        parts[#parts + 1] = utf8(cp)
      else
        return 'T_ERROR', 'invalid escape code', q
      end
    end
  end
  if c == '-' or find(c, '^%d') then
    if cfg.decode_invalid == 0 and invalid_number(s, i) then
      return 'T_ERROR', 'invalid number', i
    end
    return number_token(s, i)
  end
  if sub(s, i, i + 3) == 'true' then return 'T_BOOLEAN', true, i, i + 4 end
  if sub(s, i, i + 4) == 'false' then return 'T_BOOLEAN', false, i, i + 5 end
  if sub(s, i, i + 3) == 'null' then return 'T_NULL', null, i, i + 4 end
  -- with decode_invalid_numbers on, what JSON forbids but strtod reads (+1, inf, nan)
  if cfg.decode_invalid == 1 and invalid_number(s, i) then return number_token(s, i) end
  return 'T_ERROR', 'invalid token', i
end
local function parse_error(expected, tt, tv, ti)
  local found = tt == 'T_ERROR' and tv or tt
  error(sfmt('Expected %s but found %s at character %d', expected, found, ti), 0)
end
local parse_value
local function parse_object(s, pos, depth, start)
  depth = depth + 1
  if depth > cfg.decode_max_depth then
    error(sfmt('Found too many nested data structures (%d) at character %d', depth, start), 0)
  end
  local t = {}
  local tt, tv, ti, nx = next_token(s, pos)
  if tt == 'T_OBJ_END' then return t, nx end
  while true do
    if tt ~= 'T_STRING' then parse_error('object key string', tt, tv, ti) end
    local key = tv
    tt, tv, ti, nx = next_token(s, nx)
    if tt ~= 'T_COLON' then parse_error('colon', tt, tv, ti) end
    local v
    v, nx = parse_value(s, nx, depth)
    t[key] = v
    tt, tv, ti, nx = next_token(s, nx)
    if tt == 'T_OBJ_END' then return t, nx end
    if tt ~= 'T_COMMA' then parse_error('comma or object end', tt, tv, ti) end
    tt, tv, ti, nx = next_token(s, nx)
  end
end
local function parse_array(s, pos, depth, start)
  depth = depth + 1
  if depth > cfg.decode_max_depth then
    error(sfmt('Found too many nested data structures (%d) at character %d', depth, start), 0)
  end
  local t, n = {}, 0
  local tt, tv, ti, nx = next_token(s, pos)
  if tt == 'T_ARR_END' then return t, nx end
  while true do
    local v
    v, nx = parse_value(s, pos, depth, tt, tv, ti, nx)
    n = n + 1
    t[n] = v
    tt, tv, ti, nx = next_token(s, nx)
    if tt == 'T_ARR_END' then return t, nx end
    if tt ~= 'T_COMMA' then parse_error('comma or array end', tt, tv, ti) end
    pos = nx
    tt, tv, ti, nx = next_token(s, nx)
  end
end
parse_value = function(s, pos, depth, tt, tv, ti, nx)
  if tt == nil then tt, tv, ti, nx = next_token(s, pos) end
  if tt == 'T_STRING' or tt == 'T_NUMBER' or tt == 'T_BOOLEAN' or tt == 'T_NULL' then
    return tv, nx
  end
  if tt == 'T_OBJ_BEGIN' then return parse_object(s, nx, depth, ti) end
  if tt == 'T_ARR_BEGIN' then return parse_array(s, nx, depth, ti) end
  parse_error('value', tt, tv, ti)
end
entry(M, 'decode', function(...)
  if select('#', ...) ~= 1 then argerror(1, 'decode', 'expected 1 argument') end
  local s = ...
  if type(s) == 'number' then s = tostring(s)
  elseif type(s) ~= 'string' then argerror(1, 'decode', 'string expected, got ' .. type(s)) end
  local v, nx = parse_value(s, 1, 0)
  local tt, tv, ti = next_token(s, nx)
  if tt ~= 'T_END' then parse_error('the end', tt, tv, ti) end
  return v
end)

-- configuration (lua-cjson's json_arg_init, json_integer_option, json_enum_option) ----------
local INT_MAX = 2147483647
local BOOL_OPTIONS = {'off', 'on'}
local c_int = h.lua_int  -- luaL_checkinteger, then the C int it is stored in
local function arg_init(fname, nmax, ...)
  if select('#', ...) > nmax then argerror(nmax + 1, fname, 'found too many arguments') end
end
local function integer_option(fname, n, v, key, min, max)
  if v ~= nil then
    local x = tonumber(v)
    if x == nil then argerror(n, fname, 'number expected, got ' .. type(v)) end
    x = c_int(x)
    -- lua-cjson names argument 1 whichever it checks
    if x < min or x > max then argerror(1, fname, sfmt('expected integer between %d and %d', min, max)) end
    cfg[key] = x
  end
  return cfg[key]
end
local function enum_option(fname, n, v, key, options)
  options = options or BOOL_OPTIONS
  if type(v) == 'boolean' then
    cfg[key] = v and 1 or 0
  elseif v ~= nil then
    if type(v) ~= 'string' and type(v) ~= 'number' then
      argerror(n, fname, 'string expected, got ' .. type(v))
    end
    local name, found = tostring(v), nil
    for i = 1, #options do
      if options[i] == name then found = i - 1 end
    end
    if found == nil then argerror(n, fname, "invalid option '" .. name .. "'") end
    cfg[key] = found
  end
  local cur = cfg[key]
  if cur == 0 or cur == 1 then return cur == 1 end
  return options[cur + 1]
end
local function int_setting(name, key, min, max)
  entry(M, name, function(...)
    arg_init(name, 1, ...)
    return integer_option(name, 1, (...), key, min, max)
  end)
end
local function enum_setting(name, key, options)
  entry(M, name, function(...)
    arg_init(name, 1, ...)
    return enum_option(name, 1, (...), key, options)
  end)
end
int_setting('encode_max_depth', 'encode_max_depth', 1, INT_MAX)
int_setting('decode_max_depth', 'decode_max_depth', 1, INT_MAX)
int_setting('encode_number_precision', 'precision', 1, 14)
enum_setting('encode_keep_buffer', 'keep_buffer')
enum_setting('encode_invalid_numbers', 'encode_invalid', {'off', 'on', 'null'})
enum_setting('decode_invalid_numbers', 'decode_invalid')
entry(M, 'encode_sparse_array', function(...)
  local fname = 'encode_sparse_array'
  arg_init(fname, 3, ...)
  local convert, ratio, safe = ...
  local c = enum_option(fname, 1, convert, 'sparse_convert')
  local r = integer_option(fname, 2, ratio, 'sparse_ratio', 0, INT_MAX)
  return c, r, integer_option(fname, 3, safe, 'sparse_safe', 0, INT_MAX)
end)
entry(M, 'new', function() return M end)
return M
"""
