"""TopicDeletionManager (ZooKeeper mode): enqueue, the deletion rounds, replicas on a dead broker
ineligible, resumption when the broker returns, completion; ``delete.topic.enable`` false."""

from __future__ import annotations

from collections.abc import Collection

from zk_controller_fakes import Cluster, online_cluster, stop_replica_sent, update_metadata_sent

from odradek.controller.controller_context import (
    PartitionAndReplica,
    PartitionState,
    ReplicaState,
    TopicPartition,
)
from odradek.controller.topic_deletion_manager import TopicDeletionManager

R = ReplicaState
T0 = ("t", 0)
T1 = ("t", 1)
U0 = ("u", 0)


class FakeDeletionClient:
    def __init__(self, c: Cluster) -> None:
        self.c = c
        self.deleted_topics: list[tuple[str, int]] = []
        self.deleted_deletions: list[tuple[list[str], int]] = []
        self.muted: list[str] = []
        self.metadata_updates: list[set[TopicPartition]] = []

    def delete_topic(self, topic: str, epoch_zk_version: int) -> None:
        self.deleted_topics.append((topic, epoch_zk_version))

    def delete_topic_deletions(self, topics: Collection[str], epoch_zk_version: int) -> None:
        self.deleted_deletions.append((list(topics), epoch_zk_version))

    def mute_partition_modifications(self, topic: str) -> None:
        self.muted.append(topic)

    def send_metadata_update(self, partitions: set[TopicPartition]) -> None:
        self.metadata_updates.append(partitions)
        # as Kafka's ControllerDeletionClient: through the batch, to every live broker
        self.c.batch.new_batch()
        self.c.batch.add_update_metadata_request_for_brokers(self.c.ctx.live_or_shutting_down_broker_ids, partitions)
        self.c.batch.send_requests_to_brokers(self.c.ctx.epoch)


def setup(enable: bool = True) -> tuple[Cluster, TopicDeletionManager, FakeDeletionClient]:
    c = online_cluster(topics={"t": {0: [1, 2, 3], 1: [2, 3, 1]}, "u": {0: [1, 2]}})
    client = FakeDeletionClient(c)
    tdm = TopicDeletionManager(c.ctx, c.rsm, c.psm, client, delete_topic_enable=enable)
    return c, tdm, client


def replicas_of(c: Cluster, topic: str, broker_id: int | None = None) -> list[PartitionAndReplica]:
    return sorted(
        (r for r in c.ctx.replicas_for_topic(topic) if broker_id is None or r.replica == broker_id),
        key=lambda r: (r.topic_partition, r.replica),
    )


def test_deletion_with_all_brokers_up_completes() -> None:
    c, tdm, client = setup()
    tdm.enqueue_topics_for_deletion({"t"})
    assert c.ctx.partition_state(T0) == PartitionState.NonExistentPartition
    assert c.ctx.is_topic_deletion_in_progress("t")
    assert client.metadata_updates == [{T0, T1}]
    sent = c.sender.take()
    um = update_metadata_sent(sent)
    assert sorted(um) == [1, 2, 3]
    leaders = [p["leader"] for b in um[1] for ts in b["topic_states"] if ts["topic_name"] == "t"
               for p in ts["partition_states"]]
    assert leaders and set(leaders) == {-2}  # brokers stop serving t
    for b in (1, 2, 3):
        stops = stop_replica_sent([s for s in sent if s.api_key == 5 and s.body["topic_states"][0]["partition_states"]
                                   [0]["delete_partition"]], b)
        assert set(stops) == {T0, T1} and all(p["leader_epoch"] == -2 for p in stops.values())
    assert all(c.ctx.replica_state(r) == R.ReplicaDeletionStarted for r in replicas_of(c, "t"))
    # brokers answer the StopReplica(delete): deletion completes
    tdm.complete_replica_deletion(replicas_of(c, "t"))
    assert client.deleted_topics == [("t", c.ctx.epoch_zk_version)]
    assert client.muted == ["t"]
    assert "t" not in c.ctx.all_topics and c.ctx.partitions_for_topic("t") == set()
    assert not any(r.topic == "t" for r in c.ctx.replica_states)
    assert c.ctx.topics_to_be_deleted == set()
    # the other topic is untouched
    assert c.ctx.partition_state(U0) == PartitionState.OnlinePartition


