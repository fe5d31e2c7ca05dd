"""The classic group state machine, driven directly (no sockets, no clock), and the records."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from odradek.coordinator.group import records as r
from odradek.coordinator.group.classic_group import ClassicGroup, ClassicGroupState, Effects
from odradek.coordinator.group.classic_group_member import JoinResult, SyncResult
from odradek.coordinator.group.consumer_protocol import (
    encode_assignment,
    encode_subscription,
    parse_assignment,
    parse_subscription,
)
from odradek.coordinator.group.group_coordinator_config import GroupConfig
from odradek.coordinator.group.group_metadata_manager import partition_for
from odradek.java_order import java_string_hash
from odradek.protocol.errors import Errors

CFG = GroupConfig(min_session_timeout_ms=6000, max_session_timeout_ms=300000,
                  initial_rebalance_delay_ms=0, max_size=3)


class W:
    """A waiter token; collects what the state machine answers it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.results: list[JoinResult | SyncResult] = []

    def __repr__(self) -> str:
        return f"W({self.name})"


def deliver(fx: Effects) -> Effects:
    for w, res in fx.responses:
        w.results.append(res)
    return fx


def new_group(cfg: GroupConfig = CFG) -> ClassicGroup:
    ids = itertools.count()
    return ClassicGroup("g", cfg, 0, new_member_id=lambda c: f"{c}-{next(ids)}")


def join(g: ClassicGroup, now: int, member_id: str = "", instance: str | None = None,
         protocols: list[tuple[str, bytes]] | None = None, v4: bool = False,
         session: int = 10000, rebalance: int = 30000, client: str = "c") -> W:
    w = W(member_id or client)
    deliver(g.join(w, member_id=member_id, group_instance_id=instance, require_known_member_id=v4,
                   client_id=client, client_host="/127.0.0.1", rebalance_timeout_ms=rebalance,
                   session_timeout_ms=session, protocol_type="consumer",
                   protocols=protocols or [("range", b"m")], now_ms=now))
    return w


def sync(g: ClassicGroup, now: int, member_id: str, gen: int,
         assignments: dict[str, bytes] | None = None) -> W:
    w = W(member_id)
    fx = deliver(g.sync(w, member_id=member_id, generation_id=gen, group_instance_id=None,
                        protocol_type=None, protocol_name=None, assignments=assignments or {},
                        now_ms=now))
    if fx.store_generation is not None:
        deliver(g.on_group_stored(fx.store_generation, Errors.NONE, now))
    return w


def poll(g: ClassicGroup, now: int) -> None:
    deliver(g.poll(now))


def jr(w: W) -> JoinResult:
    assert w.results, f"{w} not answered"
    res = w.results[-1]
    assert isinstance(res, JoinResult)
    return res


def sr(w: W) -> SyncResult:
    assert w.results, f"{w} not answered"
    res = w.results[-1]
    assert isinstance(res, SyncResult)
    return res


def stable_group_of_two() -> tuple[ClassicGroup, str, str]:
    g = new_group()
    a = join(g, 0, client="a")
    poll(g, 0)  # initial delay 0: generation 1 with a alone
    a_id = jr(a).member_id
    b = join(g, 1, client="b")  # b joins: rebalance, waits for a
    assert not b.results
    a2 = join(g, 2, member_id=a_id)
    b_id = jr(b).member_id
    assert jr(a2).generation_id == 2 and jr(b).generation_id == 2
    assert jr(a2).leader == a_id and len(jr(a2).members) == 2 and jr(b).members == []
    sb = sync(g, 3, b_id, 2)
    assert not sb.results  # follower waits for the leader's assignment
    sa = sync(g, 4, a_id, 2, {a_id: b"A", b_id: b"B"})
    assert sr(sa).assignment == b"A" and sr(sb).assignment == b"B"
    assert g.state == ClassicGroupState.STABLE
    return g, a_id, b_id


def test_join_sync_stable() -> None:
    g, a_id, b_id = stable_group_of_two()
    assert g.protocol_name == "range" and g.generation_id == 2
    assert g.heartbeat(member_id=b_id, group_instance_id=None, generation_id=2, now_ms=5) == Errors.NONE
    assert g.heartbeat(member_id=b_id, group_instance_id=None, generation_id=1, now_ms=5) == Errors.ILLEGAL_GENERATION
    assert g.heartbeat(member_id="x", group_instance_id=None, generation_id=2, now_ms=5) == Errors.UNKNOWN_MEMBER_ID


def test_member_id_required_then_join() -> None:
    g = new_group()
    w = join(g, 0, v4=True)
    assert jr(w).error == Errors.MEMBER_ID_REQUIRED and jr(w).member_id.startswith("c-")
    w2 = join(g, 1, member_id=jr(w).member_id, v4=True)
    poll(g, 1)
    assert jr(w2).error == Errors.NONE and jr(w2).generation_id == 1


