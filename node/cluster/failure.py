"""Failure detection and cluster health: failure reports, PFAIL -> FAIL, FAIL clearing, and the
cluster state (ok/fail). Pure functions over ``ClusterState``; times are unix ms.

- A failure report is kept per (failing node, reporting master) and is valid for
  ``node_timeout * 2`` (CLUSTER_FAIL_REPORT_VALIDITY_MULT).
- PFAIL -> FAIL needs local PFAIL plus valid reports from masters, counting myself when I am
  a master, reaching ``size // 2 + 1``.
- FAIL clears at once for replicas and slotless masters; for a master with slots only after
  ``node_timeout * 2`` (CLUSTER_FAIL_UNDO_TIME_MULT) since it failed.
- The state is FAIL when a slot is unbound or bound to a FAIL node (with
  cluster-require-full-coverage) or when fewer than ``size // 2 + 1`` masters with slots are
  reachable. A master waits WRITABLE_DELAY after start before going ok, and rejoin_delay after
  it last was in the minority.
"""

from __future__ import annotations

import logging

from slotgate.node.cluster import bus
from slotgate.node.cluster.state import TODO_SAVE, TODO_UPDATE_STATE, ClusterState, Node

log = logging.getLogger("node.cluster")

FAIL_REPORT_VALIDITY_MULT = 2
FAIL_UNDO_TIME_MULT = 2
WRITABLE_DELAY_MS = 2000
MIN_REJOIN_DELAY_MS = 500
MAX_REJOIN_DELAY_MS = 5000


def add_failure_report(failing: Node, sender: Node, now_ms: int) -> bool:
    """True if the report is new (an existing one is refreshed)."""
    new = sender.name not in failing.fail_reports
    failing.fail_reports[sender.name] = now_ms
    return new


def del_failure_report(failing: Node, sender: Node) -> bool:
    return failing.fail_reports.pop(sender.name, None) is not None


def cleanup_failure_reports(node: Node, node_timeout_ms: int, now_ms: int) -> None:
    max_age = node_timeout_ms * FAIL_REPORT_VALIDITY_MULT
    for name in [n for n, t in node.fail_reports.items() if now_ms - t > max_age]:
        del node.fail_reports[name]


def failure_reports_count(node: Node, node_timeout_ms: int, now_ms: int) -> int:
    cleanup_failure_reports(node, node_timeout_ms, now_ms)
    return len(node.fail_reports)


def mark_failing_if_needed(st: ClusterState, node: Node, node_timeout_ms: int,
                           now_ms: int) -> bool:
    """markNodeAsFailingIfNeeded: True when ``node`` just became FAIL (caller broadcasts)."""
    needed = st.size // 2 + 1
    if not node.timed_out or node.failed:
        return False
    failures = failure_reports_count(node, node_timeout_ms, now_ms)
    if st.myself.is_master:
        failures += 1
    if failures < needed:
        return False
    log.info("Marking node %s as failing (quorum reached).", node.name.decode())
    node.flags &= ~bus.F_PFAIL
    node.flags |= bus.F_FAIL
    node.fail_time = now_ms
    st.changed(TODO_UPDATE_STATE | TODO_SAVE)
    return True


def clear_failure_if_needed(st: ClusterState, node: Node, node_timeout_ms: int,
                            now_ms: int) -> None:
    """clearNodeFailureIfNeeded (the node answered a PING while flagged FAIL)."""
    if node.is_replica or node.numslots == 0:
        log.info("Clear FAIL state for node %s: %s is reachable again.", node.name.decode(),
                 "replica" if node.is_replica else "master without slots")
        node.flags &= ~bus.F_FAIL
        st.changed(TODO_UPDATE_STATE | TODO_SAVE)
    if (node.is_master and node.numslots > 0
            and now_ms - node.fail_time > node_timeout_ms * FAIL_UNDO_TIME_MULT):
        log.info("Clear FAIL state for node %s: is reachable again and nobody is serving its "
                 "slots after some time.", node.name.decode())
        node.flags &= ~bus.F_FAIL
        st.changed(TODO_UPDATE_STATE | TODO_SAVE)


class StateTracker:
    """clusterUpdateState, with its two timers (first call, last time in the minority)."""

    def __init__(self) -> None:
        self.first_call_ms = 0
        self.among_minority_ms = 0

    def update(self, st: ClusterState, node_timeout_ms: int, require_full_coverage: bool,
               now_ms: int) -> None:
        st.todo &= ~TODO_UPDATE_STATE
        if self.first_call_ms == 0:
            self.first_call_ms = now_ms
        me = st.myself
        if (me.is_master and st.state == bus.STATE_FAIL
                and now_ms - self.first_call_ms < WRITABLE_DELAY_MS):
            return
        new_state = bus.STATE_OK
        if require_full_coverage and (st.unbound or any(
                n.numslots and n.flags & bus.F_FAIL for n in st.nodes.values())):
            new_state = bus.STATE_FAIL  # a slot unbound or bound to a FAIL node
        size = 0
        reachable = 0
        for n in st.nodes.values():
            if n.is_master and n.numslots:
                size += 1
                if not n.flags & (bus.F_FAIL | bus.F_PFAIL):
                    reachable += 1
        st.size = size
        if reachable < size // 2 + 1:
            new_state = bus.STATE_FAIL
            self.among_minority_ms = now_ms
        if new_state != st.state:
            rejoin_delay = min(max(node_timeout_ms, MIN_REJOIN_DELAY_MS), MAX_REJOIN_DELAY_MS)
            if (new_state == bus.STATE_OK and me.is_master
                    and now_ms - self.among_minority_ms < rejoin_delay):
                return
            log.info("Cluster state changed: %s", "ok" if new_state == bus.STATE_OK else "fail")
            st.state = new_state
            st.generation += 1
