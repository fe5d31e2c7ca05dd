"""Client quotas on a real server with real clients: a confluent-kafka producer limited to
1 MiB/s is held to it within 10% over 20 s and sees its throttle time; a consumer byte rate and a
request percentage throttle; no quota, no throttle; quotas set with ``odradek configs`` and with
Kafka 4's kafka-configs.sh, described identically by both, and kept across a restart; a quota
set through one broker of a cluster of processes throttles on another; a user quota holds the
SASL principal.

The server runs with ``quota.window.num=2`` (Kafka's key; default 11). With Kafka's Rate a quota
is measured over ``quota.window.num`` windows and the first ``quota.window.num - 1`` of them are
credited up front, so a client sending as fast as it can gets bursts of up to 10 windows' worth
of its quota every 11 seconds under the defaults: over any 20-second stretch the rate then lies
anywhere between about 0.6 and 1.1 times the quota (1.0 over whole periods; see
tests/unit/test_client_quota_manager.py). With two windows the bursts are one window's worth and
every 20-second stretch is within a few percent of the quota, which is what this test measures.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from odradek.cli.cluster import LocalCluster
from odradek.embedded import EmbeddedBroker
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import ServerProcess, unique_name

ROOT = Path(__file__).resolve().parents[2]
MiB = 1048576


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek.cli.main", *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT, stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("quotas") / "data", {"quota.window.num": "2", "num.partitions": "1"})
    s.start()
    try:
        yield s
    finally:
        s.kill()


def _create_topic(bs: str, topic: str) -> None:
    r = odradek("topics", "--bootstrap-server", bs, "--create", "--topic", topic)
    assert r.returncode == 0, r.stderr


class _Stats:
    """librdkafka's statistics: the largest broker throttle time seen (ms)."""

    def __init__(self) -> None:
        self.max_throttle_ms = 0

    def __call__(self, raw: str) -> None:
        stats = json.loads(raw)
        for b in stats.get("brokers", {}).values():
            self.max_throttle_ms = max(self.max_throttle_ms, int(b.get("throttle", {}).get("max", 0)))


def _produce_flat_out(
    bs: str, topic: str, client_id: str, seconds: float, stats: _Stats, extra: dict[str, str] | None = None
) -> list[tuple[float, int]]:
    """Produce as fast as the producer can for ``seconds``; (ack time, bytes) of each delivery."""
    acks: list[tuple[float, int]] = []
    errors: list[Any] = []
    p = Producer({
        "bootstrap.servers": bs, "client.id": client_id, "linger.ms": 5, "batch.size": 65536,
        "queue.buffering.max.kbytes": 4096, "statistics.interval.ms": 500, "stats_cb": stats,
        "message.timeout.ms": 60000, "compression.type": "none", **(extra or {}),
    })

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acks.append((time.monotonic(), len(msg.value())))

    value = b"q" * 16384
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, value=value, on_delivery=delivered)
        except BufferError:
            p.poll(0.05)
            continue
        p.poll(0)
    p.purge()  # what is still queued at the end is not counted
    p.flush(30)
    assert not [e for e in errors if "Purged" not in str(e)], errors[:3]
    return acks


def test_producer_held_to_its_byte_rate(server: ServerProcess) -> None:
    bs = server.bootstrap_servers
    topic = unique_name("quota-produce")
    _create_topic(bs, topic)
    client_id = unique_name("limited-producer")
    r = odradek("configs", "--bootstrap-server", bs, "--alter", "--add-config", f"producer_byte_rate={MiB}",
                "--entity-type", "clients", "--entity-name", client_id)
    assert (r.returncode, r.stdout) == (0, f"Completed updating config for client {client_id}.\n"), r.stderr

    stats = _Stats()
    acks = _produce_flat_out(bs, topic, client_id, 22.0, stats)
    assert acks
    t0 = acks[0][0]
    acked = sum(n for t, n in acks if t0 <= t < t0 + 20.0)
    rate = acked / 20.0
    print(f"acked {acked} bytes in 20 s: {rate / MiB:.3f} MiB/s; max throttle {stats.max_throttle_ms} ms")
    assert rate == pytest.approx(MiB, rel=0.10)
    assert stats.max_throttle_ms > 0  # the throttle time reached the client