def test_pending_member_expires_after_session_timeout() -> None:
    g, a_id, b_id = stable_group_of_two()
    p = join(g, 10, v4=True)  # pending: never comes back
    assert jr(p).error == Errors.MEMBER_ID_REQUIRED
    a = join(g, 11, member_id=a_id)  # leader rejoins -> rebalance waits for b and the pending one
    b = join(g, 12, member_id=b_id)
    assert not a.results and not b.results
    poll(g, 10 + 10000)
    assert jr(a).generation_id == 3 and jr(b).generation_id == 3


def test_session_timeout_removes_member_and_rebalances() -> None:
    g, a_id, b_id = stable_group_of_two()
    g.heartbeat(member_id=a_id, group_instance_id=None, generation_id=2, now_ms=9000)
    poll(g, 4 + 10000)  # b's session (10 s from its sync at 3 ms) has passed
    assert b_id not in g.members and g.state == ClassicGroupState.PREPARING_REBALANCE
    assert g.heartbeat(member_id=a_id, group_instance_id=None, generation_id=2, now_ms=10010) == Errors.REBALANCE_IN_PROGRESS
    a = join(g, 10020, member_id=a_id)
    assert jr(a).generation_id == 3 and g.state == ClassicGroupState.COMPLETING_REBALANCE


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    g, a_id, b_id = stable_group_of_two()
    a = join(g, 10, member_id=a_id)  # leader rejoin triggers a rebalance
    assert not a.results
    for t in (5000, 12000, 19000, 26000):  # b stays alive but never rejoins
        assert g.heartbeat(member_id=b_id, group_instance_id=None, generation_id=2, now_ms=t) == Errors.REBALANCE_IN_PROGRESS
        poll(g, t)
    poll(g, 10 + 29999)
    assert not a.results
    poll(g, 10 + 30000)
    assert jr(a).generation_id == 3 and list(g.members) == [a_id]


def test_leave_group_and_empty() -> None:
    g, a_id, b_id = stable_group_of_two()
    top, errs, fx = g.leave([(b_id, None), ("nobody", None)], 10)
    deliver(fx)
    assert top == Errors.NONE and errs == [Errors.NONE, Errors.UNKNOWN_MEMBER_ID]
    a = join(g, 11, member_id=a_id)
    assert jr(a).generation_id == 3
    top, errs, fx = g.leave([(a_id, None)], 12)
    deliver(fx)
    # The last member left: the rebalance completes at once with nobody, the group is Empty.
    assert g.state == ClassicGroupState.EMPTY and g.generation_id == 4 and fx.store_generation == 4


def test_sync_errors() -> None:
    g, a_id, b_id = stable_group_of_two()
    assert sr(sync(g, 10, "x", 2)).error == Errors.UNKNOWN_MEMBER_ID
    assert sr(sync(g, 10, a_id, 1)).error == Errors.ILLEGAL_GENERATION
    join(g, 11, member_id=a_id)
    assert sr(sync(g, 12, b_id, 2)).error == Errors.REBALANCE_IN_PROGRESS


def test_rebalance_during_completing_fails_pending_syncs() -> None:
    g, a_id, b_id = stable_group_of_two()
    a = join(g, 10, member_id=a_id)
    join(g, 11, member_id=b_id)
    assert jr(a).generation_id == 3
    sb = sync(g, 12, b_id, 3)
    assert not sb.results
    c = join(g, 13, client="c")  # a newcomer before the leader synced
    assert sr(sb).error == Errors.REBALANCE_IN_PROGRESS
    assert not c.results and g.state == ClassicGroupState.PREPARING_REBALANCE


def test_invalid_session_timeout_and_inconsistent_protocol() -> None:
    g = new_group()
    assert jr(join(g, 0, session=1000)).error == Errors.INVALID_SESSION_TIMEOUT
    assert jr(join(g, 0, session=10**9)).error == Errors.INVALID_SESSION_TIMEOUT
    join(g, 0, protocols=[("range", b"")])
    poll(g, 0)
    assert jr(join(g, 1, protocols=[("roundrobin", b"")])).error == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_selection_by_votes() -> None:
    g = new_group()
    a = join(g, 0, client="a", protocols=[("range", b""), ("rr", b"")])
    b = join(g, 0, client="b", protocols=[("rr", b""), ("range", b"")])
    c = join(g, 0, client="c", protocols=[("rr", b""), ("sticky", b""), ("range", b"")])
    poll(g, 0)  # new members arrived during the (zero) initial delay: extended once
    poll(g, 0)
    assert jr(a).protocol_name == "rr"
    assert {jr(b).protocol_name, jr(c).protocol_name} == {"rr"}


def test_group_max_size() -> None:
    g = new_group()
    for i in range(3):
        join(g, 0, client=f"m{i}")
    assert jr(join(g, 0, client="m3")).error == Errors.GROUP_MAX_SIZE_REACHED


def test_initial_rebalance_delay_extends_while_members_arrive() -> None:
    cfg = GroupConfig(6000, 300000, 3000, 100)
    g = new_group(cfg)
    a = join(g, 0, client="a", rebalance=10000)
    poll(g, 2999)
    assert not a.results
    b = join(g, 2000, client="b", rebalance=10000)
    poll(g, 3000)  # a new member arrived: extended by another delay
    assert not a.results and not b.results
    poll(g, 6000)
    assert jr(a).generation_id == 1 and len(jr(a).members) + len(jr(b).members) == 2


