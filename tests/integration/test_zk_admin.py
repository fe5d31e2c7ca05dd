"""The ZooKeeper-mode admin path on a real ZooKeeper with the real KafkaController in-process:
CreateTopics through ZkAdminManager writes /config/topics and /brokers/topics (rack-aware placement,
a topic id) and the controller gives every partition a state and a leader, which is what the
delayed answer waits for; Kafka's refusals come back per topic; CreatePartitions adds partitions the
controller picks up; AlterConfigs / IncrementalAlterConfigs write the config and a
/config/changes notification that ZkConfigManager hands to its handlers; DeleteTopics writes
/admin/delete_topics/<t>.

The brokers are only registrations (nothing answers the controller's requests), so the "metadata
cache" the manager asks is ZooKeeper's partition state here; a deletion cannot finish without
brokers answering StopReplica (test_zk_kafka_fidelity.py has Kafka's controller finish ours)."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Callable

import pytest

from odradek.controller.kafka_controller import KafkaControllerConfig
from odradek.controller.kafka_controller_driver import ZkControllerRuntime
from odradek.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE
from odradek.protocol.errors import Errors
from odradek.server.dynamic_broker_config import DynamicBrokerConfigPolicy
from odradek.server.kafka_config import KafkaConfig
from odradek.server.zk_admin_manager import ZkAdminManager, ZkAutoTopicCreationManager
from odradek.zk import zk_data as z
from odradek.zk.zk_config_manager import BrokerConfigHandler, ZkConfigManager

from .zookeeper_support import _free_port, wait_until, zk_client

pytestmark = pytest.mark.timeout(180)

RACKS = {1: "a", 2: "b", 3: "a"}


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []

    def process_config_changes(self, entity_name: str, configs: dict[str, str]) -> None:
        self.seen.append((entity_name, configs))


class Cluster:
    """Three registered brokers (racks a, b, a), a controller, an admin session."""

    def __init__(self, connect: str, loop: asyncio.AbstractEventLoop) -> None:
        self.sessions = {}
        for b, rack in RACKS.items():
            s = zk_client(connect)
            s.register_broker(z.BrokerInfo.create(b, [("PLAINTEXT", "PLAINTEXT", "127.0.0.1", _free_port())],
                                                  timestamp_ms=int(time.time() * 1000), rack=rack))
            self.sessions[b] = s
        self.ctl_zk = zk_client(connect)
        self.runtime = ZkControllerRuntime(KafkaControllerConfig(broker_id=1, auto_leader_rebalance_enable=False),
                                           self.ctl_zk, loop)
        self.zk = zk_client(connect)
        self.manager = ZkAdminManager(self.zk, topic_ready=self.topic_ready, topic_known=self.topic_known,
                                      default_num_partitions=2, default_replication_factor=2, node_id=1)

    # stand-ins for the metadata cache: what the controller wrote to ZooKeeper
    def topic_ready(self, topic: str, n: int) -> bool:
        states = self.zk.get_topic_partition_states([(topic, p) for p in range(n)])
        return len(states) == n and all(s.leader >= 0 for s in states.values())

    def topic_known(self, topic: str) -> bool:
        return self.zk.exists(z.topic_path(topic))

    async def close(self) -> None:
        await self.runtime.close()
        for c in (self.ctl_zk, self.zk, *self.sessions.values()):
            c.close()


def run(connect: str, body: Callable[[Cluster], object]) -> None:
    async def main() -> None:
        cluster = Cluster(connect, asyncio.get_running_loop())
        try:
            cluster.runtime.start()
            await wait_until(lambda: cluster.runtime.controller.is_active, "the election")
            await body(cluster)  # type: ignore[misc]
        finally:
            await cluster.close()

    asyncio.run(main())


def test_create_topics_placement_leaders_and_kafkas_refusals(connect: str) -> None:
    async def body(c: Cluster) -> None:
        m = c.manager
        res = await m.create_topics([
            {"name": "t1", "num_partitions": 6, "replication_factor": 2,
             "configs": [{"name": "retention.ms", "value": "123000"}]},
            {"name": "dflt", "num_partitions": -1, "replication_factor": -1},
            {"name": "manual", "num_partitions": -1, "replication_factor": -1,
             "assignments": [{"partition_index": 0, "broker_ids": [3, 2]}, {"partition_index": 1, "broker_ids": [2, 1]}]},
            {"name": "my.topic", "num_partitions": 1, "replication_factor": 1},
        ], timeout_ms=30000)
        assert [(r.name, r.error_code) for r in res] == [("t1", 0), ("dflt", 0), ("manual", 0), ("my.topic", 0)]
        assert (res[0].num_partitions, res[0].replication_factor, res[1].num_partitions, res[1].replication_factor) \
            == (6, 2, 2, 2)
        # the answer came once the controller gave every partition a leader
        assert all(c.topic_ready(r.name, r.num_partitions) for r in res)
        ta = c.zk.get_replica_assignment_and_topic_ids(["t1"])["t1"]
        assert ta.topic_id == res[0].topic_id and len(ta.topic_id or "") == 22
        assert ta.topic_id is not None
        assert c.runtime.controller.context.topic_ids["t1"] == uuid.UUID(bytes=base64.urlsafe_b64decode(ta.topic_id + "=="))
        # rack-aware: every partition has one replica on rack a and one on rack b
        for a in ta.partitions.values():
            assert sorted(RACKS[b] for b in a.replicas) == ["a", "b"]
        assert {a.replicas[0] for a in ta.partitions.values()} == {1, 2, 3}
        assert c.zk.get_entity_configs("topics", "t1") == {"retention.ms": "123000"}
        assert c.zk.get_data(z.config_entity_path("topics", "dflt"))[0] == b'{"version":1,"config":{}}'  # type: ignore[index]
        manual = c.zk.get_replica_assignment_and_topic_ids(["manual"])["manual"].partitions
        assert {p: a.replicas for p, a in manual.items()} == {0: (3, 2), 1: (2, 1)}
        states = c.zk.get_topic_partition_states([("manual", 0), ("manual", 1)])
        assert states[("manual", 0)].leader == 3 and states[("manual", 1)].leader == 2

        bad = await m.create_topics([
            {"name": "t1", "num_partitions": 1, "replication_factor": 1},
            {"name": "toomany", "num_partitions": 1, "replication_factor": 4},
            {"name": "badcfg", "num_partitions": 1, "replication_factor": 1,
             "configs": [{"name": "retention.ms", "value": "soon"}]},
            {"name": "unknowncfg", "num_partitions": 1, "replication_factor": 1,
             "configs": [{"name": "no.such.config", "value": "1"}]},
            {"name": "bad/name", "num_partitions": 1, "replication_factor": 1},
            {"name": "my_topic", "num_partitions": 1, "replication_factor": 1},
            {"name": "dup", "num_partitions": 1, "replication_factor": 1},
            {"name": "dup", "num_partitions": 1, "replication_factor": 1},
            {"name": "gap", "num_partitions": -1, "replication_factor": -1,
             "assignments": [{"partition_index": 1, "broker_ids": [1]}]},
            {"name": "zero", "num_partitions": 0, "replication_factor": 1},
        ], timeout_ms=1000)
        got = {(r.name, r.error_code, r.error_message) for r in bad}
        assert ("t1", Errors.TOPIC_ALREADY_EXISTS, "Topic 't1' already exists.") in got
        assert ("toomany", Errors.INVALID_REPLICATION_FACTOR,
                "Replication factor: 4 larger than available brokers: 3.") in got
        assert [r.error_code for r in bad[2:4]] == [Errors.INVALID_CONFIG, Errors.INVALID_CONFIG]
        assert "no.such.config" in (bad[3].error_message or "")
        assert bad[4].error_code == Errors.INVALID_TOPIC_EXCEPTION
        assert (bad[5].error_code, bad[5].error_message) == (
            Errors.INVALID_TOPIC_EXCEPTION, "Topic 'my_topic' collides with existing topics: my.topic")
        assert [r.error_code for r in bad[6:8]] == [Errors.INVALID_REQUEST] * 2
        assert (bad[8].error_code, bad[8].error_message) == (
            Errors.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence")
        assert bad[9].error_code == Errors.INVALID_PARTITIONS
        assert c.zk.get_all_topics() == {"t1", "dflt", "manual", "my.topic"}  # nothing refused was written
        assert c.zk.get_children(z.config_entity_type_path("topics")) == ["dflt", "manual", "my.topic", "t1"]

        # validate_only answers as a creation would and writes nothing
        vo = await m.create_topics([{"name": "v", "num_partitions": 3, "replication_factor": 3}], 30000,
                                   validate_only=True)
        assert (vo[0].error_code, vo[0].num_partitions, vo[0].replication_factor, vo[0].topic_id) == (0, 3, 3, None)
        assert not c.zk.exists(z.topic_path("v")) and not c.zk.exists(z.config_entity_path("topics", "v"))

        # auto-creation: written at once with the defaults, LEADER_NOT_AVAILABLE until it has leaders
        auto = ZkAutoTopicCreationManager(m)
        assert await auto.create_topics(["auto", "bad name", "t1"]) == {
            "auto": Errors.LEADER_NOT_AVAILABLE, "bad name": Errors.INVALID_TOPIC_EXCEPTION,
            "t1": Errors.LEADER_NOT_AVAILABLE}
        assert len(c.zk.get_replica_assignment_and_topic_ids(["auto"])["auto"].partitions) == 2
        await wait_until(lambda: c.topic_ready("auto", 2), "the auto-created topic's leaders")

    run(connect, body)


def test_create_partitions_configs_notifications_and_delete(connect: str) -> None:
    async def body(c: Cluster) -> None:
        m = c.manager
        topics = Recorder()
        applied: list[tuple[dict[str, str], dict[str, str]]] = []
        c.manager.admin.change_broker_config("1", {"log.retention.bytes": "4000"})  # before start: read at startup
        brokers = BrokerConfigHandler(1, lambda d, b: applied.append((d, b)))
        listener = ZkConfigManager(c.zk, {"topics": topics, "brokers": brokers})
        await c.zk.call_async(listener.startup)
        res = await m.create_topics([{"name": "p", "num_partitions": 2, "replication_factor": 2}], 30000)
        assert res[0].error_code == 0
        before = c.zk.get_replica_assignment_and_topic_ids(["p"])["p"]

        # CreatePartitions: 2 -> 4, the controller gives the new ones leaders; refusals
        out = await m.create_partitions([{"name": "p", "count": 4, "assignments": None}], 30000)
        assert [(r.error_code, r.error_message) for r in out] == [(0, None)]
        after = c.zk.get_replica_assignment_and_topic_ids(["p"])["p"]
        assert after.topic_id == before.topic_id and set(after.partitions) == {0, 1, 2, 3}
        assert {p: after.partitions[p] for p in (0, 1)} == before.partitions
        assert all(len(set(a.replicas)) == 2 for a in after.partitions.values())
        assert c.topic_ready("p", 4)
        out = await m.create_partitions([
            {"name": "p", "count": 4, "assignments": None},
            {"name": "p2", "count": 4, "assignments": None},
            {"name": "p", "count": 3, "assignments": None},
        ], 1000)
        assert [(r.error_code, r.error_message) for r in out] == [
            (Errors.INVALID_PARTITIONS, "Topic already has 4 partitions."),
            (Errors.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'p2' does not exist."),
            (Errors.INVALID_PARTITIONS, "Topic currently has 4 partitions, which is higher than the requested 3."),
        ]
        out = await m.create_partitions([{"name": "p", "count": 5, "assignments": [{"broker_ids": [1, 9]}]}], 1000)
        assert (out[0].error_code, out[0].error_message) == (
            Errors.INVALID_REPLICA_ASSIGNMENT, "Unknown broker(s) in replica assignment: 9.")
        out = await m.create_partitions([{"name": "p", "count": 5, "assignments": [{"broker_ids": [3, 1]}]}], 30000)
        assert out[0].error_code == 0
        assert c.zk.get_replica_assignment_and_topic_ids(["p"])["p"].partitions[4].replicas == (3, 1)

        # AlterConfigs (replaces the set) and IncrementalAlterConfigs (ops) -> config + notification
        n0 = len(c.zk.get_children(z.CONFIG_CHANGES_PATH))
        r1 = await m.alter_configs([{"resource_type": TOPIC_RESOURCE, "resource_name": "p",
                                     "configs": [{"name": "retention.ms", "value": "1000"},
                                                 {"name": "cleanup.policy", "value": "compact"}]}])
        assert [(r.error_code, r.error_message) for r in r1] == [(0, None)]
        r2 = await m.alter_configs([{"resource_type": TOPIC_RESOURCE, "resource_name": "p",
                                     "configs": [{"name": "retention.ms", "config_operation": 1, "value": None},
                                                 {"name": "cleanup.policy", "config_operation": 2,
                                                  "value": "delete"}]}], incremental=True)
        assert r2[0].error_code == 0
        assert c.zk.get_entity_configs("topics", "p") == {"cleanup.policy": "compact,delete"}
        changes = c.zk.get_children(z.CONFIG_CHANGES_PATH)
        assert len(changes) == n0 + 2
        got = c.zk.get_data(f"{z.CONFIG_CHANGES_PATH}/{changes[-1]}")
        assert got is not None and got[0] == b'{"version":2,"entity_path":"topics/p"}'
        await wait_until(lambda: ("p", {"cleanup.policy": "compact,delete"}) in topics.seen,
                         "the listener to hand the topic's new config over")
        # Each notification is handled by reading the topic's config as it is then (Kafka's
        # ConfigChangeListener does too): the first may already see the second change.
        assert all(seen in (("p", {"retention.ms": "1000", "cleanup.policy": "compact"}),
                            ("p", {"cleanup.policy": "compact,delete"}))
                   for seen in topics.seen if seen[0] == "p"), topics.seen
        # a broker default (the empty name is <default>) and a refusal that writes nothing
        rb = await m.alter_configs([{"resource_type": BROKER_RESOURCE, "resource_name": "",
                                     "configs": [{"name": "log.retention.ms", "config_operation": 0,
                                                  "value": "5000"}]}], incremental=True)
        assert rb[0].error_code == Errors.INVALID_REQUEST  # no broker config policy given: refused
        policy = DynamicBrokerConfigPolicy(KafkaConfig({"log.dirs": "/nonexistent", "node.id": "1"}))
        with_policy = ZkAdminManager(c.zk, topic_ready=c.topic_ready, topic_known=c.topic_known,
                                     broker_configs=policy, node_id=1)
        rb = await with_policy.alter_configs([
            {"resource_type": BROKER_RESOURCE, "resource_name": "1",
             "configs": [{"name": "log.segment.bytes", "config_operation": 0, "value": "2000000"}]},
            {"resource_type": BROKER_RESOURCE, "resource_name": "1",
             "configs": [{"name": "broker.id", "config_operation": 0, "value": "7"}]},
            {"resource_type": BROKER_RESOURCE, "resource_name": "2",
             "configs": [{"name": "log.segment.bytes", "config_operation": 0, "value": "2000000"}]},
        ], incremental=True)
        assert [(r.error_code, r.error_message) for r in rb] == [
            (0, None), (Errors.INVALID_REQUEST, "Cannot update these configs dynamically: [broker.id]"),
            (Errors.INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2")]
        await wait_until(lambda: any(b.get("log.segment.bytes") == "2000000" for _, b in applied),
                         "this broker's dynamic config")
        bad = await m.alter_configs([{"resource_type": TOPIC_RESOURCE, "resource_name": "p",
                                      "configs": [{"name": "retention.ms", "value": "x"}]},
                                     {"resource_type": TOPIC_RESOURCE, "resource_name": "nope",
                                      "configs": [{"name": "retention.ms", "value": "1"}]}])
        assert [r.error_code for r in bad] == [Errors.INVALID_CONFIG, Errors.UNKNOWN_TOPIC_OR_PARTITION]
        vo = await m.alter_configs([{"resource_type": TOPIC_RESOURCE, "resource_name": "p",
                                     "configs": [{"name": "retention.ms", "value": "9"}]}], validate_only=True)
        assert vo[0].error_code == 0
        assert c.zk.get_entity_configs("topics", "p") == {"cleanup.policy": "compact,delete"}
        assert len(c.zk.get_children(z.CONFIG_CHANGES_PATH)) == n0 + 3  # two topic changes, one broker change
        c.manager.admin.change_broker_config("2", {"log.retention.bytes": "9000"})  # another broker's: not applied (announced first)
        c.manager.admin.change_broker_config("", {"log.retention.ms": "5000"})
        assert c.zk.exists(z.config_entity_path("brokers", "<default>"))
        both = {"log.retention.bytes": "4000", "log.segment.bytes": "2000000"}
        await wait_until(lambda: ({"log.retention.ms": "5000"}, both) in applied,
                         "the broker default")
        assert ({}, {"log.retention.bytes": "4000"}) in applied and all(b != {"log.retention.bytes": "9000"} for _, b in applied)
        assert await m.describe_overrides(TOPIC_RESOURCE, "p") == {"cleanup.policy": "compact,delete"}
        assert await m.describe_overrides(TOPIC_RESOURCE, "nope") is None
        assert await m.describe_overrides(BROKER_RESOURCE, "") == {"log.retention.ms": "5000"}

        # DeleteTopics: /admin/delete_topics/<t>; nobody answers StopReplica here, so the wait times out
        d = await m.delete_topics(["p", "ghost"], timeout_ms=0)
        assert [(r.error_code, r.error_message) for r in d] == [
            (0, None), (Errors.UNKNOWN_TOPIC_OR_PARTITION, None)]
        assert c.zk.exists(z.delete_topic_path("p"))
        await wait_until(lambda: "p" in c.runtime.controller.context.topics_to_be_deleted, "the deletion to start")
        again = await m.delete_topics(["p"], timeout_ms=200)  # already marked: waited on, then timed out
        assert (again[0].error_code, again[0].error_message) == (Errors.REQUEST_TIMED_OUT, None)
        queued = await m.create_partitions([{"name": "p", "count": 9, "assignments": None}], 1000)
        assert (queued[0].error_code, queued[0].error_message) == (
            Errors.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
        recreate = await m.create_topics([{"name": "p", "num_partitions": 1, "replication_factor": 1}], 1000)
        assert recreate[0].error_code == Errors.TOPIC_ALREADY_EXISTS
        off = ZkAdminManager(c.zk, topic_ready=c.topic_ready, topic_known=c.topic_known, delete_topic_enable=False)
        assert [(r.error_code) for r in await off.delete_topics(["dflt"], 0)] == [Errors.TOPIC_DELETION_DISABLED]
        listener.shutdown()

    run(connect, body)
