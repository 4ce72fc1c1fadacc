"""Redis 7.0's client-visible error texts that the node and the proxy both answer.

Each is the text without the leading ``-`` and the CRLF, byte for byte as redis-server 7.0
prints it. Texts only one side produces stay in ``node/core/errors.py`` / ``proxy/errors.py``.
"""

from __future__ import annotations

# Arguments and values.
WRONG_ARITY = "ERR wrong number of arguments for '{name}' command"
SYNTAX = "ERR syntax error"
NOT_INTEGER = "ERR value is not an integer or out of range"
INVALID_CURSOR = "ERR invalid cursor"

# Cluster mode.
CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"
SLOT_NOT_SERVED = "CLUSTERDOWN Hash slot not served"
SELECT_CLUSTER = "ERR SELECT is not allowed in cluster mode"
DB_INDEX_OUT_OF_RANGE = "ERR DB index is out of range"

# Connections: AUTH, HELLO, CLIENT SETNAME.
MAX_CLIENTS = "ERR max number of clients reached"
NOAUTH = "NOAUTH Authentication required."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
AUTH_NOT_CONFIGURED = (
    "ERR AUTH <password> called without any password configured for the default user. "
    "Are you sure your configuration is correct?"
)
NOPROTO = "NOPROTO unsupported protocol version"
PROTOVER_NOT_INTEGER = "ERR Protocol version is not an integer or out of range"
HELLO_OPTION = b"ERR Syntax error in HELLO option '%s'"  # the option as a C string
NOAUTH_HELLO = (
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
    "HELLO AUTH <user> <pass> option can be used to authenticate the client and select the "
    "RESP protocol version at the same time"
)
NOPERM_CMD = "NOPERM this user has no permissions to run the '%s' command"
NOPERM_KEY = "NOPERM this user has no permissions to access one of the keys used as arguments"
NOPERM_CHANNEL = ("NOPERM this user has no permissions to access one of the channels used as "
                  "arguments")
CLIENT_NAME_CHARS = "ERR Client names cannot contain spaces, newlines or special characters."

# Transactions.
NESTED_MULTI = "ERR MULTI calls can not be nested"
EXEC_WITHOUT_MULTI = "ERR EXEC without MULTI"
DISCARD_WITHOUT_MULTI = "ERR DISCARD without MULTI"
WATCH_IN_MULTI = "ERR WATCH inside MULTI is not allowed"
EXECABORT = "EXECABORT Transaction discarded because of previous errors."


def wrong_args(name: str) -> str:
    """The arity error for ``name`` (lower case, ``container|sub`` for subcommands)."""
    return WRONG_ARITY.format(name=name)


def format_error(template: bytes, *args: bytes) -> bytes:
    """Redis' ``addReplyErrorFormat``: each ``%s`` argument printed as a C string (up to its
    first NUL byte), then CR and LF anywhere in the text turned into spaces."""
    text = template % tuple(a.split(b"\0", 1)[0] for a in args)
    return text.replace(b"\r", b" ").replace(b"\n", b" ")
