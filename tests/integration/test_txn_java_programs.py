"""Transactions proved with Apache Kafka's own Java programs, against a real ``odradek server``
process and, with ``ODRADEK_TXN_SERVERS=odradek,kafka``, Apache Kafka as the reference (the
same test on both, fetched by ``scripts/kafka_reference.sh``):

- a Kafka Streams application with ``processing.guarantee=exactly_once_v2`` (a stateful
  aggregation behind a repartition topic, in a RocksDB store with a changelog topic,
  ``java/TxnStreamsAggregate.java``) fed while running, ``kill -9``-ed at seeded points with a
  transaction open and restarted (or the broker killed -9 and restarted under it): the output read
  ``read_committed`` is exactly one update per input record, per key in order (no duplicate, no
  loss, no state restored from an aborted transaction);
- Kafka's ``TransactionalMessageCopier`` (kafka-tools, the program of Kafka's own EOS system
  tests) copying a topic with ``--enable-random-aborts``, assigned or as a consumer group with
  group metadata, each copier killed at a seeded point and restarted (or the broker killed under
  them): the output read ``read_committed`` is the input, partition by partition, exactly once;
- ``kafka-console-consumer --isolation-level read_committed`` reading that output.

Every wait is bounded; everything listens on 127.0.0.1. Skipped without Java or the fetched jars
outside CI (see :func:`find_kafka_tools`).
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol import messages as m

from .kafka_reference import KafkaServer, KafkaTools, find_kafka_tools
from .support import RawConnection, ServerProcess, die_with_parent, unique_name, wait_until
from .txn_support import txn_server_kinds

pytestmark = pytest.mark.integration

JAVA_DIR = Path(__file__).parent / "java"
SEED = int(os.environ.get("ODRADEK_TEST_SEED", "1313"))

# The same settings on both brokers: one node, small internal topics, expired transactions
# aborted within a second or so.
BROKER_SETTINGS = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
}


class Broker(Protocol):
    port: int

    @property
    def bootstrap_servers(self) -> str: ...

    def log_tail(self, chars: int = 4000) -> str: ...


@pytest.fixture(scope="module")
def kafka_tools() -> KafkaTools:
    return find_kafka_tools("4")


@pytest.fixture(params=txn_server_kinds())
def broker(request: pytest.FixtureRequest, tmp_path: Path, kafka_tools: KafkaTools) -> Iterator[Broker]:
    """The broker under test: Odradek, or Apache Kafka as the reference when
    ``ODRADEK_TXN_SERVERS`` names it (as the other transaction tests)."""
    if request.param == "odradek":
        server = ServerProcess(tmp_path / "odradek", BROKER_SETTINGS).start()
        try:
            yield server
        finally:
            server.kill()
    else:
        kafka = KafkaServer(kafka_tools, tmp_path / "kafka", BROKER_SETTINGS).start()
        try:
            yield kafka
        finally:
            kafka.stop()


class JavaProgram:
    """A Java program (a single source file under ``java/`` or a class of Kafka's jars) as a
    child process, its output in files beside the test's data."""

    def __init__(self, tools: KafkaTools, workdir: Path, name: str, main: str, *args: str) -> None:
        self.tools = tools
        self.workdir = workdir
        self.name = name
        self.main = main
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.stdout_path = workdir / f"{name}.out"
        self.stderr_path = workdir / f"{name}.err"

    def start(self) -> JavaProgram:
        assert self.proc is None or self.proc.poll() is not None
        self.starts += 1
        lib = self.tools.home / self.tools.line / "lib"
        log4j = self.tools.home / "log4j2.properties"
        cmd = [
            "java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{lib}/*", self.main, *self.args,
        ]
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            for f in (out, err):
                f.write(f"\n===== start #{self.starts} =====\n".encode())
                f.flush()
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=self.workdir,
                preexec_fn=die_with_parent,
            )
        return self

    def stdout(self) -> str:
        return self.stdout_path.read_text("utf-8", "replace")

    def last_run_stdout(self) -> str:
        return self.stdout().rsplit(f"===== start #{self.starts} =====", 1)[-1]

    def output_tail(self, chars: int = 3000) -> str:
        err = self.stderr_path.read_text("utf-8", "replace")
        return f"stdout:\n{self.stdout()[-chars:]}\nstderr:\n{err[-chars:]}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """``kill -9``: no shutdown hook, the open transaction left behind."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
            raise AssertionError(f"{self.name} did not exit in {timeout}s\n{self.output_tail()}") from None

    def terminate(self, timeout: float = 90.0) -> int:
        """SIGTERM: the program's shutdown hook runs (Streams closes, committing)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def stop_quietly(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(30)


def create_topics(broker: Broker, partitions: int, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for f in futures.values():
        f.result(60)


def produce(broker: Broker, topic: str, records: Sequence[tuple[int, str | None, str]]) -> None:
    """(partition, key, value) records, idempotently, acknowledged before returning."""
    producer = Producer({
        "bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True, "linger.ms": 5,
    })
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for partition, key, value in records:
        producer.produce(topic, value.encode(), key.encode() if key is not None else None,
                         partition=partition, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0, "records not acknowledged in 60s"
    assert not errors, errors[:5]


def read_all(
    broker: Broker, topic: str, partitions: int, isolation: str, timeout: float = 60.0
) -> dict[int, list[tuple[str | None, str]]]:
    """Every record of ``topic`` up to the end offset of the isolation level (the LSO under
    read_committed), per partition in offset order, as (key, value)."""
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap_servers, "group.id": unique_name("reader"),
        "enable.auto.commit": False, "isolation.level": isolation,
        "enable.partition.eof": True,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[tuple[str | None, str]]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic} not read to its end in {timeout}s"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err, partition = msg.error(), msg.partition()
            assert partition is not None
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                at_end.add(partition)
                continue
            at_end.discard(partition)
            key, value = msg.key(), msg.value()
            assert value is not None
            out[partition].append((key.decode() if key is not None else None, value.decode()))
    finally:
        consumer.close()
    return out


def end_offsets(broker: Broker, topic: str, partitions: int) -> int:
    """The sum of the partitions' high watermarks (uncommitted records and markers included)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": unique_name("w")})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    finally:
        consumer.close()


