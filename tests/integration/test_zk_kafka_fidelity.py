"""odradek.zk against the real thing: a Kafka 3.9.2 broker in ZooKeeper mode (from the Maven jars
scripts/kafka_reference.sh fetches) on a ZooKeeper of our own.

Kafka writes its znodes (registration, controller, topic, partition states, configs, change
notifications); we decode each and re-encode it, and the bytes must be Kafka's. Then the other way:
a topic and its config written with our encoders are picked up by Kafka's controller as if its own
admin client had written them.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import die_with_parent
from .zookeeper_support import ZooKeeperServer, _free_port

pytestmark = pytest.mark.timeout(400)

CHROOT = "/kafka39"


class ZkModeKafka:
    """One Kafka 3.9 broker (broker.id=1) in ZooKeeper mode: it is also the controller."""

    def __init__(self, tools: KafkaTools, zk_connect: str, data_dir: Path) -> None:
        self.tools = tools
        self.port = _free_port()
        self.internal_port = _free_port()
        self.data_dir = data_dir
        self.zk_connect = zk_connect
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "kafka.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ZkModeKafka:
        props = {
            "broker.id": "1",
            "zookeeper.connect": self.zk_connect,
            "zookeeper.session.timeout.ms": "10000",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},INTERNAL://127.0.0.1:{self.internal_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "broker.rack": "rack-a",
            "log.dirs": str(self.data_dir / "logs"),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        config = self.data_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        env = dict(os.environ)
        env.setdefault("KAFKA_HEAP_OPTS", "-Xmx512m")
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [str(self.tools.home / "bin" / "kafka-run"), "--line", self.tools.line,
                 "kafka.Kafka", str(config)],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                preexec_fn=die_with_parent)
        return self

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def wait_for(cond: object, what: str, kafka: ZkModeKafka, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert kafka.proc is not None
        if kafka.proc.poll() is not None:
            raise AssertionError(f"Kafka exited {kafka.proc.returncode}:\n{kafka.log_tail()}")
        try:
            if cond():  # type: ignore[operator]
                return
        except Exception:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}\n{kafka.log_tail()}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ZkModeKafka, KafkaZkClient]]:
    tools = find_kafka_tools("3.9")
    with ZooKeeperServer() as zk:
        kafka = ZkModeKafka(tools, zk.connect + CHROOT, tmp_path_factory.mktemp("kafka39")).start()
        client = KafkaZkClient(ZkConfig(zk.connect + CHROOT, 10000, 20000)).start()
        try:
            wait_for(lambda: client.get_controller_id() == 1, "Kafka to register and lead", kafka)
            yield kafka, client
        finally:
            client.close()
            kafka.stop()


def reencodes(data: bytes, encoded: bytes, what: str) -> None:
    assert encoded == data, f"{what}: Kafka wrote\n  {data!r}\nwe write\n  {encoded!r}"


def test_kafka_written_znodes_reencode_byte_for_byte(cluster: tuple[ZkModeKafka, KafkaZkClient]) -> None:
    kafka, client = cluster
    tools = kafka.tools
    tools.run("kafka-topics", "--bootstrap-server", kafka.bootstrap, "--create", "--topic", "fid",
              "--partitions", "12", "--replication-factor", "1",
              "--config", "retention.ms=123456", "--config", "cleanup.policy=compact",
              "--config", "max.message.bytes=2000000", "--config", "segment.bytes=1048576")
    tools.run("kafka-configs", "--bootstrap-server", kafka.bootstrap, "--alter", "--entity-type",
              "topics", "--entity-name", "fid", "--add-config", "min.insync.replicas=1")
    wait_for(lambda: len(client.get_topic_partition_states([("fid", p) for p in range(12)])) == 12,
             "partition states", kafka)
    wait_for(lambda: "min.insync.replicas" in client.get_entity_configs("topics", "fid"),
             "the altered config", kafka)

    checked: list[str] = []

    def get(path: str) -> bytes:
        got = client.get_data(path)
        assert got is not None, f"{path} missing"
        checked.append(path)
        return got[0]

    data = get("/brokers/ids/1")
    info = z.decode_broker(1, data)
    assert info.rack == "rack-a" and info.version == 5 and info.host == "127.0.0.1"
    assert {e[0] for e in info.endpoint_tuples()} == {"PLAINTEXT", "INTERNAL"}
    reencodes(data, z.encode_broker(info), "/brokers/ids/1")

    data = get("/controller")
    reg = z.decode_controller(data)
    assert reg.broker_id == 1
    reencodes(data, z.encode_controller(reg.broker_id, int(reg.timestamp), reg.kraft_controller_epoch or -1),
              "/controller")
    data = get("/controller_epoch")
    reencodes(data, z.encode_controller_epoch(z.decode_controller_epoch(data)), "/controller_epoch")
    data = get("/cluster/id")
    reencodes(data, z.encode_cluster_id(z.decode_cluster_id(data)), "/cluster/id")

    data = get("/brokers/topics/fid")
    topic = z.decode_topic("fid", data)
    assert topic.topic_id and sorted(topic.partitions) == list(range(12))
    reencodes(data, z.encode_topic(topic.topic_id, topic.partitions), "/brokers/topics/fid")
    for p in range(12):
        path = z.partition_state_path("fid", p)
        data = get(path)
        state = z.decode_partition_state(data)
        assert state.leader == 1 and state.isr == (1,)
        reencodes(data, z.encode_partition_state(state), path)

    data = get("/config/topics/fid")
    config = z.decode_config_entity(data)
    assert config["retention.ms"] == "123456" and config["min.insync.replicas"] == "1"
    reencodes(data, z.encode_config_entity(config), "/config/topics/fid")
    changes = client.get_children(z.CONFIG_CHANGES_PATH)
    assert changes, "kafka-configs --alter wrote no change notification"
    for name in changes:
        data = get(f"{z.CONFIG_CHANGES_PATH}/{name}")
        reencodes(data, z.encode_config_change_notification(z.decode_config_change_notification(data)),
                  name)
    data = get(z.FEATURE_PATH)  # the ZooKeeper-mode controller finalizes features (IBP >= 2.7)
    reencodes(data, z.encode_feature(z.decode_feature(data)), z.FEATURE_PATH)
    for path in z.PERSISTENT_PATHS:  # Kafka created the same top-level paths
        assert client.exists(path), path
    assert len(checked) >= 18


def test_kafka_adopts_a_topic_we_write(cluster: tuple[ZkModeKafka, KafkaZkClient]) -> None:
    """Kafka's controller reads our /config/topics and /brokers/topics bytes as its own (the old
    AdminZkClient path): it creates the partitions, elects leaders and keeps our topic id."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    kafka, client = cluster
    topic_id = "AAECAwQFBgcICQoLDA0ODw"
    client.set_or_create_entity_configs("topics", "ours", {"retention.ms": "777000"})
    client.create_topic_assignment("ours", topic_id, {0: z.ReplicaAssignment((1,)),
                                                      1: z.ReplicaAssignment((1,))})
    wait_for(lambda: len(client.get_topic_partition_states([("ours", 0), ("ours", 1)])) == 2,
             "Kafka's controller to create our topic's partitions", kafka)
    states = client.get_topic_partition_states([("ours", 0), ("ours", 1)])
    assert all(s.leader == 1 and s.isr == (1,) for s in states.values())
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    wait_for(lambda: len(admin.list_topics("ours", timeout=5).topics["ours"].partitions) == 2,
             "metadata of our topic", kafka)
    res = ConfigResource(ConfigResource.Type.TOPIC, "ours")
    configs = admin.describe_configs([res])[res].result(timeout=30)
    assert configs["retention.ms"].value == "777000"
    # Kafka kept our topic id (the znode it may rewrite still carries it).
    assert client.get_replica_assignment_and_topic_ids(["ours"])["ours"].topic_id == topic_id
