"""The controller's sans-I/O managers over an image, with a fake clock: ClusterControlManager
(registration rules and errors, heartbeats, unfencing on catch-up, fencing after
broker.session.timeout.ms, controlled shutdown moving leaders), BrokerHeartbeatManager,
FeatureControlManager and ProducerIdControlManager. Every record a manager returns is encoded
as the log would write it and replayed into the next image."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from fake_clock import FakeClock

from odradek.controller.broker_heartbeat_manager import BrokerControlState, BrokerHeartbeatManager
from odradek.controller.cluster_control_manager import BrokerHeartbeatReply, ClusterControlManager
from odradek.controller.feature_control_manager import FeatureControlManager, registration_features
from odradek.controller.producer_id_control_manager import (
    PRODUCER_ID_BLOCK_SIZE,
    ProducerIdControlManager,
)
from odradek.controller.replication_control import MetadataRecord
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE, MetadataImage
from odradek.metadata.records import decode_metadata_record, encode_metadata_record
from odradek.protocol.errors import Errors, KafkaError

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
SESSION_MS = 9000
TOPIC_ID = uuid.UUID(int=0xABCDEF)
MV_FEATURE = {"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 21}


class Controller:
    """The managers over one image, with a log of what they produced (offsets from 0)."""

    def __init__(self, kraft_version: int = 0) -> None:
        self.clock = FakeClock(1_000_000)
        self.image: MetadataImage = EMPTY_IMAGE
        self.features = FeatureControlManager(self.image, kraft_version=lambda: kraft_version)
        self.cluster = ClusterControlManager(CLUSTER_ID, self.image, self.features, session_timeout_ms=SESSION_MS)
        self.producer_ids = ProducerIdControlManager(self.image, self.cluster)
        self.next_offset = 0
        self.cluster.activate(self.clock())
        self.commit(self.features.bootstrap_records())

    def commit(self, records: list[MetadataRecord]) -> int:
        """Encode, decode and replay ``records``; the offset of the last one."""
        delta = MetadataDelta(self.image)
        for name, rec in records:
            decoded_name, _version, decoded = decode_metadata_record(encode_metadata_record(name, rec))
            assert decoded_name == name
            delta.replay(name, decoded, self.next_offset)
            self.cluster.replay(name, decoded, self.next_offset)
            self.next_offset += 1
        self.image = delta.apply()
        self.features.image = self.cluster.image = self.producer_ids.image = self.image
        return self.next_offset - 1

    def register(self, broker_id: int, incarnation: uuid.UUID | None = None, **overrides: Any) -> int:
        epoch, records = self.cluster.register_broker(
            registration(broker_id, incarnation, **overrides), self.next_offset, self.clock()
        )
        self.commit(records)
        return epoch

    def heartbeat(
        self, broker_id: int, *, offset: int | None = None, want_fence: bool = False, want_shut_down: bool = False,
        epoch: int | None = None,
    ) -> tuple[BrokerHeartbeatReply, list[MetadataRecord]]:
        b = self.image.brokers.get(broker_id)
        request = {
            "broker_id": broker_id,
            "broker_epoch": epoch if epoch is not None else (b.epoch if b else -1),
            "current_metadata_offset": self.next_offset - 1 if offset is None else offset,
            "want_fence": want_fence,
            "want_shut_down": want_shut_down,
        }
        reply, records = self.cluster.process_broker_heartbeat(request, self.clock())
        last = self.commit(records) if records else self.next_offset - 1
        self.cluster.process_batch_end_offset(broker_id, reply, last)
        return reply, records

    def add_partition(self, pid: int, replicas: list[int], leader: int) -> None:
        records: list[MetadataRecord] = []
        if "t" not in self.image.topics_by_name:
            records.append(("TopicRecord", {"name": "t", "topic_id": TOPIC_ID}))
        records.append((
            "PartitionRecord",
            {
                "partition_id": pid, "topic_id": TOPIC_ID, "replicas": replicas, "isr": replicas,
                "leader": leader, "leader_epoch": 0, "partition_epoch": 0,
            },
        ))
        self.commit(records)


def registration(broker_id: int, incarnation: uuid.UUID | None = None, **overrides: Any) -> dict[str, Any]:
    request = {
        "broker_id": broker_id,
        "cluster_id": CLUSTER_ID,
        "incarnation_id": incarnation or uuid.UUID(int=broker_id),
        "listeners": [{"name": "PLAINTEXT", "host": "localhost", "port": 9090 + broker_id, "security_protocol": 0}],
        "features": [MV_FEATURE],
        "rack": None,
        "is_migrating_zk_broker": False,
        "log_dirs": [],
        "previous_broker_epoch": -1,
    }
    request.update(overrides)
    return request


def error_of(fn: Any, *args: Any) -> KafkaError:
    with pytest.raises(KafkaError) as e:
        fn(*args)
    return e.value


def unfenced(c: Controller, *broker_ids: int) -> None:
    for b in broker_ids:
        c.register(b)
        reply, _ = c.heartbeat(b)
        assert not reply.is_fenced


# -- registration --------------------------------------------------------------------------------


def test_new_registration_is_fenced_with_the_offset_as_epoch_and_bootstrap_came_first() -> None:
    c = Controller()
    assert c.image.features.levels["metadata.version"] == 21
    assert c.features.bootstrap_records() == []  # only on a new log
    offset = c.next_offset
    epoch = c.register(1)
    b = c.image.brokers[1]
    assert (epoch, b.epoch, b.fenced, b.endpoints["PLAINTEXT"].port) == (offset, offset, True, 9091)
    assert b.supported_features == {"metadata.version": (7, 21)}


def test_reregistration_with_the_same_incarnation_keeps_epoch_and_state() -> None:
    c = Controller()
    unfenced(c, 1)
    epoch = c.image.brokers[1].epoch
    again, records = c.cluster.register_broker(registration(1, rack="r2"), c.next_offset, c.clock())
    assert again == epoch
    assert records[0][1]["fenced"] is False and records[0][1]["broker_epoch"] == epoch
    c.commit(records)
    assert (c.image.brokers[1].epoch, c.image.brokers[1].fenced, c.image.brokers[1].rack) == (epoch, False, "r2")


def test_another_incarnation_while_the_session_is_alive_is_a_duplicate_registration() -> None:
    c = Controller()
    unfenced(c, 1)
    before = c.next_offset
    other = registration(1, uuid.uuid4())
    e = error_of(c.cluster.register_broker, other, c.next_offset, c.clock())
    assert e.code == Errors.DUPLICATE_BROKER_REGISTRATION
    assert c.next_offset == before
    # Once the old incarnation's session has run out, the new one takes over with a new epoch.
    c.clock.advance(SESSION_MS + 1)
    epoch, records = c.cluster.register_broker(other, c.next_offset, c.clock())
    assert epoch == c.next_offset and records[0][1]["fenced"] is True
    c.commit(records)
    assert c.image.brokers[1].incarnation_id == other["incarnation_id"]


def test_a_broker_known_to_be_gone_registers_again_at_once() -> None:
    """A controller that activates knowing a broker's incarnation died (the broker sharing its
    process, after a kill -9 of both) does not hold it to a fresh session."""
    c = Controller()
    unfenced(c, 1)
    unfenced(c, 2)
    c.cluster.activate(c.clock(), expired=frozenset({1}))
    epoch, records = c.cluster.register_broker(registration(1, uuid.uuid4()), c.next_offset, c.clock())
    assert epoch == c.next_offset and records[0][1]["fenced"] is True
    # Another broker's session is fresh after the activation: still a duplicate.
    e = error_of(c.cluster.register_broker, registration(2, uuid.uuid4()), c.next_offset, c.clock())
    assert e.code == Errors.DUPLICATE_BROKER_REGISTRATION


def test_a_fenced_registration_may_be_replaced_by_another_incarnation() -> None:
    c = Controller()
    first = c.register(1)
    second = c.register(1, uuid.uuid4())
    assert second > first and c.image.brokers[1].epoch == second


def test_registration_refusals() -> None:
    c = Controller()
    now, at = c.clock(), c.next_offset
    wrong = error_of(c.cluster.register_broker, registration(1, cluster_id="other"), at, now)
    assert wrong.code == Errors.INCONSISTENT_CLUSTER_ID
    assert wrong.message == f"Expected cluster ID {CLUSTER_ID}, but got cluster ID other"
    too_old = {"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 20}
    e = error_of(c.cluster.register_broker, registration(1, features=[too_old]), at, now)
    assert e.code == Errors.UNSUPPORTED_VERSION and "finalized version 21 of metadata.version" in (e.message or "")
    # No metadata.version range at all: the broker is taken to support only level 1.
    assert error_of(c.cluster.register_broker, registration(1, features=[]), at, now).code == Errors.UNSUPPORTED_VERSION
    zk = error_of(c.cluster.register_broker, registration(1, is_migrating_zk_broker=True), at, now)
    assert zk.code == Errors.BROKER_ID_NOT_REGISTERED
    dup_dirs = [uuid.UUID(int=1000), uuid.UUID(int=1000)]
    assert error_of(c.cluster.register_broker, registration(1, log_dirs=dup_dirs), at, now).code == Errors.INVALID_REGISTRATION
    reserved = [uuid.UUID(int=2)]
    assert error_of(c.cluster.register_broker, registration(1, log_dirs=reserved), at, now).code == Errors.INVALID_REGISTRATION
    assert c.next_offset == at and 1 not in c.image.brokers


def test_a_finalized_kraft_version_the_broker_does_not_support_is_refused() -> None:
    c = Controller(kraft_version=1)
    e = error_of(c.cluster.register_broker, registration(1), c.next_offset, c.clock())
    assert e.code == Errors.UNSUPPORTED_VERSION and "kraft.version" in (e.message or "")
    kraft = {"name": "kraft.version", "min_supported_version": 0, "max_supported_version": 1}
    assert c.register(1, features=[MV_FEATURE, kraft]) >= 0


def test_a_directory_of_another_broker_is_refused() -> None:
    c = Controller()
    d = uuid.UUID(int=5000)
    c.register(1, log_dirs=[d])
    assert c.image.brokers[1].log_dirs == (d,)
    e = error_of(c.cluster.register_broker, registration(2, log_dirs=[d]), c.next_offset, c.clock())
    assert e.code == Errors.INVALID_REGISTRATION and "Broker 1" in (e.message or "")


def test_standby_refuses_with_not_controller() -> None:
    c = Controller()
    c.cluster.deactivate()
    assert error_of(c.cluster.register_broker, registration(1), 0, 0).code == Errors.NOT_CONTROLLER


# -- heartbeats, unfencing -----------------------------------------------------------------------


def test_unfenced_once_caught_up_with_its_registration_record() -> None:
    c = Controller()
    c.add_partition(0, [1], -1)  # left leaderless (as Kafka's last broker shutting down does)
    epoch = c.register(1)
    reg_offset = c.next_offset - 1
    behind, records = c.heartbeat(1, offset=reg_offset - 1)
    assert (behind.is_caught_up, behind.is_fenced, records) == (False, True, [])
    held, records = c.heartbeat(1, offset=reg_offset, want_fence=True)
    assert (held.is_caught_up, held.is_fenced, records) == (True, True, [])
    ok, records = c.heartbeat(1, offset=reg_offset)
    assert (ok.is_caught_up, ok.is_fenced, ok.should_shut_down) == (True, False, False)
    assert records[0] == ("BrokerRegistrationChangeRecord", {"broker_id": 1, "broker_epoch": epoch, "fenced": -1})
    assert not c.image.brokers[1].fenced
    p = c.image.partition("t", 0)
    assert p is not None and (p.leader, p.isr) == (1, (1,))  # it took over its leaderless partition


def test_heartbeat_errors() -> None:
    c = Controller()
    epoch = c.register(1)
    with pytest.raises(KafkaError) as e:
        c.heartbeat(1, epoch=epoch - 1)
    assert e.value.code == Errors.STALE_BROKER_EPOCH
    with pytest.raises(KafkaError) as e:
        c.heartbeat(9, epoch=5)
    assert e.value.code == Errors.STALE_BROKER_EPOCH
    assert "before registration" in (e.value.message or "")


# -- fencing of silent brokers -------------------------------------------------------------------


def test_silent_broker_is_fenced_after_the_session_timeout_and_loses_its_leaderships() -> None:
    c = Controller()
    unfenced(c, 1, 2)
    c.add_partition(0, [1, 2], 1)
    c.add_partition(1, [2, 1], 2)
    start = c.clock()
    c.clock.advance(5000)
    c.heartbeat(2)  # broker 2 keeps heartbeating; broker 1 is silent from `start`
    assert c.cluster.next_fencing_check_ms() == start + SESSION_MS + 1
    c.clock.now_ms = start + SESSION_MS
    assert c.cluster.maybe_fence_one_stale_broker(c.clock()) == []  # exactly at the timeout: alive
    c.clock.advance(1)
    records = c.cluster.maybe_fence_one_stale_broker(c.clock())
    assert records[-1] == (
        "BrokerRegistrationChangeRecord", {"broker_id": 1, "broker_epoch": c.image.brokers[1].epoch, "fenced": 1},
    )
    c.commit(records)
    assert c.image.brokers[1].fenced and not c.image.brokers[2].fenced
    p0, p1 = c.image.partition("t", 0), c.image.partition("t", 1)
    assert p0 is not None and (p0.leader, p0.isr) == (2, (2,))
    assert p1 is not None and (p1.leader, p1.isr) == (2, (2,))
    assert c.cluster.maybe_fence_one_stale_broker(c.clock()) == []  # one at a time, and only once
    # Broker 2 next runs out at its last heartbeat plus the session timeout.
    assert c.cluster.next_fencing_check_ms() == start + 5000 + SESSION_MS + 1


def test_fencing_the_only_isr_member_leaves_the_partition_without_leader() -> None:
    c = Controller()
    unfenced(c, 1)
    c.add_partition(0, [1], 1)
    c.clock.advance(SESSION_MS + 1)
    c.commit(c.cluster.maybe_fence_one_stale_broker(c.clock()))
    p = c.image.partition("t", 0)
    assert p is not None and (p.leader, p.isr) == (-1, (1,))  # the ISR is never emptied


def test_a_failover_gives_every_broker_a_fresh_session() -> None:
    c = Controller()
    unfenced(c, 1)
    c.clock.advance(SESSION_MS * 2)
    c.cluster.deactivate()
    c.cluster.activate(c.clock())
    assert c.cluster.maybe_fence_one_stale_broker(c.clock()) == []
    assert c.cluster.next_fencing_check_ms() == c.clock() + SESSION_MS + 1


# -- controlled shutdown -------------------------------------------------------------------------


def test_controlled_shutdown_moves_leaders_then_answers_should_shut_down() -> None:
    c = Controller()
    unfenced(c, 1, 2)
    c.add_partition(0, [1, 2], 1)
    c.add_partition(1, [2, 1], 2)
    reply, records = c.heartbeat(1, want_shut_down=True)
    assert (reply.is_fenced, reply.in_controlled_shutdown, reply.should_shut_down) == (False, True, False)
    assert records[0][0] == "BrokerRegistrationChangeRecord" and records[0][1]["in_controlled_shutdown"] == 1
    assert c.image.brokers[1].in_controlled_shutdown
    p0, p1 = c.image.partition("t", 0), c.image.partition("t", 1)
    assert p0 is not None and (p0.leader, p0.isr) == (2, (2,))  # leadership moved to the next ISR member
    assert p1 is not None and (p1.leader, p1.isr) == (2, (2,))  # and it left the ISR it followed in
    shutdown_offset = c.next_offset - 1
    # Broker 2, the only active one, has not yet seen the change: not yet.
    c.heartbeat(2, offset=shutdown_offset - 1)
    reply, records = c.heartbeat(1, want_shut_down=True)
    assert (reply.in_controlled_shutdown, reply.should_shut_down, records) == (True, False, [])
    c.heartbeat(2, offset=shutdown_offset)
    reply, records = c.heartbeat(1, want_shut_down=True)
    assert reply.should_shut_down and reply.is_fenced
    assert records[-1][1]["fenced"] == 1
    assert c.image.brokers[1].fenced


def test_want_shut_down_of_a_broker_leading_nothing_is_granted_at_once() -> None:
    c = Controller()
    unfenced(c, 1)
    reply, records = c.heartbeat(1, want_shut_down=True)
    assert (reply.should_shut_down, reply.is_fenced) == (True, True)
    assert records == [("BrokerRegistrationChangeRecord", {"broker_id": 1, "broker_epoch": c.image.brokers[1].epoch, "fenced": 1})]


def test_controlled_shutdown_of_the_only_replica_leaves_it_leaderless() -> None:
    c = Controller()
    unfenced(c, 1)
    c.add_partition(0, [1], 1)
    reply, _ = c.heartbeat(1, want_shut_down=True)
    assert reply.in_controlled_shutdown
    p = c.image.partition("t", 0)
    assert p is not None and (p.leader, p.isr) == (-1, (1,))
    reply, _ = c.heartbeat(1, want_shut_down=True)
    assert reply.should_shut_down


def test_heartbeat_manager_states() -> None:
    hb = BrokerHeartbeatManager(100)
    hb.register(1, fenced=False, now_ms=0)
    assert hb.has_valid_session(1, 100) and not hb.has_valid_session(1, 101)
    assert hb.current_broker_state(1) is BrokerControlState.UNFENCED
    hb.maybe_update_controlled_shutdown_offset(1, 42)
    hb.maybe_update_controlled_shutdown_offset(1, 50)  # kept from the first time
    assert hb.controlled_shutdown_offset(1) == 42
    assert hb.current_broker_state(1) is BrokerControlState.CONTROLLED_SHUTDOWN
    hb.touch(1, fenced=True, metadata_offset=7, now_ms=5)
    assert hb.current_broker_state(1) is BrokerControlState.FENCED and hb.controlled_shutdown_offset(1) is None
    with pytest.raises(ValueError):
        hb.maybe_update_controlled_shutdown_offset(1, 60)
    assert hb.next_check_time_ms() is None and hb.find_one_stale_broker(10**9) is None


# -- producer ids --------------------------------------------------------------------------------


def test_producer_id_blocks_need_the_current_broker_epoch() -> None:
    c = Controller()
    epoch = c.register(1)
    block, records = c.producer_ids.generate_next_producer_id(1, epoch)
    assert (block.first_producer_id, block.size) == (0, PRODUCER_ID_BLOCK_SIZE)
    assert records == [("ProducerIdsRecord", {"broker_id": 1, "broker_epoch": epoch, "next_producer_id": 1000})]
    c.commit(records)
    block, _ = c.producer_ids.generate_next_producer_id(1, epoch)
    assert block.first_producer_id == 1000
    assert error_of(c.producer_ids.generate_next_producer_id, 1, epoch + 1).code == Errors.STALE_BROKER_EPOCH
    assert error_of(c.producer_ids.generate_next_producer_id, 7, epoch).code == Errors.STALE_BROKER_EPOCH


# -- features ------------------------------------------------------------------------------------


def test_finalized_features_include_metadata_and_kraft_version() -> None:
    f = FeatureControlManager(EMPTY_IMAGE, bootstrap_metadata_version=19, kraft_version=lambda: 1)
    assert f.metadata_version() == 19  # the bootstrap level until the log has one
    assert f.finalized_features() == {"metadata.version": 19, "kraft.version": 1}
    assert f.bootstrap_records() == [("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 19})]


def test_bootstrap_features_this_node_does_not_run_are_left_at_zero(caplog: pytest.LogCaptureFixture) -> None:
    """A directory Apache Kafka 4.x formatted at its latest release: its bootstrap metadata asks
    for eligible.leader.replicas.version and group.version too. Finalizing them would refuse
    every broker's registration; they stay at 0, said at WARNING."""
    asked = {"eligible.leader.replicas.version": 1, "group.version": 1, "transaction.version": 2}
    with caplog.at_level(logging.WARNING, logger="odradek.controller.feature_control_manager"):
        f = FeatureControlManager(EMPTY_IMAGE, bootstrap_features=asked)
    assert [r[1]["name"] for r in f.bootstrap_records()] == ["metadata.version", "transaction.version"]
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "eligible.leader.replicas.version=1" in warned and "group.version=1" in warned


def test_a_broker_on_a_log_kafka_finalized_further_registers_as_able_to_run_it() -> None:
    """Odradek takes over logs Apache Kafka 4.x finalized at a newer metadata.version and with
    features of its own: its broker registers with those levels, and the controller accepts it."""
    c = Controller()
    c.commit([
        ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 30}),
        ("FeatureLevelRecord", {"name": "eligible.leader.replicas.version", "feature_level": 1}),
    ])
    plain = [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 21}]
    assert error_of(c.cluster.register_broker, registration(1, features=plain), c.next_offset, c.clock()).code == (
        Errors.UNSUPPORTED_VERSION
    )
    features = registration_features(c.image.features.levels)
    assert features == {
        "metadata.version": (7, 30), "eligible.leader.replicas.version": (0, 1), "kraft.version": (0, 1),
        "transaction.version": (0, 2),  # Odradek's own range (KIP-890)
    }
    ranges = [{"name": n, "min_supported_version": lo, "max_supported_version": hi} for n, (lo, hi) in features.items()]
    assert c.register(1, features=ranges) >= 0
