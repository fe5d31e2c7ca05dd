"""The Prometheus endpoint (metrics.prometheus.listener) scraped while real clients work, and
the request log (kafka.request.logger) with its slow-request warning."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from odradek.embedded import EmbeddedBroker
from odradek.protocol import messages as m

from .support import RawConnection, unique_name, wait_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def metrics_url(broker: EmbeddedBroker) -> str:
    endpoint = broker.server.shared.metrics
    assert endpoint is not None
    return str(endpoint.url)


@pytest.fixture(scope="module")
def metered() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker({
        "metrics.prometheus.listener": "http://127.0.0.1:0",
        "request.slow.threshold.ms": "200",
    }) as b:
        yield b


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=b"v%04d" % i, key=b"k")
    assert p.flush(30) == 0


def _consume(c: Consumer, n: int) -> None:
    got = 0
    deadline = time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
    assert got == n
    c.commit(asynchronous=False)


def test_numbers_move_while_clients_produce_and_consume(metered: EmbeddedBroker) -> None:
    url = metrics_url(metered)
    bootstrap = metered.bootstrap_servers
    topic, group = unique_name("prom"), unique_name("g")
    before = scrape(url)
    # The single node is the active controller; its own metrics are there from the start.
    assert value(before, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(before, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert ("odradek_eventloop_lag_seconds", frozenset()) in before

    _create(bootstrap, topic)
    _produce(bootstrap, topic, 50)
    after = scrape(url)
    mi = "kafka_server_brokertopicmetrics_messagesin_total"
    assert value(after, mi, topic=topic) == 50
    assert value(after, mi) - value(before, mi) >= 50
    bi = "kafka_server_brokertopicmetrics_bytesin_total"
    assert value(after, bi, topic=topic) > 50 * 5  # at least the values
    rq = "kafka_network_requestmetrics_requests_total"
    produces = sum(v for (n, lb), v in after.items() if n == rq and ("request", "Produce") in lb)
    assert produces >= 1
    assert value(after, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == produces
    assert value(after, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf") == produces
    assert sum(v for (n, lb), v in after.items() if n == rq and ("request", "CreateTopics") in lb) >= 1
    assert value(after, "kafka_server_replicamanager_partitioncount") >= 1
    assert value(after, "kafka_server_replicamanager_leadercount") >= 1
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(after, "kafka_controller_kafkacontroller_globalpartitioncount") >= 1

    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    try:
        c.subscribe([topic])
        _consume(c, 50)
        consumed = scrape(url)
        lag = "kafka_consumergroup_lag"
        assert value(consumed, lag, consumergroup=group, topic=topic, partition="0") == 0
        assert (lag, frozenset({"consumergroup": group, "topic": topic, "partition": "0"}.items())) in consumed
        assert value(consumed, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > 50 * 5
        fetches = sum(v for (n, lb), v in consumed.items() if n == rq and ("request", "Fetch") in lb)
        assert fetches >= 1
        assert value(consumed, "kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1
        assert value(consumed, "kafka_coordinator_group_groupmetadatamanager_numgroupsstable") >= 1
        assert value(consumed, "kafka_coordinator_group_groupmetadatamanager_numoffsets") >= 1
        assert value(consumed, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 1

        _produce(bootstrap, topic, 30)  # the group has not read these yet: lag 30
        behind = scrape(url)
        assert value(behind, lag, consumergroup=group, topic=topic, partition="0") == 30
        assert value(behind, mi, topic=topic) == 80
        _consume(c, 30)
        assert value(scrape(url), lag, consumergroup=group, topic=topic, partition="0") == 0
    finally:
        c.close()


def test_purgatory_size_counts_a_waiting_fetch(metered: EmbeddedBroker) -> None:
    url = metrics_url(metered)
    topic = unique_name("purg")
    _create(metered.bootstrap_servers, topic)
    c = Consumer({
        "bootstrap.servers": metered.bootstrap_servers, "group.id": unique_name("g"),
        "fetch.wait.max.ms": 5000, "auto.offset.reset": "latest",
    })
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        size = "kafka_server_delayedoperationpurgatory_purgatorysize"

        def waiting() -> bool:
            c.poll(0.1)
            return value(scrape(url), size, delayedoperation="Fetch") >= 1

        wait_until(waiting, timeout=20, what="a consumer's fetch waiting in the purgatory")
    finally:
        c.close()


def test_unknown_path_is_404(metered: EmbeddedBroker) -> None:
    url = metrics_url(metered).replace("/metrics", "/other")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=10)
    assert e.value.code == 404


def test_request_log_at_debug_and_slow_requests_at_warn(
    metered: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_name("rlog")
    _create(metered.bootstrap_servers, topic)
    logger = logging.getLogger("kafka.request.logger")
    with RawConnection.to(metered) as conn:
        # Off by default: nothing on the request logger for a quick request.
        with caplog.at_level(logging.INFO, logger="kafka.request.logger"):
            conn.request(m.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})
        assert not [r for r in caplog.records if r.name == "kafka.request.logger"]
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="kafka.request.logger"):
            assert logger.isEnabledFor(logging.DEBUG)
            conn.request(m.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})
            wait_until(lambda: any("api=Metadata" in r.getMessage() for r in caplog.records), timeout=10)
        line = next(r for r in caplog.records if "api=Metadata" in r.getMessage())
        assert line.levelno == logging.DEBUG
        text = line.getMessage()
        for field in ("from 127.0.0.1:", "version=12", "correlationId=", "totalTimeMs=", "responseBytes=",
                      "error=NONE"):
            assert field in text, text
        caplog.clear()
        # A fetch waiting 600 ms for data that never comes takes longer than
        # request.slow.threshold.ms (200) but is a long poll: not slow.
        with caplog.at_level(logging.INFO, logger="kafka.request.logger"):
            conn.request(m.FETCH, 12, _waiting_fetch(topic, 600))
            apis = metered.server.broker.broker_apis
            assert apis.slow_request_ms == 200
            # Any request is slower than a nanosecond: logged at WARNING although DEBUG is off.
            apis.slow_request_ms = 1e-6
            try:
                conn.request(m.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})
                wait_until(lambda: any("api=Metadata" in r.getMessage() for r in caplog.records), timeout=10)
            finally:
                apis.slow_request_ms = 200
        assert not [r for r in caplog.records if "api=Fetch" in r.getMessage()]
        slow = next(r for r in caplog.records if "api=Metadata" in r.getMessage())
        assert slow.levelno == logging.WARNING
    # That fetch waited in the purgatory: remote time, not local time.
    samples = scrape(metrics_url(metered))
    assert value(samples, "kafka_network_requestmetrics_remotetimems_sum", request="Fetch") >= 500
    assert value(samples, "kafka_network_requestmetrics_localtimems_count", request="Fetch") >= 1


def _waiting_fetch(topic: str, wait_ms: int) -> dict[str, Any]:
    return {
        "cluster_id": None, "replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "topic_id": uuid.UUID(int=0), "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20, "replica_directory_id": uuid.UUID(int=0),
        }]}],
        "forgotten_topics_data": [], "rack_id": "",
    }


def test_no_endpoint_unless_configured(broker: EmbeddedBroker) -> None:
    assert broker.server.shared.metrics is None


@pytest.mark.parametrize("bad", ["127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1", "http://h:1/x"])
def test_a_bad_listener_is_refused_at_startup(tmp_path: Path, bad: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "odradek.cli.main", "server", "--override", f"log.dirs={tmp_path}",
         "--override", f"metrics.prometheus.listener={bad}"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0
    assert "metrics.prometheus.listener" in proc.stderr and "http://HOST:PORT" in proc.stderr, proc.stderr


def test_zookeeper_mode_broker_serves_metrics(connect: str) -> None:
    from odradek.server.zk_broker_server import ZkBrokerServer

    with EmbeddedBroker({
        "zookeeper.connect": connect, "broker.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0",
        "metrics.prometheus.listener": "http://127.0.0.1:0",
    }, server_factory=ZkBrokerServer) as b:
        assert b.server.metrics is not None
        url = b.server.metrics.url
        active = "kafka_controller_kafkacontroller_activecontrollercount"
        wait_until(lambda: value(scrape(url), active) == 1, timeout=30, what="the ZooKeeper controller elected")
        topic = unique_name("zkprom")
        _create(b.bootstrap_servers, topic)
        _produce(b.bootstrap_servers, topic, 20)
        samples = scrape(url)
        assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 20
        assert value(samples, "kafka_controller_kafkacontroller_globalpartitioncount") >= 1
        produces = sum(v for (n, lb), v in samples.items()
                       if n == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in lb)
        assert produces >= 1


def test_under_replicated_partitions_after_a_broker_dies(tmp_path: Path) -> None:
    from .replication_cluster import ReplicationCluster
    from .test_raft_quorum import _free_ports

    cluster = ReplicationCluster(tmp_path, controller_extra="auto.leader.rebalance.enable=false\n")
    ports = dict(zip((0, 1, 2, 3), _free_ports(4), strict=True))
    for node in cluster.nodes:
        with node.config.open("a") as f:
            f.write(f"metrics.prometheus.listener=http://127.0.0.1:{ports[node.node_id]}\n")
    url = {i: f"http://127.0.0.1:{p}/metrics" for i, p in ports.items()}
    cluster.start()
    try:
        topic = unique_name("urp")
        admin = cluster.admin()
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
        cluster.wait_for(topic, lambda s: len(s) == 3 and all(len(isr) == 3 for _, _, isr in s.values()),
                         what="fully replicated")
        urp = "kafka_server_replicamanager_underreplicatedpartitions"
        assert sum(value(scrape(url[b]), urp) for b in (1, 2, 3)) == 0
        # The controller-only process: the active controller, with the cluster's partitions.
        ctl = scrape(url[0])
        assert value(ctl, "kafka_controller_kafkacontroller_activecontrollercount") == 1
        assert value(ctl, "kafka_controller_kafkacontroller_globalpartitioncount") >= 3
        # A broker-only process runs no controller: it exports no controller metrics at all
        # (summing the metric over all nodes still gives 1).
        assert not any(name.startswith("kafka_controller_") for name, _ in scrape(url[1]))
        cluster.brokers[3].kill()
        # Fenced after broker.session.timeout.ms: out of every ISR, and the leaders on 1 and 2
        # count their partitions as under-replicated.
        wait_until(lambda: sum(value(scrape(url[b]), urp) for b in (1, 2)) == 3, timeout=60,
                   what="3 under-replicated partitions on brokers 1 and 2")
        assert value(scrape(url[0]), "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    finally:
        cluster.stop()


def test_request_log_of_a_server_process_enabled_from_the_command_line(tmp_path: Path) -> None:
    from .support import ServerProcess

    class Logged(ServerProcess):
        def _command(self) -> list[str]:
            return [*super()._command(), "--log-level", "kafka.request.logger=DEBUG"]

    server = Logged(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers, "client.id": "req-log-test"})
        admin.list_topics(timeout=10)
        wait_until(lambda: "clientId=req-log-test api=Metadata" in server.log_tail(20000), timeout=10,
                   what="the Metadata request in the request log")
        line = next(x for x in server.log_tail(20000).splitlines() if "clientId=req-log-test api=Metadata" in x)
        assert " DEBUG kafka.request.logger: Completed request from 127.0.0.1:" in line, line
    finally:
        server.terminate()


def test_a_taken_metrics_port_fails_the_start_with_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "odradek.cli.main", "server", "--override", f"log.dirs={tmp_path}",
             "--override", "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
             "--override", f"metrics.prometheus.listener=http://127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60,
        )
    assert proc.returncode == 2, proc.stderr
    assert f"cannot listen on 127.0.0.1:{port} (metrics.prometheus.listener)" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_log_flushes_are_timed(metered: EmbeddedBroker) -> None:
    url = metrics_url(metered)
    flushes = "kafka_log_logflushstats_logflushrateandtimems_count"
    before = value(scrape(url), flushes)
    topic = unique_name("flush")
    admin = AdminClient({"bootstrap.servers": metered.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1, config={"flush.messages": "1"})])[topic].result(30)
    _produce(metered.bootstrap_servers, topic, 3)  # an fsync before each acknowledgement
    after = scrape(url)
    assert value(after, flushes) > before
    assert value(after, "kafka_log_logflushstats_logflushrateandtimems_bucket", le="+Inf") == value(after, flushes)


def test_quota_throttle_time_and_byte_rate_of_a_throttled_producer() -> None:
    from .test_quotas import _create_topic, _produce_flat_out, _Stats, odradek

    quota = 262144
    # Two quota windows (Kafka's quota.window.num): the measured rate settles within seconds.
    with EmbeddedBroker({"metrics.prometheus.listener": "http://127.0.0.1:0", "quota.window.num": "2"}) as b:
        url, bs = metrics_url(b), b.bootstrap_servers
        topic, client_id = unique_name("quota-metrics"), unique_name("limited")
        _create_topic(bs, topic)
        r = odradek("configs", "--bootstrap-server", bs, "--alter", "--add-config", f"producer_byte_rate={quota}",
                    "--entity-type", "clients", "--entity-name", client_id)
        assert r.returncode == 0, r.stderr
        # No sensor before the client produces: no sample.
        assert not any(name == "kafka_server_produce_byte_rate" for name, _ in scrape(url))
        stats = _Stats()
        assert _produce_flat_out(bs, topic, client_id, 4.0, stats)
        samples = scrape(url)
        labels = {"user": "", "client_id": client_id}  # a client-id quota: the user tag is empty
        assert value(samples, "kafka_server_produce_throttle_time", **labels) > 0
        rate = value(samples, "kafka_server_produce_byte_rate", **labels)
        assert 0.5 * quota < rate < 1.5 * quota, rate
        assert stats.max_throttle_ms > 0
        # No fetch or request quota is set: those have no samples.
        assert not any(name.startswith(("kafka_server_fetch_", "kafka_server_request_")) for name, _ in samples)


def test_consumer_lag_of_partitions_led_by_other_brokers(tmp_path: Path) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    from .replication_cluster import ReplicationCluster
    from .test_raft_quorum import _free_ports

    cluster = ReplicationCluster(tmp_path, controller_extra="auto.leader.rebalance.enable=false\n")
    ports = dict(zip((0, 1, 2, 3), _free_ports(4), strict=True))
    for node in cluster.nodes:
        with node.config.open("a") as f:
            f.write(f"metrics.prometheus.listener=http://127.0.0.1:{ports[node.node_id]}\n")
    cluster.start()
    try:
        topic, group = unique_name("lag"), unique_name("lag-group")
        admin = cluster.admin()
        # One partition on each broker: whichever coordinates the group hosts only one of them.
        admin.create_topics([NewTopic(topic, num_partitions=3, replica_assignment=[[1], [2], [3]])])[topic].result(30)
        cluster.wait_for(topic, lambda s: len(s) == 3 and all(leader >= 0 for leader, _, _ in s.values()),
                         what="3 partitions with leaders")
        p = Producer({"bootstrap.servers": cluster.bootstrap})
        for partition in range(3):
            for i in range(5 + partition):
                p.produce(topic, value=b"v%d" % i, partition=partition)
        assert p.flush(30) == 0
        # The group commits offset 1 everywhere: lag 4, 5, 6.
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        try:
            c.commit(offsets=[TopicPartition(topic, i, 1) for i in range(3)], asynchronous=False)
            desc = admin.describe_consumer_groups([group])[group].result(30)
            url = f"http://127.0.0.1:{ports[desc.coordinator.id]}/metrics"
            offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
            assert sorted(tp.offset for tp in offsets.topic_partitions) == [1, 1, 1]

            def lags() -> dict[str, float]:
                samples = scrape(url)
                return {lb["partition"]: v for (n, labels), v in samples.items()
                        if n == "kafka_consumergroup_lag"
                        for lb in [dict(labels)] if lb["consumergroup"] == group and lb["topic"] == topic}

            # (the leaders' high watermarks are refreshed every 10 s)
            wait_until(lambda: lags() == {"0": 4, "1": 5, "2": 6}, timeout=40,
                       what=f"lag of all 3 partitions on the coordinator (broker {desc.coordinator.id})")
            c.assign([TopicPartition(topic, i, 1) for i in range(3)])
            got = 0
            deadline = time.monotonic() + 30
            while got < 15 and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is not None and msg.error() is None:
                    got += 1
            assert got == 15
            c.commit(asynchronous=False)
            wait_until(lambda: lags() == {"0": 0, "1": 0, "2": 0}, timeout=40, what="lag 0 after consuming")
        finally:
            c.close()
    finally:
        cluster.stop()