def test_no_quota_no_throttle_and_consumer_byte_rate(server: ServerProcess) -> None:
    bs = server.bootstrap_servers
    topic = unique_name("quota-fetch")
    _create_topic(bs, topic)
    # No quota for this client id (others have quotas): never throttled.
    stats = _Stats()
    # (Batches of at most 64 KiB: a fetch always returns its first batch whole, and one larger
    # than the quota over the quota window could never be sent, as in Kafka.)
    p = Producer({"bootstrap.servers": bs, "client.id": unique_name("free-producer"), "linger.ms": 5,
                  "batch.size": 65536, "statistics.interval.ms": 200, "stats_cb": stats})
    for _ in range(256):
        p.produce(topic, value=b"f" * 16384)
        p.poll(0)
    assert p.flush(30) == 0
    time.sleep(0.5)
    p.poll(0)
    assert stats.max_throttle_ms == 0

    # 4 MiB to read at 256 KiB/s.
    client_id = unique_name("limited-consumer")
    quota = 262144
    r = odradek("configs", "--bootstrap-server", bs, "--alter", "--add-config", f"consumer_byte_rate={quota}",
                "--entity-type", "clients", "--entity-name", client_id)
    assert r.returncode == 0, r.stderr
    cstats = _Stats()
    c = Consumer({"bootstrap.servers": bs, "client.id": client_id, "group.id": unique_name("g"),
                  "auto.offset.reset": "earliest", "statistics.interval.ms": 500, "stats_cb": cstats,
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got, first = 0, None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is None or msg.error():
            continue
        first = first or time.monotonic()
        got += len(msg.value())
        if time.monotonic() - first >= 6.0:
            break
    c.close()
    assert first is not None, "nothing consumed"
    elapsed = time.monotonic() - first
    assert elapsed >= 6.0
    print(f"consumed {got} bytes in {elapsed:.1f} s; max throttle {cstats.max_throttle_ms} ms")
    # Unthrottled, all 4 MiB arrive at once; held to the quota (plus one window's credit).
    assert got <= quota * (elapsed + 1.0) * 1.15
    assert got >= quota * elapsed * 0.5
    assert cstats.max_throttle_ms > 0


def _metadata_loop(bs: str, client_id: str, seconds: float) -> list[tuple[int, float]]:
    """Send Metadata requests one after another: (throttle_time_ms, seconds the next request
    took after a throttled response) pairs."""
    host, port = bs.rsplit(":", 1)

    async def run() -> list[tuple[int, float]]:
        out: list[tuple[int, float]] = []
        async with NetworkClient(host, int(port), client_id=client_id) as client:
            await client.connect()
            end = time.monotonic() + seconds
            last_throttle = 0
            while time.monotonic() < end:
                t = time.monotonic()
                resp = await client.send(m.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                         "include_topic_authorized_operations": False})
                took = time.monotonic() - t
                if last_throttle:
                    out.append((last_throttle, took))
                last_throttle = resp["throttle_time_ms"]
        return out

    return asyncio.run(run())


def test_request_percentage_throttles_and_mutes(server: ServerProcess) -> None:
    bs = server.bootstrap_servers
    client_id = unique_name("busy-client")
    # 0.01% of a request handler thread: a few Metadata requests use it up.
    r = odradek("configs", "--bootstrap-server", bs, "--alter", "--add-config", "request_percentage=0.01",
                "--entity-type", "clients", "--entity-name", client_id)
    assert r.returncode == 0, r.stderr
    throttled = _metadata_loop(bs, client_id, 3.0)
    assert throttled, "no response carried a throttle time"
    # KIP-219: the response came at once, and the next request waited for the throttle time.
    throttle_ms, took = max(throttled)
    assert 0 < throttle_ms <= 1000  # a request-time throttle is at most one quota window
    assert took >= throttle_ms / 1000 * 0.8, (throttle_ms, took)
    # Another client id is not throttled.
    assert _metadata_loop(bs, unique_name("idle-client"), 0.5) == []


@pytest.fixture(scope="module")
def kafka() -> KafkaTools:
    return find_kafka_tools("4")


def test_kafka_configs_sets_and_describes_quotas_which_survive_restart(
    kafka: KafkaTools, server: ServerProcess
) -> None:
    bs = server.bootstrap_servers
    user = unique_name("alice")
    # Kafka's own tool (the Java Admin's AlterClientQuotas) and ours.
    theirs = kafka.run("kafka-configs", "--bootstrap-server", bs, "--alter", "--add-config",
                       "producer_byte_rate=2097152,consumer_byte_rate=1048576", "--entity-type", "users",
                       "--entity-name", user, "--entity-type", "clients", "--entity-default")
    assert theirs.stdout == f"Completed updating config for user {user}.\n"
    r = odradek("configs", "--bootstrap-server", bs, "--alter", "--add-config", "request_percentage=25.5",
                "--entity-type", "users", "--entity-name", user)
    assert (r.returncode, r.stdout) == (0, f"Completed updating config for user {user}.\n"), r.stderr
    r = odradek("client-quotas", "--bootstrap-server", bs, "--alter", "--add-config", "producer_byte_rate=12345678",
                "--entity-type", "users", "--entity-default")
    assert (r.returncode, r.stdout) == (0, "Completed updating default config for users in the cluster.\n"), r.stderr

    def describes() -> dict[tuple[str, ...], str]:
        out = {}
        for args in (("--entity-type", "users", "--entity-name", user),
                     ("--entity-type", "users", "--entity-name", user, "--entity-type", "clients"),
                     ("--entity-type", "users", "--entity-default"),
                     ("--entity-type", "users"), ("--entity-type", "users", "--entity-type", "clients")):
            ours = odradek("configs", "--bootstrap-server", bs, "--describe", *args)
            assert ours.returncode == 0, ours.stderr
            # (Kafka's tool then describes the user's SCRAM credentials too: that API belongs to
            # the SASL side, and it exits 1 while the broker does not serve it.)
            ref = kafka.run("kafka-configs", "--bootstrap-server", bs, "--describe", *args, check=False)
            assert ours.stdout == ref.stdout, (args, ref.stderr[-2000:])
            out[args] = ours.stdout
        return out

    before = describes()
    assert before[("--entity-type", "users", "--entity-name", user)] == (
        f"Quota configs for user-principal '{user}' are request_percentage=25.5\n")
    assert before[("--entity-type", "users", "--entity-name", user, "--entity-type", "clients")] == (
        f"Quota configs for user-principal '{user}', the default client-id are "
        "consumer_byte_rate=1048576.0, producer_byte_rate=2097152.0\n")
    assert before[("--entity-type", "users", "--entity-default")] == (
        "Quota configs for the default user-principal are producer_byte_rate=1.2345678E7\n")

    # Kafka's errors for bad values, through Kafka's tool.
    bad = kafka.run("kafka-configs", "--bootstrap-server", bs, "--alter", "--add-config", "producer_byte_rate=-5",
                    "--entity-type", "clients", "--entity-name", "x", check=False)
    assert bad.returncode != 0
    assert "InvalidRequestException: Quota producer_byte_rate must be greater than 0" in bad.stderr

    server.restart()
    assert describes() == before
    # Removing them all leaves nothing.
    r = odradek("configs", "--bootstrap-server", server.bootstrap_servers, "--alter", "--delete-config",
                "request_percentage", "--entity-type", "users", "--entity-name", user)
    assert r.returncode == 0, r.stderr
    r = odradek("configs", "--bootstrap-server", server.bootstrap_servers, "--describe", "--entity-type", "users",
                "--entity-name", user)
    assert (r.returncode, r.stdout) == (0, "")


def test_quotas_in_a_cluster_of_processes(tmp_path: Path) -> None:
    """One controller, two brokers: a quota set through broker A is forwarded to the controller,
    reaches broker B through the metadata log, and throttles a producer there."""
    cluster = LocalCluster(1, 2, tmp_path, die_with_parent=True)
    broker_a, broker_b = cluster.brokers
    try:
        cluster.start(timeout=90)
        client_id = unique_name("cluster-producer")
        r = odradek("configs", "--bootstrap-server", broker_a.address, "--alter", "--add-config",
                    "producer_byte_rate=65536", "--entity-type", "clients", "--entity-name", client_id)
        assert r.returncode == 0, r.stderr
        expected = f"Quota configs for client-id '{client_id}' are producer_byte_rate=65536.0\n"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = odradek("configs", "--bootstrap-server", broker_b.address, "--describe", "--entity-type", "clients",
                        "--entity-name", client_id)
            if r.stdout == expected:
                break
            time.sleep(0.5)
        assert r.stdout == expected, r.stderr
        topic = unique_name("cluster-quota")
        r = odradek("topics", "--bootstrap-server", broker_b.address, "--create", "--topic", topic,
                    "--replication-factor", "1", "--partitions", "1")
        assert r.returncode == 0, r.stderr
        stats = _Stats()
        acks = _produce_flat_out(broker_b.address, topic, client_id, 3.0, stats)
        print(f"acked {sum(n for _, n in acks)} bytes in 3 s at 64 KiB/s; max throttle {stats.max_throttle_ms} ms")
        # 64 KiB/s, with ten windows' credit up front: far less than unthrottled in 3 s.
        assert sum(n for _, n in acks) <= 65536 * 20
        assert stats.max_throttle_ms > 0
    finally:
        cluster.stop()


def test_user_quota_applies_to_the_sasl_principal() -> None:
    """A user quota holds the principal a SASL login gave, whatever its client id; another
    user with the same client id is not held."""
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
    }
    with EmbeddedBroker(overrides=overrides) as b:
        sasl = f"127.0.0.1:{b.bound_ports['SASL_PLAINTEXT']}"
        topic = unique_name("sasl-quota")
        _create_topic(b.bootstrap_servers, topic)
        r = odradek("configs", "--bootstrap-server", b.bootstrap_servers, "--alter", "--add-config",
                    "producer_byte_rate=65536", "--entity-type", "users", "--entity-name", "alice")
        assert r.returncode == 0, r.stderr
        sent: dict[str, tuple[int, int]] = {}
        for user in ("alice", "admin"):
            stats = _Stats()
            acks = _produce_flat_out(sasl, topic, "same-client-id", 3.0, stats, {
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": f"{user}-secret"})
            sent[user] = (sum(n for _, n in acks), stats.max_throttle_ms)
        print(f"3 s of producing: {sent}")
        assert sent["alice"][0] <= 65536 * 20 and sent["alice"][1] > 0
        assert sent["admin"][1] == 0 and sent["admin"][0] > 65536 * 20
