"""Lua scripting (EVAL, EVALSHA, SCRIPT) as Redis 7.0 has it, on lupa's Lua 5.1."""
