"""Replica placement (odradek.controller.replica_placement): Kafka's
AdminUtils.assignReplicasToBrokers, checked against the worked examples of its javadoc."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from typing import Any

import pytest

from odradek.controller.replica_placement import (
    BrokerMetadata,
    PlacementError,
    assign_replicas_to_brokers,
    rack_alternated_broker_list,
)
from odradek.controller.replication_control import ReplicationControlManager
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE
from odradek.protocol.errors import Errors

# AdminUtils' example racks: 0 -> rack1, 1 -> rack3, 2 -> rack3, 3 -> rack2, 4 -> rack2, 5 -> rack1
KAFKA_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def unaware(n: int) -> list[BrokerMetadata]:
    return [BrokerMetadata(i) for i in range(n)]


def racked(racks: dict[int, str]) -> list[BrokerMetadata]:
    return [BrokerMetadata(b, r) for b, r in racks.items()]


def test_kafka_rack_unaware_example_five_brokers_ten_partitions() -> None:
    # The table of AdminUtils' javadoc, read per broker column; start index 0.
    got = assign_replicas_to_brokers(unaware(5), 10, 3, fixed_start_index=0)
    first_rows = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    second_rows = [[4, 0, 1, 2, 3], [8, 9, 5, 6, 7]]
    third_rows = [[3, 4, 0, 1, 2], [7, 8, 9, 5, 6]]
    for position, rows in enumerate([first_rows, second_rows, third_rows]):
        for row in rows:
            for broker, partition in enumerate(row):
                assert got[partition][position] == broker, (partition, position)


def test_kafka_rack_alternated_list_example() -> None:
    assert rack_alternated_broker_list(KAFKA_RACKS) == [0, 3, 1, 5, 4, 2]
    nine = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rack_alternated_broker_list(nine) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_kafka_rack_aware_example() -> None:
    got = assign_replicas_to_brokers(racked(KAFKA_RACKS), 7, 3, fixed_start_index=0)
    assert got == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],  # the followers shift once the first round-robin is done
    }


def test_replication_factor_larger_than_brokers() -> None:
    with pytest.raises(PlacementError) as e:
        assign_replicas_to_brokers(unaware(2), 1, 3)
    assert e.value.error == Errors.INVALID_REPLICATION_FACTOR
    assert e.value.message == "Replication factor: 3 larger than available brokers: 2."


def test_non_positive_partitions_and_replication_factor() -> None:
    with pytest.raises(PlacementError) as e:
        assign_replicas_to_brokers(unaware(2), 0, 1)
    assert (e.value.error, e.value.message) == (Errors.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    with pytest.raises(PlacementError) as e:
        assign_replicas_to_brokers(unaware(2), 1, 0)
    assert (e.value.error, e.value.message) == (
        Errors.INVALID_REPLICATION_FACTOR,
        "Replication factor must be larger than 0.",
    )


def test_racks_for_some_brokers_only() -> None:
    brokers = [BrokerMetadata(0, "a"), BrokerMetadata(1, None), BrokerMetadata(2, "b")]
    with pytest.raises(PlacementError) as e:
        assign_replicas_to_brokers(brokers, 3, 2)
    assert e.value.message == "Not all brokers have rack information for replica rack aware assignment."


def test_single_broker() -> None:
    assert assign_replicas_to_brokers(unaware(1), 3, 1, rng=random.Random(7)) == {0: [0], 1: [0], 2: [0]}
    assert assign_replicas_to_brokers([BrokerMetadata(9)], 2, 1, start_partition_id=4) == {4: [9], 5: [9]}


def test_start_partition_id_continues_numbering() -> None:
    # Adding partitions 10..14 to the example's topic continues the leaders' round-robin. The
    # follower shift restarts from the start index (+1 at partition 10), as in Kafka.
    whole = assign_replicas_to_brokers(unaware(5), 15, 3, fixed_start_index=0)
    tail = assign_replicas_to_brokers(unaware(5), 5, 3, fixed_start_index=0, start_partition_id=10)
    assert sorted(tail) == list(range(10, 15))
    assert [tail[p][0] for p in tail] == [whole[p][0] for p in range(10, 15)] == [0, 1, 2, 3, 4]
    assert tail[10] == [0, 2, 3] == whole[5]


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 42])
@pytest.mark.parametrize(("n_brokers", "rf"), [(3, 3), (5, 2), (6, 3), (7, 1)])
def test_rack_unaware_distribution(seed: int, n_brokers: int, rf: int) -> None:
    parts = n_brokers * 4
    got = assign_replicas_to_brokers(unaware(n_brokers), parts, rf, rng=random.Random(seed))
    assert sorted(got) == list(range(parts))
    for replicas in got.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
    leaders = Counter(r[0] for r in got.values())
    assert set(leaders.values()) == {4}  # every broker leads the same number of partitions
    replicas_per_broker = Counter(b for r in got.values() for b in r)
    assert set(replicas_per_broker.values()) == {4 * rf}


@pytest.mark.parametrize("seed", [0, 5, 11])
def test_rack_aware_diversity(seed: int) -> None:
    racks = {b: f"r{b % 3}" for b in range(9)}
    got = assign_replicas_to_brokers(racked(racks), 18, 3, rng=random.Random(seed))
    for replicas in got.values():
        assert len(set(replicas)) == 3
        assert len({racks[b] for b in replicas}) == 3  # one replica per rack
    assert set(Counter(r[0] for r in got.values()).values()) == {2}
    # More replicas than racks: every rack still gets at least one.
    two_racks = {b: f"r{b % 2}" for b in range(4)}
    for replicas in assign_replicas_to_brokers(racked(two_racks), 8, 3, rng=random.Random(seed)).values():
        assert {two_racks[b] for b in replicas} == {"r0", "r1"} and len(set(replicas)) == 3


def test_seeded_random_is_deterministic_and_varies_start() -> None:
    a = assign_replicas_to_brokers(unaware(6), 12, 3, rng=random.Random(123))
    b = assign_replicas_to_brokers(unaware(6), 12, 3, rng=random.Random(123))
    assert a == b
    firsts = {assign_replicas_to_brokers(unaware(6), 1, 3, rng=random.Random(s))[0][0] for s in range(40)}
    assert len(firsts) > 1  # the start index is drawn, not fixed


# -- ReplicationControlManager places with it -----------------------------------------------------


def _manager(broker_racks: dict[int, str | None], seed: int) -> ReplicationControlManager:
    delta = MetadataDelta(EMPTY_IMAGE)
    for b, rack in broker_racks.items():
        delta.replay("RegisterBrokerRecord", {
            "broker_id": b, "incarnation_id": uuid.UUID(int=b + 1), "broker_epoch": 1, "end_points": [],
            "features": [], "rack": rack, "fenced": False,
        })
    return ReplicationControlManager(
        delta.apply(),
        default_partitions=1,
        default_replication_factor=1,
        validate_config=lambda k, v: None,
        rng=random.Random(seed),
    )


def _create(mgr: ReplicationControlManager, name: str, parts: int, rf: int) -> dict[int, dict[str, Any]]:
    res, records = mgr.create_topic(name, parts, rf, [], [], pending_names=set())
    assert res.error == Errors.NONE, res.message
    delta = MetadataDelta(mgr.image)
    for rec_name, rec in records:
        delta.replay(rec_name, rec)
    mgr.image = delta.apply()
    return {rec["partition_id"]: rec for n, rec in records if n == "PartitionRecord"}


def test_manager_places_new_topics_as_admin_utils() -> None:
    # 5 brokers, 10 partitions: partition 5 (the second round) shifts its followers, as Kafka.
    parts = _create(_manager({b: None for b in range(5)}, seed=3), "t", 10, 3)
    expected = assign_replicas_to_brokers(unaware(5), 10, 3, rng=random.Random(3))
    assert {p: r["replicas"] for p, r in parts.items()} == expected
    for r in parts.values():
        assert r["leader"] == r["replicas"][0] and r["isr"] == r["replicas"]
    assert parts[0]["replicas"][1:] != parts[5]["replicas"][1:]


def test_manager_places_rack_aware_when_every_broker_has_a_rack() -> None:
    racks: dict[int, str | None] = {b: r for b, r in KAFKA_RACKS.items()}
    parts = _create(_manager(racks, seed=1), "t", 6, 3)
    for r in parts.values():
        assert len({racks[b] for b in r["replicas"]}) == 3


def test_manager_new_partitions_continue_from_partition_0_leader() -> None:
    mgr = _manager({b: None for b in range(4)}, seed=9)
    parts = _create(mgr, "t", 2, 2)
    err, msg, records = mgr.create_partitions("t", 6, None)
    assert err == Errors.NONE, msg
    added = {rec["partition_id"]: rec["replicas"] for n, rec in records if n == "PartitionRecord"}
    start = parts[0]["replicas"][0]  # brokers 0..3: the index is the id
    assert added == assign_replicas_to_brokers(unaware(4), 4, 2, fixed_start_index=start, start_partition_id=2)
    assert [added[p][0] for p in range(2, 6)] == [(start + p) % 4 for p in range(2, 6)]


def test_manager_single_broker_unchanged() -> None:
    mgr = _manager({7: None}, seed=0)
    parts = _create(mgr, "t", 3, 1)
    assert [(r["replicas"], r["isr"], r["leader"]) for r in parts.values()] == [([7], [7], 7)] * 3
