"""ReplicaManager: leadership changes from partition states (make_leaders / make_followers /
stop_replicas), their file work on the log worker, and requests waiting for it. No sockets;
the worker runs its jobs when a test says so, the purgatory timer is fake."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from purgatory_support import FakeTimer, ManualLogWorker

from odradek.cluster.partition import PartitionState
from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.protocol.errors import Errors, KafkaError
from odradek.records.builder import build_batch
from odradek.server.delayed_fetch import FetchPartitionRequest
from odradek.server.replica_manager import ReplicaManager

ME = 1
TOPIC_ID = uuid.UUID(int=1)
TP = ("t", 0)


def state(leader: int = ME, leader_epoch: int = 0, partition_epoch: int = 0, isr: tuple[int, ...] = (1,),
          topic_id: uuid.UUID = TOPIC_ID) -> PartitionState:
    return PartitionState("t", 0, topic_id, leader=leader, leader_epoch=leader_epoch, isr=isr,
                          replicas=(1, 2), partition_epoch=partition_epoch)


class Setup:
    def __init__(self, path: Path) -> None:
        self.cache = KRaftMetadataCache()
        self.offset = 0
        self.lm = LogManager([str(path)], LogConfig(), lambda: 0)
        self.worker = ManualLogWorker()
        self.timer = FakeTimer()
        self.rm = ReplicaManager(ME, self.lm, self.cache, lambda _t: LogConfig(), lambda: 0,
                                 timer=self.timer, log_worker=self.worker)
        self.events: list[tuple[str, int, bool, int]] = []
        self.rm.leadership_listeners.append(lambda t, p, lead, epoch: self.events.append((t, p, lead, epoch)))

    def publish(self, *records: tuple[str, dict[str, Any]]) -> None:
        """Replay the records into the next image and hand the delta to the replica manager, as
        the metadata loader does."""
        delta = MetadataDelta(self.cache.image)
        for name, rec in records:
            delta.replay(name, rec, self.offset)
            self.offset += 1
        image = delta.apply()
        self.cache.set_image(image)
        self.rm.apply_delta(delta, image)


@pytest.fixture
def s(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def produce(s: Setup, n: int = 1, acks: int = 1) -> Any:
    return s.rm.append_records(1000, acks, {TP: bytearray(build_batch([(b"k", b"v", [], 1)] * n))})


def test_make_leaders_creates_the_log_on_the_worker_then_leads(s: Setup) -> None:
    assert s.rm.make_leaders([state(leader_epoch=2)]) == {TP: Errors.NONE}
    # The state is taken at once, the log is created by the worker, not by the caller.
    assert s.lm.get_log(*TP) is None and s.rm.is_loading(TP)
    p = s.rm.partitions[TP]
    assert (p.leader_id, p.leader_epoch, p.is_leader) == (ME, 2, False)
    assert s.events == []  # listeners hear of a leadership only once it serves
    assert s.worker.run_all() == 1
    assert s.lm.get_log(*TP) is p.log and p.is_leader and not s.rm.is_loading(TP)
    assert s.events == [("t", 0, True, 2)]
    assert produce(s)[TP].base_offset == 0
    # Leader again with its log ready: no file work, no new announcement for the same epoch.
    s.rm.make_leaders([state(leader_epoch=2, partition_epoch=1)])
    assert s.worker.jobs == [] and s.events == [("t", 0, True, 2)]


def test_produce_and_fetch_wait_for_the_log_work(s: Setup) -> None:
    async def run() -> None:
        s.rm.make_leaders([state()])
        pending = produce(s)
        assert not isinstance(pending, dict)  # waits for the log
        fetch = s.rm.fetch_messages(0, 1, 1 << 20, 0, [FetchPartitionRequest("t", 0, 0, 1 << 20)])
        assert not isinstance(fetch, list)
        produced = asyncio.ensure_future(pending)
        fetched = asyncio.ensure_future(fetch)
        await asyncio.sleep(0)
        assert not produced.done()
        s.worker.run_all()
        assert (await produced)[TP].base_offset == 0
        result = (await fetched)[0].result
        assert result.error == Errors.NONE and result.high_watermark in (0, 1)

    asyncio.run(run())


def test_appends_keep_their_order_while_a_partition_is_made(s: Setup) -> None:
    """A produce to a ready partition does not overtake one queued before it behind another
    partition's log work."""
    other = ("t", 1)

    async def run() -> None:
        s.rm.make_leaders([state()])
        s.worker.run_all()
        s.rm.make_leaders([PartitionState("t", 1, TOPIC_ID, leader=ME, leader_epoch=0, isr=(1,),
                                          replicas=(1,), partition_epoch=0)])
        first = s.rm.append_records(1000, 1, {TP: bytearray(build_batch([(b"k", b"first", [], 1)])),
                                              other: bytearray(build_batch([(b"k", b"x", [], 1)]))})
        second = s.rm.append_records(1000, 1, {TP: bytearray(build_batch([(b"k", b"second", [], 1)]))})
        assert not isinstance(first, dict) and not isinstance(second, dict)
        await asyncio.sleep(0)
        s.worker.run_all()
        assert (await first)[TP].base_offset == 0
        assert (await second)[TP].base_offset == 1
        assert s.rm._queued_appends == {}

    asyncio.run(run())