def kill_9_and_restart(broker: Broker) -> None:
    """``kill -9`` the broker process and start it again on the same port and data."""
    if isinstance(broker, ServerProcess):
        broker.restart(signal.SIGKILL)
        return
    assert isinstance(broker, KafkaServer) and broker.proc is not None
    broker.proc.kill()
    broker.proc.wait(60)
    broker.proc = None
    broker.start()


# ---- Kafka Streams, exactly_once_v2 -----------------------------------------------------------


STREAMS_KEYS = 12
STREAMS_CHUNKS = 12
STREAMS_PER_CHUNK = 60
STREAMS_PARTITIONS = 3


def offsets(broker: Broker, topic: str, partitions: int, isolation_level: int) -> list[int]:
    """ListOffsets LATEST per partition: the high watermark (0) or the last stable offset (1)."""
    with RawConnection("127.0.0.1", broker.port) as conn:
        r = conn.request(m.LIST_OFFSETS, 5, {
            "replica_id": -1, "isolation_level": isolation_level,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                for p in range(partitions)]}],
        })
    parts = sorted(r["topics"][0]["partitions"], key=lambda p: p["partition_index"])
    assert all(p["error_code"] == 0 for p in parts), parts
    return [p["offset"] for p in parts]


def open_transaction(broker: Broker, topic: str, partitions: int) -> bool:
    """True while some partition holds records of a transaction not yet ended (LSO < HW)."""
    hw = offsets(broker, topic, partitions, 0)
    lso = offsets(broker, topic, partitions, 1)
    return any(s < h for s, h in zip(lso, hw, strict=True))


