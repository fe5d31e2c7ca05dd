#!/usr/bin/env python3
"""TLS and SASL_SSL against plaintext on the same broker, in the same run: produce and consume
throughput and produce latency percentiles.

    python3 benchmarks/tls.py                       # short default run
    python3 benchmarks/tls.py --records 200000 --record-size 1024 --latency-records 5000

One ``odradek server`` with a PLAINTEXT, an SSL and a SASL_SSL listener (a test CA and server
certificate made at start, PKCS12 key store; ``--mtls`` requires client certificates on the SSL
listener; SASL_SSL logs in with SCRAM-SHA-512, the user created with AlterUserScramCredentials).
For each listener in turn, with confluent-kafka (librdkafka):

* produce throughput: ``--records`` records of ``--record-size`` bytes, acks=1, default batching;
* consume throughput: the same records read back (manual assignment from offset 0); over TLS the
  broker cannot ``sendfile`` fetch data and copies it through OpenSSL;
* produce latency: ``--latency-records`` records sent one at a time at ``--rate`` per second,
  acks=1, linger.ms=0; the time from ``produce()`` to the delivery report, p50/p99/max.

Broker CPU time (from ``/proc``) is shown per phase: on a loaded machine the broker's CPU seconds
per MB are steadier than the wall-clock rates.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench_support import Broker, cpu_times, create_topic, free_ports, make_log, percentile, table
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.unit.tls_certs import make_tls_files  # noqa: E402 - the repository root is added above

log = make_log("tls")


def _produce(conf: dict[str, str], topic: str, records: int, size: int) -> float:
    p = Producer({**conf, "acks": "1", "linger.ms": 5, "queue.buffering.max.kbytes": 262144})
    payload = b"x" * size
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    if p.flush(120) != 0:
        raise RuntimeError("records left unsent")
    return time.perf_counter() - start


def _consume(conf: dict[str, str], topic: str, partitions: int, records: int) -> float:
    c = Consumer({**conf, "group.id": f"bench-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 300
    try:
        while got < records and time.monotonic() < deadline:
            for m in c.consume(10000, 1.0):
                if m.error() is None:
                    got += 1
    finally:
        c.close()
    if got < records:
        raise RuntimeError(f"read {got} of {records} records")
    return time.perf_counter() - start


def _latency(conf: dict[str, str], topic: str, records: int, rate: int, size: int) -> list[float]:
    p = Producer({**conf, "acks": "1", "linger.ms": 0})
    lat: list[float] = []
    payload = b"y" * size

    def report(sent: float):  # type: ignore[no-untyped-def]
        def cb(err, msg):  # type: ignore[no-untyped-def]
            if err is None:
                lat.append((time.perf_counter() - sent) * 1000)
        return cb

    p.produce(topic, payload)  # connect and warm up
    p.flush(30)
    interval = 1.0 / rate
    nxt = time.perf_counter()
    for _ in range(records):
        now = time.perf_counter()
        if now < nxt:
            time.sleep(nxt - now)
        nxt += interval
        p.produce(topic, payload, on_delivery=report(time.perf_counter()))
        p.poll(0)
    p.flush(60)
    return lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--latency-records", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=1000, help="records per second in the latency phase")
    ap.add_argument("--mtls", action="store_true", help="require client certificates on the SSL listener")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="odradek-tls-bench-") as tmp:
        work = Path(tmp)
        files = make_tls_files(work / "certs")
        ssl_port, sasl_ssl_port = free_ports(2)
        broker = Broker(work / "broker", log=log)
        props = files.server_props(client_auth="required" if args.mtls else "none")
        broker.overrides = [
            f"listeners=PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port},"
            f"SASL_SSL://127.0.0.1:{sasl_ssl_port},CONTROLLER://127.0.0.1:{broker.controller_port}",
            *(f"{k}={v}" for k, v in props.items()),
            "listener.name.sasl_ssl.ssl.client.auth=none",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
        ]
        client_ssl = {"security.protocol": "SSL", "ssl.ca.location": str(files.ca_pem)}
        if args.mtls:
            cert, key, _ = files.client("bench")
            client_ssl.update({"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
        runs = {
            "PLAINTEXT": {"bootstrap.servers": broker.bootstrap},
            "SSL" + (" (mTLS)" if args.mtls else ""): {"bootstrap.servers": f"127.0.0.1:{ssl_port}", **client_ssl},
            "SASL_SSL (SCRAM-SHA-512)": {
                "bootstrap.servers": f"127.0.0.1:{sasl_ssl_port}", "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(files.ca_pem), "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "bench", "sasl.password": "bench-secret",
            },
        }
        mb = args.records * args.record_size / 1e6
        rows: list[tuple[str, ...]] = []
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # (kept alive until the result)
            admin.alter_user_scram_credentials([
                UserScramCredentialUpsertion("bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                             b"bench-secret")])["bench"].result(30)
            for name, conf in runs.items():
                topic = f"bench-{name.split()[0].lower()}-{uuid.uuid4().hex[:6]}"
                create_topic(broker.bootstrap, topic, args.partitions)
                cpu0 = sum(cpu_times(broker.pid))
                t_prod = _produce(conf, topic, args.records, args.record_size)
                cpu1 = sum(cpu_times(broker.pid))
                t_cons = _consume(conf, topic, args.partitions, args.records)
                cpu2 = sum(cpu_times(broker.pid))
                lat = _latency(conf, topic, args.latency_records, args.rate, args.record_size)
                log(f"{name}: produce {t_prod:.2f}s, consume {t_cons:.2f}s, {len(lat)} latency samples")
                rows.append((
                    name,
                    f"{mb / t_prod:.1f}", f"{(cpu1 - cpu0) / mb * 1000:.1f}",
                    f"{mb / t_cons:.1f}", f"{(cpu2 - cpu1) / mb * 1000:.1f}",
                    f"{percentile(lat, 0.5):.2f}", f"{percentile(lat, 0.99):.2f}", f"{max(lat, default=0):.2f}",
                    "",
                ))
        finally:
            broker.stop()
    print(f"{args.records} records x {args.record_size} B ({mb:.0f} MB), {args.partitions} partitions; "
          f"latency: {args.latency_records} records at {args.rate}/s, acks=1")
    table(("listener", "produce MB/s", "broker CPU ms/MB", "consume MB/s", "broker CPU ms/MB",
           "p50 ms", "p99 ms", "max ms", ""), rows)


if __name__ == "__main__":
    main()
