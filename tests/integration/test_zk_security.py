"""ZooKeeper mode with secured listeners: a real ZooKeeper and three ``odradek server`` processes
(``zookeeper.connect``, no ``process.roles``) whose only listeners are a secured client listener
and a secured inter-broker one, so that every connection between the brokers (the controller's
LeaderAndIsr / UpdateMetadata, the brokers' AlterPartition to the controller, the replica fetchers,
transaction markers) must use TLS or SASL to work at all.

- mutual TLS: CLIENT and INTERNAL are SSL with ``ssl.client.auth=required``; the brokers connect
  to each other with their own certificate; a client with a certificate from another CA is refused;
- SASL: CLIENT is SASL_PLAINTEXT, INTERNAL SASL_SSL, PLAIN, the brokers log in to each other as
  ``admin`` (``sasl.mechanism.inter.broker.protocol=PLAIN`` and the listener's JAAS username and
  password); SCRAM with the credentials of ``/config/users/<user>`` znodes; wrong passwords are
  refused.

In both: a controller is elected, a topic with three replicas gets ISR 3, confluent-kafka produces
(acks=all) and consumes over the client listener, ``kill -9`` of a partition leader → a new
leader, nothing acknowledged lost; the killed broker catches up; SIGTERM runs a controlled
shutdown through the secured listener.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.security.scram_credential import ScramMechanism, generate_credential
from odradek.security.zk_credential_provider import credential_to_string
from odradek.zk.admin_zk_client import AdminZkClient
from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig
from tests.unit.tls_certs import TlsFiles, make_ca, make_tls_files

from .support import _READY_RE, ServerProcess
from .test_sasl import BAD_LOGIN, PLAIN_JAAS, _auth_errors, roundtrip_confluent
from .zookeeper_support import ZooKeeperServer, _free_port, wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.timeout(400)

SESSION_TIMEOUT_MS = 6000
TOPIC = "zk-secured"
PARTITIONS = 3


class SecuredZkBroker(ServerProcess):
    """``odradek server`` in ZooKeeper mode with CLIENT and INTERNAL listeners only (ports chosen
    once, kept across restarts)."""

    def __init__(self, data_dir: Path, zk_connect: str, broker_id: int, props: dict[str, str]) -> None:
        super().__init__(data_dir)
        self.broker_id = broker_id
        self.zk_connect = zk_connect
        self.client_port = _free_port()
        self.internal_port = _free_port()
        self.props = props

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def _command(self) -> list[str]:
        props = {
            "broker.id": str(self.broker_id),
            "zookeeper.connect": self.zk_connect,
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "log.dirs": str(self.data_dir),
            "listeners": f"CLIENT://127.0.0.1:{self.client_port},INTERNAL://127.0.0.1:{self.internal_port}",
            "inter.broker.listener.name": "INTERNAL",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "replica.lag.time.max.ms": "5000",
            "controlled.shutdown.max.retries": "1",
            "group.initial.rebalance.delay.ms": "0",
            **self.props,
        }
        cmd = [sys.executable, "-m", "odradek.cli.main", "server"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 60.0) -> SecuredZkBroker:
        assert self.proc is None, "already running"
        with open(self.log_path, "ab") as logf:
            offset = logf.tell()
            self.proc = subprocess.Popen(self._command(), stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _READY_RE.search(self._log_since(offset)):
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"odradek server exited with {self.proc.returncode}:\n"
                                   f"{self._log_since(offset)[-4000:]}")
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"odradek server not ready in {timeout}s:\n{self._log_since(offset)[-4000:]}")


def produce(conf: dict[str, str], first: int, n: int) -> list[bytes]:
    """``n`` records with acks=all, idempotent; returns the values acknowledged."""
    p = confluent_kafka.Producer({**conf, "acks": "all", "enable.idempotence": True,
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


def consume_all(conf: dict[str, str], expected: int) -> list[bytes]:
    c = confluent_kafka.Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest"})
    got: list[bytes] = []
    try:
        c.assign([confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
                  for p in range(PARTITIONS)])
        deadline = time.monotonic() + 90
        while len(got) < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        c.close()
    return got


def run_cluster(tmp_path: Path, props: dict[str, str], client_conf: dict[str, str], peer_log: str = "",
                users: dict[str, dict[str, str]] | None = None) -> None:
    """Three brokers with ``props``; a controller, an RF=3 topic with ISR 3, produce and consume
    over the client listener with ``client_conf``, kill -9 of a leader, nothing acknowledged lost;
    ``peer_log``: a line every broker logs about the other brokers' connections; ``users``: the
    ``/config/users/<user>`` configs written before the brokers start."""
    with ZooKeeperServer() as zk:
        connect = zk.connect + "/odradek"
        brokers = {i: SecuredZkBroker(tmp_path / f"broker{i}", connect, i, props) for i in (1, 2, 3)}
        admin = KafkaZkClient(ZkConfig(connect, 10000, 20000))

        def logs() -> str:
            return "\n".join(f"--- broker {i} ---\n{b.log_tail(3000)}" for i, b in brokers.items())

        try:
            admin.start()
            for user, config in (users or {}).items():
                AdminZkClient(admin).change_entity_config("users", user, config)
            for b in brokers.values():
                b.start(60)
            wait_for("three registrations", lambda: admin.get_sorted_broker_list() == [1, 2, 3], 30, logs)
            controller = wait_for("a controller", admin.get_controller_id, 30, logs)
            assert controller in brokers
            # every broker registered its two secured endpoints
            for i in brokers:
                info = admin.get_broker(i)
                assert info is not None
                assert sorted(e.split("://")[0] for e in info.endpoints) == ["CLIENT", "INTERNAL"]

            conf = {"bootstrap.servers": ",".join(b.bootstrap_servers for b in brokers.values()), **client_conf}
            ac = kafka_admin.AdminClient(conf)
            fut = ac.create_topics([kafka_admin.NewTopic(TOPIC, PARTITIONS, 3)], request_timeout=30)[TOPIC]
            assert fut.result(60) is None
            tps = [(TOPIC, p) for p in range(PARTITIONS)]

            def states() -> dict[Any, Any]:
                return admin.get_topic_partition_states(tps)

            # leaders from the controller (LeaderAndIsr over the secured inter-broker listener)
            wait_for("leaders", lambda: len(states()) == PARTITIONS and all(
                s.leader in brokers and len(s.isr) == 3 for s in states().values()), 30, logs)
            acked = produce(conf, 0, 200)
            assert len(acked) == 200, logs()

            def in_sync() -> bool:
                parts = ac.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions
                return len(parts) == PARTITIONS and all(sorted(pm.isrs) == [1, 2, 3] for pm in parts.values())

            wait_for("ISR 3 in the brokers' metadata", in_sync, 30, logs)
            assert sorted(consume_all(conf, len(acked))) == sorted(acked)

            # kill -9 the leader of partition 0 (not the controller, if possible): a new leader
            leader = states()[(TOPIC, 0)].leader
            brokers[leader].kill()
            wait_for("a new leader of partition 0", lambda: (
                s := states().get((TOPIC, 0))) is not None and s.leader not in (-1, leader), 60, logs)
            acked += produce(conf, 200, 100)
            assert len(acked) == 300, logs()
            got = consume_all(conf, len(acked))
            assert sorted(got) == sorted(acked), logs()

            # the killed broker comes back and catches up: ISR 3 again
            brokers[leader].start(60)
            wait_for("ISR 3 after the restart", lambda: all(len(s.isr) == 3 for s in states().values()), 60, logs)
            # SIGTERM: a controlled shutdown, ControlledShutdown sent to the controller over INTERNAL
            stopping = next(i for i in brokers if i != admin.get_controller_id())
            assert brokers[stopping].terminate(60) == 0
            assert "Controlled shutdown request returned successfully" in brokers[stopping].log_tail(10**7)
            text = logs()
            assert "Traceback" not in text, text
            if peer_log:
                for b in brokers.values():
                    assert re.search(peer_log, b.log_tail(10**7)), b.log_tail(4000)
        finally:
            admin.close()
            for b in brokers.values():
                if b.proc is not None and b.proc.poll() is None:
                    b.kill()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("zk-tls-certs"))


def test_zk_mode_brokers_over_mutual_tls(tls_files: TlsFiles, tmp_path: Path) -> None:
    props = {
        "listener.security.protocol.map": "CLIENT:SSL,INTERNAL:SSL",
        **tls_files.server_props(client_auth="required"),
    }
    cert, key, _p12 = tls_files.client("app")
    client = {"security.protocol": "SSL", "ssl.ca.location": str(tls_files.ca_pem),
              "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    run_cluster(tmp_path, props, client)


def test_zk_mode_untrusted_client_certificate_refused(tls_files: TlsFiles, tmp_path: Path) -> None:
    props = {
        "listener.security.protocol.map": "CLIENT:SSL,INTERNAL:SSL",
        **tls_files.server_props(client_auth="required"),
    }
    with ZooKeeperServer() as zk:
        broker = SecuredZkBroker(tmp_path / "b1", zk.connect + "/odradek", 1, props)
        try:
            broker.start(60)
            cert, key, _p12 = tls_files.client("mallory", ca=make_ca("Other CA"))
            client = {"bootstrap.servers": broker.bootstrap_servers, "security.protocol": "SSL",
                      "ssl.ca.location": str(tls_files.ca_pem),
                      "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
            ac = kafka_admin.AdminClient({**client, "retries": 0, "reconnect.backoff.max.ms": 1000})
            with pytest.raises(confluent_kafka.KafkaException):
                ac.list_topics(timeout=3)
            wait_for("the handshake failure logged", lambda: re.search(
                r"TLS handshake with 127\.0\.0\.1:\d+ on listener CLIENT failed.*certificate verify failed",
                broker.log_tail(100000)), 10, lambda: broker.log_tail(4000))
            assert broker.proc is not None and broker.proc.poll() is None
            # the same client with a certificate of the cluster's CA is served
            cert, key, _p12 = tls_files.client("app")
            good = kafka_admin.AdminClient({**client, "ssl.certificate.location": str(cert),
                                            "ssl.key.location": str(key)})
            assert good.list_topics(timeout=30).brokers
        finally:
            broker.kill()


SASL_PROPS = {
    "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,INTERNAL:SASL_SSL",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.client.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.name.internal.plain.sasl.jaas.config": PLAIN_JAAS,
}


def test_zk_mode_brokers_over_sasl_plain(tls_files: TlsFiles, tmp_path: Path) -> None:
    props = {**SASL_PROPS, **tls_files.server_props("listener.name.internal.")}
    client = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
              "sasl.username": "alice", "sasl.password": "alice-secret"}
    # the brokers logged in to each other as admin on INTERNAL (the controller's and the fetchers'
    # connections)
    run_cluster(tmp_path, props, client, peer_log=r"on listener INTERNAL authenticated as User:admin with PLAIN")


def test_zk_mode_brokers_over_sasl_scram(tls_files: TlsFiles, tmp_path: Path) -> None:
    """The brokers log in to each other with SCRAM-SHA-512 over SASL_SSL, with the credential of
    ``admin`` in ``/config/users/admin`` created before they start (as Kafka's ZooKeeper-mode
    documentation has it); clients use PLAIN."""
    scram_jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
                  'password="admin-secret";')
    props = {**SASL_PROPS, **tls_files.server_props("listener.name.internal."),
             "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
             "listener.name.internal.scram-sha-512.sasl.jaas.config": scram_jaas}
    cred = generate_credential(ScramMechanism.SCRAM_SHA_512, "admin-secret", 4096)
    client = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
              "sasl.username": "alice", "sasl.password": "alice-secret"}
    run_cluster(tmp_path, props, client, peer_log=r"on listener INTERNAL authenticated as User:admin with SCRAM-SHA-512",
                users={"admin": {"SCRAM-SHA-512": credential_to_string(cred)}})


def test_zk_mode_scram_credentials_from_znodes_and_wrong_passwords(tls_files: TlsFiles, tmp_path: Path) -> None:
    """SCRAM in ZooKeeper mode: a credential written to ``/config/users/alice`` in Kafka's format
    (as ``kafka-configs --zookeeper`` wrote it) with a ``/config/changes`` notification reaches the
    running broker; confluent-kafka logs in with it; a wrong password (SCRAM and PLAIN) and an
    unknown user are refused; a removed credential is refused."""
    props = {**SASL_PROPS, **tls_files.server_props("listener.name.internal."),
             "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"}
    with ZooKeeperServer() as zk:
        connect = zk.connect + "/odradek"
        broker = SecuredZkBroker(tmp_path / "b1", connect, 1, props)
        zkc = KafkaZkClient(ZkConfig(connect, 10000, 20000))
        try:
            broker.start(60)
            zkc.start()
            cred = generate_credential(ScramMechanism.SCRAM_SHA_256, "alice-scram", 4096)
            AdminZkClient(zkc).change_entity_config("users", "alice", {"SCRAM-SHA-256": credential_to_string(cred)})
            wait_for("the credential applied", lambda: "SCRAM credentials of user alice: SCRAM-SHA-256"
                     in broker.log_tail(10**6), 30, lambda: broker.log_tail(4000))
            conf = {"bootstrap.servers": broker.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "alice-scram"}
            roundtrip_confluent(conf, "scram-topic")
            for bad in ({"sasl.password": "wrong"}, {"sasl.username": "mallory"},
                        {"sasl.mechanism": "PLAIN", "sasl.password": "wrong"}):
                errors = _auth_errors({**conf, **bad})
                needle = BAD_LOGIN if bad.get("sasl.mechanism") == "PLAIN" else "invalid credentials with SASL mechanism"
                assert errors and needle in errors[0].str(), bad
            # the credential removed: refused from then on
            AdminZkClient(zkc).change_entity_config("users", "alice", {})
            wait_for("the credential removed", lambda: "SCRAM credentials of user alice: none"
                     in broker.log_tail(10**6), 30, lambda: broker.log_tail(4000))
            errors = _auth_errors(conf)
            assert errors and "invalid credentials with SASL mechanism SCRAM-SHA-256" in errors[0].str()
            assert broker.proc is not None and broker.proc.poll() is None
        finally:
            zkc.close()
            broker.kill()
