"""MODULE: a server without module support (LIST is empty; LOAD, LOADEX and UNLOAD are refused
as Redis 7.0 refuses a library it cannot load or a module it does not have)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import EMPTY_ARRAY
from slotgate.node.core.errors import CommandError
from slotgate.protocol.resp import array_header, simple

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

MODULE_NOT_ALLOWED = (
    "ERR MODULE command not allowed. If the enable-module-command option is set to \"local\", "
    "you can run it from a local connection, otherwise you need to set this option in the "
    "configuration file, and then restart the server.")
LOAD_FAILED = "ERR Error loading the extension. Please check the server logs."
NO_SUCH_MODULE = "ERR Error unloading module: no such module with that name"

_HELP = [
    "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LIST",
    "    Return a list of loaded modules.",
    "LOAD <path> [<arg> ...]",
    "    Load a module library from <path>, passing to it any optional arguments.",
    "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
    "    Load a module library from <path>, while passing it module configurations and "
    "optional arguments.",
    "UNLOAD <name>",
    "    Unload a module.",
    "HELP",
    "    Prints this help.",
]


def _check_allowed(c: Client) -> None:
    """enable-module-command: ``no`` refuses, ``local`` admits loopback clients only."""
    mode = c.server.config.get("enable-module-command")
    if mode == "yes" or (mode == "local" and (c.addr.startswith("127.") or c.addr.startswith("::1"))):
        return
    raise CommandError(MODULE_NOT_ALLOWED)


@command("module|list")
def module_list(c: Client, argv: list[bytes]) -> bytes:
    return EMPTY_ARRAY


@command("module|help")
def module_help(c: Client, argv: list[bytes]) -> bytes:
    return array_header(len(_HELP)) + b"".join(simple(ln) for ln in _HELP)


@command("module|load")
def module_load(c: Client, argv: list[bytes]) -> bytes:
    _check_allowed(c)
    raise CommandError(LOAD_FAILED)


@command("module|loadex")
def module_loadex(c: Client, argv: list[bytes]) -> bytes:
    _check_allowed(c)
    raise CommandError(LOAD_FAILED)


@command("module|unload")
def module_unload(c: Client, argv: list[bytes]) -> bytes:
    _check_allowed(c)
    raise CommandError(NO_SUCH_MODULE)
