"""AlterPartition: the controller's validations (Kafka's ReplicationControlManager.alterPartition)
and the broker's AlterPartitionManager (batching, retries, per-partition answers)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from odradek.controller.alter_partition import alter_partition
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE, MetadataImage
from odradek.protocol.errors import Errors
from odradek.server.alter_partition_manager import AlterPartitionItem, AlterPartitionManager
from odradek.server.controller_channel import (
    ControllerChannel,
    ControllerRequest,
    ControllerRequestTimeout,
)

TOPIC_ID = uuid.UUID(int=5)


def image(fenced: tuple[int, ...] = (), shutting_down: tuple[int, ...] = ()) -> MetadataImage:
    """Brokers 1-4 (epoch 10 + id), topic t with partition 0: replicas 1-3, ISR 1-2, leader 1,
    leader epoch 3, partition epoch 5."""
    d = MetadataDelta(EMPTY_IMAGE)
    for b in (1, 2, 3, 4):
        d.replay("RegisterBrokerRecord", {
            "broker_id": b, "broker_epoch": 10 + b, "incarnation_id": uuid.UUID(int=b),
            "end_points": [{"name": "PLAINTEXT", "host": "h", "port": 9000 + b, "security_protocol": 0}],
            "fenced": b in fenced, "in_controlled_shutdown": b in shutting_down,
        })
    d.replay("TopicRecord", {"name": "t", "topic_id": TOPIC_ID})
    d.replay("PartitionRecord", {
        "partition_id": 0, "topic_id": TOPIC_ID, "replicas": [1, 2, 3], "isr": [1, 2], "leader": 1,
        "leader_epoch": 3, "partition_epoch": 5,
    })
    return d.apply()


def request(new_isr: list[int], *, broker: int = 1, leader_epoch: int = 3, partition_epoch: int = 5,
            epochs: dict[int, int] | None = None, topic_id: uuid.UUID = TOPIC_ID, partition: int = 0) -> dict[str, Any]:
    epochs = epochs or {}
    return {"broker_id": broker, "broker_epoch": 11, "topics": [{
        "topic_name": "t", "topic_id": topic_id, "partitions": [{
            "partition_index": partition, "leader_epoch": leader_epoch, "new_isr": new_isr,
            "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": epochs.get(b, -1)} for b in new_isr],
            "leader_recovery_state": 0, "partition_epoch": partition_epoch,
        }]}]}


def answer(img: MetadataImage, req: dict[str, Any], version: int = 3) -> tuple[dict[str, Any], list[Any]]:
    resp, records = alter_partition(img, req, version)
    return resp["topics"][0]["partitions"][0], records


def test_an_isr_expansion_is_committed_as_a_partition_change_record() -> None:
    part, records = answer(image(), request([1, 2, 3], epochs={3: 13}))
    assert part["error_code"] == Errors.NONE
    assert (part["leader_id"], part["leader_epoch"], part["isr"], part["partition_epoch"]) == (1, 3, [1, 2, 3], 6)
    assert records == [("PartitionChangeRecord", {"partition_id": 0, "topic_id": TOPIC_ID, "isr": [1, 2, 3]})]
    d = MetadataDelta(image())
    d.replay(*records[0])
    p = d.apply().partition("t", 0)
    assert p is not None and (p.isr, p.leader_epoch, p.partition_epoch) == ((1, 2, 3), 3, 6)


def test_the_same_isr_writes_nothing() -> None:
    part, records = answer(image(), request([1, 2]))
    assert (part["error_code"], part["partition_epoch"], records) == (Errors.NONE, 5, [])


def test_refusals() -> None:
    cases: list[tuple[dict[str, Any], Errors, MetadataImage]] = [
        (request([1, 2], leader_epoch=2), Errors.FENCED_LEADER_EPOCH, image()),
        (request([1, 2], leader_epoch=4), Errors.FENCED_LEADER_EPOCH, image()),
        (request([1, 2, 3], partition_epoch=4), Errors.INVALID_UPDATE_VERSION, image()),
        (request([2], broker=2), Errors.INVALID_REQUEST, image()),  # not the leader
        (request([2]), Errors.INVALID_REQUEST, image()),  # the leader left out
        (request([1, 4]), Errors.INVALID_REQUEST, image()),  # 4 is not a replica
        (request([1, 1]), Errors.INVALID_REQUEST, image()),
        (request([]), Errors.INVALID_REQUEST, image()),
        (request([1, 2, 3]), Errors.INELIGIBLE_REPLICA, image(fenced=(3,))),
        (request([1, 2, 3]), Errors.INELIGIBLE_REPLICA, image(shutting_down=(3,))),
        (request([1, 2, 3], epochs={3: 99}), Errors.INELIGIBLE_REPLICA, image()),
        (request([1, 2]), Errors.INELIGIBLE_REPLICA, image(shutting_down=(1,))),  # the leader too
        (request([1, 2], partition=7), Errors.UNKNOWN_TOPIC_OR_PARTITION, image()),
        (request([1, 2], topic_id=uuid.UUID(int=99)), Errors.UNKNOWN_TOPIC_ID, image()),
    ]
    for req, error, img in cases:
        part, records = answer(img, req)
        assert (Errors(part["error_code"]), records) == (error, []), req
    # Before v2: no INELIGIBLE_REPLICA (OPERATION_NOT_ATTEMPTED), topics by name.
    part, _ = answer(image(fenced=(3,)), request([1, 2, 3]), version=1)
    assert part["error_code"] == Errors.OPERATION_NOT_ATTEMPTED
    req = request([1, 2, 3])
    req["topics"][0]["topic_name"] = "nope"
    part, _ = answer(image(), req, version=1)
    assert part["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION


class FakeChannel(ControllerChannel):
    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.sent: list[ControllerRequest] = []

    async def send(self, request: ControllerRequest) -> dict[str, Any]:
        self.sent.append(request)
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        result: dict[str, Any] = a(request.data) if callable(a) else a
        return result

    def active_controller_id(self) -> int | None:
        return 1

    async def close(self) -> None:
        pass


def test_manager_batches_retries_and_answers_each_partition() -> None:
    got: dict[tuple[str, int], tuple[Errors, int, int, tuple[int, ...]]] = {}

    def item(p: int, isr: tuple[int, ...]) -> AlterPartitionItem:
        def done(e: Errors, le: int, pe: int, i: tuple[int, ...]) -> None:
            got[("t", p)] = (e, le, pe, i)

        return AlterPartitionItem(("t", p), TOPIC_ID, 3, 5, isr, tuple(10 + b for b in isr), done)

    def ok(data: dict[str, Any]) -> dict[str, Any]:
        parts = data["topics"][0]["partitions"]
        return {"error_code": 0, "topics": [{"topic_name": "t", "topic_id": TOPIC_ID, "partitions": [
            {"partition_index": parts[0]["partition_index"], "error_code": 0, "leader_id": 1, "leader_epoch": 3,
             "isr": parts[0]["new_isr"], "partition_epoch": 6},
            {"partition_index": parts[1]["partition_index"], "error_code": Errors.INVALID_UPDATE_VERSION,
             "leader_id": -1, "leader_epoch": -1, "isr": [], "partition_epoch": -1},
        ]}]}

    channel = FakeChannel([ControllerRequestTimeout("no controller"), {"error_code": Errors.STALE_BROKER_EPOCH}, ok])

    async def run() -> None:
        m = AlterPartitionManager(channel, broker_id=1, broker_epoch=lambda: 11, retry_backoff_ms=1)
        assert m.submit(item(0, (1, 2, 3)))
        assert m.submit(item(1, (1,)))
        assert not m.submit(item(1, (1, 2)))  # one per partition
        for _ in range(100):
            if len(got) == 2:
                break
            await asyncio.sleep(0.01)
        await m.close()

    asyncio.run(run())
    assert len(channel.sent) == 3  # sent again after the timeout and STALE_BROKER_EPOCH
    data = channel.sent[-1].data
    assert data["broker_epoch"] == 11
    assert [p["new_isr_with_epochs"] for p in data["topics"][0]["partitions"]] == [
        [{"broker_id": 1, "broker_epoch": 11}, {"broker_id": 2, "broker_epoch": 12}, {"broker_id": 3, "broker_epoch": 13}],
        [{"broker_id": 1, "broker_epoch": 11}],
    ]
    assert got == {("t", 0): (Errors.NONE, 3, 6, (1, 2, 3)), ("t", 1): (Errors.INVALID_UPDATE_VERSION, -1, -1, ())}


def test_quorum_controller_checks_the_broker_epoch_and_commits_the_change() -> None:
    import pytest
    from test_quorum_controller import FakeRaft, _controller, _settle

    from odradek.protocol.errors import KafkaError
    from odradek.raft.raft_client import LeaderAndEpoch

    raft = FakeRaft()
    c = _controller(raft)
    records = [
        ("RegisterBrokerRecord", {
            "broker_id": b, "broker_epoch": 10 + b, "incarnation_id": uuid.UUID(int=b), "fenced": False,
            "end_points": [{"name": "PLAINTEXT", "host": "h", "port": 9000 + b, "security_protocol": 0}],
        }) for b in (1, 2, 3)
    ] + [
        ("TopicRecord", {"name": "t", "topic_id": TOPIC_ID}),
        ("PartitionRecord", {"partition_id": 0, "topic_id": TOPIC_ID, "replicas": [1, 2, 3], "isr": [1, 2],
                             "leader": 1, "leader_epoch": 3, "partition_epoch": 5}),
    ]
    c.replay([(i, n, r) for i, (n, r) in enumerate(records)])
    c._activated_before = True
    raft.leader = LeaderAndEpoch(1, 2)
    c.handle_leader_change(raft.leader)

    async def run() -> None:
        stale = dict(request([1, 2, 3]), broker_epoch=99)
        fut = asyncio.ensure_future(c.alter_partition(stale, 3))
        await _settle()
        for b in list(raft.proposed):  # the activation records, if any
            c.handle_commit([b])
        with pytest.raises(KafkaError) as e:
            await fut
        assert e.value.code == Errors.STALE_BROKER_EPOCH
        n = len(raft.proposed)
        fut = asyncio.ensure_future(c.alter_partition(request([1, 2, 3]), 3))
        await _settle()
        assert len(raft.proposed) == n + 1 and not fut.done()  # answered only once committed
        c.handle_commit([raft.proposed[-1]])
        resp = await fut
        part = resp["topics"][0]["partitions"][0]
        assert (part["error_code"], part["isr"], part["partition_epoch"]) == (Errors.NONE, [1, 2, 3], 6)
        p = c.image.partition("t", 0)
        assert p is not None and p.isr == (1, 2, 3)

    asyncio.run(run())
