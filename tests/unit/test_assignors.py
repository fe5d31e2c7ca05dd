"""Server-side assignors (KIP-848): ``uniform`` and ``range``, property-tested."""

from __future__ import annotations

import uuid
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator.group.assignors import (
    ASSIGNORS,
    Assignment,
    MemberSubscription,
    RangeAssignor,
    TopicMetadata,
    UniformAssignor,
)

TOPIC_NAMES = ["a", "b", "c", "d"]


def topic(name: str, n: int) -> TopicMetadata:
    return TopicMetadata(uuid.UUID(int=TOPIC_NAMES.index(name) + 1), name, n)


@st.composite
def topics_st(draw: st.DrawFn) -> dict[str, TopicMetadata]:
    names = draw(st.lists(st.sampled_from(TOPIC_NAMES), min_size=1, max_size=4, unique=True))
    return {n: topic(n, draw(st.integers(1, 12))) for n in names}


@st.composite
def group_st(
    draw: st.DrawFn, homogeneous: bool = False
) -> tuple[dict[str, MemberSubscription], dict[str, TopicMetadata]]:
    topics = draw(topics_st())
    # Subscriptions may name topics that do not exist (yet).
    sub = st.frozensets(st.sampled_from(TOPIC_NAMES), max_size=4)
    n = draw(st.integers(1, 8))
    ids = draw(
        st.lists(st.text("mnopqrs", min_size=1, max_size=3), min_size=n, max_size=n, unique=True)
    )
    common = draw(sub)
    members = {}
    for mid in ids:
        subs = common if homogeneous else draw(sub)
        # A previous assignment, possibly stale: unknown topics, out-of-range partitions, overlaps.
        prev: dict[uuid.UUID, set[int]] = {}
        for name in draw(st.lists(st.sampled_from(TOPIC_NAMES), max_size=3)):
            ps = draw(st.sets(st.integers(0, 14), max_size=5))
            prev.setdefault(uuid.UUID(int=TOPIC_NAMES.index(name) + 1), set()).update(ps)
        members[mid] = MemberSubscription(subs, prev)
    return members, topics


def owners(
    result: dict[str, Assignment], topics: dict[str, TopicMetadata]
) -> Counter[tuple[str, int]]:
    by_id = {t.topic_id: n for n, t in topics.items()}
    c: Counter[tuple[str, int]] = Counter()
    for parts in result.values():
        for tid, ps in parts.items():
            for p in ps:
                c[(by_id[tid], p)] += 1
    return c


def check_complete(
    members: dict[str, MemberSubscription],
    topics: dict[str, TopicMetadata],
    result: dict[str, Assignment],
) -> None:
    assert set(result) == set(members)
    by_id = {t.topic_id: n for n, t in topics.items()}
    subscribed = {t for m in members.values() for t in m.subscribed_topics if t in topics}
    expected = {(t, p) for t in subscribed for p in range(topics[t].num_partitions)}
    c = owners(result, topics)
    assert set(c) == expected
    assert all(v == 1 for v in c.values()), "a partition is assigned twice"
    for mid, parts in result.items():
        for tid, ps in parts.items():
            assert by_id[tid] in members[mid].subscribed_topics, "assigned an unsubscribed topic"
            assert ps == sorted(ps)


def count(a: Assignment) -> int:
    return sum(len(ps) for ps in a.values())


@settings(max_examples=150, deadline=None)
@given(group_st())
def test_every_partition_assigned_exactly_once(
    g: tuple[dict[str, MemberSubscription], dict[str, TopicMetadata]],
) -> None:
    members, topics = g
    for assignor in ASSIGNORS.values():
        check_complete(members, topics, assignor.assign(members, topics))


@settings(max_examples=150, deadline=None)
@given(group_st())
def test_uniform_balanced_among_identical_subscriptions(
    g: tuple[dict[str, MemberSubscription], dict[str, TopicMetadata]],
) -> None:
    members, topics = g
    result = UniformAssignor().assign(members, topics)
    by_subs: dict[frozenset[str], list[int]] = {}
    for mid, m in members.items():
        key = frozenset(t for t in m.subscribed_topics if t in topics)
        by_subs.setdefault(key, []).append(count(result[mid]))
    for counts in by_subs.values():
        assert max(counts) - min(counts) <= 1, by_subs


