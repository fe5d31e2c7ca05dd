"""Transactions under faults on a 3-broker cluster (issue 13): kill -9 the transaction
coordinator, a partition leader, or both, in the middle of a commit.

A controller and brokers 1, 2, 3 (Odradek processes, or Apache Kafka JVMs with
``ODRADEK_TXN_SERVERS=kafka``); ``__transaction_state``, ``__consumer_offsets`` and the data topic
have replication factor 3 and ``min.insync.replicas=2``. A producer process
(txn_fault_producer.py) runs transactions back to back, each writing 6 records over the 3
partitions. Right after it announces a commit, the victim is killed with SIGKILL: the broker
leading the transactional id's ``__transaction_state`` partition (the coordinator), the leader of
a data partition that is not the coordinator, or both at once. The victims come back 3 s later;
the producer carries on (a new producer with the same transactional id after a fatal error).
Two such rounds per case, the victims chosen anew once transactions commit again.

Then, as the 2024 Jepsen analyses asked: every transaction is visible ``read_committed`` as a
whole or not at all (no torn transaction), each record at most once; every transaction whose
commit the client saw succeed is visible (no lost commit) and every one whose abort it saw succeed
is not, and a ``read_committed`` consumer reading all along was shown nothing that is not
committed in the end (no aborted read); the last stable offset of every partition reaches the high watermark
(not stuck) within a bounded wait; and transactions commit again after the fault.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.coordinator.transaction.transaction_state_manager import partition_for

from .kafka_reference import find_kafka_tools
from .support import unique_name, wait_until
from .test_mixed_kafka_cluster import KafkaNode, Node, OdradekNode, _broker_props, _controller_props
from .test_raft_quorum import _free_ports
from .txn_support import Lines, Watcher, read_all, txn_server_kinds, watermarks

PARTITIONS = 3
RECORDS = 6
TRANSACTIONS = 100
ROUNDS = 2
PACE_S = 0.1  # between transactions: the producer outlasts both fault rounds
TXN_STATE_PARTITIONS = 4
BROKERS = (1, 2, 3)
PRODUCER = Path(__file__).parent / "txn_fault_producer.py"

CLUSTER_TXN_SETTINGS: dict[str, Any] = {
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "transaction.state.log.num.partitions": TXN_STATE_PARTITIONS,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 4,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
}


class LatestKafkaNode(KafkaNode):
    """A Kafka node formatted at Kafka's own latest features (transactions version 2)."""

    def format(self) -> None:
        r = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "--cluster-id", "TxnFaultsClusterQ1", "--config",
                       str(self.config)),
            capture_output=True, text=True, timeout=120,
        )
        if r.returncode != 0:
            raise AssertionError(f"kafka-storage format of node {self.node_id}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


class TxnCluster:
    def __init__(self, kind: str, base: Path) -> None:
        ports = _free_ports(4)
        voters = f"0@127.0.0.1:{ports[0]}"
        self.kind = kind
        self.ports = dict(zip(BROKERS, ports[1:], strict=True))
        if kind == "kafka":
            tools = find_kafka_tools("4")

            def make(node_id: int, props: dict[str, Any]) -> Node:
                return LatestKafkaNode(tools, node_id, base, props)
        else:
            def make(node_id: int, props: dict[str, Any]) -> Node:
                return OdradekNode(node_id, base, props)
        self.controller = make(0, _controller_props(ports[0], voters))
        self.brokers = {i: make(i, {**_broker_props(self.ports[i], voters), **CLUSTER_TXN_SETTINGS})
                        for i in BROKERS}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def start(self) -> None:
        for n in [self.controller, *self.brokers.values()]:
            n.format()
        for n in [self.controller, *self.brokers.values()]:
            n.start()
        self.wait_for_brokers(set(BROKERS), 120)

    def stop(self) -> None:
        for n in [self.controller, *self.brokers.values()]:
            n.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {n.kind} node {n.node_id}\n{n.log_tail()}" for n in [self.controller, *self.brokers.values()])

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def wait_for_brokers(self, ids: set[int], timeout: float) -> None:
        def registered() -> bool:
            try:
                return set(self.admin().list_topics(timeout=3).brokers) == ids
            except KafkaException:
                return False
        try:
            wait_until(registered, timeout=timeout, interval=0.3, what=f"brokers {ids}")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.logs()}") from None

    def leaders_besides(self, topic: str, coordinator: int) -> list[int]:
        """The leaders of ``topic``'s partitions other than ``coordinator``. When the coordinator
        leads them all (after earlier kills), a preferred leader election spreads them again."""
        leaders = self.leaders(topic)
        if all(b == coordinator for b in leaders.values()):
            # Hold the client until the election answers: a dropped AdminClient is destroyed
            # and fails its pending futures with _DESTROY.
            admin = self.admin()
            admin.elect_leaders(
                ElectionType.PREFERRED, [TopicPartition(topic, p) for p in leaders]).result(60)
            wait_until(lambda: any(b != coordinator for b in self.leaders(topic).values()),
                       timeout=30, what="a partition leader other than the coordinator")
            leaders = self.leaders(topic)
        return sorted({b for b in leaders.values() if b != coordinator and b in BROKERS})

    def leaders(self, topic: str) -> dict[int, int]:
        md = self.admin().list_topics(topic=topic, timeout=10).topics[topic]
        if md.error is not None:
            raise AssertionError(f"{topic}: {md.error}")
        return {p: pm.leader for p, pm in md.partitions.items()}


