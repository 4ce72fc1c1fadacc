"""Functions: FUNCTION LOAD|DELETE|FLUSH|LIST|STATS|KILL|HELP, FCALL, FCALL_RO (Redis 7.0).

Libraries live in an interpreter of their own (a second ``ScriptEngine``, as Redis keeps a
second Lua state), replaced by FUNCTION FLUSH. FUNCTION LOAD compiles the code as
``@user_function`` and runs it once with only ``redis.register_function``, ``redis.log`` and
the constants visible (sandbox.py's ``load_library``); the registered callbacks are then
called by FCALL with ``(keys, args)`` under the same checks and effects replication as EVAL,
their errors naming the function (``script: <name>, on @user_function:N.``).

FUNCTION LOAD/DELETE/FLUSH are write commands: the dispatcher propagates them as they are.
FUNCTION DUMP/RESTORE speak Redis' RDB payload (rdb.py's ``dump_functions``/``iter_functions``);
snapshots carry ``codes()`` and load them back with ``restore(codes, b"flush")``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import CommandError
from slotgate.node.core.glob import glob_match
from slotgate.node.core.memory import dict_table_slots, sds_size
from slotgate.node.persistence import rdb
from slotgate.node.scripting import busy
from slotgate.node.scripting.commands import (
    KEYS_GT_ARGS,
    KEYS_NEGATIVE,
    check_flags,
    set_script_flags,
)
from slotgate.node.scripting.engine import Script, ScriptEngine
from slotgate.protocol.resp import array_header, bulk, map_header, set_header, simple

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

FUNCTION_NOT_FOUND = "ERR Function not found"
LIBRARY_NOT_FOUND = "ERR Library not found"
BAD_NUMKEYS = "ERR Bad number of keys provided"
MISSING_METADATA = "ERR Missing library metadata"
INVALID_METADATA = "ERR Invalid library metadata"
NO_NAME = "ERR Library name was not given"
NAME_TWICE = "ERR Invalid metadata value, name argument was given multiple times"
BAD_METADATA = "ERR Invalid metadata value given: %s"
NO_ENGINE = "ERR Engine '%s' not found"
BAD_LIBRARY_NAME = ("ERR Library names can only contain letters, numbers, or underscores(_) and "
                    "must be at least one character long")
LIBRARY_EXISTS = "ERR Library '%s' already exists"
JOIN_LIBRARY_EXISTS = "ERR Library %s already exists"  # FUNCTION RESTORE APPEND
BAD_RESTORE_POLICY = "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE."
FUNCTION_EXISTS = "ERR Function %s already exists"
NO_FUNCTIONS = "ERR No functions registered"
COMPILE_ERROR = "ERR Error compiling function: %s"
REGISTER_ERROR = "ERR Error registering functions: %s"
FLUSH_OPTION = "ERR FUNCTION FLUSH only supports SYNC|ASYNC option"

FUNCTION_HELP = [
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using "
    "FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a "
    "restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, "
    "replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance "
    "of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
]
_HELP_REPLY = array_header(len(FUNCTION_HELP)) + b"".join(simple(x) for x in FUNCTION_HELP)


@dataclass
class Function:
    name: str
    script: Script  # what the engine runs: the callback, its flags
    description: bytes | None
    flag_names: list[bytes]


@dataclass
class Library:
    name: str
    code: bytes
    functions: dict[str, Function] = field(default_factory=dict)  # in registration order


# the libraries as Redis counts them (functionsMemoryOverhead): the engines dict, the Lua
# engine's own allocations and the library context; per library its functionLibInfo, name and
# code; per function its functionInfo and the Lua engine's handle of the callback, its name and
# description, and an entry (and buckets) in the functions dict
FUNCTIONS_BASE_BYTES = 200
LIBRARY_BYTES = 32
FUNCTION_BYTES = 56
DICT_ENTRY_BYTES = 24


class Functions:
    """The node's libraries and their interpreter (``server.functions``)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.libraries: dict[str, Library] = {}
        self.functions: dict[str, Function] = {}  # lower-case name -> function
        self.engine = ScriptEngine(server, functions=True)

    def memory_bytes(self) -> int:
        """INFO used_memory_functions (MEMORY STATS functions.caches)."""
        n = len(self.functions)
        total = FUNCTIONS_BASE_BYTES + DICT_ENTRY_BYTES * n + 8 * dict_table_slots(n)
        for lib in self.libraries.values():
            total += LIBRARY_BYTES + sds_size(len(lib.name.encode())) + sds_size(len(lib.code))
            for f in lib.functions.values():
                total += FUNCTION_BYTES + sds_size(len(f.name.encode()))
                if f.description is not None:
                    total += sds_size(len(f.description))
        return total

    def flush(self) -> None:
        self.libraries = {}
        self.functions = {}
        self.engine = ScriptEngine(self.server, functions=True)

    def load(self, code: bytes, replace: bool) -> str:
        """FUNCTION LOAD: the library's name, or CommandError with Redis' text."""
        name = _library_name(code)
        old = self.libraries.get(name)
        if old is not None and not replace:
            raise CommandError(LIBRARY_EXISTS % name)
        lib = self._compile(name, code)
        for fname in lib.functions:
            other = self.functions.get(fname.lower())
            if other is not None and (old is None or fname not in old.functions):
                raise CommandError(FUNCTION_EXISTS % fname)
        if old is not None:
            self._drop(old)
        self.libraries[name] = lib
        for fname, f in lib.functions.items():
            self.functions[fname.lower()] = f
        return name

    def _compile(self, name: str, code: bytes) -> Library:
        """Compile and run a library's code once: its registered functions."""
        body = code[code.index(b"\n"):]
        handle = self.engine.handle
        fn, err = handle.compile(body, b"@user_function")
        if fn is None:
            raise CommandError(COMPILE_ERROR % _text(err))
        ok, got = self.engine.load_library(fn)
        if not ok:
            msg = handle.error_info(got)
            raise CommandError(REGISTER_ERROR % _text(msg[0] if msg[0] is not None else msg[3]))
        lib = Library(name, code)
        for i in range(1, len(got) + 1):
            reg = got[i]
            fname = reg[b"name"].decode("utf-8", "surrogateescape")
            bits = int(reg[b"flags"])
            script = Script(fname, b"", reg[b"callback"], bits, False, is_function=True)
            lib.functions[fname] = Function(fname, script, reg[b"description"],
                                            list(handle.flag_names(bits).values()))
        if not lib.functions:
            raise CommandError(NO_FUNCTIONS)
        return lib

    def codes(self) -> list[bytes]:
        """Every library's code, for snapshots (which load them back with ``restore``)."""
        return [lib.code for lib in self.libraries.values()]

    def dump(self) -> bytes:
        """FUNCTION DUMP: every library's code in an RDB-format payload."""
        return rdb.dump_functions(lib.code for lib in self.libraries.values())

    def restore(self, codes: Iterable[bytes], policy: bytes) -> None:
        """FUNCTION RESTORE: load ``codes`` into a context of their own, then swap it in
        (FLUSH) or join it to the current libraries (APPEND; REPLACE drops colliding
        libraries first), as ``functionRestoreCommand``; nothing changes on an error."""
        staged: dict[str, Library] = {}
        staged_fns: dict[str, Function] = {}
        try:
            for code in codes:
                name = _library_name(code)
                if name in staged:
                    raise CommandError(LIBRARY_EXISTS % name)
                lib = self._compile(name, code)
                for fname, f in lib.functions.items():
                    if fname.lower() in staged_fns:
                        raise CommandError(FUNCTION_EXISTS % fname)
                    staged_fns[fname.lower()] = f
                staged[name] = lib
        except rdb.RdbError as exc:
            raise CommandError(str(exc)) from None
        if policy == b"flush":
            self.libraries, self.functions = staged, staged_fns
            return
        if policy == b"append":
            for name in staged:
                if name in self.libraries:
                    raise CommandError(JOIN_LIBRARY_EXISTS % name)
        kept = {name: lib for name, lib in self.libraries.items() if name not in staged}
        kept_fns = {fname.lower(): f for lib in kept.values() for fname, f in lib.functions.items()}
        for fname, f in staged_fns.items():
            if fname in kept_fns:
                raise CommandError(FUNCTION_EXISTS % f.name)
        kept.update(staged)
        kept_fns.update(staged_fns)
        self.libraries, self.functions = kept, kept_fns

    def _drop(self, lib: Library) -> None:
        del self.libraries[lib.name]
        for fname in lib.functions:
            self.functions.pop(fname.lower(), None)


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _library_name(code: bytes) -> str:
    """functionExtractLibMetaData: ``#!<engine> name=<name>`` on the first line."""
    if not code.startswith(b"#!"):
        raise CommandError(MISSING_METADATA)
    end = code.find(b"\n")
    if end < 0:
        raise CommandError(INVALID_METADATA)
    parts = code[2:end].split()
    if not parts:
        raise CommandError(INVALID_METADATA)
    engine = parts[0].decode("utf-8", "replace")
    name: str | None = None
    for part in parts[1:]:
        if not part.startswith(b"name="):
            raise CommandError(BAD_METADATA % part.decode("utf-8", "replace"))
        if name is not None:
            raise CommandError(NAME_TWICE)
        name = part[5:].decode("utf-8", "replace")
    if engine.lower() != "lua":
        raise CommandError(NO_ENGINE % engine)
    if name is None:
        raise CommandError(NO_NAME)
    if not name or not all(ch.isascii() and (ch.isalnum() or ch == "_") for ch in name):
        raise CommandError(BAD_LIBRARY_NAME)
    return name


