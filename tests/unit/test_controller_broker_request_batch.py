"""ControllerBrokerRequestBatch: per-broker collection of one round, the bodies Kafka 3.9's
controller sends at IBP 3.9 (LeaderAndIsr v7, UpdateMetadata v8, StopReplica v4), encodable by the
generated protocol, each carrying the controller epoch and the receiver's broker epoch."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from zk_controller_fakes import TOPIC_IDS, broker_epoch, make_cluster, online_cluster

from odradek.controller.controller_context import (
    ZERO_UUID,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
)
from odradek.controller.controller_zk_client import ControllerMovedException
from odradek.protocol.messages.generated import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA

T0 = ("t", 0)
T1 = ("t", 1)
APIS = {4: LEADER_AND_ISR, 5: STOP_REPLICA, 6: UPDATE_METADATA}


def roundtrip(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    api = APIS[api_key]
    data = b"".join(bytes(b) for b in api.encode_request(version, body))
    decoded, end = api.decode_request(version, data)
    assert end == len(data)
    return decoded


def info(leader: int, isr: list[int], epoch: int = 3, zk_version: int = 7) -> LeaderIsrAndControllerEpoch:
    return LeaderIsrAndControllerEpoch(LeaderAndIsr(leader, tuple(isr), epoch, 0, zk_version), 5)


def test_versions_are_kafka_3_9s_for_ibp_3_9_and_bodies_encode() -> None:
    c = make_cluster()
    c.ctx.put_partition_leadership_info(T0, info(1, [1, 2, 3]))
    c.batch.new_batch()
    c.batch.add_leader_and_isr_request_for_brokers([1, 2, 3], T0, info(1, [1, 2, 3]),
                                                   ReplicaAssignment.of([1, 2, 3]), is_new=False)
    c.batch.add_stop_replica_request_for_brokers([3], T1, delete_partition=False)
    c.batch.send_requests_to_brokers(5)
    sent = c.sender.take()
    assert {(s.api_key, s.version) for s in sent} == {(4, 7), (6, 8), (5, 4)}
    for s in sent:
        decoded = roundtrip(s.api_key, s.version, s.body)
        assert decoded["controller_id"] == 1 and decoded["controller_epoch"] == 5
        assert decoded["broker_epoch"] == broker_epoch(s.broker_id)
        assert decoded["is_k_raft_controller"] is False
    (lai,) = [s for s in sent if s.api_key == 4 and s.broker_id == 2]
    d = roundtrip(4, 7, lai.body)
    assert d["type"] == 0
    assert d["topic_states"][0]["topic_id"] == TOPIC_IDS["t"]
    ps = d["topic_states"][0]["partition_states"][0]
    assert (ps["leader"], ps["leader_epoch"], ps["isr"], ps["partition_epoch"], ps["replicas"]) == (1, 3, [1, 2, 3], 7, [1, 2, 3])
    assert d["live_leaders"] == [{"broker_id": 1, "host_name": "127.0.0.1", "port": 9091}]
    (um,) = [s for s in sent if s.api_key == 6 and s.broker_id == 3]
    d = roundtrip(6, 8, um.body)
    assert [b["id"] for b in d["live_brokers"]] == [1, 2, 3]
    assert d["live_brokers"][1]["endpoints"] == [
        {"port": 9092, "host": "127.0.0.2", "listener": "PLAINTEXT", "security_protocol": 0}
    ]
    ps = d["topic_states"][0]["partition_states"][0]
    assert (ps["leader"], ps["zk_version"], ps["offline_replicas"]) == (1, 7, [])
    (sr,) = [s for s in sent if s.api_key == 5]
    d = roundtrip(5, 4, sr.body)
    assert d["topic_states"] == [
        {"topic_name": "t", "partition_states": [{"partition_index": 1, "leader_epoch": -1, "delete_partition": False}]}
    ]
    assert c.batch.is_empty()


def test_one_request_per_broker_per_round_and_flags_are_sticky() -> None:
    c = make_cluster()
    c.ctx.put_partition_leadership_info(T0, info(1, [1, 2, 3]))
    c.ctx.put_partition_leadership_info(T1, info(2, [2, 3]))
    c.batch.new_batch()
    ra = ReplicaAssignment.of([1, 2, 3])
    c.batch.add_leader_and_isr_request_for_brokers([2], T0, info(1, [1, 2, 3]), ra, is_new=True)
    c.batch.add_leader_and_isr_request_for_brokers([2], T0, info(1, [1, 2], epoch=4), ra, is_new=False)
    c.batch.add_leader_and_isr_request_for_brokers([2, -1], T1, info(2, [2, 3]), ra, is_new=False)
    c.batch.add_stop_replica_request_for_brokers([3], T0, delete_partition=True)
    c.batch.add_stop_replica_request_for_brokers([3], T0, delete_partition=False)
    with pytest.raises(RuntimeError, match="not empty"):
        c.batch.new_batch()
    c.batch.send_requests_to_brokers(5)
    sent = c.sender.take()
    lai = [s for s in sent if s.api_key == 4]
    assert [s.broker_id for s in lai] == [2]  # -1 (no leader) is never a recipient
    states = {p["partition_index"]: p for p in lai[0].body["topic_states"][0]["partition_states"]}
    assert states[0]["leader_epoch"] == 4 and states[0]["isr"] == [1, 2]  # the latest state wins
    assert states[0]["is_new"] is True  # once new, new for the round
    (sr,) = [s for s in sent if s.api_key == 5]
    assert sr.body["topic_states"][0]["partition_states"][0]["delete_partition"] is True
    um = [s for s in sent if s.api_key == 6]
    assert sorted(s.broker_id for s in um) == [1, 2, 3]
    assert len(um[0].body["topic_states"][0]["partition_states"]) == 2
    c.batch.new_batch()  # empty again


def test_requests_for_brokers_that_left_are_dropped() -> None:
    c = make_cluster()
    c.ctx.put_partition_leadership_info(T0, info(1, [1, 2, 3]))
    c.batch.new_batch()
    c.batch.add_leader_and_isr_request_for_brokers([1, 2, 3], T0, info(1, [1, 2, 3]),
                                                   ReplicaAssignment.of([1, 2, 3]), is_new=False)
    c.batch.add_stop_replica_request_for_brokers([3], T0, delete_partition=False)
    c.broker_down(3)
    c.batch.send_requests_to_brokers(5)
    assert all(s.broker_id != 3 for s in c.sender.take())
    assert c.batch.is_empty()


def test_topic_queued_for_deletion_is_announced_with_leader_minus_two() -> None:
    c = online_cluster()
    c.ctx.queue_topic_deletion({"t"})
    c.batch.new_batch()
    c.batch.add_update_metadata_request_for_brokers([1, 2, 3], [T0])
    c.batch.add_stop_replica_request_for_brokers([2], T0, delete_partition=True)
    c.batch.send_requests_to_brokers(5)
    sent = c.sender.take()
    um = next(s for s in sent if s.api_key == 6)
    ps = um.body["topic_states"][0]["partition_states"][0]
    # Kafka's LeaderAndIsr.duringDelete: leader -2, epochs back to their initial 0
    assert (ps["leader"], ps["leader_epoch"], ps["zk_version"], ps["isr"]) == (-2, 0, 0, [1, 2, 3])
    sr = next(s for s in sent if s.api_key == 5)
    assert sr.body["topic_states"][0]["partition_states"][0]["leader_epoch"] == -2


def test_unknown_topic_id_is_zero_uuid_and_partitions_without_leader_skip_update_metadata() -> None:
    c = make_cluster(topics={"x": {0: [1]}})
    c.batch.new_batch()
    c.batch.add_update_metadata_request_for_brokers([1], [("x", 0)])  # no leader yet: skipped
    c.batch.send_requests_to_brokers(5)
    (um,) = c.sender.take()
    assert um.body["topic_states"] == []
    c.ctx.put_partition_leadership_info(("x", 0), info(1, [1]))
    c.batch.new_batch()
    c.batch.add_leader_and_isr_request_for_brokers([1], ("x", 0), info(1, [1]), ReplicaAssignment.of([1]), True)
    c.batch.send_requests_to_brokers(5)
    lai = next(s for s in c.sender.take() if s.api_key == 4)
    assert lai.body["topic_states"][0]["topic_id"] == ZERO_UUID


def test_responses_reach_the_handler_stop_replica_only_for_deletions() -> None:
    c = online_cluster()
    c.batch.new_batch()
    c.batch.add_leader_and_isr_request_for_brokers([2], T0, info(1, [1, 2, 3]), ReplicaAssignment.of([1, 2, 3]), False)
    c.batch.add_stop_replica_request_for_brokers([2], T0, delete_partition=True)
    c.batch.add_stop_replica_request_for_brokers([3], T0, delete_partition=False)
    c.batch.send_requests_to_brokers(5)
    sent = c.sender.take()
    answer = {"error_code": 0, "partition_errors": [{"topic_name": "t", "partition_index": 0, "error_code": 0}]}
    for s in sent:
        s.callback(answer)
    assert [b for b, _ in c.responses.leader_and_isr] == [2]
    assert sorted(b for b, _ in c.responses.update_metadata) == [1, 2, 3]
    assert c.responses.stop_replica == []  # topic not being deleted
    c.ctx.queue_topic_deletion({"t"})
    c.ctx.begin_topic_deletion({"t"})
    for s in sent:
        if s.api_key == 5:
            s.callback(answer)
    # only the request that asked to delete the partition is reported
    assert [(b, d) for b, _, d in c.responses.stop_replica] == [(2, {T0})]


def test_run_round_sends_or_clears_the_batch(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whatever logging set-up earlier tests of the run left behind: this logger reports ERRORs.
    state_change = logging.getLogger("odradek.state.change.logger")
    monkeypatch.setattr(state_change, "disabled", False)
    caplog.set_level(logging.ERROR, logger=state_change.name)
    c = make_cluster()
    c.ctx.put_partition_leadership_info(T0, info(1, [1, 2, 3]))

    def add(fail: Exception | None) -> str:
        c.batch.add_stop_replica_request_for_brokers([3], T0, delete_partition=False)
        if fail is not None:
            raise fail
        return "done"

    assert c.batch.run_round(5, "some replicas to OfflineReplica", lambda: add(None), lambda e: "failed") == "done"
    assert [s.broker_id for s in c.sender.take()] == [3] and c.batch.is_empty()
    # Any other error: the round's requests are dropped, the error logged and on_error's answer returned.
    assert c.batch.run_round(5, "some replicas to OfflineReplica", lambda: add(ValueError("boom")),
                             lambda e: f"failed: {e}") == "failed: boom"
    assert c.sender.take() == [] and c.batch.is_empty()
    assert "Error while moving some replicas to OfflineReplica state: ValueError('boom')" in caplog.text
    # The controller moved: dropped too, and raised on.
    with pytest.raises(ControllerMovedException):
        c.batch.run_round(5, "some replicas to OfflineReplica", lambda: add(ControllerMovedException("moved")),
                          lambda e: "failed")
    assert c.sender.take() == [] and c.batch.is_empty()
