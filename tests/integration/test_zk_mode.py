"""ZooKeeper mode end to end: a real ZooKeeper and three ``odradek server`` processes started with
``zookeeper.connect`` (no ``process.roles``).

Exactly one broker wins ``/controller``; a topic written as Kafka's AdminZkClient writes it
(``/brokers/topics/<t>``, by the broker that gets CreateTopics) gets leaders from that controller; confluent-kafka produces with
``acks=all`` and reads everything back; ``kill -9`` of the controller → another broker wins with
epoch + 1 and clients keep working; the killed broker restarts (same meta.properties, a new broker
epoch); ``kill -9`` of a partition leader → a new leader, nothing acknowledged lost.
"""

from __future__ import annotations

import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig

from .support import RawConnection, ServerProcess
from .zk_stale_controller import assert_old_controller_is_fenced, assert_resigned_and_silent
from .zookeeper_support import ZooKeeperServer, wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.timeout(400)

SESSION_TIMEOUT_MS = 6000
TOPIC = "zk-orders"
PARTITIONS = 3


class ZkServerProcess(ServerProcess):
    """``odradek server`` in ZooKeeper mode: one PLAINTEXT listener, no controller listener."""

    def __init__(self, data_dir: Path, zk_connect: str, broker_id: int) -> None:
        super().__init__(data_dir)
        self.broker_id = broker_id
        self.zk_connect = zk_connect

    def _command(self) -> list[str]:
        props = {
            "broker.id": str(self.broker_id),
            "zookeeper.connect": self.zk_connect,
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "log.dirs": str(self.data_dir),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "replica.lag.time.max.ms": "5000",
            "controlled.shutdown.max.retries": "1",
        }
        cmd = [sys.executable, "-m", "odradek.cli.main", "server"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd


def produce(bootstrap: str, first: int, n: int) -> list[bytes]:
    """``n`` records with acks=all; returns the values acknowledged."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "message.timeout.ms": 60000, "retry.backoff.ms": 200})
    acked: list[bytes] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())

    for i in range(first, first + n):
        p.produce(TOPIC, key=str(i).encode(), value=f"v{i}".encode(), on_delivery=on_delivery)
        p.poll(0)
    p.flush(90)
    return acked


def consume_all(bootstrap: str, expected: int, read_committed: bool = True) -> list[bytes]:
    """Every (committed) record of every partition from the beginning (no group: assign)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
    got: list[bytes] = []
    try:
        c.assign([confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
                  for p in range(PARTITIONS)])
        deadline = time.monotonic() + 90
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def consume_group(bootstrap: str, expected: int) -> list[bytes]:
    """Through a consumer group (subscribe, commit): __consumer_offsets is created by the broker
    through ZooKeeper, the group coordinator serves the group."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"grp-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: list[bytes] = []
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + 90
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.commit(asynchronous=False)
        committed = c.committed([confluent_kafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
        assert sum(tp.offset for tp in committed) == expected
    finally:
        c.close()
    return got


def all_logs(brokers: dict[int, ZkServerProcess]) -> str:
    return "\n".join(f"--- broker {i} ---\n{b.log_tail(3000)}" for i, b in brokers.items())


def start_brokers(brokers: dict[int, ZkServerProcess], admin: KafkaZkClient, logs: Callable[[], str]) -> Any:
    """Start the brokers and the admin session, wait for brokers 1, 2, 3 to register; returns the
    controller's id once /controller names one."""
    for b in brokers.values():
        b.start(60)
    admin.start()
    wait_for("three registrations", lambda: admin.get_sorted_broker_list() == [1, 2, 3], 30, logs)
    return wait_for("a controller", admin.get_controller_id, 30, logs)


def test_three_zk_mode_brokers_elect_fail_over_and_lose_nothing(tmp_path: Path) -> None:
    with ZooKeeperServer() as zk:
        connect = zk.connect + "/odradek"
        brokers = {i: ZkServerProcess(tmp_path / f"broker{i}", connect, i) for i in (1, 2, 3)}
        admin = KafkaZkClient(ZkConfig(connect, 10000, 20000))

        def logs() -> str:
            return all_logs(brokers)

        try:
            # exactly one controller: /controller names one broker, and only that broker says so
            controller = start_brokers(brokers, admin, logs)
            epoch_info = admin.get_controller_epoch()
            assert controller in brokers and epoch_info is not None
            epoch = epoch_info[0]
            wait_for("the controller's log line", lambda: "Ready to serve as the new controller" in
                     brokers[controller].log_tail(100000), 30, logs)
            others = [i for i in brokers if i != controller]
            for i in others:
                assert "Ready to serve as the new controller" not in brokers[i].log_tail(100000)
            # ApiVersions: what a Kafka 3.9 ZooKeeper broker serves (the controller's requests, the
            # controller-bound ones), not KRaft's DescribeQuorum
            conn = RawConnection.to(brokers[others[0]])
            try:
                keys = {k["api_key"] for k in conn.request(m.API_VERSIONS, 3, {
                    "client_software_name": "t", "client_software_version": "1"})["api_keys"]}
                for api in (g.LEADER_AND_ISR, g.UPDATE_METADATA, g.STOP_REPLICA, g.CONTROLLED_SHUTDOWN,
                            g.ALTER_PARTITION, g.ALLOCATE_PRODUCER_IDS, m.PRODUCE, m.FETCH):
                    assert api.api_key in keys, api
                assert m.DESCRIBE_QUORUM.api_key not in keys
                # a controller-bound request to a broker that is not the controller: NOT_CONTROLLER
                resp = conn.request(g.ALTER_PARTITION, 0, {"broker_id": others[0], "broker_epoch": 1, "topics": []})
                assert resp["error_code"] == Errors.NOT_CONTROLLER
            finally:
                conn.close()
            # epoch > 0, czxid broker epochs
            regs = admin.get_all_broker_and_epochs()
            assert sorted(regs) == [1, 2, 3] and all(e > 0 for _, e in regs.values())

            # CreateTopics from a Kafka admin client: the broker writes /brokers/topics/<t> (ZkAdminManager)
            bootstrap = ",".join(b.bootstrap_servers for b in brokers.values())
            ac = kafka_admin.AdminClient({"bootstrap.servers": bootstrap})
            fut = ac.create_topics([kafka_admin.NewTopic(TOPIC, PARTITIONS, 3)], request_timeout=30)[TOPIC]
            assert fut.result(60) is None
            assert admin.get_replica_assignment_and_topic_ids([TOPIC])[TOPIC] is not None
            tps = [(TOPIC, p) for p in range(PARTITIONS)]

            # topic configs: given at creation, described, changed through /config/changes
            cfg_topic = "zk-configured"
            fut = ac.create_topics([kafka_admin.NewTopic(cfg_topic, 1, 1, config={"retention.ms": "123456789"})],
                                   request_timeout=30)[cfg_topic]
            assert fut.result(60) is None
            resource = kafka_admin.ConfigResource(kafka_admin.ResourceType.TOPIC, cfg_topic)

            def retention() -> str:
                entries = ac.describe_configs([resource])[resource].result(30)
                return str(entries["retention.ms"].value)

            assert retention() == "123456789"
            change = kafka_admin.ConfigResource(kafka_admin.ResourceType.TOPIC, cfg_topic, incremental_configs=[
                kafka_admin.ConfigEntry("retention.ms", "987654321",
                                        incremental_operation=kafka_admin.AlterConfigOpType.SET)])
            ac.incremental_alter_configs([change])[change].result(30)
            wait_for("the new retention.ms", lambda: retention() == "987654321", 30, logs)

            # DeleteTopics: /admin/delete_topics, StopReplica to the replicas, the topic's znodes gone
            ac.delete_topics([cfg_topic], request_timeout=30)[cfg_topic].result(60)
            wait_for("the deleted topic gone from ZooKeeper", lambda: cfg_topic not in admin.get_all_topics()
                     and not admin.exists(f"/admin/delete_topics/{cfg_topic}"), 30, logs)
            wait_for("the deleted topic gone from the metadata", lambda: cfg_topic not in
                     ac.list_topics(timeout=10).topics, 30, logs)
            wait_for("its log removed", lambda: not any(
                (b.data_dir / f"{cfg_topic}-0").exists() for b in brokers.values()), 30, logs)

            # a dynamic per-broker config: /config/brokers/<id> + notification, in effect there
            target = others[0]
            change_b = kafka_admin.ConfigResource(kafka_admin.ResourceType.BROKER, str(target), incremental_configs=[
                kafka_admin.ConfigEntry("log.cleaner.backoff.ms", "4321",
                                        incremental_operation=kafka_admin.AlterConfigOpType.SET)])
            ac.incremental_alter_configs([change_b])[change_b].result(30)
            one = kafka_admin.ConfigResource(kafka_admin.ResourceType.BROKER, str(target))
            wait_for("the dynamic broker config", lambda: str(
                ac.describe_configs([one])[one].result(30)["log.cleaner.backoff.ms"].value) == "4321", 30, logs)

            def states() -> dict[tuple[str, int], z.PartitionState]:
                return admin.get_topic_partition_states(tps)

            wait_for("leaders", lambda: len(states()) == PARTITIONS and all(
                s.leader in brokers and len(s.isr) == 3 for s in states().values()), 30, logs)
            acked = produce(bootstrap, 0, 300)
            assert len(acked) == 300, logs()
            got = consume_all(bootstrap, 300)
            assert sorted(got) == sorted(acked)
            assert sorted(consume_group(bootstrap, 300)) == sorted(acked)

            # a transaction (coordinator on __transaction_state, created through ZooKeeper): an
            # aborted one is invisible to read_committed, a committed one is read
            for commit, first in ((False, 10000), (True, 20000)):
                tp = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"zk-tx-{first}"})
                tp.init_transactions(60)
                tp.begin_transaction()
                for i in range(first, first + 10):
                    tp.produce(TOPIC, key=str(i).encode(), value=f"v{i}".encode())
                tp.flush(60)
                if commit:
                    tp.commit_transaction(60)
                    acked += [f"v{i}".encode() for i in range(first, first + 10)]
                else:
                    tp.abort_transaction(60)
            got = consume_all(bootstrap, len(acked))
            assert sorted(got) == sorted(acked)

            # kill -9 the controller: another broker wins with epoch + 1
            brokers[controller].kill()
            new_controller = wait_for("a new controller", lambda: (
                c if (c := admin.get_controller_id()) not in (None, controller) else None),
                SESSION_TIMEOUT_MS / 1000 + 30, logs)
            assert new_controller in others
            new_epoch = admin.get_controller_epoch()
            assert new_epoch is not None and new_epoch[0] == epoch + 1
            wait_for("leaders on live brokers", lambda: all(
                s.leader in others and controller not in s.isr for s in states().values()), 30, logs)
            live_bootstrap = ",".join(brokers[i].bootstrap_servers for i in others)
            acked += produce(live_bootstrap, 300, 300)
            assert len(acked) == 610, logs()

            # the killed broker comes back (same meta.properties, a new broker epoch) and catches up
            old_epoch = regs[controller][1]
            brokers[controller].start(60)
            wait_for("re-registration", lambda: controller in admin.get_all_broker_and_epochs(), 30, logs)
            assert admin.get_all_broker_and_epochs()[controller][1] > old_epoch
            assert admin.get_controller_id() == new_controller
            wait_for("the ISR to take the restarted broker back", lambda: all(
                len(s.isr) == 3 for s in states().values()), 60, logs)

            # preferred leader election from an admin client (ElectLeaders, served by the controller's
            # broker): every partition led by its first replica again
            preferred = {p: a.replicas[0] for p, a in
                         admin.get_replica_assignment_and_topic_ids([TOPIC])[TOPIC].partitions.items()}
            ac_all = kafka_admin.AdminClient({"bootstrap.servers": bootstrap})
            ac_all.elect_leaders(confluent_kafka.ElectionType.PREFERRED, [
                confluent_kafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)]).result(60)
            wait_for("preferred leaders", lambda: all(
                states()[(TOPIC, p)].leader == preferred[p] for p in range(PARTITIONS)), 30, logs)

            # kill -9 a partition leader (not the controller): a new leader, nothing acknowledged lost
            victim = next(s.leader for s in states().values() if s.leader != new_controller)
            before = {tp: s.leader_epoch for tp, s in states().items()}
            brokers[victim].kill()
            wait_for("new leaders", lambda: all(
                s.leader not in (victim, -1) for s in states().values()), SESSION_TIMEOUT_MS / 1000 + 30, logs)
            assert any(s.leader_epoch > before[tp] for tp, s in states().items())
            survivors = ",".join(brokers[i].bootstrap_servers for i in brokers if i != victim)
            acked += produce(survivors, 600, 300)
            assert len(acked) == 910, logs()
            got = consume_all(survivors, len(acked))
            missing = set(acked) - set(got)
            assert not missing, f"{len(missing)} acknowledged records lost\n{logs()}"
            assert sorted(got) == sorted(acked)  # idempotent producer: no duplicates either

            # SIGTERM the survivor that is not the controller: controlled shutdown moves its
            # leaderships to the controller's broker first, then it exits cleanly
            leaving = next(i for i in brokers if i not in (victim, new_controller))
            assert brokers[leaving].terminate(60) == 0
            assert "Controlled shutdown succeeded" in brokers[leaving].log_tail(100000), logs()
            assert all(s.leader == new_controller for s in states().values())
            got = consume_all(brokers[new_controller].bootstrap_servers, len(acked))
            assert sorted(got) == sorted(acked)
        finally:
            admin.close()
            for b in brokers.values():
                b.kill()