def functions(c: Client) -> Functions:
    f = c.server.functions
    assert f is not None
    return f


def _fcall(c: Client, argv: list[bytes], read_only: bool) -> bytes:
    srv = c.server
    if srv.monitors:  # shown first, whatever it answers, then the commands it runs (as EVAL)
        srv.feed_monitors(c, argv)
    fns = functions(c)
    f = fns.functions.get(argv[1].decode("utf-8", "surrogateescape").lower())
    if f is None:
        raise CommandError(FUNCTION_NOT_FOUND)
    numkeys = parse_int(argv[2], BAD_NUMKEYS)
    if numkeys > len(argv) - 3:
        raise CommandError(KEYS_GT_ARGS)
    if numkeys < 0:
        raise CommandError(KEYS_NEGATIVE)
    check_flags(c, f.script.flags, read_only)
    return fns.engine.execute(c, f.script, argv[3 : 3 + numkeys], argv[3 + numkeys :], read_only,
                              argv)


def _fcall_flags(c: Client, argv: list[bytes]) -> int | None:
    f = functions(c).functions.get(argv[1].decode("utf-8", "surrogateescape").lower())
    return None if f is None else f.script.flags


def _fcall_handler(read_only: bool) -> Callable[[Client, list[bytes]], bytes]:
    def handler(c: Client, argv: list[bytes]) -> bytes:
        return _fcall(c, argv, read_only)
    return handler


