"""The Lua side of the scripting engine: Redis 7.0's sandbox, written in Lua.

``SANDBOX_LUA`` runs once per interpreter (chunk name ``=lualib``, with the full standard
library) and returns the engine's handle (``run``, ``compile``, ``libs``). What scripts see is
``G``: the globals Redis 7.0 loads (base, table, string, math, cjson, cmsgpack, bit, struct,
``redis``), behind read-only proxies, so that

- reading a missing global fails: ``Script attempted to access nonexistent global variable``;
- writing any global or any field of a library fails: ``Attempt to modify a readonly table``
  (``rawset``/``setmetatable`` on them too, without a position, as Redis' VM check has none);
- ``os``, ``io``, ``require``, ``loadfile``, ``dofile``, ``print``, ``debug``, ``setfenv``,
  ``getfenv``, ``newproxy`` and lupa's ``python`` are simply absent.

Redis' library functions are C functions: an error they raise names the *caller's* line,
and a script that tail-calls one (``return redis.call(...)``) keeps its frame. Ours are Lua
functions, which a tail call would erase; so each public library function is the C function
``coroutine.wrap`` makes around a loop running the Lua implementation (``entry``). An error
inside it kills that coroutine; the table entry is rebuilt at once. ``pcall``/``xpcall`` of a
library function itself run its implementation directly (as a C function called from C: no
position, no name), so a function kept in a local survives the errors they catch. The texts
a C library raises without the Lua VM's help (luaL_argerror's function name, lua_settable's
``table index is nil``) are made Redis' where the error is caught (``caught``).

Internal chunks are named ``=lualib``; the error handler (``__redis__err__handler``, Redis'
own logic) skips their frames when it looks for the script line that failed.
"""

from __future__ import annotations

