"""Every client-visible error the proxy itself produces, as constants (without ``-``/CRLF).

Where Redis has an error for the situation, the text is Redis' own, byte for byte.
Errors that are the proxy's own start with ``ERR slotgate:`` so they are easy to grep for.
"""

from __future__ import annotations

CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"
SLOT_NOT_SERVED = "CLUSTERDOWN Hash slot not served"
WRONG_ARITY = "ERR wrong number of arguments for '{name}' command"
SYNTAX = "ERR syntax error"
NOT_INTEGER = "ERR value is not an integer or out of range"
INVALID_CURSOR = "ERR invalid cursor"
NOPROTO = "NOPROTO unsupported protocol version"
SELECT_IN_CLUSTER = "ERR SELECT is not allowed in cluster mode"
DB_OUT_OF_RANGE = "ERR DB index is out of range"
CLIENT_NAME_CHARS = "ERR Client names cannot contain spaces, newlines or special characters."
AUTH_NOT_CONFIGURED = (
    "ERR AUTH <password> called without any password configured for the default user. "
    "Are you sure your configuration is correct?"
)
MULTI_NESTED = "ERR MULTI calls can not be nested"
EXEC_WITHOUT_MULTI = "ERR EXEC without MULTI"
DISCARD_WITHOUT_MULTI = "ERR DISCARD without MULTI"
WATCH_IN_MULTI = "ERR WATCH inside MULTI is not allowed"
EXECABORT = "EXECABORT Transaction discarded because of previous errors."

# The proxy's own errors.
UNKNOWN_FATE_WRITE = (
    "ERR slotgate: connection to {node} lost; write may or may not have been applied"
)
NODE_UNREACHABLE = "ERR slotgate: no connection to {node} within the retry deadline"
TOO_MANY_REDIRECTS = "ERR slotgate: too many redirects ({count}) for slot {slot}"
NOT_IN_MULTI = "ERR slotgate: '{name}' cannot run inside MULTI through the proxy"
NOT_SUPPORTED = "ERR slotgate: '{name}' is not supported through the proxy"
MAX_CLIENTS = "ERR max number of clients reached"

