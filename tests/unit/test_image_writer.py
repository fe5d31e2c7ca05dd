"""ImageWriter: replay(write(image)) == image for images built by replaying every applied record
type (random, seeded, bounded), through the serde's bytes as a snapshot carries them."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE, MetadataImage
from odradek.metadata.image_writer import write_image
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE, MetadataRecord

MIGRATING = uuid.UUID(int=0)


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128))


def _endpoints(rng: random.Random) -> list[dict[str, Any]]:
    names = rng.sample(["PLAINTEXT", "SSL", "INTERNAL", "CONTROLLER"], rng.randint(1, 3))
    return [
        {"name": n, "host": f"h{rng.randint(0, 9)}", "port": rng.randint(1, 65535), "security_protocol": rng.randint(0, 3)}
        for n in names
    ]


def _features(rng: random.Random) -> list[dict[str, Any]]:
    return [
        {"name": n, "min_supported_version": rng.randint(0, 3), "max_supported_version": rng.randint(3, 25)}
        for n in rng.sample(["metadata.version", "kraft.version", "group.version"], rng.randint(0, 3))
    ]


class _Builder:
    """Random valid record sequences over a model of what exists."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.brokers: dict[int, int] = {}  # id -> epoch
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}  # name -> (id, partitions)
        self.epoch = 0

    def _ids(self, n: int) -> list[int]:
        return self.rng.sample(range(0, 8), n)

    def step(self) -> MetadataRecord:
        rng = self.rng
        choice = rng.randrange(16)
        if choice == 0 or not self.brokers:
            bid = rng.randint(0, 7)
            self.epoch += 1
            self.brokers[bid] = self.epoch
            return "RegisterBrokerRecord", {
                "broker_id": bid, "is_migrating_zk_broker": rng.random() < 0.2, "incarnation_id": _uuid(rng),
                "broker_epoch": self.epoch, "end_points": _endpoints(rng), "features": _features(rng),
                "rack": rng.choice([None, "r1", "r2"]), "fenced": rng.random() < 0.5,
                "in_controlled_shutdown": rng.random() < 0.2,
                "log_dirs": [_uuid(rng) for _ in range(rng.randint(0, 2))],
            }
        if choice == 1 and len(self.brokers) > 1:
            bid = rng.choice(sorted(self.brokers))
            epoch = self.brokers.pop(bid)
            return "UnregisterBrokerRecord", {"broker_id": bid, "broker_epoch": epoch}
        if choice == 2:
            bid = rng.choice(sorted(self.brokers))
            kind = rng.choice(["FenceBrokerRecord", "UnfenceBrokerRecord"])
            return kind, {"id": bid, "epoch": self.brokers[bid]}
        if choice == 3:
            bid = rng.choice(sorted(self.brokers))
            return "BrokerRegistrationChangeRecord", {
                "broker_id": bid, "broker_epoch": self.brokers[bid], "fenced": rng.choice([-1, 0, 1]),
                "in_controlled_shutdown": rng.choice([0, 1]),
                "log_dirs": [_uuid(rng)] if rng.random() < 0.3 else [],
            }
        if choice == 4:
            return "RegisterControllerRecord", {
                "controller_id": rng.randint(0, 5), "incarnation_id": _uuid(rng),
                "zk_migration_ready": rng.random() < 0.5, "end_points": _endpoints(rng), "features": _features(rng),
            }
        if choice in (5, 6) or not self.topics:
            name = f"t{rng.randint(0, 30)}"
            if name in self.topics:
                tid, _ = self.topics.pop(name)
                return "RemoveTopicRecord", {"topic_id": tid}
            tid = _uuid(rng)
            self.topics[name] = (tid, 0)
            return "TopicRecord", {"name": name, "topic_id": tid}
        name = rng.choice(sorted(self.topics))
        tid, nparts = self.topics[name]
        if choice in (7, 8) or nparts == 0:
            self.topics[name] = (tid, nparts + 1)
            replicas = self._ids(rng.randint(0, 3))
            dirs = [_uuid(rng) for _ in replicas] if rng.random() < 0.5 else []
            isr = replicas[: rng.randint(0, len(replicas))]
            return "PartitionRecord", {
                "partition_id": nparts, "topic_id": tid, "replicas": replicas, "isr": isr,
                "removing_replicas": replicas[:1] if rng.random() < 0.2 else [],
                "adding_replicas": replicas[-1:] if rng.random() < 0.2 else [],
                "leader": isr[0] if isr else -1, "leader_recovery_state": rng.choice([0, 1]),
                "leader_epoch": rng.randint(0, 9), "partition_epoch": rng.randint(0, 9), "directories": dirs,
                "eligible_leader_replicas": replicas[1:] if rng.random() < 0.3 else None,
                "last_known_elr": replicas[:1] if rng.random() < 0.3 else None,
            }
        if choice in (9, 10):
            fields: dict[str, Any] = {"partition_id": rng.randrange(nparts), "topic_id": tid}
            if rng.random() < 0.5:
                fields["isr"] = self._ids(rng.randint(0, 2))
            if rng.random() < 0.5:
                fields["leader"] = rng.randint(-1, 7)
            if rng.random() < 0.3:
                fields["eligible_leader_replicas"] = self._ids(rng.randint(0, 2))
            if rng.random() < 0.3:
                fields["last_known_elr"] = self._ids(1)
            if rng.random() < 0.2:
                fields["leader_recovery_state"] = rng.choice([0, 1])
            if rng.random() < 0.2:
                reps = self._ids(rng.randint(1, 3))
                fields["replicas"] = reps
                fields["directories"] = [_uuid(rng) for _ in reps] if rng.random() < 0.5 else None
            return "PartitionChangeRecord", fields
        if choice == 11:
            return "ClearElrRecord", {"topic_name": rng.choice(["", name])}
        if choice == 12:
            rtype, rname = rng.choice([(2, name), (4, ""), (4, str(rng.randint(0, 3)))])
            return "ConfigRecord", {
                "resource_type": rtype, "resource_name": rname,
                "name": rng.choice(["retention.ms", "cleanup.policy", "segment.bytes"]),
                "value": rng.choice([None, "1", "compact", "x" * rng.randint(0, 5)]),
            }
        if choice == 13:
            return "FeatureLevelRecord", {
                "name": rng.choice(["metadata.version", "kraft.version", "group.version", "transaction.version"]),
                "feature_level": rng.randint(0, 25),
            }
        if choice == 14:
            return "ProducerIdsRecord", {
                "broker_id": rng.randint(0, 3), "broker_epoch": rng.randint(0, 9),
                "next_producer_id": rng.randint(0, 1 << 20) * 1000,
            }
        if rng.random() < 0.5:
            return "ZkMigrationStateRecord", {"zk_migration_state": rng.randint(0, 3)}
        return "NoOpRecord", {}