@settings(max_examples=100, deadline=None)
@given(group_st(homogeneous=True), st.text("tuvw", min_size=4, max_size=4))
def test_uniform_adding_a_member_moves_only_what_it_needs(
    g: tuple[dict[str, MemberSubscription], dict[str, TopicMetadata]], newcomer: str
) -> None:
    members, topics = g
    assignor = UniformAssignor()
    # A settled group: members hold what the assignor gave them.
    first = assignor.assign(members, topics)
    settled = {
        mid: MemberSubscription(m.subscribed_topics, {t: set(ps) for t, ps in first[mid].items()})
        for mid, m in members.items()
    }
    subs = next(iter(members.values())).subscribed_topics
    grown = dict(settled)
    grown[newcomer] = MemberSubscription(subs, {})
    second = assignor.assign(grown, topics)
    check_complete(grown, topics, second)

    def owner_map(res: dict[str, Assignment]) -> dict[tuple[uuid.UUID, int], str]:
        return {
            (tid, p): mid for mid, parts in res.items() for tid, ps in parts.items() for p in ps
        }

    before, after = owner_map(first), owner_map(second)
    moved = {tp for tp in before if after[tp] != before[tp]}
    assert all(after[tp] == newcomer for tp in moved)
    assert len(moved) == count(second[newcomer])
    # And it is a fixed point: recomputing a settled assignment changes nothing.
    assert assignor.assign(settled, topics) == first


@settings(max_examples=100, deadline=None)
@given(group_st(homogeneous=True))
def test_uniform_removing_a_member_moves_only_its_partitions(
    g: tuple[dict[str, MemberSubscription], dict[str, TopicMetadata]],
) -> None:
    members, topics = g
    assignor = UniformAssignor()
    first = assignor.assign(members, topics)
    gone = sorted(members)[0]
    rest = {
        mid: MemberSubscription(m.subscribed_topics, {t: set(ps) for t, ps in first[mid].items()})
        for mid, m in members.items()
        if mid != gone
    }
    second = assignor.assign(rest, topics)
    check_complete(rest, topics, second)
    for mid in rest:
        for tid, ps in first[mid].items():
            assert set(ps) <= set(second[mid].get(tid, [])), "a remaining member lost a partition"


@settings(max_examples=100, deadline=None)
@given(group_st())
def test_assignors_are_deterministic(
    g: tuple[dict[str, MemberSubscription], dict[str, TopicMetadata]],
) -> None:
    members, topics = g
    reordered = dict(reversed(list(members.items())))
    for assignor in ASSIGNORS.values():
        assert assignor.assign(members, topics) == assignor.assign(reordered, topics)


@settings(max_examples=100, deadline=None)
@given(group_st())
def test_range_is_co_partitioned(
    g: tuple[dict[str, MemberSubscription], dict[str, TopicMetadata]],
) -> None:
    members, topics = g
    result = RangeAssignor().assign(members, topics)
    owner: dict[tuple[str, int], str] = {}
    by_id = {t.topic_id: n for n, t in topics.items()}
    for mid, parts in result.items():
        for tid, ps in parts.items():
            for p in ps:
                owner[(by_id[tid], p)] = mid
    for t1 in topics:
        for t2 in topics:
            s1 = {m for m, s in members.items() if t1 in s.subscribed_topics}
            s2 = {m for m, s in members.items() if t2 in s.subscribed_topics}
            if s1 and s1 == s2 and topics[t1].num_partitions == topics[t2].num_partitions:
                for p in range(topics[t1].num_partitions):
                    assert owner[(t1, p)] == owner[(t2, p)]


def test_range_gives_contiguous_ranges_in_member_id_order() -> None:
    topics = {"a": topic("a", 7), "b": topic("b", 7)}
    members = {m: MemberSubscription(frozenset({"a", "b"})) for m in ["m3", "m1", "m2"]}
    result = RangeAssignor().assign(members, topics)
    a, b = topics["a"].topic_id, topics["b"].topic_id
    assert result["m1"] == {a: [0, 1, 2], b: [0, 1, 2]}
    assert result["m2"] == {a: [3, 4], b: [3, 4]}
    assert result["m3"] == {a: [5, 6], b: [5, 6]}


def test_uniform_keeps_current_partitions() -> None:
    topics = {"a": topic("a", 6)}
    a = topics["a"].topic_id
    members = {
        "m1": MemberSubscription(frozenset({"a"}), {a: {5, 4, 3}}),
        "m2": MemberSubscription(frozenset({"a"}), {a: {0, 1, 2}}),
    }
    assert UniformAssignor().assign(members, topics) == {"m1": {a: [3, 4, 5]}, "m2": {a: [0, 1, 2]}}
    # Range ignores the current assignment.
    assert RangeAssignor().assign(members, topics) == {"m1": {a: [0, 1, 2]}, "m2": {a: [3, 4, 5]}}


def test_heterogeneous_subscriptions() -> None:
    topics = {"a": topic("a", 4), "b": topic("b", 2)}
    members = {
        "m1": MemberSubscription(frozenset({"a"})),
        "m2": MemberSubscription(frozenset({"a", "b"})),
        "m3": MemberSubscription(frozenset({"b", "c"})),
    }
    result = UniformAssignor().assign(members, topics)
    check_complete(members, topics, result)
    assert sorted(count(result[m]) for m in members) == [2, 2, 2]
