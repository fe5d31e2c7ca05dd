"""Transactions: what they cost against idempotent produce, and what read_committed costs.

    python3 benchmarks/transactions.py                  # Odradek and Apache Kafka, table
    python3 benchmarks/transactions.py --skip-kafka     # Odradek only
    python3 benchmarks/transactions.py --json           # JSON on stdout (log on stderr)

Each broker runs alone (single node, fresh data directory; ``__transaction_state`` and
``__consumer_offsets`` with 4 partitions and replication factor 1; Kafka from the jars
``scripts/kafka_reference.sh`` fetched, ``-Xmx1g``). With confluent-kafka (librdkafka), in one
run per broker:

1. **idempotent produce** -- ``--transactions`` x ``--records-per-txn`` records of
   ``--record-size`` bytes with ``enable.idempotence=true`` (``acks=all``), timed from the
   first ``produce()`` to the end of ``flush()``: records/s.
2. **transactional produce** -- the same number of records in ``--transactions`` transactions
   of ``--records-per-txn`` records, one after the other from one producer (``begin``, produce,
   ``commit_transaction``); every ``--abort-every``-th transaction is aborted instead, so the
   topic holds aborted data for the reads. Transactions/s (commits and aborts), records/s, and
   the p50/p99 time of ``commit_transaction``.
3. **read_uncommitted** and **read_committed** -- the transactional topic read from offset 0
   to its end (``assign``, no group) with each isolation level, ``--read-repeats`` (3) times: records/s and the broker's CPU
   seconds per million records read (whole process, from ``/proc``). read_committed returns
   fewer records (the aborted ones are filtered by the client with the aborted-transactions
   list of each fetch); both rates are per record *offset* read so that they compare. One
   unreported read_uncommitted read warms the broker up first.

Defaults keep one run under 3 minutes with both brokers; the broker CPU figures are the
comparable ones on a shared machine (the client's Python loop bounds the rates).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

from bench_support import (
    Broker,
    cpu_times,
    create_topic,
    loadavg,
    make_log,
    percentile,
    run_seconds,
    table,
)
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
from tests.integration.kafka_reference import KafkaServer, find_kafka_tools  # noqa: E402

log = make_log("txn")

TXN_SETTINGS = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
}
PARTITIONS = 4


class Target(Protocol):
    @property
    def pid(self) -> int: ...
    @property
    def bootstrap(self) -> str: ...
    def stop(self) -> None: ...


class KafkaTarget:
    def __init__(self, workdir: Path) -> None:
        self.server = KafkaServer(find_kafka_tools_or_exit(), workdir / "kafka", dict(TXN_SETTINGS))

    @property
    def pid(self) -> int:
        assert self.server.proc is not None
        return self.server.proc.pid  # kafka-run execs java: this is the JVM

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap_servers

    def stop(self) -> None:
        self.server.stop()


def find_kafka_tools_or_exit() -> Any:
    try:
        return find_kafka_tools("4")
    except BaseException as e:  # pytest's skip/fail outside pytest
        raise SystemExit(f"Apache Kafka is not available ({e}); run scripts/kafka_reference.sh or --skip-kafka") from None


def start(name: str, workdir: Path) -> Target:
    if name == "kafka":
        os.environ.setdefault("KAFKA_HEAP_OPTS", "-Xmx1g -Xms1g")
        k = KafkaTarget(workdir)
        log("starting Apache Kafka")
        k.server.start()
        return k
    b = Broker(workdir / "odradek", overrides=[f"{k}={v}" for k, v in TXN_SETTINGS.items()], log=log)
    b.start()
    return b


def broker_cpu(pid: int) -> float:
    user, system = cpu_times(pid)
    return max(user + system, run_seconds(pid) or 0.0)


def idempotent_produce(bootstrap: str, topic: str, n: int, value: bytes) -> dict[str, Any]:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "queue.buffering.max.messages": 1_000_000})
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    assert p.flush(120) == 0, "idempotent produce did not finish"
    seconds = time.perf_counter() - t0
    return {"records": n, "seconds": seconds, "records_per_s": n / seconds}


def transactional_produce(
    bootstrap: str, topic: str, transactions: int, per_txn: int, value: bytes, abort_every: int
) -> dict[str, Any]:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}", "linger.ms": 5})
    p.init_transactions(60)
    commit_s: list[float] = []
    aborted = 0
    t0 = time.perf_counter()
    for k in range(transactions):
        p.begin_transaction()
        for _ in range(per_txn):
            p.produce(topic, value)
        p.poll(0)
        c0 = time.perf_counter()
        if abort_every and k % abort_every == abort_every - 1:
            assert p.flush(60) == 0  # the aborted records are in the log first
            p.abort_transaction(60)
            aborted += 1
        else:
            p.commit_transaction(60)
            commit_s.append(time.perf_counter() - c0)
    seconds = time.perf_counter() - t0
    records = transactions * per_txn
    return {
        "transactions": transactions, "aborted": aborted, "records": records, "seconds": seconds,
        "txns_per_s": transactions / seconds, "records_per_s": records / seconds,
        "commit_p50_ms": percentile(commit_s, 0.5) * 1000, "commit_p99_ms": percentile(commit_s, 0.99) * 1000,
    }


def read_topic(target: Target, topic: str, isolation: str) -> dict[str, Any]:
    c = Consumer({"bootstrap.servers": target.bootstrap, "group.id": f"bench-{isolation}",
                  "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": isolation,
                  "auto.offset.reset": "earliest"})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                for p in range(PARTITIONS)}
        cpu0, t0 = broker_cpu(target.pid), time.perf_counter()
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        records = 0
        at_end: set[int] = {p for p, e in ends.items() if e == 0}
        deadline = time.monotonic() + 300
        while len(at_end) < PARTITIONS:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{isolation} read did not reach {ends}")
            for m in c.consume(10_000, 0.5):
                err = m.error()
                if err is None:
                    records += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    part, offset = int(m.partition() or 0), int(m.offset() or 0)
                    if offset >= ends[part]:
                        at_end.add(part)
                else:
                    raise RuntimeError(f"{isolation} read: {err}")
        seconds, cpu = time.perf_counter() - t0, broker_cpu(target.pid) - cpu0
    finally:
        c.close()
    offsets = sum(ends.values())
    return {"records": records, "offsets": offsets, "seconds": seconds, "offsets_per_s": offsets / seconds,
            "broker_cpu_s": cpu, "broker_cpu_s_per_m": cpu / offsets * 1e6}


def run_broker(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    target = start(name, workdir / name)
    value = b"x" * args.record_size
    n = args.transactions * args.records_per_txn
    result: dict[str, Any] = {}
    try:
        log(f"{name}: idempotent produce of {n} records (load {loadavg()})")
        create_topic(target.bootstrap, "bench-idempotent", PARTITIONS)
        result["idempotent"] = idempotent_produce(target.bootstrap, "bench-idempotent", n, value)
        log(f"{name}: {args.transactions} transactions of {args.records_per_txn} (load {loadavg()})")
        create_topic(target.bootstrap, "bench-txn", PARTITIONS)
        cpu0 = broker_cpu(target.pid)
        result["transactional"] = transactional_produce(
            target.bootstrap, "bench-txn", args.transactions, args.records_per_txn, value, args.abort_every)
        result["transactional"]["broker_cpu_s"] = broker_cpu(target.pid) - cpu0
        read_topic(target, "bench-txn", "read_uncommitted")  # warm-up (page cache, JIT), not reported
        for isolation in ("read_uncommitted", "read_committed"):
            log(f"{name}: {isolation} read x{args.read_repeats} (load {loadavg()})")
            reads = [read_topic(target, "bench-txn", isolation) for _ in range(args.read_repeats)]
            offsets = sum(r["offsets"] for r in reads)
            seconds = sum(r["seconds"] for r in reads)
            cpu = sum(r["broker_cpu_s"] for r in reads)
            result[isolation] = {"records": reads[0]["records"], "offsets": offsets, "seconds": seconds,
                                 "offsets_per_s": offsets / seconds, "broker_cpu_s": cpu,
                                 "broker_cpu_s_per_m": cpu / offsets * 1e6}
    finally:
        target.stop()
    return result


def print_table(results: dict[str, dict[str, Any]]) -> None:
    names = list(results)
    rows: list[tuple[str, ...]] = []

    def row(label: str, unit: str, get: Any) -> None:
        rows.append((label, *[f"{v:,.1f}" if abs(v := get(results[b])) >= 10 else f"{v:.3f}" for b in names], unit))

    row("idempotent produce", "records/s", lambda r: r["idempotent"]["records_per_s"])
    row("transactional produce", "records/s", lambda r: r["transactional"]["records_per_s"])
    row("transactions", "txns/s", lambda r: r["transactional"]["txns_per_s"])
    row("commit_transaction p50", "ms", lambda r: r["transactional"]["commit_p50_ms"])
    row("commit_transaction p99", "ms", lambda r: r["transactional"]["commit_p99_ms"])
    row("txn / idempotent rate", "%", lambda r: 100 * r["transactional"]["records_per_s"] / r["idempotent"]["records_per_s"])
    for iso in ("read_uncommitted", "read_committed"):
        row(f"{iso} read", "offsets/s", lambda r, i=iso: r[i]["offsets_per_s"])
        row(f"{iso} broker CPU", "s per M offsets", lambda r, i=iso: r[i]["broker_cpu_s_per_m"])
    row("read_committed / uncommitted CPU", "%",
        lambda r: 100 * r["read_committed"]["broker_cpu_s_per_m"] / max(r["read_uncommitted"]["broker_cpu_s_per_m"], 1e-9))
    table(("", *names, "unit"), rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transactions", type=int, default=300)
    ap.add_argument("--records-per-txn", type=int, default=100)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--abort-every", type=int, default=10, help="abort every N-th transaction (0: none)")
    ap.add_argument("--read-repeats", type=int, default=3, help="reads of the topic per isolation level")
    ap.add_argument("--skip-kafka", action="store_true", help="Odradek only")
    ap.add_argument("--skip-odradek", action="store_true", help="Apache Kafka only")
    ap.add_argument("--json", action="store_true", help="JSON on stdout")
    args = ap.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="odradek-txn-bench-") as tmp:
        names = [n for n, skip in (("odradek", args.skip_odradek), ("kafka", args.skip_kafka)) if not skip]
        for name in names:
            results[name] = run_broker(name, args, Path(tmp))
    for name, r in results.items():
        # Both reads covered the same offsets; read_committed returned fewer records.
        assert r["read_uncommitted"]["records"] == args.transactions * args.records_per_txn, (name, r)
        aborted = r["transactional"]["aborted"] * args.records_per_txn
        assert r["read_committed"]["records"] == r["read_uncommitted"]["records"] - aborted, (name, r)
    if args.json:
        print(json.dumps({"args": vars(args), "results": results}, indent=2))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