SANDBOX_LUA = r"""
local py = ...
local type, tostring, tonumber, select, error, rawget, rawset, rawequal, setmetatable,
      getmetatable, unpack, next, pcall, xpcall, loadstring, load, setfenv =
      type, tostring, tonumber, select, error, rawget, rawset, rawequal, setmetatable,
      getmetatable, unpack, next, pcall, xpcall, loadstring, load, setfenv
local getinfo = debug.getinfo
local cowrap, coyield = coroutine.wrap, coroutine.yield
local INTERNAL = '=lualib'
local RO_ERR = 'Attempt to modify a readonly table'

local function pack(...) return {n = select('#', ...), ...} end

-- the count hook (node/scripting/busy.py): every HOOK_EVERY instructions py.tick() reads the
-- clock and, once the run is past busy-reply-threshold, serves the other clients; it returns
-- the error that ends the code running (killed, or a library load past its time), or nil.
-- Hooks are per coroutine: each one made here or by a script gets it too.
local sethook, HOOK_EVERY, py_tick = debug.sethook, py.hook_every, py.tick
local count_hook
count_hook = function()
  local stop = py_tick()
  if stop then
    sethook(count_hook, 'l')  -- every line from now on: a pcall cannot keep the script alive
    -- raised in the script's own code only (not in our error handler or pcall)
    if debug.getinfo(2, 'S').source ~= '=lualib' then error({err = stop}, 0) end
  end
end
sethook(count_hook, '', HOOK_EVERY)

-- entries: the C-function face of every library function --------------------------------
local impl_of = setmetatable({}, {__mode = 'k'})  -- an entry's face -> its implementation
local function entry(tbl, name, impl)
  local body
  -- each call: resume with the arguments, run impl, yield its results; proper tail calls, so
  -- the loop neither grows the stack nor allocates
  local function loop(ok, ...)
    if not ok then
      -- this coroutine dies with the error: the table gets a new face now (the old one stays
      -- alive on its caller's stack until the error has left it)
      local face = cowrap(body)
      impl_of[face] = impl
      tbl[name] = face
      error((...), 0)
    end
    return loop(pcall(impl, coyield(...)))
  end
  body = function(...)
    sethook(count_hook, '', HOOK_EVERY)  -- once per coroutine: its first call
    return loop(pcall(impl, ...))
  end
  local face = cowrap(body)
  impl_of[face] = impl
  tbl[name] = face
end
-- luaL_argerror's text, raised from inside an entry (the entry adds the caller's position);
-- its parts are kept: Redis' C function is named as its caller names it ('?' from C code)
local arg_text, arg_n, arg_msg = nil, 0, ''
local function argerror(n, fname, msg)
  local text = ('bad argument #%d to \'%s\' (%s)'):format(n, fname, msg)
  arg_text, arg_n, arg_msg = text, n, msg
  error(text, 0)
end
-- an error the Lua VM raises inside a C function (lua_settable's): it has no position
local bare_text = nil
local function bare_error(msg)
  bare_text = msg
  error(msg, 0)
end
local function argerror_text(name, namewhat)
  local n = arg_n
  if namewhat == 'method' then
    n = n - 1
    if n == 0 then return ("calling '%s' on bad self (%s)"):format(name, arg_msg) end
  end
  return ("bad argument #%d to '%s' (%s)"):format(n, name or '?', arg_msg)
end
-- an error caught (by pcall, xpcall, the script's handler) as Redis' C library would have
-- raised it. ``lvl``: the stack level of the function that raised (in an error handler, where
-- the stack is still there), or nil. An argument error without position came from a call by C
-- code: no name ('?'); with one, the name is the caller's, read from the stack when there.
local ONE_POSITION = '^[^:]*:%d+: $'
local function caught(e, lvl)
  local at, bt = arg_text, bare_text
  if type(e) ~= 'string' or (at == nil and bt == nil) then return e end
  arg_text, bare_text = nil, nil
  if at ~= nil then
    if e == at then return argerror_text(nil) end
    local where = e:sub(1, #e - #at)
    if lvl ~= nil and e:sub(-#at) == at and where:find(ONE_POSITION) then
      local info = getinfo(lvl + 1, 'nf')
      if info ~= nil and impl_of[info.func] ~= nil then
        return where .. argerror_text(info.name, info.namewhat)
      end
    end
  elseif #e > #bt and e:sub(-#bt) == bt and e:sub(1, #e - #bt):find(ONE_POSITION) then
    return bt
  end
  return e
end
local function typename_at(n, ...)
  if select('#', ...) < n then return 'no value' end
  return type((select(n, ...)))
end

-- read-only proxies -----------------------------------------------------------------------
local real_of = setmetatable({}, {__mode = 'k'})  -- proxy -> the table behind it
-- what a script's getmetatable shows for the sandbox's own metatables: Redis marks its tables
-- read-only in C, so a library table has none (NO_METATABLE) and the globals' and strings'
-- metatables are read-only copies; the real ones stay out of reach
local face_of = setmetatable({}, {__mode = 'k'})
local NO_METATABLE = {}
local function ro_newindex() error(RO_ERR, 2) end
local function readonly(t)
  local mt = {__index = t, __newindex = ro_newindex}
  face_of[mt] = NO_METATABLE
  local p = setmetatable({}, mt)
  real_of[p] = t
  return p
end
local function s_getmetatable(v)
  local mt = getmetatable(v)
  local face = face_of[mt]
  if face == nil then return mt end
  if face == NO_METATABLE then return nil end
  return face
end

-- the script globals ----------------------------------------------------------------------
-- a read-only table whose missing keys are an error, reading through lookup(k)
local function protected(lookup)
  local function index(_, k)
    local v = lookup(k)
    if v == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end
    return v
  end
  local mt = {__index = index, __newindex = ro_newindex}
  face_of[mt] = readonly({__index = index})
  return setmetatable({}, mt)
end
local env = {}
local visible = env  -- what scripts see: env, or load_env while a function library loads
-- G reads ``visible`` through a table __index (followed in C: no Lua call per global read);
-- a key missing there reaches its metatable's error (``guard``). What a script's
-- getmetatable(_G) shows is a read-only table whose __index function does the same.
local function missing_global(_, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end
local function guard(t) return setmetatable(t, {__index = missing_global}) end
local G_mt = {__index = guard(env), __newindex = ro_newindex}
face_of[G_mt] = face_of[getmetatable(protected(function(k) return visible[k] end))]
local G = setmetatable({}, G_mt)
local function show(t)  -- what G reads from now on: env, or a library's load_env
  visible = t
  G_mt.__index = t
end
real_of[G] = env

local function plain(t)
  local r = real_of[t]
  if r ~= nil then return r end
  return t
end

local function s_next(t, k) return next(plain(t), k) end  -- (pairs' iterator of a proxy)
-- the base functions the sandbox replaces check their arguments as luaB_*: the often used ones
-- are plain Lua functions (an entry's coroutine switch would triple their cost) raising
-- luaL_argerror's text as a C function in their place would (``c_argerror``: named as the
-- caller names it, at the caller's position; '?' and none from C code; a tail call loses
-- both), the others entries
local function at_caller(text, lvl)  -- luaL_where(L, 1) of a C function at stack level lvl - 1
  local c = getinfo(lvl, 'Sl')
  if c ~= nil and c.currentline > 0 then return c.short_src .. ':' .. c.currentline .. ': ' .. text end
  return text
end
local function c_argerror(n, msg)
  local f = getinfo(2, 'n')  -- the checking function, as its caller named it
  local name, namewhat = f and f.name, f and f.namewhat
  local text
  if namewhat == 'method' and n == 1 then
    text = ("calling '%s' on bad self (%s)"):format(name, msg)
  else
    if namewhat == 'method' then n = n - 1 end
    text = ("bad argument #%d to '%s' (%s)"):format(n, name or '?', msg)
  end
  error(at_caller(text, 4), 0)
end
local function s_next(...)
  local t, k = ...
  if type(t) ~= 'table' then c_argerror(1, 'table expected, got ' .. typename_at(1, ...)) end
  return next(plain(t), k)
end
local function s_pairs(...)
  local t = ...
  if type(t) ~= 'table' then c_argerror(1, 'table expected, got ' .. typename_at(1, ...)) end
  if real_of[t] ~= nil then return s_next, t, nil end
  return next, t, nil
end
local function s_rawget(...)
  local t, k = ...
  if type(t) ~= 'table' then c_argerror(1, 'table expected, got ' .. typename_at(1, ...)) end
  if k == nil and select('#', ...) < 2 then c_argerror(2, 'value expected') end
  return rawget(plain(t), k)
end
local function s_rawset(...)
  local t, k, v = ...
  if type(t) ~= 'table' then c_argerror(1, 'table expected, got ' .. typename_at(1, ...)) end
  if v == nil and select('#', ...) < 3 then c_argerror(select('#', ...) < 2 and 2 or 3, 'value expected') end
  if real_of[t] ~= nil then error(RO_ERR, 0) end  -- (the VM's check: no position)
  return rawset(t, k, v)
end
local function s_setmetatable(...)
  local t, mt = ...
  if type(t) ~= 'table' then c_argerror(1, 'table expected, got ' .. typename_at(1, ...)) end
  local tm = type(mt)
  if tm ~= 'nil' and tm ~= 'table' then c_argerror(2, 'nil or table expected') end
  local cur = debug.getmetatable(t)  -- (luaL_getmetafield: the metatable itself)
  if cur ~= nil and rawget(cur, '__metatable') ~= nil then
    error(at_caller('cannot change a protected metatable', 3), 0)
  end
  if real_of[t] ~= nil then error(RO_ERR, 0) end
  return setmetatable(t, mt)
end
local function no_bytecode(s)
  return type(s) == 'string' and s:byte(1) == 27
end
local function s_loadstring(s, name)
  if no_bytecode(s) then return nil, 'binary chunks are not allowed' end
  local f, e = loadstring(s, name)
  if f then setfenv(f, G) end
  return f, e
end
entry(env, 'loadstring', function(...)
  local s, name = ...
  local ts, tn = type(s), type(name)
  if ts ~= 'string' and ts ~= 'number' then
    argerror(1, 'loadstring', 'string expected, got ' .. typename_at(1, ...))
  end
  if tn ~= 'nil' and tn ~= 'string' and tn ~= 'number' then
    argerror(2, 'loadstring', 'string expected, got ' .. tn)
  end
  return s_loadstring(s, name)
end)
entry(env, 'load', function(...)
  local fn, name = ...
  if type(fn) ~= 'function' then
    argerror(1, 'load', 'function expected, got ' .. typename_at(1, ...))
  end
  local parts = {}
  while true do
    local piece = fn()
    if piece == nil or piece == '' then break end
    if type(piece) ~= 'string' then return nil, 'reader function must return a string' end
    parts[#parts + 1] = piece
  end
  return s_loadstring(table.concat(parts), name or '=(load)')
end)
entry(env, 'getmetatable', function(...)
  if select('#', ...) < 1 then argerror(1, 'getmetatable', 'value expected') end
  return s_getmetatable((...))
end)

-- Redis 7.0's pcall: an error table {err=...} comes back as its err string
local function pcall_result(ok, ...)
  if not ok then
    local e = ...
    if type(e) == 'table' then
      local m = rawget(e, 'err')
      if type(m) == 'string' then return false, m end
    end
    return false, caught(e)
  end
  return ok, ...
end
-- a library function itself runs as its implementation (Redis': a C function called by C)
local function s_pcall(f, ...) return pcall_result(pcall(impl_of[f] or f, ...)) end
local function s_xpcall(...)
  local f, h = ...
  if select('#', ...) < 2 then error("bad argument #2 to 'xpcall' (value expected)", 2) end
  local handler = h
  if type(h) == 'function' then
    handler = function(e) return h(caught(e, 2)) end
  end
  return xpcall(impl_of[f] or f, handler)
end

-- Redis' error handler: where the error happened, skipping our own stand-in frames
local function err_handler(err)
  local lvl = 2
  local i = getinfo(lvl, 'nSl')
  if i and i.what == 'C' then lvl = 3; i = getinfo(lvl, 'nSl') end
  while i and i.source == INTERNAL do
    lvl = lvl + 1
    i = getinfo(lvl, 'nSl')
    if i and i.what == 'C' then lvl = lvl + 1; i = getinfo(lvl, 'nSl') end
  end
  if type(err) ~= 'table' then err = {err = 'ERR ' .. tostring(caught(err, 2))} end
  if i then
    err['source'] = i.source
    err['line'] = i.currentline
  end
  return err
end

-- the redis table -------------------------------------------------------------------------
local redis = {}
local function raise(msg) error({err = msg}, 0) end
local function command_args(...)
  local n = select('#', ...)
  if n == 0 then return nil, 'ERR Please specify at least one argument for this redis lib call' end
  local argv = {...}
  for j = 1, n do
    local a = argv[j]
    local t = type(a)
    if t == 'number' then
      argv[j] = ('%.17g'):format(a)
    elseif t ~= 'string' then
      return nil, 'ERR Lua redis lib command arguments must be strings or integers'
    end
  end
  return argv, nil, n
end
local py_call = py.call
local script_resp = 2  -- redis.setresp of the running script (how booleans go out)
-- Python takes the arguments as they come and answers (value), (nil, error text), (nil, nil,
-- a status reply's text: made a {ok=} table here, cheaper than from Python), STATUS_OK for
-- +OK (one value crosses, not three) or, when an argument is not a string, (nil, nil, nil,
-- true): they are converted here and sent again
local STATUS_OK = {}
-- a command's error (its reply, or the script's refusal) was counted in the error stats when
-- it happened: the table carries Redis' mark, so that it is not counted again as a reply
local function command_error(msg) return {err = msg, ignore_error_stats_update = true} end
-- (an argument that cannot be converted is the script's error, not a command's: the 4th value)
local function converted_call(...)
  local argv, e, n = command_args(...)
  if e then return nil, nil, nil, e end
  return py_call(unpack(argv, 1, n))
end
entry(redis, 'call', function(...)
  local v, err, st, conv = py_call(...)
  if conv then
    v, err, st, conv = converted_call(...)
    if conv then raise(conv) end
  end
  if v == STATUS_OK then return {ok = 'OK'} end
  if err then error(command_error(err), 0) end
  if st then return {ok = st} end
  return v
end)
entry(redis, 'pcall', function(...)
  local v, err, st, conv = py_call(...)
  if conv then
    v, err, st, conv = converted_call(...)
    if conv then return {err = conv} end
  end
  if v == STATUS_OK then return {ok = 'OK'} end
  if err then return command_error(err) end
  if st then return {ok = st} end
  return v
end)
local function error_text(msg)
  -- luaPushErrorBuff: "-CODE msg" keeps its code, anything else gets "ERR "
  if msg:sub(1, 1) == '-' then
    local sp = msg:find(' ', 1, true)
    if sp then
      msg = msg:sub(2, sp - 1) .. ' ' .. msg:sub(sp + 1)
    else
      msg = 'ERR ' .. msg:sub(2)
    end
  else
    msg = 'ERR ' .. msg
  end
  return (msg:gsub('[\r\n]+$', ''))
end
entry(redis, 'error_reply', function(...)
  local msg = ...
  if select('#', ...) ~= 1 or type(msg) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  if msg:sub(1, 1) ~= '-' then msg = '-' .. msg end
  return {err = error_text(msg)}
end)
entry(redis, 'status_reply', function(...)
  local msg = ...
  if select('#', ...) ~= 1 or type(msg) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {ok = msg}
end)
entry(redis, 'sha1hex', function(...)
  if select('#', ...) ~= 1 then raise('ERR wrong number of arguments') end
  local s = ...
  if type(s) == 'number' then s = tostring(s) elseif type(s) ~= 'string' then s = '' end
  return py.sha1hex(s)
end)
-- C's (int) of a lua_Number, as Redis reads levels and flags: truncated; NaN and values out
-- of range give INT_MIN (x86)
local function c_int(x)
  if x ~= x or x >= 2147483648 or x <= -2147483649 then return -2147483648 end
  if x >= 0 then return math.floor(x) end
  return math.ceil(x)
end
entry(redis, 'log', function(...)
  local n = select('#', ...)
  if n < 2 then raise('ERR redis.log() requires two arguments or more.') end
  local level = tonumber((...))  -- lua_isnumber: numeric strings too
  if level == nil then raise('ERR First argument must be a number (log level).') end
  level = c_int(level)
  if level < 0 or level > 3 then raise('ERR Invalid debug level.') end
  local parts = {}
  for j = 2, n do
    local a = select(j, ...)
    if type(a) == 'string' or type(a) == 'number' then parts[#parts + 1] = tostring(a) end
  end
  py.log(level, table.concat(parts, ' '))
end)
entry(redis, 'setresp', function(...)
  if select('#', ...) ~= 1 then raise('ERR redis.setresp() requires one argument.') end
  local v = c_int(tonumber((...)) or 0)
  if v ~= 2 and v ~= 3 then raise('ERR RESP version must be 2 or 3.') end
  script_resp = v
  py.setresp(v)
end)
entry(redis, 'set_repl', function(...)
  if select('#', ...) ~= 1 then raise('ERR redis.set_repl() requires two arguments.') end
  local flags = c_int(tonumber((...)) or 0)
  if flags ~= 0 and flags ~= 1 and flags ~= 2 and flags ~= 3 then
    raise('ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.')
  end
  py.set_repl(flags)
end)
entry(redis, 'acl_check_cmd', function(...)
  local argv, e, n = command_args(...)
  if e then raise(e) end
  if not py.known_command(unpack(argv, 1, n)) then
    raise('ERR Invalid command passed to redis.acl_check_cmd()')
  end
  return true
end)
entry(redis, 'replicate_commands', function() return true end)
entry(redis, 'breakpoint', function() return false end)
entry(redis, 'debug', function() end)
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.REDIS_VERSION = py.version
redis.REDIS_VERSION_NUM = py.version_num

local function copy(t)
  local r = {}
  for k, v in next, t do r[k] = v end
  return r
end

-- luaL_checkinteger's lua_Integer (64-bit) narrowed to the C int the libraries keep: the low
-- 32 bits, signed; NaN and values past 2^63 are INT64_MIN first (x86), so 0
local function lua_int(x)
  if x ~= x or x >= 9223372036854775808 or x < -9223372036854775808 then return 0 end
  if x >= 0 then x = math.floor(x) else x = -math.floor(-x) end
  x = x % 4294967296
  if x >= 2147483648 then x = x - 4294967296 end
  return x
end
-- math.random / math.randomseed: Redis' rand48, one state for the whole server (the EVAL and the
-- function interpreters share it, SCRIPT FLUSH keeps it), kept in Python (libs.Rand48)
local lrand48, srand48 = py.lrand48, py.srand48
local LRAND48_MAX = 2147483647
local function checkint(fname, n, v)  -- luaL_checkint
  local x = tonumber(v)
  if x == nil then
    argerror(n, fname, 'number expected, got ' .. (v == nil and 'no value' or type(v)))
  end
  return lua_int(x)
end
local function rmath_random(...)
  local r = (lrand48() % LRAND48_MAX) / LRAND48_MAX
  local n = select('#', ...)
  if n == 0 then return r end
  if n == 1 then
    local u = checkint('random', 1, (...))
    if u < 1 then argerror(1, 'random', 'interval is empty') end
    return math.floor(r * u) + 1
  end
  if n == 2 then
    local l, u = checkint('random', 1, (...)), checkint('random', 2, (select(2, ...)))
    if l > u then argerror(2, 'random', 'interval is empty') end
    local span = (u - l + 1) % 4294967296  -- C int arithmetic: it wraps
    if span >= 2147483648 then span = span - 4294967296 end
    return math.floor(r * span) + l
  end
  error('wrong number of arguments', 0)
end
local rmath = copy(math)
entry(rmath, 'random', rmath_random)
entry(rmath, 'randomseed', function(...) srand48(checkint('randomseed', 1, (...))) end)

-- the libraries: Lua sources handed in by the engine, each returning its table -------------
local libs = {}
local helpers = {lua_int = lua_int, entry = entry, argerror = argerror, typename_at = typename_at, pack = pack,
                 bare_error = bare_error,
                 float_bytes = py.float_bytes, bytes_float = py.bytes_float}
for name, src in pairs(py.libs) do
  local f = assert(loadstring(src, INTERNAL))
  libs[name] = f(helpers)
end

for _, k in ipairs({'assert', 'collectgarbage', 'error', 'gcinfo', 'ipairs',
                    'tonumber', 'tostring', 'type', 'unpack', 'select', 'rawequal', '_VERSION'}) do
  env[k] = _G[k]
end
env.next, env.pairs, env.rawget, env.rawset = s_next, s_pairs, s_rawget, s_rawset
env.setmetatable = s_setmetatable
env.pcall, env.xpcall = s_pcall, s_xpcall
env.__redis__err__handler = err_handler
env.string = readonly(copy(string))
env.table = readonly(copy(table))
env.math = readonly(rmath)
do  -- coroutines made by scripts get the count hook
  local rco, create, wrap = copy(coroutine), coroutine.create, coroutine.wrap
  local function lua_function(fname, f)  -- luaB_cocreate's check (a library function is C)
    if type(f) ~= 'function' or getinfo(f, 'S').what == 'C' then
      argerror(1, fname, 'Lua function expected')
    end
  end
  entry(rco, 'create', function(f)
    lua_function('create', f)
    local co = create(f)
    sethook(co, count_hook, '', HOOK_EVERY)
    return co
  end)
  entry(rco, 'wrap', function(f)
    lua_function('wrap', f)
    return wrap(function(...)
      sethook(count_hook, '', HOOK_EVERY)
      return f(...)
    end)
  end)
  env.coroutine = readonly(rco)
end
env.redis = readonly(redis)
for name, t in pairs(libs) do env[name] = readonly(t) end
env._G = G
if py.functions then  -- the functions' interpreter: Redis 7.0 leaves these out there
  env.__redis__err__handler = nil
  redis.breakpoint, redis.debug, redis.replicate_commands = nil, nil, nil
end
getmetatable('').__index = env.string
face_of[getmetatable('')] = readonly({__index = env.string})

-- function libraries (FUNCTION LOAD): while the library's code runs, scripts see only
-- load_env: redis.register_function, redis.log and the LOG_*/REDIS_VERSION constants
local registered = nil  -- the functions registered by the loading library
local FLAG_ORDER = {'no-writes', 'allow-oom', 'allow-stale', 'no-cluster', 'allow-cross-slot-keys'}
local FLAG_BIT = {['no-writes'] = 1, ['allow-oom'] = 2, ['allow-stale'] = 4, ['no-cluster'] = 8,
                  ['allow-cross-slot-keys'] = 16}
local function valid_name(n) return #n > 0 and not n:find('[^%w_]') end
local load_redis = {}
entry(load_redis, 'register_function', function(...)
  local n = select('#', ...)
  local name, callback, flags, desc
  if n == 1 then
    local t = ...
    if type(t) ~= 'table' then
      raise('ERR calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).')
    end
    for k, v in next, t do
      if type(k) ~= 'string' then raise('ERR unknown argument given to redis.register_function') end
      if k == 'function_name' then
        if type(v) ~= 'string' and type(v) ~= 'number' then
          raise('ERR function_name argument given to redis.register_function must be a string')
        end
        name = tostring(v)
      elseif k == 'description' then
        if type(v) ~= 'string' and type(v) ~= 'number' then
          raise('ERR description argument given to redis.register_function must be a string')
        end
        desc = tostring(v)
      elseif k == 'callback' then
        if type(v) ~= 'function' then
          raise('ERR callback argument given to redis.register_function must be a function')
        end
        callback = v
      elseif k == 'flags' then
        if type(v) ~= 'table' then
          raise('ERR flags argument to redis.register_function must be a table representing function flags')
        end
        flags = v
      else
        raise('ERR unknown argument given to redis.register_function')
      end
    end
    if name == nil then raise('ERR redis.register_function must get a function name argument') end
    if callback == nil then raise('ERR redis.register_function must get a callback argument') end
  elseif n == 2 then
    name, callback = ...
    if type(name) ~= 'string' and type(name) ~= 'number' then
      raise('ERR first argument to redis.register_function must be a string')
    end
    name = tostring(name)
    if type(callback) ~= 'function' then
      raise('ERR second argument to redis.register_function must be a function')
    end
  else
    raise('ERR wrong number of arguments to redis.register_function')
  end
  local bits = 0
  if flags then
    local seen = {}
    for _, f in ipairs(flags) do
      if type(f) ~= 'string' or FLAG_BIT[f] == nil then raise('ERR unknown flag given') end
      if not seen[f] then seen[f] = true; bits = bits + FLAG_BIT[f] end
    end
  end
  if not valid_name(name) then
    raise('ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long')
  end
  for _, r in ipairs(registered) do
    if r.name == name then raise('ERR Function already exists in the library') end
  end
  registered[#registered + 1] = {name = name, callback = callback, flags = bits,
                                 description = desc}
end)
load_redis.log = redis.log
load_redis.LOG_DEBUG, load_redis.LOG_VERBOSE, load_redis.LOG_NOTICE, load_redis.LOG_WARNING =
  0, 1, 2, 3
load_redis.REDIS_VERSION, load_redis.REDIS_VERSION_NUM = py.version, py.version_num
local load_env = guard({redis = protected(function(k) return load_redis[k] end)})

local encode_reply  -- Lua -> RESP, below
-- a run's outcome: a string the script returned (the common reply: the engine encodes it),
-- true and the reply for the caller's protocol, or false and the error
local function run_result(proto, ok, ...)
  if ok then
    local v = ...
    if type(v) == 'string' then return v end
    return true, encode_reply(v, proto)
  end
  return false, (...), nil
end
-- the engine's handle ---------------------------------------------------------------------
local handle = {status_ok = STATUS_OK}
-- run a library's code: the list of {name, callback, flags, description}, or false and the
-- error table
function handle.load_library(f)
  arg_text, bare_text = nil, nil
  registered = {}
  show(load_env)
  local ok, err = xpcall(f, err_handler)
  show(env)
  local got = registered
  registered = nil
  if not ok then return false, err end
  return true, got
end
function handle.flag_names(bits)
  local out = {}
  for _, name in ipairs(FLAG_ORDER) do
    if bits % (2 * FLAG_BIT[name]) >= FLAG_BIT[name] then out[#out + 1] = name end
  end
  return out
end
-- a run: KEYS and ARGV come as tables (``_t``) or, when few, as the arguments after
-- ``nkeys`` (``_v``: cheaper than tables made from Python); ``proto`` is the caller's protocol
local function split_args(nkeys, ...)
  local keys, args = {...}, {}
  for i = nkeys + 1, select('#', ...) do  -- the arguments move from keys' tail to args
    args[i - nkeys] = keys[i]
    keys[i] = nil
  end
  return keys, args
end
-- the function to call and its arguments, handed to fn_body (no closure made per call)
local fn_f, fn_keys, fn_args
local function fn_body()
  local f, keys, args = fn_f, fn_keys, fn_args
  fn_f, fn_keys, fn_args = nil, nil, nil
  return f(keys, args)
end
local function call_function(f, proto, keys, args)
  arg_text, bare_text = nil, nil
  script_resp = 2
  fn_f, fn_keys, fn_args = f, keys, args
  return run_result(proto, xpcall(fn_body, err_handler))
end
handle.call_function_t = call_function
function handle.call_function_v(f, proto, nkeys, ...)
  return call_function(f, proto, split_args(nkeys, ...))
end
function handle.compile(body, chunk)
  chunk = chunk or '@user_script'
  if no_bytecode(body) then return nil, chunk:sub(2) .. ': bad binary format' end
  local f, e = loadstring(body, chunk)
  if not f then return nil, e end
  setfenv(f, G)
  return f, false
end
local function run(f, proto, keys, argv)
  arg_text, bare_text = nil, nil
  script_resp = 2
  env.KEYS, env.ARGV = keys, argv
  return run_result(proto, xpcall(f, err_handler))
end
handle.run_t = run
function handle.run_v(f, proto, nkeys, ...)
  return run(f, proto, split_args(nkeys, ...))
end
function handle.count_hook()  -- back to counting (after a killed run)
  sethook(count_hook, '', HOOK_EVERY)
end
function handle.array(...)
  return {...}
end
-- Lua -> RESP (luaReplyToRedisReply), for the caller's protocol ``proto``; ``resp`` is the
-- script's redis.setresp, which decides how booleans go out
local MAX_DEPTH = 7994  -- Redis stops at its C stack limit: 7995 nested levels
local sfmt, concat = string.format, table.concat
local function crlf_free(s) return (s:gsub('[\r\n]', ' ')) end
-- the error replies an encoding wrote (afterErrorReply): those to count, and how many carried
-- the mark of an error counted already
local errors_counted, errors_marked = nil, 0
local function encode(out, v, proto, resp, depth)
  local t = type(v)
  if t == 'string' then
    out[#out + 1] = '$' .. #v .. '\r\n' .. v .. '\r\n'
  elseif t == 'number' then
    if v ~= v or v >= 9223372036854775808 or v < -9223372036854775808 then
      out[#out + 1] = ':-9223372036854775808\r\n'
    else
      out[#out + 1] = sfmt(':%d\r\n', v)
    end
  elseif t == 'boolean' then
    if resp == 2 then
      out[#out + 1] = v and ':1\r\n' or (proto == 2 and '$-1\r\n' or '_\r\n')
    elseif proto == 2 then
      out[#out + 1] = v and ':1\r\n' or ':0\r\n'
    else
      out[#out + 1] = v and '#t\r\n' or '#f\r\n'
    end
  elseif t == 'table' then
    if depth > MAX_DEPTH then
      out[#out + 1] = '-ERR reached lua stack limit\r\n'
      return
    end
    local f = rawget(v, 'err')
    if type(f) == 'string' then
      local e = '-' .. crlf_free(f) .. '\r\n'
      out[#out + 1] = e
      if rawget(v, 'ignore_error_stats_update') == true then
        errors_marked = errors_marked + 1
      else
        errors_counted[#errors_counted + 1] = e
      end
      return
    end
    f = rawget(v, 'ok')
    if type(f) == 'string' then out[#out + 1] = '+' .. crlf_free(f) .. '\r\n'; return end
    f = rawget(v, 'double')
    if type(f) == 'number' then
      local s
      if f == 1/0 then s = 'inf' elseif f == -1/0 then s = '-inf' else s = sfmt('%.17g', f) end
      if proto == 2 then out[#out + 1] = '$' .. #s .. '\r\n' .. s .. '\r\n'
      else out[#out + 1] = ',' .. s .. '\r\n' end
      return
    end
    f = rawget(v, 'big_number')
    if type(f) == 'string' then
      local s = crlf_free(f)
      if proto == 2 then out[#out + 1] = '$' .. #s .. '\r\n' .. s .. '\r\n'
      else out[#out + 1] = '(' .. s .. '\r\n' end
      return
    end
    f = rawget(v, 'map')
    if type(f) == 'table' then
      local at = #out + 1
      out[at] = ''
      local n = 0
      for k, x in next, f do
        n = n + 1
        encode(out, k, proto, resp, depth + 1)
        encode(out, x, proto, resp, depth + 1)
      end
      out[at] = proto == 2 and ('*' .. (2 * n) .. '\r\n') or ('%' .. n .. '\r\n')
      return
    end
    f = rawget(v, 'set')
    if type(f) == 'table' then
      local at = #out + 1
      out[at] = ''
      local n = 0
      for k in next, f do
        n = n + 1
        encode(out, k, proto, resp, depth + 1)
      end
      out[at] = (proto == 2 and '*' or '~') .. n .. '\r\n'
      return
    end
    f = rawget(v, 'verbatim_string')
    if type(f) == 'table' then
      local fmt, str = rawget(f, 'format'), rawget(f, 'string')
      if type(fmt) == 'string' and type(str) == 'string' then
        if proto == 2 then
          out[#out + 1] = '$' .. #str .. '\r\n' .. str .. '\r\n'
        else
          out[#out + 1] = '=' .. (#str + 4) .. '\r\n' .. fmt:sub(1, 3) .. ':' .. str .. '\r\n'
        end
        return
      end
    end
    local at = #out + 1
    out[at] = ''
    local j = 1
    while true do
      local x = rawget(v, j)
      if x == nil then break end
      encode(out, x, proto, resp, depth + 1)
      j = j + 1
    end
    out[at] = '*' .. (j - 1) .. '\r\n'
  else
    out[#out + 1] = proto == 2 and '$-1\r\n' or '_\r\n'
  end
end
-- the reply, then (when it holds error replies) those to count and how many were marked
encode_reply = function(v, proto)
  if type(v) == 'string' then return '$' .. #v .. '\r\n' .. v .. '\r\n' end  -- the common reply
  local out = {}
  errors_counted, errors_marked = {}, 0
  encode(out, v, proto, script_resp, 0)
  if #errors_counted == 0 and errors_marked == 0 then return concat(out) end
  return concat(out), errors_counted, errors_marked
end
-- error tables of a failed script, as luaExtractErrorInformation reads them
function handle.error_info(e)
  if type(e) ~= 'table' then return nil, nil, nil, tostring(e), false end
  local msg, source, line = rawget(e, 'err'), rawget(e, 'source'), rawget(e, 'line')
  if type(msg) ~= 'string' then msg = nil end
  if type(source) ~= 'string' then source = nil end
  if line ~= nil then line = tostring(line) end
  return msg, source, line, nil, rawget(e, 'ignore_error_stats_update') == true
end
return handle
"""