def _replay(records: list[MetadataRecord], base: MetadataImage = EMPTY_IMAGE, offset: int = -1) -> MetadataImage:
    delta = MetadataDelta(base)
    for name, fields in records:
        delta.replay(name, fields, offset)
    return delta.apply()


def _through_bytes(records: list[MetadataRecord]) -> list[MetadataRecord]:
    serde = METADATA_RECORD_SERDE
    return [serde.read(serde.write(r)) for r in records]


@pytest.mark.parametrize("seed", range(40))
def test_replay_of_written_image_is_the_image(seed: int) -> None:
    rng = random.Random(seed)
    builder = _Builder(rng)
    image = EMPTY_IMAGE
    offset = 0
    checked = 0
    for _ in range(rng.randint(5, 15)):  # several images, each a delta over the last
        delta = MetadataDelta(image)
        for _ in range(rng.randint(1, 20)):
            delta.replay(*builder.step(), offset)
            offset += 1
        image = delta.apply()
        written = write_image(image)
        rebuilt = _replay(_through_bytes(written), offset=image.offset)
        assert rebuilt == image, f"seed {seed}: replay(write(image)) differs at offset {image.offset}"
        checked += 1
    assert checked >= 5


def test_metadata_version_comes_first_and_producer_ids_as_kafka_writes_them() -> None:
    tid = uuid.UUID(int=7)
    image = _replay(
        [
            ("FeatureLevelRecord", {"name": "group.version", "feature_level": 1}),
            ("TopicRecord", {"name": "a", "topic_id": tid}),
            ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 21}),
            ("ProducerIdsRecord", {"broker_id": 3, "broker_epoch": 5, "next_producer_id": 2000}),
        ],
        offset=3,
    )
    written = write_image(image)
    assert written[0] == ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 21})
    assert ("ProducerIdsRecord", {"broker_id": -1, "broker_epoch": -1, "next_producer_id": 2000}) in written
    assert written.index(("TopicRecord", {"name": "a", "topic_id": tid})) > 1
    assert write_image(EMPTY_IMAGE) == []


def test_partition_fields_survive_including_elr_and_directories() -> None:
    tid, d1, d2 = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)
    image = _replay(
        [
            ("TopicRecord", {"name": "t", "topic_id": tid}),
            ("PartitionRecord", {
                "partition_id": 0, "topic_id": tid, "replicas": [1, 2], "isr": [], "removing_replicas": [2],
                "adding_replicas": [], "leader": -1, "leader_recovery_state": 1, "leader_epoch": 4,
                "partition_epoch": 9, "directories": [d1, d2], "eligible_leader_replicas": [1],
                "last_known_elr": [2],
            }),
        ],
        offset=1,
    )
    p = _replay(_through_bytes(write_image(image)), offset=1).partition("t", 0)
    assert p is not None
    assert (p.elr, p.last_known_elr, p.directories, p.leader_recovery_state) == ((1,), (2,), (d1, d2), 1)
    assert (p.leader_epoch, p.partition_epoch, p.removing_replicas) == (4, 9, (2,))