def test_stopped_controller_loses_its_session_resigns_and_registers_again(tmp_path: Path) -> None:
    """SIGSTOP the controller past zookeeper.session.timeout.ms: another broker wins with epoch + 1;
    SIGCONT: the old one finds its session expired, resigns, registers again (a new broker epoch),
    does not take /controller back, and its replicas rejoin the ISR; nothing acknowledged lost."""
    with ZooKeeperServer() as zk:
        connect = zk.connect + "/odradek-expiry"
        brokers = {i: ZkServerProcess(tmp_path / f"broker{i}", connect, i) for i in (1, 2, 3)}
        admin = KafkaZkClient(ZkConfig(connect, 10000, 20000))

        def logs() -> str:
            return all_logs(brokers)

        try:
            old = start_brokers(brokers, admin, logs)
            epoch = admin.get_controller_epoch()
            assert epoch is not None
            old_broker_epoch = admin.get_all_broker_and_epochs()[old][1]
            bootstrap = ",".join(b.bootstrap_servers for b in brokers.values())
            ac = kafka_admin.AdminClient({"bootstrap.servers": bootstrap})
            ac.create_topics([kafka_admin.NewTopic(TOPIC, PARTITIONS, 3)], request_timeout=30)[TOPIC].result(60)
            tps = [(TOPIC, p) for p in range(PARTITIONS)]

            def states() -> dict[tuple[str, int], z.PartitionState]:
                return admin.get_topic_partition_states(tps)

            wait_for("leaders", lambda: len(states()) == PARTITIONS and all(
                len(s.isr) == 3 for s in states().values()), 30, logs)
            acked = produce(bootstrap, 0, 100)
            assert len(acked) == 100, logs()

            proc = brokers[old].proc
            assert proc is not None
            proc.send_signal(signal.SIGSTOP)
            try:
                new = wait_for("a new controller", lambda: (
                    c if (c := admin.get_controller_id()) not in (None, old) else None),
                    SESSION_TIMEOUT_MS / 1000 + 30, logs)
                new_epoch = admin.get_controller_epoch()
                assert new_epoch is not None and new_epoch[0] == epoch[0] + 1
                wait_for("the stopped broker out of every ISR", lambda: all(
                    old not in s.isr for s in states().values()), 30, logs)
                # what the old controller would send when it resumes is refused by every live
                # broker with STALE_CONTROLLER_EPOCH, and its epoch-guarded writes fail
                for i in brokers:
                    if i != old:
                        assert_old_controller_is_fenced(admin, brokers[i], i, TOPIC, 0, old, epoch[0], epoch[1])
                others = ",".join(brokers[i].bootstrap_servers for i in brokers if i != old)
                acked += produce(others, 100, 100)
                assert len(acked) == 200, logs()
            finally:
                proc.send_signal(signal.SIGCONT)
            wait_for("the resumed broker registered again", lambda: (
                admin.get_all_broker_and_epochs().get(old, (None, -1))[1] > old_broker_epoch), 60, logs)
            wait_for("its replicas back in the ISR", lambda: all(
                len(s.isr) == 3 for s in states().values()), 60, logs)
            assert admin.get_controller_id() == new
            assert admin.get_controller_epoch() == new_epoch  # the old controller wrote nothing more
            assert_resigned_and_silent(brokers[old].log_tail(1_000_000))
            got = consume_all(bootstrap, len(acked))
            assert sorted(got) == sorted(acked)

            # SIGTERM the controller itself: a controlled shutdown through its own controller, a
            # clean exit, and its closed session hands /controller over at once (epoch + 1)
            assert brokers[new].terminate(60) == 0
            assert "Controlled shutdown succeeded" in brokers[new].log_tail(100000), logs()
            third = wait_for("the next controller", lambda: (
                c if (c := admin.get_controller_id()) not in (None, new) else None), 30, logs)
            assert third != new
            last = admin.get_controller_epoch()
            assert last is not None and last[0] == new_epoch[0] + 1
            survivors = ",".join(brokers[i].bootstrap_servers for i in brokers if i != new)
            acked += produce(survivors, 200, 50)
            assert len(acked) == 250, logs()
        finally:
            admin.close()
            for b in brokers.values():
                b.kill()
