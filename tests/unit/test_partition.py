"""Partition (Kafka's cluster/Partition): leader and follower transitions from partition states."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from odradek.cluster.partition import Partition, PartitionState
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.protocol.errors import Errors, KafkaError
from odradek.records.builder import build_batch

TOPIC_ID = uuid.UUID(int=42)
ME = 1


def state(leader: int, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...] = (1, 2),
          controller_epoch: int = -1) -> PartitionState:
    return PartitionState("t", 0, TOPIC_ID, leader=leader, leader_epoch=leader_epoch, isr=isr,
                          replicas=(1, 2), partition_epoch=partition_epoch, controller_epoch=controller_epoch)


@pytest.fixture
def log_(tmp_path: Path) -> Log:
    return Log.load(str(tmp_path / "t-0"), LogConfig(), now_ms=0, clean_shutdown=False)


def produce(p: Partition, n: int = 1) -> int:
    return p.append_records_to_leader(bytearray(build_batch([(b"k", b"v", [], 1)] * n)), 1, 0).first_offset


def test_make_leader_takes_the_state_and_serves(log_: Log) -> None:
    p = Partition("t", 0, TOPIC_ID, ME)
    assert p.make_leader(state(ME, 3, 5), log_) is True
    assert (p.is_leader, p.leader_id, p.leader_epoch, p.partition_epoch) == (True, ME, 3, 5)
    assert (p.isr, p.replicas, list(p.remote_replicas)) == ([1, 2], [1, 2], [2])
    assert p.remote_replicas[2].log_end_offset == -1  # must fetch before it counts for the HW
    assert produce(p, 2) == 0
    assert log_.leader_epoch_cache.latest_epoch == 3  # appends are stamped with the leader epoch
    # The same state again is no new leadership; an ISR change (partition epoch) is not either.
    assert p.make_leader(state(ME, 3, 5), log_) is False
    assert p.make_leader(state(ME, 3, 6, isr=(1,)), log_) is False
    assert (p.isr, p.partition_epoch) == ([1], 6)
    assert log_.high_watermark == 2  # ISR down to this replica: the HW follows its LEO
    assert p.make_leader(state(ME, 4, 7), log_) is True  # new leader epoch


def test_leader_without_its_log_yet_serves_nothing(log_: Log) -> None:
    p = Partition("t", 0, TOPIC_ID, ME)
    assert p.make_leader(state(ME, 0, 0), None) is True
    assert not p.is_leader  # leads by state, but the log is not ready
    with pytest.raises(KafkaError) as e:
        produce(p)
    assert e.value.code == Errors.NOT_LEADER_OR_FOLLOWER
    assert p.check_enough_replicas_reach_offset(0) == (True, Errors.NOT_LEADER_OR_FOLLOWER)
    p.attach_log(log_)
    assert p.is_leader and produce(p) == 0


def test_make_follower_refuses_produce_and_fetch_and_keeps_the_log(log_: Log) -> None:
    p = Partition("t", 0, TOPIC_ID, ME)
    p.make_leader(state(ME, 0, 0, isr=(1,)), log_)
    produce(p, 3)
    assert p.make_follower(state(2, 1, 1), log_) is True
    assert (p.is_leader, p.leader_id, p.leader_epoch, p.partition_epoch, p.isr) == (False, 2, 1, 1, [])
    assert p.log is log_ and log_.log_end_offset == 3
    for call in (lambda: produce(p), lambda: p.read_records(0, 1024, 0, True),
                 lambda: p.fetch_offset_for_timestamp(-1, 0, -1), lambda: p.delete_records_on_leader(1)):
        with pytest.raises(KafkaError) as e:
            call()
        assert e.value.code == Errors.NOT_LEADER_OR_FOLLOWER
    assert p.make_follower(state(2, 1, 2), log_) is False  # same leader and epoch
    assert p.make_follower(state(3, 2, 3), log_) is True  # another leader


def test_stale_states_are_refused_and_change_nothing(log_: Log) -> None:
    p = Partition("t", 0, TOPIC_ID, ME)
    p.make_leader(state(ME, 5, 8), log_)
    for stale in (state(ME, 5, 7), state(ME, 4, 9), state(2, 4, 9), state(2, 5, 7)):
        assert p.is_stale(stale)
        changed = p.make_leader(stale, log_) if stale.leader == ME else p.make_follower(stale, log_)
        assert changed is False
        assert (p.is_leader, p.leader_epoch, p.partition_epoch) == (True, 5, 8)
    # ZooKeeper mode: a state from an older controller is refused too.
    p.make_leader(state(ME, 6, 9, controller_epoch=3), log_)
    assert p.make_follower(state(2, 7, 10, controller_epoch=2), log_) is False
    assert (p.is_leader, p.controller_epoch) == (True, 3)


def test_leader_epoch_fencing_of_requests(log_: Log) -> None:
    p = Partition("t", 0, TOPIC_ID, ME)
    p.make_leader(state(ME, 2, 0, isr=(1,)), log_)
    for current, err in ((1, Errors.FENCED_LEADER_EPOCH), (3, Errors.UNKNOWN_LEADER_EPOCH)):
        with pytest.raises(KafkaError) as e:
            p.read_records(0, 1024, 0, True, current_leader_epoch=current)
        assert e.value.code == err
    assert p.read_records(0, 1024, 0, True, current_leader_epoch=2).error == Errors.NONE


def test_transitions_check_the_leader_named_in_the_state(log_: Log) -> None:
    p = Partition("t", 0, TOPIC_ID, ME)
    with pytest.raises(ValueError):
        p.make_leader(state(2, 0, 0), log_)
    with pytest.raises(ValueError):
        p.make_follower(state(ME, 0, 0), log_)


def test_stop_leaves_no_leadership(log_: Log) -> None:
    p = Partition("t", 0, TOPIC_ID, ME)
    p.make_leader(state(ME, 0, 0), log_)
    p.stop()
    assert not p.is_leader and p.log is None