def test_deletion_with_a_broker_down_is_ineligible_until_it_returns() -> None:
    c, tdm, client = setup()
    c.broker_down(3)
    c.rsm.handle_state_changes(replicas_of(c, "t", 3), R.OfflineReplica)  # Kafka's broker failure flow
    c.sender.take()
    tdm.enqueue_topics_for_deletion({"t"})
    assert "t" in c.ctx.topics_ineligible_for_deletion
    on3 = replicas_of(c, "t", 3)
    assert {c.ctx.replica_state(r) for r in on3} == {R.ReplicaDeletionIneligible}
    live = [r for r in replicas_of(c, "t") if r.replica != 3]
    assert {c.ctx.replica_state(r) for r in live} == {R.ReplicaDeletionStarted}
    sent = c.sender.take()
    assert all(s.broker_id != 3 for s in sent)
    # the live replicas are deleted; the topic can't finish while 3 is down
    tdm.complete_replica_deletion(live)
    assert client.deleted_topics == []
    assert {c.ctx.replica_state(r) for r in on3} == {R.OfflineReplica}  # retried: back to Offline
    assert "t" in c.ctx.all_topics
    tdm.try_topic_deletion()  # nothing changes while it is ineligible
    assert client.deleted_topics == [] and {c.ctx.replica_state(r) for r in on3} == {R.OfflineReplica}
    c.sender.take()

    # broker 3 comes back (Kafka's onBrokerStartup): its replicas Online, then deletion resumes
    c.broker_up(3)
    c.rsm.handle_state_changes(on3, R.OnlineReplica)
    tdm.resume_deletion_for_topics({r.topic for r in on3})
    assert "t" not in c.ctx.topics_ineligible_for_deletion
    assert {c.ctx.replica_state(r) for r in on3} == {R.ReplicaDeletionStarted}
    stops = [s for s in c.sender.take() if s.api_key == 5 and s.broker_id == 3]
    deleting = {(ts["topic_name"], p["partition_index"]) for s in stops for ts in s.body["topic_states"]
                for p in ts["partition_states"] if p["delete_partition"]}
    assert deleting == {T0, T1}
    tdm.complete_replica_deletion(on3)
    assert client.deleted_topics == [("t", c.ctx.epoch_zk_version)]
    assert "t" not in c.ctx.all_topics


def test_failed_replica_deletion_halts_then_resumes() -> None:
    c, tdm, client = setup()
    tdm.enqueue_topics_for_deletion({"u"})
    failed = replicas_of(c, "u", 2)
    tdm.fail_replica_deletion(failed)  # broker 2 answered StopReplica with an error
    assert c.ctx.replica_state(failed[0]) == R.ReplicaDeletionIneligible
    assert "u" in c.ctx.topics_ineligible_for_deletion
    tdm.complete_replica_deletion(replicas_of(c, "u", 1))
    assert client.deleted_topics == []
    assert c.ctx.replica_state(failed[0]) == R.OfflineReplica  # queued for a retry
    tdm.resume_deletion_for_topics({"u"})
    assert c.ctx.replica_state(failed[0]) == R.ReplicaDeletionStarted
    tdm.complete_replica_deletion(failed)
    assert [t for t, _ in client.deleted_topics] == ["u"]


def test_delete_topic_disabled_drops_the_requests() -> None:
    c, tdm, client = setup(enable=False)
    tdm.init({"t"}, set())
    assert client.deleted_deletions == [(["t"], c.ctx.epoch_zk_version)]
    assert c.ctx.topics_to_be_deleted == set()
    tdm.enqueue_topics_for_deletion({"t"})
    assert c.ctx.topics_to_be_deleted == set() and c.sender.sent == []
    assert c.ctx.partition_state(T0) == PartitionState.OnlinePartition
    assert not tdm.is_topic_queued_up_for_deletion("t")


def test_init_keeps_only_queued_topics_ineligible() -> None:
    c, tdm, _ = setup()
    tdm.init({"t"}, {"t", "u"})
    assert c.ctx.topics_to_be_deleted == {"t"}
    assert c.ctx.topics_ineligible_for_deletion == {"t"}