@pytest.mark.parametrize("fault", ["app", "broker"])
def test_kafka_streams_exactly_once_v2_survives_kill_9(
    broker: Broker, kafka_tools: KafkaTools, tmp_path: Path, fault: str
) -> None:
    """``app``: the Streams JVM is killed -9 twice, each time with a transaction open, and
    started again; ``broker``: the broker is, twice, under the running application."""
    if fault == "broker" and isinstance(broker, KafkaServer):
        # Seen with Kafka 4.3.1 (one node): after the broker's kill -9 and restart the Streams
        # application stays in REBALANCING for minutes (not investigated further).
        pytest.skip("the single-node Kafka reference does not get Streams past a broker kill -9")
    rng = random.Random(SEED)
    source, sink, app = unique_name("words"), unique_name("aggregates"), unique_name("app")
    create_topics(broker, STREAMS_PARTITIONS, source, sink)
    # Key i is always on partition i % 3 (put there by the test): the aggregation sees a key's
    # records in the order produced, so its expected updates are known.
    keys = [rng.randrange(STREAMS_KEYS) for _ in range(STREAMS_CHUNKS * STREAMS_PER_CHUNK)]
    chunks = [
        [(k % STREAMS_PARTITIONS, f"key-{k}", str(rng.randint(1, 999)))
         for k in keys[c * STREAMS_PER_CHUNK:(c + 1) * STREAMS_PER_CHUNK]]
        for c in range(STREAMS_CHUNKS)
    ]
    # Two kills at seeded chunks, each followed by a restart two chunks later (the input of the
    # chunk in between waits for the restarted application).
    kills = {rng.randint(1, 3), rng.randint(6, STREAMS_CHUNKS - 4)}
    restarts = {k + 2 for k in kills}

    app_proc = JavaProgram(
        kafka_tools, tmp_path, "streams", str(JAVA_DIR / "TxnStreamsAggregate.java"),
        broker.bootstrap_servers, app, source, sink, str(tmp_path / "state"),
    )

    def alive() -> None:
        assert app_proc.alive(), f"Streams exited\n{app_proc.output_tail()}\n{broker.log_tail()}"

    def running() -> bool:
        alive()
        return "STATE RUNNING" in app_proc.last_run_stdout()

    def in_transaction() -> bool:
        alive()
        return open_transaction(broker, sink, STREAMS_PARTITIONS)

    app_proc.start()
    try:
        wait_until(running, timeout=180, interval=0.5, what="Streams RUNNING")
        for i, chunk in enumerate(chunks):
            produce(broker, source, chunk)
            if i in kills:
                # Kill while the application has written output it has not committed yet
                # (commit.interval.ms is 2 s): that transaction must never become visible.
                wait_until(in_transaction, timeout=120, interval=0.02, what="an open Streams transaction")
                if fault == "app":
                    app_proc.kill()
                else:
                    kill_9_and_restart(broker)
            elif i in restarts and fault == "app":
                app_proc.start()
                wait_until(running, timeout=180, interval=0.5, what="Streams RUNNING after kill -9")
            else:
                time.sleep(0.3)
        total = STREAMS_CHUNKS * STREAMS_PER_CHUNK

        def all_committed() -> bool:
            alive()
            n = sum(len(v) for v in read_all(broker, sink, STREAMS_PARTITIONS, "read_committed").values())
            assert n <= total, f"{n} committed outputs for {total} inputs: duplicates"
            return n == total

        wait_until(all_committed, timeout=240, interval=2, what="every update committed")
        # SIGTERM: the JVM exits 143 after the shutdown hook closed Streams (its last commit).
        assert app_proc.terminate() == 128 + signal.SIGTERM, app_proc.output_tail()
        assert "CLOSED true" in app_proc.last_run_stdout(), app_proc.output_tail()
    finally:
        app_proc.stop_quietly()

    expected: dict[str, list[str]] = {}
    state: dict[str, tuple[int, int]] = {}
    for chunk in chunks:
        for _, key, value in chunk:
            count, total_sum = state.get(key, (0, 0))
            state[key] = (count + 1, total_sum + int(value))
            expected.setdefault(key, []).append(f"{count + 1},{total_sum + int(value)}")
    got: dict[str, list[str]] = {}
    for records in read_all(broker, sink, STREAMS_PARTITIONS, "read_committed").values():
        for out_key, out_value in records:
            assert out_key is not None
            got.setdefault(out_key, []).append(out_value)
    assert got == expected
    assert app_proc.starts == (3 if fault == "app" else 1)
    uncommitted = sum(len(v) for v in read_all(broker, sink, STREAMS_PARTITIONS, "read_uncommitted").values())
    if fault == "app":
        # The killed transactions' output is in the log, aborted: read_uncommitted sees more.
        # (Under a broker restart the live application may still commit what it had written.)
        assert uncommitted > total, (uncommitted, total)
    else:
        assert uncommitted >= total, (uncommitted, total)
    assert not open_transaction(broker, sink, STREAMS_PARTITIONS), "a transaction left open"


# ---- TransactionalMessageCopier ---------------------------------------------------------------


COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"
COPY_PARTITIONS = 2
COPY_PER_PARTITION = 1000


def copier_progress(copier: JavaProgram) -> int:
    """totalProcessed of the copier's last status line in its current run."""
    done = 0
    for line in copier.last_run_stdout().splitlines():
        if line.startswith("{"):
            try:
                done = int(json.loads(line).get("totalProcessed", done))
            except (ValueError, AttributeError):
                continue
    return done


