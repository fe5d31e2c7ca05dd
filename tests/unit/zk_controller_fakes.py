"""Fakes for the ZooKeeper-mode controller core's tests: an in-memory ZooKeeper for the partition
state znodes (zkVersion-conditional writes, controller epoch fencing, injectable BADVERSION
races), a sender that records the requests, and a small cluster to start from."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.controller.controller_broker_request_batch import ControllerBrokerRequestBatch
from odradek.controller.controller_context import (
    Broker,
    ControllerContext,
    EndPoint,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
    TopicPartition,
)
from odradek.controller.controller_zk_client import (
    ControllerMovedException,
    UpdateLeaderAndIsrResult,
    ZkCode,
)
from odradek.controller.partition_state_machine import PartitionStateMachine
from odradek.controller.replica_state_machine import ReplicaStateMachine

TOPIC_IDS = {"t": uuid.UUID(int=0x1111), "u": uuid.UUID(int=0x2222)}


class FakeZk:
    """The partition state znodes: (content, zkVersion) per partition."""

    def __init__(self, controller_epoch_zk_version: int = 0) -> None:
        self.states: dict[TopicPartition, tuple[LeaderIsrAndControllerEpoch, int]] = {}
        self.controller_epoch_zk_version = controller_epoch_zk_version
        self.unclean_config: dict[str, bool] = {}
        self.writes: list[tuple[TopicPartition, LeaderAndIsr]] = []  # every successful write, in order
        self.bad_version_attempts = 0
        # Called before each conditional update: a broker (the partition leader) may change the znode.
        self.before_update: Callable[[FakeZk], None] | None = None

    def leader_and_isr(self, tp: TopicPartition) -> LeaderAndIsr:
        info, version = self.states[tp]
        return info.leader_and_isr.with_partition_epoch(version)

    def external_write(self, tp: TopicPartition, lai: LeaderAndIsr, controller_epoch: int) -> None:
        """Someone else (a leader shrinking its ISR, another controller) writes the znode."""
        _, version = self.states[tp]
        self.states[tp] = (LeaderIsrAndControllerEpoch(lai, controller_epoch), version + 1)

    def _fence(self, expected: int) -> None:
        if expected != self.controller_epoch_zk_version:
            raise ControllerMovedException(f"controller epoch zkVersion {self.controller_epoch_zk_version} != {expected}")

    def create_topic_partition_states(
        self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch], expected_controller_epoch_zk_version: int
    ) -> dict[TopicPartition, ZkCode]:
        self._fence(expected_controller_epoch_zk_version)
        out = {}
        for tp, info in states.items():
            if tp in self.states:
                out[tp] = ZkCode.NODE_EXISTS
            else:
                self.states[tp] = (info, 0)
                self.writes.append((tp, info.leader_and_isr))
                out[tp] = ZkCode.OK
        return out

    def get_topic_partition_states(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch | None | Exception]:
        out: dict[TopicPartition, LeaderIsrAndControllerEpoch | None | Exception] = {}
        for tp in partitions:
            if tp not in self.states:
                out[tp] = None
            else:
                info, version = self.states[tp]
                out[tp] = LeaderIsrAndControllerEpoch(info.leader_and_isr.with_partition_epoch(version), info.controller_epoch)
        return out

    def update_leader_and_isr(
        self, leader_and_isrs: Mapping[TopicPartition, LeaderAndIsr], controller_epoch: int,
        expected_controller_epoch_zk_version: int,
    ) -> UpdateLeaderAndIsrResult:
        self._fence(expected_controller_epoch_zk_version)
        if self.before_update is not None:
            hook, self.before_update = self.before_update, None
            hook(self)
        result = UpdateLeaderAndIsrResult()
        for tp, lai in leader_and_isrs.items():
            _, version = self.states[tp]
            if lai.partition_epoch != version:
                self.bad_version_attempts += 1
                result.to_retry.append(tp)
                continue
            written = lai.with_partition_epoch(version + 1)
            self.states[tp] = (LeaderIsrAndControllerEpoch(written, controller_epoch), version + 1)
            self.writes.append((tp, written))
            result.finished[tp] = written
        return result

    def unclean_leader_election_enable(self, topics: Collection[str]) -> dict[str, bool | Exception]:
        return {t: self.unclean_config.get(t, False) for t in topics}


@dataclass
class Sent:
    broker_id: int
    api_key: int
    version: int
    body: dict[str, Any]
    callback: Callable[[dict[str, Any]], None]


@dataclass
class RecordingSender:
    sent: list[Sent] = field(default_factory=list)

    def send_request(
        self, broker_id: int, api_key: int, api_version: int, body: dict[str, Any],
        callback: Callable[[dict[str, Any]], None],
    ) -> None:
        self.sent.append(Sent(broker_id, api_key, api_version, body, callback))

    def take(self) -> list[Sent]:
        out, self.sent = self.sent, []
        return out


@dataclass
class RecordingResponses:
    leader_and_isr: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    update_metadata: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    stop_replica: list[tuple[int, dict[str, Any], set[TopicPartition]]] = field(default_factory=list)

    def leader_and_isr_response(self, broker_id: int, response: dict[str, Any]) -> None:
        self.leader_and_isr.append((broker_id, response))

    def update_metadata_response(self, broker_id: int, response: dict[str, Any]) -> None:
        self.update_metadata.append((broker_id, response))

    def stop_replica_response(self, broker_id: int, response: dict[str, Any], deleted: set[TopicPartition]) -> None:
        self.stop_replica.append((broker_id, response, deleted))


def broker(i: int) -> Broker:
    return Broker(i, (EndPoint(f"127.0.0.{i}", 9090 + i, "PLAINTEXT", 0),), rack=None)


def broker_epoch(i: int) -> int:
    return 1000 + i


@dataclass
class Cluster:
    ctx: ControllerContext
    zk: FakeZk
    sender: RecordingSender
    responses: RecordingResponses
    batch: ControllerBrokerRequestBatch
    psm: PartitionStateMachine
    rsm: ReplicaStateMachine

    def broker_down(self, b: int) -> None:
        self.ctx.remove_live_brokers([b])

    def broker_up(self, b: int) -> None:
        self.ctx.add_live_brokers({broker(b): broker_epoch(b)})


def make_cluster(
    brokers: Collection[int] = (1, 2, 3),
    topics: Mapping[str, Mapping[int, list[int]]] | None = None,
    controller_epoch: int = 5,
    controller_id: int = 1,
) -> Cluster:
    """A context with live brokers and topics assigned, no leaders yet (partitions not created)."""
    if topics is None:
        topics = {"t": {0: [1, 2, 3], 1: [2, 3, 1]}}
    ctx = ControllerContext(epoch=controller_epoch, epoch_zk_version=controller_epoch - 1)
    ctx.set_live_brokers({broker(b): broker_epoch(b) for b in brokers})
    ctx.set_all_topics(topics)
    for t, parts in topics.items():
        if t in TOPIC_IDS:
            ctx.add_topic_id(t, TOPIC_IDS[t])
        for p, replicas in parts.items():
            ctx.update_partition_full_replica_assignment((t, p), ReplicaAssignment.of(replicas))
    zk = FakeZk(controller_epoch_zk_version=controller_epoch - 1)
    sender = RecordingSender()
    responses = RecordingResponses()
    batch = ControllerBrokerRequestBatch(controller_id, ctx, sender, responses)
    psm = PartitionStateMachine(controller_id, ctx, zk, batch)
    rsm = ReplicaStateMachine(controller_id, ctx, zk, batch)
    return Cluster(ctx, zk, sender, responses, batch, psm, rsm)


def online_cluster(**kw: Any) -> Cluster:
    """``make_cluster`` then Kafka's onNewPartitionCreation: every partition Online, its replicas
    Online, the requests of that taken from the sender."""
    c = make_cluster(**kw)
    from odradek.controller.controller_context import PartitionState, ReplicaState
    from odradek.controller.partition_state_machine import OfflinePartitionLeaderElectionStrategy

    parts = sorted(c.ctx.all_partitions())
    c.psm.handle_state_changes(parts, PartitionState.NewPartition)
    replicas = sorted(c.ctx.replicas_for_partition(parts), key=lambda r: (r.topic_partition, r.replica))
    c.rsm.handle_state_changes(replicas, ReplicaState.NewReplica)
    c.psm.handle_state_changes(parts, PartitionState.OnlinePartition, OfflinePartitionLeaderElectionStrategy(False))
    c.rsm.handle_state_changes(replicas, ReplicaState.OnlineReplica)
    c.sender.take()
    c.zk.writes.clear()
    return c


def lai_sent(sent: list[Sent], broker_id: int) -> dict[TopicPartition, dict[str, Any]]:
    """The LeaderAndIsr partition states sent to a broker, by partition."""
    out = {}
    for s in sent:
        if s.api_key == 4 and s.broker_id == broker_id:
            for ts in s.body["topic_states"]:
                for ps in ts["partition_states"]:
                    out[(ts["topic_name"], ps["partition_index"])] = ps
    return out


def stop_replica_sent(sent: list[Sent], broker_id: int) -> dict[TopicPartition, dict[str, Any]]:
    out = {}
    for s in sent:
        if s.api_key == 5 and s.broker_id == broker_id:
            for ts in s.body["topic_states"]:
                for ps in ts["partition_states"]:
                    out[(ts["topic_name"], ps["partition_index"])] = ps
    return out


def update_metadata_sent(sent: list[Sent]) -> dict[int, list[dict[str, Any]]]:
    """UpdateMetadata bodies by receiving broker."""
    out: dict[int, list[dict[str, Any]]] = {}
    for s in sent:
        if s.api_key == 6:
            out.setdefault(s.broker_id, []).append(s.body)
    return out
