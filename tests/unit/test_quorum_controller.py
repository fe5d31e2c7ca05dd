"""QuorumController as a Raft listener: it proposes at the epoch Raft gave it, its image moves
only when Raft delivers the commit, and it refuses writes with NOT_CONTROLLER when it does not
lead. Raft here is an in-memory fake the test commits by hand."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from odradek.controller.feature_control_manager import METADATA_VERSION
from odradek.controller.quorum_controller import QuorumController
from odradek.metadata.metadata_record_serde import MetadataRecord
from odradek.protocol.errors import Errors, KafkaError
from odradek.raft.raft_client import (
    Batch,
    LeaderAndEpoch,
    Listener,
    NotLeaderError,
    RaftClient,
    SnapshotReader,
)

CLUSTER_ID = "q1Sh-9_ISia_zwGINzRvyQ"


class FakeRaft(RaftClient[MetadataRecord]):
    def __init__(self) -> None:
        self.leader = LeaderAndEpoch(None, 0)
        self.proposed: list[Batch[MetadataRecord]] = []
        self.scheduled = 0
        self._end = 0

    def register(self, listener: Listener[MetadataRecord]) -> None:
        pass

    def unregister(self, listener: Listener[MetadataRecord]) -> None:
        pass

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self.leader

    @property
    def high_watermark(self) -> int:
        return self._end

    @property
    def log_end_offset(self) -> int:
        return self._end

    def prepare_append(self, epoch: int, records: Sequence[MetadataRecord]) -> int:
        if self.leader != LeaderAndEpoch(1, epoch):
            raise NotLeaderError(f"not leader of {epoch}")
        self.proposed.append(Batch(self._end, epoch, 0, list(records)))
        self._end += len(records)
        return self._end - 1

    def schedule_prepared_append(self) -> None:
        self.scheduled += 1

    def begin_shutdown(self) -> None:
        pass


def _controller(raft: FakeRaft) -> QuorumController:
    return QuorumController(
        1, raft, default_partitions=1, default_replication_factor=1, delete_topic_enable=True,
        validate_config=lambda _k, _v: None, cluster_id=CLUSTER_ID,
    )


def _registration(broker_id: int) -> dict[str, Any]:
    """A BrokerRegistration request as the controller channel hands it over."""
    return {
        "broker_id": broker_id,
        "cluster_id": CLUSTER_ID,
        "incarnation_id": uuid.uuid4(),
        "listeners": [{"name": "PLAINTEXT", "host": "h", "port": 9092, "security_protocol": 0}],
        "features": [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": METADATA_VERSION}],
        "rack": None,
    }


def _heartbeat(broker_id: int, epoch: int, offset: int, **flags: bool) -> dict[str, Any]:
    return {
        "broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": offset,
        "want_fence": flags.get("want_fence", False), "want_shut_down": flags.get("want_shut_down", False),
    }


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def _with_unfenced_broker(c: QuorumController, raft: FakeRaft) -> None:
    """Activation, broker 1 registered and unfenced, all committed."""
    reg = asyncio.ensure_future(c.register_broker(_registration(1)))
    committed = 0
    for _ in range(3):  # activation, then the registration (at once, or once it committed)
        await _settle()
        c.handle_commit(raft.proposed[committed:])
        committed = len(raft.proposed)
    epoch = await asyncio.wait_for(reg, 5)
    beat = asyncio.ensure_future(c.broker_heartbeat(_heartbeat(1, epoch, offset=raft.log_end_offset - 1)))
    await _settle()
    c.handle_commit(raft.proposed[-1:])
    assert not (await asyncio.wait_for(beat, 5)).is_fenced
    raft.proposed.clear()


def test_controller_refuses_writes_when_not_leader() -> None:
    raft = FakeRaft()
    c = _controller(raft)

    async def run() -> None:
        with pytest.raises(KafkaError) as e:
            await c.allocate_producer_ids(1, 0)
        assert e.value.code == Errors.NOT_CONTROLLER and "No controller appears to be active" in str(e.value)
        raft.leader = LeaderAndEpoch(2, 4)
        c.handle_leader_change(raft.leader)
        with pytest.raises(KafkaError) as e:
            await c.create_topics([{"name": "t"}], validate_only=False)
        assert e.value.code == Errors.NOT_CONTROLLER and "node 2" in str(e.value)
        assert raft.proposed == []

    asyncio.run(run())


def test_controller_proposes_at_raft_epoch_and_applies_only_committed_records() -> None:
    raft = FakeRaft()
    c = _controller(raft)
    raft.leader = LeaderAndEpoch(1, 7)
    c.handle_leader_change(raft.leader)

    async def run() -> None:
        reg = asyncio.ensure_future(c.register_broker(_registration(1)))
        await _settle()
        # First the activation records of a new leader on an empty log (the bootstrap
        # metadata.version), then at once (pipelined, on the write image that has them) the
        # registration; neither is in the committed image before it is committed.
        activation, batch = raft.proposed
        assert activation.epoch == 7 and [n for n, _ in activation.records] == ["FeatureLevelRecord"]
        assert batch.epoch == 7 and [n for n, _ in batch.records] == ["RegisterBrokerRecord"]
        assert not reg.done() and raft.scheduled == 2 and c.image.features.levels == {}
        assert c.image.brokers == {} and 1 in c.write_image.brokers
        c.handle_commit([activation])
        await _settle()
        assert c.image.features.levels == {"metadata.version": METADATA_VERSION}
        assert not reg.done() and c.image.brokers == {}  # answered only once committed
        c.handle_commit([batch])
        assert await reg == 1  # the broker epoch: the offset of its registration record
        assert c.image.brokers[1].fenced
        # Its first heartbeat from a caught-up broker unfences it, through Raft too.
        beat = asyncio.ensure_future(c.broker_heartbeat(_heartbeat(1, 1, offset=1)))
        await _settle()
        batch = raft.proposed[-1]
        assert batch.epoch == 7 and [n for n, _ in batch.records] == ["BrokerRegistrationChangeRecord"]
        assert not beat.done() and c.image.brokers[1].fenced
        c.handle_commit([batch])
        reply = await beat
        assert (reply.is_caught_up, reply.is_fenced) == (True, False)
        assert not c.image.brokers[1].fenced and c.image.offset == 2

        create = asyncio.ensure_future(c.create_topics([{"name": "t"}], validate_only=False))
        await _settle()
        assert "t" not in c.image.topics_by_name
        # Leadership moves before the commit: the write fails, nothing is applied.
        raft.leader = LeaderAndEpoch(1, 8)
        c.handle_leader_change(raft.leader)
        with pytest.raises(KafkaError) as e:
            await create
        assert e.value.code == Errors.NOT_CONTROLLER
        assert "t" not in c.image.topics_by_name
        # In the new epoch it writes again, at that epoch.
        again = asyncio.ensure_future(c.create_topics([{"name": "t"}], validate_only=False))
        await _settle()
        assert raft.proposed[-1].epoch == 8
        c.handle_commit([raft.proposed[-1]])
        (result,) = await again
        assert result.error == Errors.NONE and "t" in c.image.topics_by_name

    asyncio.run(run())


def test_controller_replays_snapshot_and_commits_it_did_not_write() -> None:
    c = _controller(FakeRaft())
    tid = uuid.UUID(int=5)
    c.handle_load_snapshot(SnapshotReader(10, 3, [("TopicRecord", {"name": "a", "topic_id": tid})]))
    assert c.image.topics_by_name["a"].topic_id == tid and c.image.offset == 9
    c.handle_commit([Batch(10, 3, 0, [("BeginTransactionRecord", {"name": None}),
                                      ("RemoveTopicRecord", {"topic_id": tid})])])
    assert "a" in c.image.topics_by_name and c.transactions.open_transaction == 10
    c.handle_commit([Batch(12, 3, 0, [("EndTransactionRecord", {})])])
    assert "a" not in c.image.topics_by_name and c.image.offset == 12


def test_new_leader_writes_activation_records_at_once() -> None:
    """On becoming leader (on the event loop) the controller aborts a metadata transaction left
    open and bootstraps metadata.version, without waiting for a write."""
    raft = FakeRaft()
    c = _controller(raft)
    c.handle_commit([Batch(0, 1, 0, [("BeginTransactionRecord", {"name": None})])])
    assert c.transactions.open_transaction == 0
    raft._end = 1

    async def run() -> None:
        raft.leader = LeaderAndEpoch(1, 2)
        c.handle_leader_change(raft.leader)
        await _settle()
        (activation,) = raft.proposed
        assert [n for n, _ in activation.records] == ["AbortTransactionRecord", "FeatureLevelRecord"]
        c.handle_commit([activation])
        await _settle()
        assert c.transactions.open_transaction is None
        assert c.image.features.levels["metadata.version"] == METADATA_VERSION
        # Leading again in a later epoch: nothing left to activate.
        raft.leader = LeaderAndEpoch(1, 3)
        c.handle_leader_change(raft.leader)
        await _settle()
        assert len(raft.proposed) == 1

    asyncio.run(run())


def test_writes_are_pipelined_on_the_write_image_and_answered_only_when_committed() -> None:
    """Kafka's pipelining: the next write is proposed before the previous one commits, and is
    validated against the appended state (the write image); each is answered only once its
    offset commits; a leader change drops the appended state and fails what waits."""
    raft = FakeRaft()
    c = _controller(raft)
    raft.leader = LeaderAndEpoch(1, 7)
    c.handle_leader_change(raft.leader)

    async def run() -> None:
        await _with_unfenced_broker(c, raft)
        first = asyncio.ensure_future(c.create_topics([{"name": "a"}], validate_only=False))
        other = asyncio.ensure_future(c.create_topics([{"name": "b"}], validate_only=False))
        again = asyncio.ensure_future(c.create_topics([{"name": "a"}], validate_only=False))
        await _settle()
        # "a", "b" both proposed with nothing committed; the second "a" is refused from the
        # write image, proposes nothing, and waits for what it saw to commit.
        a_batch, b_batch = raft.proposed
        assert [n for n, _ in a_batch.records][0] == "TopicRecord"
        assert [n for n, _ in b_batch.records][0] == "TopicRecord"
        assert c.image.topics_by_name == {} and set(c.write_image.topics_by_name) == {"a", "b"}
        assert not first.done() and not again.done() and not other.done()
        c.handle_commit([a_batch])
        await _settle()
        (res,) = await first
        assert res.error == Errors.NONE and set(c.image.topics_by_name) == {"a"}
        # Not "b" yet, nor the refusal, computed on a write image that had "b".
        assert not again.done() and not other.done()
        c.handle_commit([b_batch])
        await _settle()
        (res,) = await again
        assert res.error == Errors.TOPIC_ALREADY_EXISTS
        assert (await other)[0].error == Errors.NONE and c.write_image is c.image

        # Appended, then leadership moves: the waiting write fails, the write image is the
        # committed one again, and the new epoch's writes build on it.
        lost = asyncio.ensure_future(c.create_topics([{"name": "lost"}], validate_only=False))
        await _settle()
        assert "lost" in c.write_image.topics_by_name
        raft.leader = LeaderAndEpoch(1, 8)
        c.handle_leader_change(raft.leader)
        with pytest.raises(KafkaError) as e:
            await lost
        assert e.value.code == Errors.NOT_CONTROLLER
        assert c.write_image is c.image and "lost" not in c.image.topics_by_name
        retry = asyncio.ensure_future(c.create_topics([{"name": "lost"}], validate_only=False))
        await _settle()
        assert raft.proposed[-1].epoch == 8 and raft.proposed[-1].records[0][0] == "TopicRecord"
        c.handle_commit([raft.proposed[-1]])
        assert (await retry)[0].error == Errors.NONE

    asyncio.run(run())


def test_uncommitted_writes_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most MAX_UNCOMMITTED_WRITES wait for their commit; the next waits for the oldest."""
    from odradek.controller import quorum_controller

    monkeypatch.setattr(quorum_controller, "MAX_UNCOMMITTED_WRITES", 2)
    raft = FakeRaft()
    c = _controller(raft)
    raft.leader = LeaderAndEpoch(1, 7)
    c.handle_leader_change(raft.leader)

    async def run() -> None:
        await _with_unfenced_broker(c, raft)
        writes = [
            asyncio.ensure_future(c.create_topics([{"name": f"t{i}"}], validate_only=False)) for i in range(3)
        ]
        await _settle()
        assert len(raft.proposed) == 2  # t0, t1; t2 waits for the oldest to commit
        c.handle_commit([raft.proposed[0]])
        await _settle()
        assert len(raft.proposed) == 3 and writes[0].done() and not writes[1].done()
        c.handle_commit(raft.proposed[1:2])
        await _settle()
        assert [(await w)[0].error for w in writes[:2]] == [Errors.NONE, Errors.NONE]
        assert not writes[2].done()
        c.handle_commit(raft.proposed[2:])
        assert (await writes[2])[0].error == Errors.NONE
        assert set(c.image.topics_by_name) == {"t0", "t1", "t2"}

    asyncio.run(run())


def test_failed_append_drops_the_appended_state() -> None:
    """Raft refuses an append (it no longer leads, the controller not told yet): that write
    and the ones waiting for their commit fail with NOT_CONTROLLER, and the write image is the
    committed one again (Kafka renounces)."""
    raft = FakeRaft()
    c = _controller(raft)
    raft.leader = LeaderAndEpoch(1, 7)
    c.handle_leader_change(raft.leader)

    async def run() -> None:
        await _with_unfenced_broker(c, raft)
        waiting = asyncio.ensure_future(c.create_topics([{"name": "a"}], validate_only=False))
        await _settle()
        assert "a" in c.write_image.topics_by_name and len(raft.proposed) == 1
        raft.leader = LeaderAndEpoch(2, 8)  # Raft moved on; handle_leader_change not yet run
        refused = asyncio.ensure_future(c.create_topics([{"name": "b"}], validate_only=False))
        for fut in (refused, waiting):
            with pytest.raises(KafkaError) as e:
                await asyncio.wait_for(fut, 5)
            assert e.value.code == Errors.NOT_CONTROLLER
        assert c.write_image is c.image and c.image.topics_by_name == {}
        assert len(raft.proposed) == 1

    asyncio.run(run())
