#!/usr/bin/env python3
"""SASL_PLAINTEXT (SCRAM-SHA-512) against PLAINTEXT on one broker, in the same run.

    python3 benchmarks/sasl.py                      # 200,000 records of 100 bytes per listener
    python3 benchmarks/sasl.py --records 1000000 --connections 200

One ``odradek server`` with a PLAINTEXT and a SASL_PLAINTEXT listener (the SCRAM-SHA-512 user is
created with AlterUserScramCredentials). For each listener: the time to open a connection and get
the first Metadata answer (``--connections`` new librdkafka clients one after the other: TCP,
ApiVersions, for SASL the handshake and the two SCRAM round trips with PBKDF2 on both sides), then
produce throughput and the p50/p99 delivery latency of every 100th record (acks=1), then consume
throughput. Authentication costs once per connection; the request path after it only adds a state
check per request, which the produce/consume figures show.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_support import Broker, create_topic, free_ports
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def connect_ms(conf: dict[str, Any], n: int) -> float:
    """Mean ms from a new client to its first Metadata answer."""
    start = time.perf_counter()
    for _ in range(n):
        AdminClient(conf).list_topics(timeout=10)
    return (time.perf_counter() - start) * 1000 / n


def produce(conf: dict[str, Any], topic: str, records: int, size: int) -> tuple[float, float, float]:
    payload = b"x" * size
    latencies: list[float] = []
    p = Producer({**conf, "acks": 1, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})

    def sampled(sent: float) -> Any:
        def cb(err: KafkaError | None, _msg: Any) -> None:
            if err is None:
                latencies.append((time.perf_counter() - sent) * 1000)
        return cb

    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                if i % 100 == 0:
                    p.produce(topic, payload, callback=sampled(time.perf_counter()))
                else:
                    p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    elapsed = time.perf_counter() - start
    return records / elapsed, percentile(latencies, 0.5), percentile(latencies, 0.99)


def consume(conf: dict[str, Any], topic: str, records: int) -> float:
    c = Consumer({**conf, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    deadline = start + 300
    while got < records and time.perf_counter() < deadline:
        for msg in c.consume(10_000, 1.0):
            if not msg.error():
                got += 1
    elapsed = time.perf_counter() - start
    c.close()
    return got / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--sasl-first", action="store_true", help="measure the SASL listener first")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain_port, sasl_port, ctl = free_ports(3)
        broker = Broker(Path(tmp), overrides=[
            f"listeners=PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
            f"CONTROLLER://127.0.0.1:{ctl}",
            f"controller.quorum.voters=1@127.0.0.1:{ctl}",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
        ])
        broker.port, broker.controller_port = plain_port, ctl
        broker.start()
        try:
            plain: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{plain_port}"}
            admin = AdminClient(dict(plain))
            for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bench-secret")]).values():
                f.result(30)
            sasl: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench", "sasl.password": "bench-secret"}
            rows = []
            runs: list[tuple[str, dict[str, Any]]] = [("PLAINTEXT", plain), ("SASL_PLAINTEXT SCRAM-SHA-512", sasl)]
            if args.sasl_first:
                runs.reverse()
            for name, conf in runs:
                topic = f"bench-{name.split()[0].lower()}"
                create_topic(plain["bootstrap.servers"], topic, 1)
                conn = connect_ms(conf, args.connections)
                rate, p50, p99 = produce(conf, topic, args.records, args.record_size)
                crate = consume(conf, topic, args.records)
                rows.append((name, conn, rate, p50, p99, crate))
            print(f"{args.records} records of {args.record_size} B, one partition, acks=1; "
                  f"{args.connections} new connections each")
            print(f"{'listener':30} {'connect ms':>10} {'produce rec/s':>14} {'p50 ms':>8} {'p99 ms':>8} "
                  f"{'consume rec/s':>14}")
            for name, conn, rate, p50, p99, crate in rows:
                print(f"{name:30} {conn:10.2f} {rate:14,.0f} {p50:8.1f} {p99:8.1f} {crate:14,.0f}")
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