@pytest.mark.parametrize("mode", ["assign", "group", "broker-kill"])
def test_transactional_message_copier_random_aborts_kill_9(
    broker: Broker, kafka_tools: KafkaTools, tmp_path: Path, mode: str
) -> None:
    """``assign``: each copier reads one partition and commits its offsets as a simple group
    (generation -1); ``group``: the copiers subscribe as one consumer group and commit with
    their group metadata (KIP-447: member id and generation checked by the group coordinator),
    rebalancing when one is killed and when it comes back. Both kill -9 the copiers.
    ``broker-kill``: as ``assign``, but the broker is killed -9 and restarted under the running
    copiers (transaction state, producer state and group offsets recovered from its logs); a
    copier that gives up on an error is started again."""
    rng = random.Random(SEED + 1)
    source, sink = unique_name("copy-in"), unique_name("copy-out")
    group = unique_name("copier-group")
    create_topics(broker, COPY_PARTITIONS, source, sink)
    inputs = {p: [f"p{p}-{i}-{rng.randrange(10**6)}" for i in range(COPY_PER_PARTITION)]
              for p in range(COPY_PARTITIONS)}
    produce(broker, source, [(p, None, v) for p in range(COPY_PARTITIONS) for v in inputs[p]])

    copiers = [
        JavaProgram(
            kafka_tools, tmp_path, f"copier-{p}", COPIER,
            "--broker-list", broker.bootstrap_servers, "--input-topic", source,
            "--input-partition", str(p), "--output-topic", sink, "--consumer-group", group,
            "--transactional-id", f"{sink}-copier-{p}", "--transaction-size", "20",
            "--transaction-timeout", "10000", "--enable-random-aborts",
            *(["--group-mode", "--use-group-metadata"] if mode == "group" else []),
        )
        for p in range(COPY_PARTITIONS)
    ]
    kill_at = [rng.randint(COPY_PER_PARTITION // 5, COPY_PER_PARTITION // 2) for _ in copiers]

    def progressed(c: JavaProgram, at: int) -> bool:
        # A copier that exited 0 had nothing left to copy: in group mode one member can copy both
        # partitions before the other is ever assigned one, or the survivor of the first kill
        # finishes before it is looked at. Its kill is then moot; any other exit fails the test.
        if not c.alive():
            assert c.proc is not None and c.proc.returncode == 0, (
                f"{c.name} exited {c.proc and c.proc.returncode} before its kill\n{c.output_tail()}\n"
                f"{broker.log_tail()}")
            return True
        return copier_progress(c) >= at

    try:
        for c in copiers:
            c.start()
        if mode == "broker-kill":
            wait_until(functools.partial(progressed, copiers[0], kill_at[0]), timeout=240, interval=0.05,
                       what=f"copier-0 copied {kill_at[0]}")
            kill_9_and_restart(broker)
        else:
            for c, at in zip(copiers, kill_at, strict=True):
                wait_until(functools.partial(progressed, c, at), timeout=240, interval=0.05,
                           what=f"{c.name} copied {at}")
                c.kill()
            for c in copiers:
                c.start()
        deadline = time.monotonic() + 300
        for c in copiers:
            while True:
                code = c.wait(max(1.0, deadline - time.monotonic()))
                if code == 0:
                    break
                # Only under a broker restart may a copier give up (and be started again).
                assert mode == "broker-kill" and c.starts < 4, (
                    f"{c.name} exited {code}\n{c.output_tail()}\n{broker.log_tail()}")
                c.start()
    finally:
        for c in copiers:
            c.stop_quietly()

    committed = read_all(broker, sink, COPY_PARTITIONS, "read_committed")
    for p in range(COPY_PARTITIONS):
        values = [v for _, v in committed[p]]
        assert len(values) == len(inputs[p]), (p, len(values), len(inputs[p]))
        assert values == inputs[p], f"partition {p}: the output is not the input exactly once"
    uncommitted = read_all(broker, sink, COPY_PARTITIONS, "read_uncommitted")
    aborted = sum(len(v) for v in uncommitted.values()) - COPY_PARTITIONS * COPY_PER_PARTITION
    # --enable-random-aborts aborts a third of the transactions, after their records were sent.
    assert aborted > 0, "no aborted record in the log: the test did not exercise aborts"

    # kafka-console-consumer reads the same: read_committed the input exactly once, and
    # read_uncommitted also the aborted records.
    every_input = Counter(v for p in inputs for v in inputs[p])
    for isolation, expected_count in (("read_committed", len(every_input)),
                                      ("read_uncommitted", len(every_input) + aborted)):
        result = kafka_tools.run(
            "kafka-console-consumer", "--bootstrap-server", broker.bootstrap_servers,
            "--topic", sink, "--from-beginning", "--isolation-level", isolation,
            "--timeout-ms", "10000", timeout=120,
        )
        seen = Counter(result.stdout.splitlines())
        assert sum(seen.values()) == expected_count, (isolation, sum(seen.values()), expected_count)
        if isolation == "read_committed":
            assert seen == every_input
        else:
            assert set(seen) == set(every_input)
