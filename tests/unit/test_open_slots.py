"""The pure parts of settling open slots (proxy/ops/open_slots.py): who stands in for a node
that was failed over, and the refusal to act while two masters claim one slot."""

from __future__ import annotations

import pytest

from slotgate.proxy.ops.admin import AdminError, NodeLine
from slotgate.proxy.ops.open_slots import Survey, _check_settled, open_slots
from slotgate.proxy.ops.reshard import ClusterView, _check_target


def line(text: str) -> NodeLine:
    return NodeLine.parse(text)


S = line("aaaa 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-99 [50->-bbbb]")
T_OLD = line("bbbb 10.0.0.2:7000@17000 myself,slave cccc 0 0 2 connected")
R = line("cccc 10.0.0.3:7000@17000 myself,master - 0 0 3 connected 100-199")


def test_a_replica_stands_for_the_master_it_follows() -> None:
    sv = Survey({ln.id: ln for ln in (S, T_OLD, R)})
    assert sv.stand_in("bbbb") == "cccc"
    assert sv.stand_in("aaaa") == "aaaa"
    assert sv.stand_in("dddd") is None  # does not answer
    assert [m.id for m in sv.masters()] == ["aaaa", "cccc"]
    assert {s: [(m.id, a, p) for m, a, p in marks]
            for s, marks in open_slots(sv.masters()).items()} == {50: [("aaaa", ">", "bbbb")]}


def test_replicas_following_each_other_stand_for_nobody() -> None:
    a = line("aaaa 10.0.0.1:7000@17000 myself,slave bbbb 0 0 1 connected")
    b = line("bbbb 10.0.0.2:7000@17000 myself,slave aaaa 0 0 2 connected")
    assert Survey({"aaaa": a, "bbbb": b}).stand_in("aaaa") is None


def test_two_masters_claiming_one_slot_is_no_time_to_settle() -> None:
    _check_settled({ln.id: ln for ln in (S, T_OLD, R)})
    back = line("bbbb 10.0.0.2:7000@17000 myself,master - 0 0 2 connected 100-150 [120-<-aaaa]")
    with pytest.raises(AdminError, match="both claim slot 100"):
        _check_settled({ln.id: ln for ln in (S, back, R)})


class _Says:
    """A node that answers CLUSTER NODES with a fixed text."""

    def __init__(self, text: str) -> None:
        self.nodes = text

    def text(self, *args: object) -> str:
        return self.nodes


SRC_VIEW = ("aaaa 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-99\n"
            "bbbb 10.0.0.2:7000@17000 master - 0 0 2 connected 200-299\n")


@pytest.mark.parametrize(("target_says", "moves"), [
    ("bbbb 10.0.0.2:7000@17000 myself,master - 0 0 2 connected 200-299", True),
    # back from a cut, not yet told that its replica replaced it: still claims its old slots
    ("bbbb 10.0.0.2:7000@17000 myself,master - 0 0 2 connected 100-299", False),
    ("bbbb 10.0.0.2:7000@17000 myself,slave cccc 0 0 2 connected", False),
])
def test_a_slot_goes_only_to_the_master_the_source_knows(target_says: str, moves: bool) -> None:
    view = ClusterView(("10.0.0.1", 7000))
    view.lines = [line(ln) for ln in SRC_VIEW.splitlines()]
    view._clients.update({"aaaa": _Says(SRC_VIEW), "bbbb": _Says(target_says)})  # type: ignore[dict-item]
    src, dst = view.lines
    if moves:
        _check_target(view, src, dst)
    else:
        with pytest.raises(AdminError, match="is not the master"):
            _check_target(view, src, dst)