def test_static_member_rejoins_without_rebalance_and_fences_old() -> None:
    g = new_group()
    a = join(g, 0, client="a", instance="i-a")
    poll(g, 0)
    a_id = jr(a).member_id
    sync(g, 1, a_id, 1, {a_id: b"A"})
    assert g.state == ClassicGroupState.STABLE
    a2 = join(g, 5, client="a", instance="i-a")  # restarted: new member id, same instance
    res = jr(a2)
    assert res.error == Errors.NONE and res.generation_id == 1 and res.member_id != a_id
    assert res.skip_assignment  # it is the leader: it must not re-run the assignment
    assert g.state == ClassicGroupState.STABLE
    assert sr(sync(g, 6, res.member_id, 1)).assignment == b"A"
    # The old incarnation is fenced everywhere.
    assert g.heartbeat(member_id=a_id, group_instance_id="i-a", generation_id=1, now_ms=7) == Errors.FENCED_INSTANCE_ID
    assert jr(join(g, 7, member_id=a_id, instance="i-a")).error == Errors.FENCED_INSTANCE_ID
    assert g.validate_offset_commit(a_id, 1, "i-a", 7) == Errors.FENCED_INSTANCE_ID
    # Leaving by instance id alone works.
    _, errs, fx = g.leave([("", "i-a")], 8)
    assert errs == [Errors.NONE]


def test_offset_commit_validation() -> None:
    g, a_id, b_id = stable_group_of_two()
    assert g.validate_offset_commit(a_id, 2, None, 10) == Errors.NONE
    assert g.validate_offset_commit(a_id, 1, None, 10) == Errors.ILLEGAL_GENERATION
    assert g.validate_offset_commit("x", 2, None, 10) == Errors.UNKNOWN_MEMBER_ID
    assert g.validate_offset_commit("", -1, None, 10) == Errors.UNKNOWN_MEMBER_ID  # not empty
    join(g, 11, member_id=a_id)
    join(g, 12, member_id=b_id)
    assert g.validate_offset_commit(a_id, 3, None, 13) == Errors.REBALANCE_IN_PROGRESS
    empty = new_group()
    assert empty.validate_offset_commit("", -1, None, 0) == Errors.NONE  # standalone


def test_group_record_round_trip_and_reload() -> None:
    g, a_id, b_id = stable_group_of_two()
    rec = r.parse_group_value(r.group_metadata_value(g.to_record()))
    g2 = ClassicGroup.from_record("g", rec, CFG, 100)
    assert g2.state == ClassicGroupState.STABLE and g2.generation_id == 2 and g2.leader_id == a_id
    assert g2.members[b_id].assignment == b"B"
    # A loaded member keeps its generation: heartbeats and syncs work.
    assert g2.heartbeat(member_id=b_id, group_instance_id=None, generation_id=2, now_ms=101) == Errors.NONE


def test_records_and_partitioning() -> None:
    assert r.parse_key(r.offset_commit_key("grp", "t", 7)) == r.OffsetKey("grp", "t", 7)
    assert r.parse_key(r.group_metadata_key("grp")) == r.GroupKey("grp")
    assert r.parse_key(b"\x00\x05junk") is None  # a newer record type: skipped by this reader
    o = r.parse_offset_value(r.offset_commit_value(r.OffsetAndMetadata(42, 3, "meta", 1234)))
    assert (o.offset, o.leader_epoch, o.metadata, o.commit_timestamp) == (42, 3, "meta", 1234)
    # Java's String.hashCode, and Utils.abs semantics (the absolute value; Integer.MIN_VALUE -> 0).
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    # A negative hash code: Utils.abs(-1906497762) % 50 puts "my-group" on partition 12 of 50
    # (& 0x7fffffff, Kafka 0.8's abs, gave 30).
    assert java_string_hash("my-group") == -1906497762
    assert partition_for("my-group", 50) == 12


def test_consumer_protocol_codecs() -> None:
    sub = parse_subscription(encode_subscription(["a", "b"], version=0, user_data=b"u"))
    assert sub.topics == ["a", "b"] and sub.user_data == b"u"
    assert parse_assignment(encode_assignment({"a": [0, 2]})) == {"a": [0, 2]}
    assert parse_assignment(b"") == {}


@pytest.mark.parametrize("state_after", ["leave", "dead"])
def test_make_dead_answers_waiters(state_after: str) -> None:
    g, a_id, b_id = stable_group_of_two()
    a = join(g, 10, member_id=a_id)
    fx: Any = g.make_dead(Errors.NOT_COORDINATOR, 11)
    deliver(fx)
    assert jr(a).error == Errors.NOT_COORDINATOR and g.state == ClassicGroupState.DEAD
    assert jr(join(g, 12)).error == Errors.COORDINATOR_NOT_AVAILABLE