command("fcall")(_fcall_handler(False))
command("fcall_ro")(_fcall_handler(True))


@command("function|load")
def function_load(c: Client, argv: list[bytes]) -> bytes:
    args = argv[2:]
    replace = False
    while len(args) > 1:
        if args[0].lower() != b"replace":
            raise CommandError(f"ERR Unknown option given: {args[0].decode('utf-8', 'replace')}")
        replace = True
        args = args[1:]
    if not args:
        raise CommandError("ERR Function code is missing")
    name = functions(c).load(args[0], replace)
    c.ks.dirty += 1
    return bulk(name)


@command("function|delete")
def function_delete(c: Client, argv: list[bytes]) -> bytes:
    fns = functions(c)
    lib = fns.libraries.get(argv[2].decode("utf-8", "surrogateescape"))
    if lib is None:
        raise CommandError(LIBRARY_NOT_FOUND)
    fns._drop(lib)
    c.ks.dirty += 1
    return OK


@command("function|flush")
def function_flush(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) > 3 or (len(argv) == 3 and argv[2].lower() not in (b"sync", b"async")):
        raise CommandError(FLUSH_OPTION)
    functions(c).flush()
    c.ks.dirty += 1
    return OK


@command("function|list")
def function_list(c: Client, argv: list[bytes]) -> bytes:
    with_code = False
    pattern: bytes | None = None
    i = 2
    while i < len(argv):
        word = argv[i].lower()
        if word == b"withcode" and not with_code:
            with_code = True
        elif word == b"libraryname" and pattern is None:
            if i + 1 >= len(argv):
                raise CommandError("ERR library name argument was not given")
            pattern = argv[i + 1]
            i += 1
        else:
            raise CommandError(f"ERR Unknown argument {argv[i].decode('utf-8', 'replace')}")
        i += 1
    proto = c.resp
    libs = [lib for lib in functions(c).libraries.values()
            if pattern is None or glob_match(pattern, lib.name.encode())]
    out = [array_header(len(libs))]
    for lib in libs:
        out.append(map_header(4 if with_code else 3, proto))
        out += [bulk("library_name"), bulk(lib.name), bulk("engine"), bulk("LUA"),
                bulk("functions"), array_header(len(lib.functions))]
        for f in lib.functions.values():
            out += [map_header(3, proto), bulk("name"), bulk(f.name), bulk("description"),
                    bulk(f.description) if f.description is not None else c.null_bulk,
                    bulk("flags"), set_header(len(f.flag_names), proto)]
            out += [simple(name) for name in f.flag_names]
        if with_code:
            out += [bulk("library_code"), bulk(lib.code)]
    return b"".join(out)