def test_other_requests_answer_not_leader_while_the_log_is_made(s: Setup) -> None:
    s.rm.make_leaders([state()])
    p = s.rm.get_partition_or_error(TP)
    with pytest.raises(KafkaError) as e:
        p.fetch_offset_for_timestamp(-1, 0, -1)
    assert e.value.code == Errors.NOT_LEADER_OR_FOLLOWER


def test_make_followers_stops_produce_and_keeps_the_log_untruncated(s: Setup) -> None:
    """A new follower no longer truncates to its HW (issue 12: the replica fetcher's last fetched
    epoch and the leader's diverging epoch say where, KIP-320); the old test asserted the
    truncation to the HW."""
    s.rm.make_leaders([state(leader_epoch=0)])
    s.worker.run_all()
    produce(s, 2)  # epoch 0, offsets 0-1; the ISR is this replica alone: HW 2
    s.rm.make_leaders([state(leader_epoch=1, partition_epoch=1, isr=(1, 2))])
    produce(s, 1)  # epoch 1, offset 2; follower 2 has not fetched it: HW stays 2
    lg = s.lm.get_log(*TP)
    assert lg is not None
    assert (lg.log_end_offset, lg.high_watermark, lg.leader_epoch_cache.entries) == (3, 2, [(0, 0), (1, 2)])

    assert s.rm.make_followers([state(leader=2, leader_epoch=2, partition_epoch=2)]) == {TP: Errors.NONE}
    p = s.rm.partitions[TP]
    assert (p.is_leader, p.leader_id, p.leader_epoch) == (False, 2, 2)
    assert s.events[-1] == ("t", 0, False, 2)
    assert not s.rm.is_loading(TP) and s.worker.run_all() == 0
    assert produce(s)[TP].error == Errors.NOT_LEADER_OR_FOLLOWER
    assert s.lm.get_log(*TP) is lg and p.log is lg  # the log is kept, whole
    assert (lg.log_end_offset, lg.leader_epoch_cache.entries) == (3, [(0, 0), (1, 2)])
    # A follower again at the same epoch: nothing to do.
    s.rm.make_followers([state(leader=2, leader_epoch=2, partition_epoch=3)])
    assert s.worker.jobs == []


def test_follower_then_leader_keeps_what_it_replicated(s: Setup) -> None:
    """Records a follower holds above its HW stay when it becomes leader (Kafka's new leader
    keeps its log; the followers truncate to it). The old test asserted a truncation to the HW
    on becoming follower."""
    s.rm.make_leaders([state(isr=(1, 2))])
    s.worker.run_all()
    lg = s.lm.get_log(*TP)
    assert lg is not None
    lg.append_as_follower(bytearray(build_batch([(b"k", b"v", [], 1)] * 2)))  # above the HW (0)
    s.rm.make_followers([state(leader=2, leader_epoch=1, partition_epoch=1)])
    s.rm.make_leaders([state(leader_epoch=2, partition_epoch=2)])
    p = s.rm.partitions[TP]
    assert s.worker.run_all() == 0
    assert p.is_leader and lg.log_end_offset == 2
    assert lg.leader_epoch_cache.latest_epoch == 2  # the new epoch starts at its log end
    assert s.events == [("t", 0, True, 0), ("t", 0, False, 1), ("t", 0, True, 2)]


