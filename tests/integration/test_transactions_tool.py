"""``odradek transactions`` against a real ``odradek server`` with real transactional producers
(confluent-kafka), and Kafka's own ``kafka-transactions.sh`` on the same server when it is fetched.

* ``list`` / ``describe`` show an open transaction (and ``list --state`` filters it), then its
  commit; ``describe-producers`` shows the open transaction's start offset, then none.
* A producer killed -9 mid-transaction is not hanging (its coordinator still has the partition
  in the transaction); a transaction the coordinator never knew of (a transactional batch of an
  idempotent producer id, written with KIP-890 verification off, as a broker before it allowed)
  is: ``find-hanging`` lists exactly that one, by topic and by broker.
* ``abort --start-offset`` writes its ABORT marker: the last stable offset moves past it and
  ``find-hanging`` finds nothing more.
* A producer killed mid-transaction whose coordinator then loses its state (``__transaction_state``
  deleted while the server is down) hangs: ``find-hanging`` shows it, ``abort`` moves the LSO on.
* Kafka 4.x's ``kafka-transactions.sh`` prints the same (stdout, stderr, exit code) on the same
  server, when it is fetched (scripts/kafka_reference.sh).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol import messages as m

from .kafka_reference import find_kafka_tools
from .support import (
    RawConnection,
    ServerProcess,
    open_transaction,
    produce,
    transactional_batch,
    unique_name,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    # The hanging transaction is made the way old brokers let it happen: unverified.
    "transaction.partition.verification.enable": "false",
}

DOOMED = """
import sys, time
from confluent_kafka import Producer
bootstrap, topic, txid, partition = sys.argv[1:5]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid, "transaction.timeout.ms": 600000})
p.init_transactions(60)
p.begin_transaction()
for i in range(2):
    p.produce(topic, partition=int(partition), value=f"doomed-{i}".encode())
