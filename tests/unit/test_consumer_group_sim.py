"""Randomized runs of a KIP-848 group: members join, leave, crash, restart and topics change in any
order. A partition is never owned by two live members, a member never owns a partition the
coordinator does not count as its own, the group converges once the churn stops, and replaying
its records rebuilds it exactly."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_consumer_group import GROUP, Client, TopicMetadata, assert_same, replayed

from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.coordinator.group.consumer_group_heartbeat import consumer_group_heartbeat, expire_due
from odradek.coordinator.group.consumer_group_member import MemberState
from odradek.coordinator.group.group_coordinator_config import ConsumerGroupConfig
from odradek.protocol.errors import Errors

TOPICS = ["t0", "t1", "t2"]
SUBSCRIPTIONS = [["t0"], ["t0", "t1"], ["t1", "t2"], ["t0", "t1", "t2"]]

op_st = st.one_of(
    st.tuples(st.just("join"), st.integers(0, len(SUBSCRIPTIONS) - 1), st.booleans()),
    st.tuples(st.just("hb"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("leave"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("crash"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("tick"), st.integers(1, 60_000), st.booleans()),
    st.tuples(st.just("topic"), st.integers(0, len(TOPICS) - 1), st.integers(1, 6)),
)


class World:
    def __init__(self, assignor: str) -> None:
        ids = (f"m{i}" for i in itertools.count())
        self.group = ConsumerGroup(
            GROUP, ConsumerGroupConfig(assignors=(assignor,)), member_id_factory=lambda: next(ids)
        )
        self.meta: dict[str, TopicMetadata] = {
            "t0": TopicMetadata(uuid.UUID(int=1), "t0", 3),
        }
        self.now = 0
        self.live: list[Client] = []  # processes running and heartbeating
        self.log: list[Any] = []
        self.instances = itertools.count()
        self.away: list[Client] = []  # static members that left temporarily

    def hb(self, c: Client, full: bool = False) -> None:
        resp, records = consumer_group_heartbeat(self.group, c.request(full=full), self.now, self.meta)
        self.log += records
        code = resp["error_code"]
        if code == 0:
            c.apply(resp)
        elif code in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID):
            c.owned, c.epoch = set(), 0  # abandon everything and rejoin
            if code == Errors.UNKNOWN_MEMBER_ID and c.instance_id is None:
                c.member_id = ""
        elif code == Errors.UNRELEASED_INSTANCE_ID:
            pass  # retried later, once the previous instance is gone
        else:
            raise AssertionError(resp)

    def expire(self) -> None:
        self.log += expire_due(self.group, self.now)

    def step(self, op: tuple[str, int, Any]) -> None:
        kind, n, flag = op
        if kind == "join":
            instance = None
            if flag and self.away:
                instance = self.away.pop(0).instance_id  # a static member restarts
            elif flag:
                instance = f"i{next(self.instances)}"
            c = Client(f"c{len(self.log)}", SUBSCRIPTIONS[n], instance_id=instance)
            self.live.append(c)
            self.hb(c)
        elif kind == "tick":
            self.now += n
            for c in self.live:
                if flag:  # everybody heartbeats in time, otherwise they all miss this one
                    self.hb(c)
            self.expire()
        elif kind == "topic":
            name = TOPICS[n]
            old = self.meta.get(name)
            count = max(flag, old.num_partitions if old else 0)  # partitions only grow
            self.meta = {**self.meta, name: TopicMetadata(uuid.UUID(int=n + 1), name, count)}
        elif self.live:
            c = self.live[n % len(self.live)]
            if kind == "hb":
                self.hb(c, full=flag)
            elif kind == "leave":
                if c.joined and c.epoch > 0:
                    req = c.request()
                    static_leave = flag and c.instance_id is not None
                    req["member_epoch"] = -2 if static_leave else -1
                    resp, records = consumer_group_heartbeat(self.group, req, self.now, self.meta)
                    self.log += records
                    if static_leave and resp["error_code"] == 0:
                        self.away.append(c)
                self.live.remove(c)
            elif kind == "crash":
                self.live.remove(c)  # silent: only its session timeout removes it

    def check(self) -> None:
        g = self.group
        owners: dict[tuple[uuid.UUID, int], str] = {}
        for mid, m in g.members.items():
            for parts in (m.assigned_partitions, m.partitions_pending_revocation):
                for t, ps in parts.items():
                    for p in ps:
                        assert (t, p) not in owners, f"{(t, p)} held by {owners[(t, p)]} and {mid}"
                        owners[(t, p)] = mid
        seen: set[tuple[uuid.UUID, int]] = set()
        for c in self.live:
            if c.member_id not in g.members or c.epoch == 0:
                continue  # a zombie until its next heartbeat tells it so
            assert not (c.owned & seen), "a partition is owned by two live members"
            seen |= c.owned
            for tp in c.owned:
                assert owners.get(tp) == c.member_id, "owns what the coordinator gave elsewhere"

    def settle(self) -> None:
        """Live members heartbeat every 5 s; the dead ones expire; wait until it is all still."""
        before: list[Any] = []
        for _ in range(40):
            self.now += 5000
            for c in self.live:
                self.hb(c)
                self.check()
            self.expire()
            after = [(c.member_id, c.epoch, frozenset(c.owned)) for c in self.live]
            members = {c.member_id for c in self.live}
            if (
                after == before
                and set(self.group.members) == members
                and self.group.state.value in ("Stable", "Empty")
            ):
                return
            before = after
        raise AssertionError(f"no convergence: {self.group.describe()}")


@settings(max_examples=150, deadline=None)
@given(st.lists(op_st, max_size=40), st.sampled_from(["uniform", "range"]))
def test_random_churn_is_safe_and_converges(ops: list[tuple[str, int, Any]], assignor: str) -> None:
    w = World(assignor)
    for op in ops:
        w.step(op)
        w.check()
    w.away.clear()
    w.settle()
    g = w.group
    live = [c for c in w.live if c.member_id in g.members]
    assert len(live) == len(g.members)
    assert all(m.state == MemberState.STABLE for m in g.members.values())
    # Every partition of a subscribed topic is owned by exactly one live member.
    wanted = {
        (w.meta[t].topic_id, p)
        for c in live
        for t in (c.subscribe or [])
        if t in w.meta
        for p in range(w.meta[t].num_partitions)
    }
    owned = [tp for c in live for tp in c.owned]
    assert len(owned) == len(set(owned))
    assert set(owned) == wanted
    if assignor == "uniform":
        by_subs: dict[tuple[str, ...], list[int]] = {}
        for c in live:
            key = tuple(t for t in (c.subscribe or []) if t in w.meta)
            by_subs.setdefault(key, []).append(len(c.owned))
        assert all(max(v) - min(v) <= 1 for v in by_subs.values()), by_subs
    assert_same(g, replayed(g, w.log))