def test_stale_states_are_refused(s: Setup) -> None:
    s.rm.make_leaders([state(leader_epoch=3, partition_epoch=4)])
    s.worker.run_all()
    assert s.rm.make_leaders([state(leader_epoch=2, partition_epoch=5)]) == {TP: Errors.STALE_CONTROLLER_EPOCH}
    assert s.rm.make_followers([state(leader=2, leader_epoch=3, partition_epoch=3)]) == {
        TP: Errors.STALE_CONTROLLER_EPOCH
    }
    p = s.rm.partitions[TP]
    assert (p.is_leader, p.leader_epoch, p.partition_epoch) == (True, 3, 4)
    assert s.worker.jobs == []


def test_stop_replicas_deletes_on_the_worker_and_a_recreated_topic_starts_empty(s: Setup) -> None:
    s.rm.make_leaders([state()])
    s.worker.run_all()
    produce(s, 3)
    s.rm.stop_replicas([TP], delete=True)
    assert TP not in s.rm.partitions and s.events[-1] == ("t", 0, False, 0)
    assert s.lm.get_log(*TP) is not None  # deleted by the worker
    new_id = uuid.UUID(int=2)
    s.rm.make_leaders([state(topic_id=new_id)])  # recreated before the deletion ran
    assert s.worker.run_all() == 2
    lg = s.lm.get_log(*TP)
    assert lg is not None and lg.log_end_offset == 0 and lg.topic_id == new_id.bytes
    assert s.rm.partitions[TP].is_leader


def test_apply_delta_turns_metadata_into_leader_and_follower_states(s: Setup) -> None:
    s.publish(("TopicRecord", {"name": "t", "topic_id": TOPIC_ID}), *(
        ("PartitionRecord", {
            "topic_id": TOPIC_ID, "partition_id": pid, "replicas": replicas, "isr": replicas,
            "leader": leader, "leader_epoch": 4, "partition_epoch": 6,
        })
        for pid, leader, replicas in ((0, 1, [1, 2]), (1, 2, [2, 1]), (2, 2, [2, 3]))
    ))
    s.worker.run_all()
    lead, follow = s.rm.partitions[("t", 0)], s.rm.partitions[("t", 1)]
    assert (lead.is_leader, lead.leader_epoch, lead.partition_epoch, lead.isr) == (True, 4, 6, [1, 2])
    assert (follow.is_leader, follow.leader_id, follow.leader_epoch, follow.replicas) == (False, 2, 4, [2, 1])
    assert follow.log is not None  # a follower's log is created and kept
    assert ("t", 2) not in s.rm.partitions and s.lm.get_log("t", 2) is None
    # The unknown partition and the follower answer produce as Kafka does.
    out = s.rm.append_records(1000, 1, {("t", 1): bytearray(b"x"), ("u", 0): bytearray(b"x")})
    assert isinstance(out, dict)
    assert (out[("t", 1)].error, out[("u", 0)].error) == (Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_OR_PARTITION)

    # The topic is deleted: its replicas stop and their logs go.
    s.publish(("RemoveTopicRecord", {"topic_id": TOPIC_ID}))
    s.worker.run_all()
    assert s.rm.partitions == {} and s.lm.all_logs() == {}


def test_acks_all_waits_in_the_purgatory_until_the_hw_or_the_timeout(s: Setup) -> None:
    async def run() -> None:
        s.rm.make_leaders([state(isr=(1, 2))])
        s.worker.run_all()
        waiting = asyncio.ensure_future(produce(s, 1, acks=-1))
        await asyncio.sleep(0)
        assert not waiting.done() and s.rm.produce_purgatory.watched() == 1
        p = s.rm.partitions[TP]
        p.update_follower_fetch_state(2, 1, 0, 0)
        s.rm.produce_purgatory.check_and_complete(TP)
        assert (await waiting)[TP].error == Errors.NONE

        timing_out = asyncio.ensure_future(produce(s, 1, acks=-1))
        await asyncio.sleep(0)
        s.timer.advance(1000)
        assert (await timing_out)[TP].error == Errors.REQUEST_TIMED_OUT

    asyncio.run(run())


def test_a_recreated_topic_of_the_same_name_is_a_new_leadership(s: Setup) -> None:
    s.rm.make_leaders([state()])
    s.worker.run_all()
    old = s.rm.partitions[TP]
    s.rm.make_leaders([state(topic_id=uuid.UUID(int=9))])  # same name, same epochs, new topic
    s.worker.run_all()
    new = s.rm.partitions[TP]
    assert new is not old and new.is_leader and not old.is_leader
    assert s.events == [("t", 0, True, 0), ("t", 0, False, 0), ("t", 0, True, 0)]