assert p.flush(60) == 0
print("READY", flush=True)
time.sleep(300)
"""


def start_and_kill_producer(bootstrap: str, topic: str, txid: str, partition: int) -> None:
    """A producer process that writes two records in a transaction and is killed -9."""
    proc = subprocess.Popen([sys.executable, "-c", DOOMED, bootstrap, topic, txid, str(partition)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
    finally:
        proc.kill()
        proc.wait(30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("txn-tool") / "data", SETTINGS).start()
    try:
        yield s
    finally:
        s.kill()


def tool(bootstrap: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "odradek.cli.main", "transactions", "--bootstrap-server", bootstrap,
                        *args], cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if check:
        assert r.returncode == 0, f"transactions {args} exited {r.returncode}: {r.stderr}"
    return r


def rows(text: str) -> list[dict[str, str]]:
    """A prettyPrintTable table as dicts by column name."""
    lines = text.splitlines()
    head = [c.strip() for c in lines[0].split("\t")[:-1]]
    return [dict(zip(head, (c.strip() for c in line.split("\t")[:-1]), strict=True)) for line in lines[1:]]


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
    wait_until(lambda: all(p.leader >= 0 for p in admin.list_topics(name, timeout=10).topics[name].partitions.values()),
               timeout=30, what=f"leaders of {name}")


def lso_and_hw(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    out = []
    for isolation in ("read_committed", "read_uncommitted"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"), "isolation.level": isolation})
        try:
            out.append(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30, cached=False)[1])
        finally:
            c.close()
    return out[0], out[1]


def write_unknown_transaction(server: ServerProcess, topic: str, partition: int) -> int:
    """A transactional batch of an idempotent producer id: a transaction no coordinator knows.
    Returns the producer id."""
    with RawConnection("127.0.0.1", server.port) as conn:
        init = conn.request(m.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                    "producer_id": -1, "producer_epoch": -1})
        assert init["error_code"] == 0, init
        pid, epoch = init["producer_id"], init["producer_epoch"]
        batch = transactional_batch(pid, [b"ghost"], epoch=epoch, timestamp_ms=int(time.time() * 1000) - 1000)
        part = produce(conn, topic, partition, batch, transactional_id=unique_name("ghost"))
        assert part["error_code"] == 0, part
    return int(pid)


@pytest.mark.timeout(300)
def test_list_describe_find_hanging_and_abort(server: ServerProcess) -> None:
    bs = server.bootstrap_servers
    topic = unique_name("txn-tool")
    create_topic(bs, topic, 2)

    # An open transaction: list, describe, describe-producers show it.
    live_id = unique_name("live")
    live = open_transaction(bs, live_id, topic, [f"live-{i}".encode() for i in range(3)])
    [listed] = [r for r in rows(tool(bs, "list").stdout) if r["TransactionalId"] == live_id]
    assert listed["TransactionState"] == "Ongoing" and listed["Coordinator"] == "1"
    pid = listed["ProducerId"]
    [desc] = rows(tool(bs, "describe", "--transactional-id", live_id).stdout)
    assert (desc["CoordinatorId"], desc["ProducerId"], desc["TransactionState"], desc["TopicPartitions"]) == (
        "1", pid, "Ongoing", f"{topic}-0")
    assert int(desc["TransactionDurationMs"]) >= 0 and desc["CurrentTransactionStartTimeMs"] != "None"
    [prod] = rows(tool(bs, "describe-producers", "--topic", topic, "--partition", "0").stdout)
    assert (prod["ProducerId"], prod["CurrentTransactionStartOffset"], prod["LastSequence"]) == (pid, "0", "2")
    assert lso_and_hw(bs, topic, 0) == (0, 3)

    live.commit_transaction(60)
    [desc] = rows(tool(bs, "describe", "--transactional-id", live_id).stdout)
    assert desc["TransactionState"] == "CompleteCommit" and desc["TopicPartitions"] == ""
    [prod] = rows(tool(bs, "describe-producers", "--topic", topic, "--partition", "0").stdout)
    assert prod["CurrentTransactionStartOffset"] == "None"
    assert lso_and_hw(bs, topic, 0) == (4, 4)  # 3 records and the COMMIT marker

    # A producer killed mid-transaction: its coordinator still has partition 1 in it.
    doomed_id = unique_name("doomed")
    start_and_kill_producer(bs, topic, doomed_id, 1)
    ongoing = {r["TransactionalId"] for r in rows(tool(bs, "list", "--state", "Ongoing").stdout)}
    assert doomed_id in ongoing and live_id not in ongoing

    # A transaction no coordinator knows, on partition 0 after the committed one.
    ghost = write_unknown_transaction(server, topic, 0)
    assert lso_and_hw(bs, topic, 0) == (4, 5)
    time.sleep(0.01)  # --max-transaction-timeout 0: open longer than 0 ms
    expected = [(topic, "0", str(ghost), "4")]
    for scope in (["--topic", topic], ["--topic", topic, "--partition", "0"], ["--broker-id", "1"]):
        hanging = rows(tool(bs, "find-hanging", *scope, "--max-transaction-timeout", "0").stdout)
        assert [(r["Topic"], r["Partition"], r["ProducerId"], r["StartOffset"]) for r in hanging] == expected, scope
    assert rows(tool(bs, "find-hanging", "--topic", topic).stdout) == []  # younger than 15 minutes

    # Aborted by its start offset: the LSO moves past it and its marker.
    assert tool(bs, "abort", "--topic", topic, "--partition", "0", "--start-offset", "4").stdout == ""
    assert lso_and_hw(bs, topic, 0) == (6, 6)
    assert rows(tool(bs, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0").stdout) == []
    producers = {r["ProducerId"]: r for r in rows(tool(bs, "describe-producers", "--topic", topic, "--partition", "0").stdout)}
    assert producers[str(ghost)]["CurrentTransactionStartOffset"] == "None"
    # partition 1 still waits for the killed producer's transaction (its timeout is 10 minutes)
    assert lso_and_hw(bs, topic, 1) == (0, 2)
    again = tool(bs, "abort", "--topic", topic, "--partition", "0", "--start-offset", "4", check=False)
    assert again.returncode == 1
    assert again.stderr == f"Could not find any open transactions starting at offset 4 on partition {topic}-0\n"


@pytest.mark.timeout(300)
def test_same_output_as_kafkas_tool(server: ServerProcess) -> None:
    kafka = find_kafka_tools()
    bs = server.bootstrap_servers
    topic = unique_name("txn-cmp")
    create_topic(bs, topic, 1)
    txid = unique_name("cmp")
    p = open_transaction(bs, txid, topic, [b"x"])
    try:
        for args in (["describe-producers", "--topic", topic, "--partition", "0"], ["list"],
                     ["find-hanging", "--topic", topic], ["describe", "--transactional-id", "nope"],
                     ["abort", "--topic", topic, "--partition", "0", "--start-offset", "7"]):
            ours = tool(bs, *args, check=False)
            theirs = kafka.run("kafka-transactions", "--bootstrap-server", bs, *args, check=False)
            assert (ours.returncode, ours.stdout, ours.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr), args
        # A hanging transaction after the open one: found alike, aborted by Kafka's tool.
        ghost = write_unknown_transaction(server, topic, 0)
        time.sleep(0.01)
        for args in (["find-hanging", "--topic", topic, "--max-transaction-timeout", "0"],
                     ["describe-producers", "--topic", topic, "--partition", "0"]):
            ours = tool(bs, *args)
            theirs = kafka.run("kafka-transactions", "--bootstrap-server", bs, *args)
            assert ours.stdout == theirs.stdout, args
        assert [r["ProducerId"] for r in rows(ours.stdout)].count(str(ghost)) == 1
        assert kafka.run("kafka-transactions", "--bootstrap-server", bs, "abort", "--topic", topic, "--partition", "0",
                         "--start-offset", "1").stdout == ""
        assert rows(tool(bs, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0").stdout) == []
        ours_d = rows(tool(bs, "describe", "--transactional-id", txid).stdout)
        theirs_d = rows(kafka.run("kafka-transactions", "--bootstrap-server", bs, "describe", "--transactional-id",
                                  txid).stdout)
        for d in (ours_d[0], theirs_d[0]):
            del d["TransactionDurationMs"]  # now - start: differs by the time between the two runs
        assert ours_d == theirs_d
    finally:
        p.abort_transaction(60)


@pytest.mark.timeout(300)
def test_a_killed_producer_hangs_once_its_coordinator_lost_it(tmp_path: Path) -> None:
    """Killed -9 mid-transaction, the producer's transaction waits for its coordinator (not
    hanging); once the coordinator's state is lost (its ``__transaction_state`` logs deleted
    while the server is down) nothing will ever end it: find-hanging shows it, abort ends it."""
    server = ServerProcess(tmp_path / "data", SETTINGS).start()
    try:
        bs = server.bootstrap_servers
        topic = unique_name("lost")
        create_topic(bs, topic, 1)
        txid = unique_name("lost")
        start_and_kill_producer(bs, topic, txid, 0)
        [prod] = rows(tool(bs, "describe-producers", "--topic", topic, "--partition", "0").stdout)
        assert prod["CurrentTransactionStartOffset"] == "0"
        time.sleep(0.01)
        assert rows(tool(bs, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0").stdout) == []
        assert lso_and_hw(bs, topic, 0) == (0, 2)

        server.kill()
        lost = sorted((tmp_path / "data").glob("__transaction_state-*"))
        assert lost, "no __transaction_state partitions on disk"
        for d in lost:
            shutil.rmtree(d)
        server.start()
        describe = tool(bs, "describe", "--transactional-id", txid, check=False)
        assert describe.returncode == 1 and "failed because the ID could not be found" in describe.stderr
        [hanging] = rows(tool(bs, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0").stdout)
        assert (hanging["ProducerId"], hanging["StartOffset"]) == (prod["ProducerId"], "0")
        assert lso_and_hw(bs, topic, 0) == (0, 2)
        assert tool(bs, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0").stdout == ""
        assert lso_and_hw(bs, topic, 0) == (3, 3)  # two records and the ABORT marker
        assert rows(tool(bs, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0").stdout) == []
    finally:
        server.kill()