@command("function|stats")
def function_stats(c: Client, argv: list[bytes]) -> bytes:
    fns = functions(c)
    proto = c.resp
    return b"".join([
        map_header(2, proto), bulk("running_script"), busy.running_script(c), bulk("engines"),
        map_header(1, proto), bulk("LUA"), map_header(2, proto), bulk("libraries_count"),
        b":%d\r\n" % len(fns.libraries), bulk("functions_count"),
        b":%d\r\n" % len(fns.functions),
    ])


@command("function|kill")
def function_kill(c: Client, argv: list[bytes]) -> bytes:
    return busy.kill(c, is_eval=False)


@command("function|dump")
def function_dump(c: Client, argv: list[bytes]) -> bytes:
    return bulk(functions(c).dump())


@command("function|restore")
def function_restore(c: Client, argv: list[bytes]) -> bytes:
    policy = argv[3].lower() if len(argv) > 3 else b"append"
    if len(argv) > 4:
        raise CommandError("ERR unknown subcommand or wrong number of arguments for "
                           f"'{argv[1].decode('utf-8', 'replace')}'. Try FUNCTION HELP.")
    if policy not in (b"flush", b"append", b"replace"):
        raise CommandError(BAD_RESTORE_POLICY)
    try:
        rdb.check_footer(argv[2])
    except rdb.RdbError as exc:
        raise CommandError(str(exc)) from None
    functions(c).restore(rdb.iter_functions(argv[2]), policy)
    c.ks.dirty += 1
    return OK


@command("function|help")
def function_help(c: Client, argv: list[bytes]) -> bytes:
    return _HELP_REPLY


def install(server: Server) -> None:
    server.functions = Functions(server)
    set_script_flags(server, ("fcall", "fcall_ro"), _fcall_flags)
