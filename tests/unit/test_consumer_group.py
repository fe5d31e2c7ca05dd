"""The KIP-848 consumer group state machine, driven with plain dicts and simulated members."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest

from odradek.coordinator.group.assignors import TopicMetadata
from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.coordinator.group.consumer_group_heartbeat import (
    consumer_group_heartbeat,
    expire_due,
    expire_member,
)
from odradek.coordinator.group.consumer_group_member import MemberState
from odradek.coordinator.group.consumer_group_records import (
    CoordinatorRecord,
    decode_record,
    encode_record,
)
from odradek.coordinator.group.group_coordinator_config import ConsumerGroupConfig
from odradek.protocol.errors import Errors

GROUP = "g"
REBALANCE_TIMEOUT = 30000
SESSION = 45000


def tid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_OID, name)


def topics(**counts: int) -> dict[str, TopicMetadata]:
    return {n: TopicMetadata(tid(n), n, c) for n, c in counts.items()}


def new_group(**kw: Any) -> ConsumerGroup:
    ids = (f"member-{i}" for i in itertools.count(1))
    return ConsumerGroup(GROUP, ConsumerGroupConfig(**kw), member_id_factory=lambda: next(ids))


TP = tuple[uuid.UUID, int]


class Client:
    """A consumer: owns exactly what it was last given; revokes as soon as it is told."""

    def __init__(
        self,
        name: str,
        subscribe: list[str] | None = None,
        *,
        regex: str | None = None,
        instance_id: str | None = None,
        assignor: str | None = None,
    ) -> None:
        self.name = name
        self.member_id = ""
        self.epoch = 0
        self.owned: set[TP] = set()
        self.subscribe = subscribe
        self.regex = regex
        self.instance_id = instance_id
        self.assignor = assignor
        self.joined = False

    def request(self, full: bool = False) -> dict[str, Any]:
        joining = self.epoch == 0
        owned: dict[uuid.UUID, list[int]] = {}
        for t, p in sorted(self.owned):
            owned.setdefault(t, []).append(p)
        req: dict[str, Any] = {
            "group_id": GROUP,
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "instance_id": self.instance_id,
            "rack_id": None,
            "rebalance_timeout_ms": REBALANCE_TIMEOUT if joining or full else -1,
            "subscribed_topic_names": self.subscribe if joining or full else None,
            "subscribed_topic_regex": self.regex if joining or full else None,
            "server_assignor": self.assignor if joining or full else None,
            "topic_partitions": [{"topic_id": t, "partitions": ps} for t, ps in owned.items()],
        }
        return req

    def apply(self, resp: dict[str, Any]) -> None:
        assert resp["error_code"] == 0, resp
        self.member_id = resp["member_id"]
        self.epoch = resp["member_epoch"]
        self.joined = True
        if resp["assignment"] is not None:
            self.owned = {
                (tp["topic_id"], p)
                for tp in resp["assignment"]["topic_partitions"]
                for p in tp["partitions"]
            }


class Sim:
    def __init__(self, group: ConsumerGroup, meta: dict[str, TopicMetadata]) -> None:
        self.group = group
        self.meta = meta
        self.now = 0
        self.clients: list[Client] = []
        self.log: list[CoordinatorRecord] = []

    def hb(self, c: Client, **kw: Any) -> dict[str, Any]:
        resp, records = consumer_group_heartbeat(
            self.group, c.request(**kw), self.now, self.meta, client_id=c.name,
            client_host="/127.0.0.1",
        )
        self.log += records
        if resp["error_code"] == 0:
            c.apply(resp)
        self.check_exclusive()
        return resp

    def join(self, c: Client) -> dict[str, Any]:
        self.clients.append(c)
        return self.hb(c)

    def check_exclusive(self) -> None:
        seen: dict[TP, str] = {}
        for c in self.clients:
            for tp in c.owned:
                assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.name}"
                seen[tp] = c.name

    def run(self, rounds: int = 10, step_ms: int = 1000) -> None:
        """Heartbeat every member round-robin until nothing changes any more."""
        for _ in range(rounds):
            before = [(c.epoch, frozenset(c.owned)) for c in self.clients]
            for c in self.clients:
                self.now += step_ms
                self.hb(c)
            if [(c.epoch, frozenset(c.owned)) for c in self.clients] == before:
                return
        raise AssertionError("did not converge")

    def all_partitions(self, *names: str) -> set[TP]:
        return {
            (self.meta[n].topic_id, p) for n in names for p in range(self.meta[n].num_partitions)
        }


def replayed(group: ConsumerGroup, log: list[CoordinatorRecord]) -> ConsumerGroup:
    """A group rebuilt from the bytes of its records, as after a restart."""
    g = ConsumerGroup(group.group_id, group.config)
    for rec in log:
        name, key, value = decode_record(*encode_record(*rec))
        g.replay(name, key, value)
    return g


def assert_same(a: ConsumerGroup, b: ConsumerGroup) -> None:
    assert a.records() == b.records()
    assert a.describe() == b.describe()
    assert a.members == b.members
    assert a.static_members == b.static_members
    assert a._owners == b._owners


# ---------------------------------------------------------------------------------------------


def test_three_members_join_one_by_one_and_converge() -> None:
    meta = topics(orders=6, payments=3)
    sim = Sim(new_group(), meta)
    a = Client("a", ["orders", "payments"])
    resp = sim.join(a)
    assert resp["member_id"] == "member-1" and resp["member_epoch"] == 1
    assert resp["heartbeat_interval_ms"] == 5000
    assert a.owned == sim.all_partitions("orders", "payments")
    assert sim.group.describe()["group_state"] == "Stable"

    b, c = Client("b", ["orders", "payments"]), Client("c", ["payments", "orders"])
    sim.join(b)
    # b gets nothing until a has revoked: a is asked to revoke, b waits for the partitions.
    assert not b.owned
    assert sim.group.members[b.member_id].state == MemberState.UNRELEASED_PARTITIONS
    assert sim.group.describe()["group_state"] == "Reconciling"
    sim.run()
    assert len(a.owned) + len(b.owned) == 9 and abs(len(a.owned) - len(b.owned)) <= 1

    sim.join(c)
    sim.run()
    assert sorted(len(x.owned) for x in sim.clients) == [3, 3, 3]
    assert set().union(*(x.owned for x in sim.clients)) == sim.all_partitions("orders", "payments")
    d = sim.group.describe()
    assert d["group_state"] == "Stable"
    assert d["group_epoch"] == d["assignment_epoch"] == 3
    assert d["assignor_name"] == "uniform"
    assert {m["member_epoch"] for m in d["members"]} == {3}
    for m in d["members"]:
        assert m["assignment"] == m["target_assignment"]
        assert m["client_id"] in "abc" and m["client_host"] == "/127.0.0.1"
        assert {t["topic_name"] for t in m["assignment"]["topic_partitions"]} <= {
            "orders",
            "payments",
        }
    assert_same(sim.group, replayed(sim.group, sim.log))


def test_assignment_is_sent_only_when_it_changes() -> None:
    sim = Sim(new_group(), topics(t=4))
    a = Client("a", ["t"])
    sim.join(a)
    assert sim.hb(a)["assignment"] is None
    resp = sim.hb(a, full=True)  # a full request (e.g. after an error) always gets it
    assert resp["assignment"] is not None
    b = Client("b", ["t"])
    sim.join(b)
    resp = sim.hb(a)
    assert (
        resp["assignment"] is not None
        and len(resp["assignment"]["topic_partitions"][0]["partitions"]) == 2
    )


def test_member_leaves_and_its_partitions_move() -> None:
    sim = Sim(new_group(), topics(t=6))
    clients = [Client(n, ["t"]) for n in "abc"]
    for c in clients:
        sim.join(c)
        sim.run()
    a = clients[0]
    epoch = sim.group.group_epoch
    req = a.request()
    req["member_epoch"] = -1
    resp, records = consumer_group_heartbeat(sim.group, req, sim.now, sim.meta)
    sim.log += records
    assert resp["error_code"] == 0 and resp["member_epoch"] == -1
    assert [r.name for r in records[:3]] == [
        "ConsumerGroupCurrentMemberAssignment",
        "ConsumerGroupTargetAssignmentMember",
        "ConsumerGroupMemberMetadata",
    ]
    assert all(r.value is None for r in records[:3])
    assert records[-1] == CoordinatorRecord(
        "ConsumerGroupMetadata", {"group_id": GROUP}, {"epoch": epoch + 1}
    )
    sim.clients.remove(a)
    assert sim.group.describe()["group_state"] == "Assigning"
    sim.run()
    assert sorted(len(c.owned) for c in sim.clients) == [3, 3]
    assert set().union(*(c.owned for c in sim.clients)) == sim.all_partitions("t")
    # Leaving again: the member is unknown now.
    resp, records = consumer_group_heartbeat(sim.group, req, sim.now, sim.meta)
    assert resp["error_code"] == Errors.UNKNOWN_MEMBER_ID and records == []
    assert_same(sim.group, replayed(sim.group, sim.log))


def test_last_member_leaving_empties_the_group() -> None:
    sim = Sim(new_group(), topics(t=2))
    a = Client("a", ["t"])
    sim.join(a)
    req = a.request()
    req["member_epoch"] = -1
    _, records = consumer_group_heartbeat(sim.group, req, 1, sim.meta)
    sim.log += records
    d = sim.group.describe()
    assert d["group_state"] == "Empty" and d["members"] == [] and d["group_epoch"] == 2
    assert sim.group.subscription_metadata == {}
    assert_same(sim.group, replayed(sim.group, sim.log))


def test_session_expiry() -> None:
    sim = Sim(new_group(), topics(t=4))
    a, b = Client("a", ["t"]), Client("b", ["t"])
    sim.join(a)
    sim.join(b)
    sim.run()
    deadline = sim.group.session_deadline(b.member_id)
    assert deadline == sim.now + SESSION
    assert sim.group.next_deadline() is not None
    # A stale timer: b heartbeated since, nothing happens.
    assert expire_member(sim.group, b.member_id, deadline - 1) == []
    # Only a keeps heartbeating.
    sim.clients.remove(b)
    for _ in range(5):
        sim.now += 5000
        sim.hb(a)
    assert expire_due(sim.group, sim.now) == []
    sim.now = deadline
    records = expire_due(sim.group, sim.now)
    sim.log += records
    assert b.member_id not in sim.group.members
    assert sim.group.session_deadline(b.member_id) is None
    sim.run()
    assert a.owned == sim.all_partitions("t")
    # b comes back with its old epoch: unknown.
    assert sim.hb(b)["error_code"] == Errors.UNKNOWN_MEMBER_ID
    assert_same(sim.group, replayed(sim.group, sim.log))


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    sim = Sim(new_group(), topics(t=4))
    a = Client("a", ["t"])
    sim.join(a)
    b = Client("b", ["t"])
    sim.join(b)
    # a is asked to revoke two partitions but keeps reporting them.
    resp, recs = consumer_group_heartbeat(
        sim.group,
        {**a.request(), "topic_partitions": [{"topic_id": tid("t"), "partitions": [0, 1, 2, 3]}]},
        sim.now,
        sim.meta,
    )
    sim.log += recs
    member = sim.group.members[a.member_id]
    assert member.state == MemberState.UNREVOKED_PARTITIONS
    assert resp["assignment"]["topic_partitions"][0]["partitions"] == sorted(
        member.assigned_partitions[tid("t")]
    )
    assert len(member.partitions_pending_revocation[tid("t")]) == 2
    deadline = sim.group.rebalance_deadline(a.member_id)
    assert deadline == sim.now + REBALANCE_TIMEOUT
    # Heartbeats still owning the partitions keep the session alive but not the rebalance.
    sim.now = deadline - 1
    sim.log += consumer_group_heartbeat(
        sim.group,
        {**a.request(), "topic_partitions": [{"topic_id": tid("t"), "partitions": [0, 1, 2, 3]}]},
        sim.now,
        sim.meta,
    )[1]
    assert sim.group.rebalance_deadline(a.member_id) == deadline
    assert expire_member(sim.group, a.member_id, deadline - 1) == []
    sim.log += expire_member(sim.group, a.member_id, deadline)
    assert a.member_id not in sim.group.members
    sim.clients.remove(a)
    sim.run()
    assert b.owned == sim.all_partitions("t")
    assert_same(sim.group, replayed(sim.group, sim.log))


def test_static_member_temporary_leave_and_rejoin_with_same_assignment() -> None:
    sim = Sim(new_group(), topics(t=6))
    a = Client("a", ["t"], instance_id="instance-a")
    b = Client("b", ["t"])
    sim.join(a)
    sim.join(b)
    sim.run()
    held = set(a.owned)
    epoch = sim.group.group_epoch
    # Another process with the same instance id while a is alive: refused.
    intruder = Client("a2", ["t"], instance_id="instance-a")
    resp, recs = consumer_group_heartbeat(sim.group, intruder.request(), sim.now, sim.meta)
    assert resp["error_code"] == Errors.UNRELEASED_INSTANCE_ID and recs == []
    # a's instance id with a wrong member id: fenced instance.
    wrong = {**a.request(), "member_id": "someone-else"}
    assert (
        consumer_group_heartbeat(sim.group, wrong, sim.now, sim.meta)[0]["error_code"] == Errors.FENCED_INSTANCE_ID
    )

    req = a.request()
    req["member_epoch"] = -2
    resp, recs = consumer_group_heartbeat(sim.group, req, sim.now, sim.meta)
    sim.log += recs
    assert resp["error_code"] == 0 and resp["member_epoch"] == -2
    assert [r.name for r in recs] == ["ConsumerGroupCurrentMemberAssignment"]
    assert sim.group.group_epoch == epoch  # no rebalance while it is away
    assert sim.group.session_deadline(a.member_id) == sim.now + SESSION
    sim.clients.remove(a)
    sim.run()
    assert len(b.owned) == 3  # b did not get a's partitions

    # The restarted process: new member id, same instance id, same partitions, no rebalance.
    a2 = Client("a2", ["t"], instance_id="instance-a")
    resp = sim.join(a2)
    assert resp["error_code"] == 0 and resp["member_id"] != a.member_id
    assert a2.owned == held
    assert sim.group.group_epoch == epoch
    assert a.member_id not in sim.group.members
    assert sim.group.static_members == {"instance-a": a2.member_id}
    sim.run()
    assert sim.group.describe()["group_state"] == "Stable"
    assert_same(sim.group, replayed(sim.group, sim.log))


def test_static_member_away_too_long_is_expired() -> None:
    sim = Sim(new_group(), topics(t=4))
    a = Client("a", ["t"], instance_id="i")
    b = Client("b", ["t"])
    sim.join(a)
    sim.join(b)
    sim.run()
    req = a.request()
    req["member_epoch"] = -2
    sim.log += consumer_group_heartbeat(sim.group, req, sim.now, sim.meta)[1]
    sim.clients.remove(a)
    deadline = sim.group.session_deadline(a.member_id)
    assert deadline is not None
    sim.now = deadline
    sim.log += expire_member(sim.group, a.member_id, sim.now)
    assert sim.group.static_members == {}
    sim.run()
    assert b.owned == sim.all_partitions("t")
    assert_same(sim.group, replayed(sim.group, sim.log))


def test_fenced_epochs_and_request_errors() -> None:
    sim = Sim(new_group(max_size=3), topics(t=4))
    a = Client("a", ["t"])
    for c in (a, Client("b", ["t"]), Client("c", ["t"])):
        sim.join(c)
        sim.run()
    g = sim.group
    m = g.members[a.member_id]
    assert (m.member_epoch, m.previous_member_epoch) == (3, 2)

    def err(req: dict[str, Any]) -> int:
        resp, recs = consumer_group_heartbeat(g, req, sim.now, sim.meta, client_id="a", client_host="/127.0.0.1")
        assert recs == []
        if resp["error_code"]:
            assert resp["member_id"] is None and resp["assignment"] is None
            assert resp["error_message"]
        return int(resp["error_code"])

    snapshot = g.records()
    assert err({**a.request(), "member_epoch": a.epoch + 1}) == Errors.FENCED_MEMBER_EPOCH
    assert err({**a.request(), "member_epoch": 1}) == Errors.FENCED_MEMBER_EPOCH
    assert err({**a.request(), "member_epoch": 2}) == 0  # the previous epoch is tolerated
    assert err({**a.request(), "member_id": "nobody"}) == Errors.UNKNOWN_MEMBER_ID
    assert err({**a.request(), "member_id": ""}) == Errors.INVALID_REQUEST
    assert err({**a.request(full=True), "server_assignor": "sticky"}) == Errors.UNSUPPORTED_ASSIGNOR
    joining = Client("d", ["t"]).request()
    assert err(joining) == Errors.GROUP_MAX_SIZE_REACHED
    assert err({**joining, "rebalance_timeout_ms": -1}) == Errors.INVALID_REQUEST
    assert err({**joining, "topic_partitions": None}) == Errors.INVALID_REQUEST
    assert err({**joining, "subscribed_topic_names": None}) == Errors.INVALID_REQUEST
    assert err({**joining, "subscribed_topic_names": None, "subscribed_topic_regex": "("}) == Errors.INVALID_REGULAR_EXPRESSION
    assert err({**joining, "member_epoch": -3}) == Errors.INVALID_REQUEST
    assert err({**joining, "member_epoch": -2, "member_id": "x"}) == Errors.INVALID_REQUEST
    assert err({**joining, "group_id": ""}) == Errors.INVALID_REQUEST
    assert g.records() == snapshot  # errors change nothing


def test_previous_epoch_is_accepted_when_the_response_was_lost() -> None:
    sim = Sim(new_group(), topics(t=4))
    a = Client("a", ["t"])
    sim.join(a)
    b = Client("b", ["t"])
    sim.join(b)
    sim.run()
    m = sim.group.members[a.member_id]
    assert m.previous_member_epoch < m.member_epoch
    # a resends with its previous epoch, owning a subset of its assignment: accepted.
    req = {**a.request(), "member_epoch": m.previous_member_epoch}
    resp, _ = consumer_group_heartbeat(sim.group, req, sim.now, sim.meta)
    assert resp["error_code"] == 0 and resp["member_epoch"] == m.member_epoch
    # ... but not while owning partitions it does not have.
    req["topic_partitions"] = [{"topic_id": tid("t"), "partitions": [0, 1, 2, 3]}]
    assert (
        consumer_group_heartbeat(sim.group, req, sim.now, sim.meta)[0]["error_code"] == Errors.FENCED_MEMBER_EPOCH
    )


def test_fenced_member_rejoins_with_epoch_zero() -> None:
    sim = Sim(new_group(), topics(t=4))
    a, b = Client("a", ["t"]), Client("b", ["t"])
    sim.join(a)
    sim.join(b)
    sim.run()
    # a was fenced: it drops everything and rejoins with epoch 0 and the same member id.
    a.epoch, a.owned = 0, set()
    resp = sim.hb(a)
    assert resp["error_code"] == 0 and resp["member_id"] == a.member_id
    sim.run()
    assert sorted(len(c.owned) for c in sim.clients) == [2, 2]
    assert_same(sim.group, replayed(sim.group, sim.log))


def test_regex_subscription_picks_up_new_topics() -> None:
    sim = Sim(new_group(), topics(orders_eu=2, other=3, __consumer_offsets=50))
    a = Client("a", regex="orders_.*")
    sim.join(a)
    assert a.owned == sim.all_partitions("orders_eu")
    epoch = sim.group.group_epoch
    sim.run()
    assert sim.group.group_epoch == epoch
    # A new matching topic, and one that only matches partially (full match required).
    sim.meta = {**sim.meta, **topics(orders_us=3, my_orders_x=1)}
    sim.run()
    assert sim.group.group_epoch == epoch + 1
    assert a.owned == sim.all_partitions("orders_eu", "orders_us")
    b = Client("b", regex=".*")  # internal topics never match
    sim.join(b)
    sim.run()
    assert set(sim.group.subscription_metadata) == {
        "orders_eu",
        "orders_us",
        "other",
        "my_orders_x",
    }
    d = {m["member_id"]: m for m in sim.group.describe()["members"]}
    assert d[a.member_id]["subscribed_topic_regex"] == "orders_.*"
    assert d[a.member_id]["subscribed_topic_names"] == []
    assert_same(sim.group, replayed(sim.group, sim.log))


def test_partition_count_change_bumps_the_epoch() -> None:
    sim = Sim(new_group(), topics(t=2))
    a, b = Client("a", ["t"]), Client("b", ["t"])
    sim.join(a)
    sim.join(b)
    sim.run()
    epoch = sim.group.group_epoch
    sim.meta = topics(t=6)
    sim.run()
    assert sim.group.group_epoch == epoch + 1
    assert sorted(len(c.owned) for c in sim.clients) == [3, 3]
    # The topic is deleted: partitions are revoked.
    sim.meta = {}
    sim.run()
    assert all(not c.owned for c in sim.clients)
    assert_same(sim.group, replayed(sim.group, sim.log))


def test_subscription_change() -> None:
    sim = Sim(new_group(), topics(t=2, u=2))
    a = Client("a", ["t"])
    sim.join(a)
    a.subscribe = ["u"]
    sim.hb(a, full=True)
    sim.run()
    assert a.owned == sim.all_partitions("u")


def test_range_versus_uniform() -> None:
    meta = topics(x=3, y=3)
    # uniform (the default) balances across both topics.
    sim = Sim(new_group(), meta)
    cs = [Client(n, ["x", "y"]) for n in "ab"]
    for c in cs:
        sim.join(c)
    sim.run()
    assert sorted(len(c.owned) for c in cs) == [3, 3]
    # range splits each topic the same way: co-partitioned.
    sim = Sim(new_group(), meta)
    cs = [Client(n, ["x", "y"], assignor="range") for n in "ab"]
    for c in cs:
        sim.join(c)
    sim.run()
    assert sim.group.describe()["assignor_name"] == "range"
    first = cs[0] if cs[0].member_id < cs[1].member_id else cs[1]
    assert first.owned == {(tid(t), p) for t in "xy" for p in (0, 1)}
    assert_same(sim.group, replayed(sim.group, sim.log))


def test_default_assignor_from_config() -> None:
    g = new_group(assignors=("range", "uniform"))
    assert g.describe()["assignor_name"] == "range"
    cfg = ConsumerGroupConfig.from_properties(
        {
            "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
            "group.consumer.session.timeout.ms": "10000",
            "group.consumer.heartbeat.interval.ms": 1000,
            "group.consumer.max.size": "3",
        }
    )
    assert cfg == ConsumerGroupConfig(10000, 1000, 3, ("range",))
    with pytest.raises(ValueError):
        ConsumerGroupConfig(assignors=("sticky",))


def test_replay_then_on_loaded_restores_timers() -> None:
    sim = Sim(new_group(), topics(t=4))
    a, b = Client("a", ["t"]), Client("b", ["t"])
    sim.join(a)
    sim.join(b)
    sim.hb(a)  # a is told to revoke two partitions
    assert sim.group.members[a.member_id].state == MemberState.UNREVOKED_PARTITIONS
    g2 = replayed(sim.group, sim.log)
    assert_same(sim.group, g2)
    assert g2.session_deadline(a.member_id) is None
    g2.on_loaded(1_000_000)
    assert g2.session_deadline(a.member_id) == 1_000_000 + SESSION
    assert g2.rebalance_deadline(a.member_id) == 1_000_000 + REBALANCE_TIMEOUT
    assert g2.rebalance_deadline(b.member_id) is None
    # The reloaded group carries on where the old one stopped.
    sim.group = g2
    sim.run()
    assert sorted(len(c.owned) for c in sim.clients) == [2, 2]


def test_group_metadata_tombstone_deletes_the_group() -> None:
    sim = Sim(new_group(), topics(t=1))
    a = Client("a", ["t"])
    sim.join(a)
    sim.group.replay("ConsumerGroupMetadata", {"group_id": GROUP}, None)
    assert sim.group.group_epoch == 0 and not sim.group.members


def test_tombstones_delete_the_group() -> None:
    sim = Sim(new_group(), topics(t=2))
    sim.join(Client("a", ["t"]))
    tombstones = sim.group.tombstones()
    assert all(r.value is None for r in tombstones)
    assert [r.name for r in tombstones[-3:]] == [
        "ConsumerGroupTargetAssignmentMetadata",
        "ConsumerGroupPartitionMetadata",
        "ConsumerGroupMetadata",
    ]
    g = replayed(sim.group, sim.log + tombstones)
    assert not g.members and g.group_epoch == 0 and g.records() == new_group().records()