@pytest.fixture(scope="module", params=txn_server_kinds())
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TxnCluster]:
    c = TxnCluster(request.param, tmp_path_factory.mktemp("txn-cluster"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def coordinator_of(cluster: TxnCluster, txid: str) -> int:
    """The broker leading the ``__transaction_state`` partition of ``txid`` (Kafka's
    ``Utils.abs(txid.hashCode) % partitions``)."""
    partition = partition_for(txid, TXN_STATE_PARTITIONS)
    leader = cluster.leaders("__transaction_state")[partition]
    assert leader in BROKERS, f"__transaction_state-{partition} has no leader"
    return leader


@pytest.mark.parametrize("victim", ["coordinator", "leader", "both"])
def test_kill_during_commit(cluster: TxnCluster, victim: str, tmp_path: Path) -> None:
    topic, txid = unique_name(f"txn-fault-{victim}"), unique_name(f"txid-fault-{victim}")
    admin = cluster.admin()
    assignment = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]  # each broker leads one partition
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replica_assignment=assignment,
                                  config={"min.insync.replicas": "2"})])[topic].result(60)
    def led() -> bool:
        try:
            return all(v in BROKERS for v in cluster.leaders(topic).values())
        except (KafkaException, KeyError, AssertionError):
            return False
    wait_until(led, timeout=30, what="leaders")

    with open(tmp_path / "producer.err", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(PRODUCER), cluster.bootstrap, topic, txid, str(PARTITIONS), str(TRANSACTIONS),
             str(RECORDS), str(PACE_S)],
            stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
        )
    fault_at: list[int] = []
    watcher = Watcher(cluster.bootstrap, topic, PARTITIONS)
    try:
        out = Lines(proc)
        after = out.wait_for(r"COMMITTED 3", 120)
        for _ in range(ROUNDS):
            # The cluster commits again (since the last fault): find this round's victims.
            after = out.wait_for(r"COMMITTED \d+", 120, after=after)
            coordinator = coordinator_of(cluster, txid)
            others = cluster.leaders_besides(topic, coordinator)
            victims = {"coordinator": [coordinator], "leader": [others[0]], "both": [coordinator, others[0]]}[victim]
            # Kill mid-commit: right after the producer says it calls commit_transaction.
            committing = out.wait_for(r"COMMITTING \d+", 60, after=after + 1)
            for b in victims:
                cluster.brokers[b].kill()
            fault_at.append(int(out.lines[committing].split()[1]))
            time.sleep(3)
            for b in victims:
                cluster.brokers[b].start()
            cluster.wait_for_brokers(set(BROKERS), 120)
            after = committing + 1
        out.wait_for("DONE|GAVE UP", 240, after=after)
        assert proc.wait(30) == 0, f"{out.lines[-20:]}"
    finally:
        proc.kill()
        proc.wait(30)
    outcome: dict[int, str] = {}
    for line in out.lines:
        word, _, rest = line.partition(" ")
        if word in ("COMMITTED", "ABORTED", "FAILED"):
            outcome.setdefault(int(rest.split()[0]), word)
            if word != "FAILED":
                outcome[int(rest.split()[0])] = word

    # The LSO of every partition reaches the high watermark: nothing is left open (bounded).
    wait_until(lambda: watermarks(cluster.bootstrap, topic, PARTITIONS, "read_committed")
               == watermarks(cluster.bootstrap, topic, PARTITIONS, "read_uncommitted"),
               timeout=90, interval=0.5, what="the last stable offsets to reach the high watermarks")
    reads = read_all(cluster.bootstrap, topic, PARTITIONS, "read_committed", timeout=90)
    # What a read_committed consumer saw during the faults is what is committed in the end, at
    # the same offsets: nothing it was shown was aborted later.
    final = {(r.partition, r.offset): r.value for r in reads}
    seen = watcher.stop()
    shown_then_gone = [(r.partition, r.offset, r.value) for r in seen if final.get((r.partition, r.offset)) != r.value]
    assert not shown_then_gone, f"read_committed showed records that are not committed: {shown_then_gone[:10]}"
    assert seen, "the read_committed consumer saw nothing during the run"
    records = Counter((r.value or b"").decode() for r in reads)
    twice = [v for v, n in records.items() if n > 1]
    assert not twice, f"records read twice: {twice[:10]}"
    per_txn = Counter(int(v.split("-")[0][1:]) for v in records)
    torn = {k: n for k, n in per_txn.items() if n != RECORDS}
    assert not torn, f"torn transactions (records visible of {RECORDS}): {torn}"
    lost = [k for k, o in outcome.items() if o == "COMMITTED" and per_txn[k] == 0]
    assert not lost, f"transactions committed but not visible: {lost}"
    aborted_read = [k for k, o in outcome.items() if o == "ABORTED" and per_txn[k] > 0]
    assert not aborted_read, f"transactions aborted but visible: {aborted_read}"
    assert any(o == "COMMITTED" and k > fault_at[-1] for k, o in outcome.items()), f"no commit after the faults: {outcome}"
    print(f"{victim} killed at transactions {fault_at}: "
          f"{Counter(outcome.values())}, {len(per_txn)} visible")
