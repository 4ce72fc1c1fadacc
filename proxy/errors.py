"""Every client-visible error the proxy itself produces, as constants (without ``-``/CRLF).

Where Redis has an error for the situation, the text is Redis' own, byte for byte: those the
node answers too are defined in ``protocol/errors.py`` and named here for the proxy's modules.
Errors that are the proxy's own start with ``ERR slotgate:`` so they are easy to grep for.
"""

from __future__ import annotations

from slotgate.protocol.errors import AUTH_NOT_CONFIGURED as AUTH_NOT_CONFIGURED
from slotgate.protocol.errors import CLIENT_NAME_CHARS as CLIENT_NAME_CHARS
from slotgate.protocol.errors import CROSSSLOT as CROSSSLOT
from slotgate.protocol.errors import DISCARD_WITHOUT_MULTI as DISCARD_WITHOUT_MULTI
from slotgate.protocol.errors import EXEC_WITHOUT_MULTI as EXEC_WITHOUT_MULTI
from slotgate.protocol.errors import EXECABORT as EXECABORT
from slotgate.protocol.errors import INVALID_CURSOR as INVALID_CURSOR
from slotgate.protocol.errors import MAX_CLIENTS as MAX_CLIENTS
from slotgate.protocol.errors import NESTED_MULTI as NESTED_MULTI
from slotgate.protocol.errors import NOT_INTEGER as NOT_INTEGER
from slotgate.protocol.errors import SELECT_CLUSTER as SELECT_CLUSTER
from slotgate.protocol.errors import SLOT_NOT_SERVED as SLOT_NOT_SERVED
from slotgate.protocol.errors import SYNTAX as SYNTAX
from slotgate.protocol.errors import WATCH_IN_MULTI as WATCH_IN_MULTI
from slotgate.protocol.errors import WRONG_ARITY as WRONG_ARITY
from slotgate.protocol.errors import WRONGPASS as WRONGPASS

# Redis' words for a command flagged no-multi (SAVE, SHUTDOWN, SYNC, PSYNC) inside MULTI.
NO_MULTI = "ERR Command not allowed inside a transaction"
# Redis' CLIENT errors.
NO_SUCH_CLIENT = "ERR No such client"
CLIENT_ID_POSITIVE = "ERR client-id should be greater than 0"
INVALID_CLIENT_ID = "ERR Invalid client ID"
UNKNOWN_CLIENT_TYPE = "ERR Unknown client type '{type}'"
NO_SUCH_USER = "ERR No such user '{user}'"
UNBLOCK_REASON = "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"
CLIENT_SUBCOMMAND = ("ERR unknown subcommand or wrong number of arguments for '{sub}'. "
                     "Try CLIENT HELP.")

MULTI_NESTED = NESTED_MULTI  # the name the transaction code uses

# The proxy's own errors.
UNKNOWN_FATE_WRITE = (
    "ERR slotgate: connection to {node} lost; write may or may not have been applied"
)
NODE_UNREACHABLE = "ERR slotgate: no connection to {node} within the retry deadline"
TOO_MANY_REDIRECTS = "ERR slotgate: too many redirects ({count}) for slot {slot}"
NOT_IN_MULTI = "ERR slotgate: '{name}' cannot run inside MULTI through the proxy"
NOT_SUPPORTED = "ERR slotgate: '{name}' is not supported through the proxy"
# EXEC of a transaction whose commands (or watched keys) are in several slots, refused.
CROSSSLOT_TX = (
    "CROSSSLOT Keys in request don't hash to the same slot (slotgate: this transaction's keys "
    "span slots; set cross_slot_transactions: per_shard to run one MULTI/EXEC per slot)"
)
# Inside MULTI with ``refuse``: a command whose own keys span slots, which ``per_shard`` queues.
CROSSSLOT_QUEUED = (
    "CROSSSLOT Keys in request don't hash to the same slot (slotgate: this command's keys "
    "span slots; set cross_slot_transactions: per_shard to run it inside MULTI)"
)
# Multi-key commands across slots (proxy/routing/gather.py).
CROSSSLOT_TRYAGAIN = "TRYAGAIN Multiple keys request during rehashing of slot"
MOVE_CONTENDED = (
    "ERR slotgate: '{name}' across slots: its source kept changing meanwhile; nothing was "
    "changed"
)
MOVE_UNDONE = (
    "ERR slotgate: '{name}' across slots not done: the master of its source ({node}) failed "
    "before the source was updated; nothing was changed"
)
MOVE_NOT_DONE = (
    "ERR slotgate: '{name}' across slots not done: the master of its destination ({node}) "
    "failed during the move; nothing was changed"
)
# A move whose element left its source and could be neither written to its destination nor
# put back before the retry deadline (proxy/routing/sourcefirst.py).
MOVE_STRANDED = (
    "ERR slotgate: move across slots half done: the element left '{src}' but could be "
    "neither written to '{dst}' nor put back"
)
MOVE_HALF_DONE = (
    "ERR slotgate: move across slots half done: its source could not be updated and its "
    "destination '{key}' was changed meanwhile"
)
# durable_writes (proxy/routing/durable.py): the write ran, its WAIT fell short or was lost.
NOT_DURABLE = (
    "ERR slotgate: write applied on {node} but acknowledged by {acked} of {wanted} replicas "
    "within {timeout_ms} ms; it may be lost if that master fails"
)
DURABILITY_UNKNOWN = (
    "ERR slotgate: write applied on {node} but the connection was lost before its replicas "
    "acknowledged it; it may be lost if that master fails"
)
