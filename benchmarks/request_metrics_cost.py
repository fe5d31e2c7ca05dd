"""Broker CPU per request with the Prometheus request metrics on vs off, and with the request
log (kafka.request.logger) at DEBUG.

    python3 benchmarks/request_metrics_cost.py --requests 7000

Starts a broker in-process and times ``KafkaApis.handle`` (decode + handle + encode; no
sockets) on encoded frames of two requests: Metadata for one topic (a cheap request, where a fixed
cost per request shows most) and an acks=1 Produce of one 10-record batch. Modes:

* off: no ``metrics.prometheus.listener`` (only the slow-request check runs);
* metrics: the request metrics counted (what ``metrics.prometheus.listener`` turns on);
* metrics+debug log: also one request-log line per request (to a handler that drops it).

Times are the CPU time of this process (``time.process_time``), the best of 7 rounds, so that
other load on the machine disturbs them little.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
from typing import Any

from odradek.network.request_channel import ConnectionInfo
from odradek.network.request_metrics import RequestMetrics, request_logger
from odradek.protocol import messages as m
from odradek.protocol.header import RequestHeader, encode_request_header
from odradek.records.builder import build_batch
from odradek.server.kafka_apis import KafkaApis
from odradek.server.kafka_config import KafkaConfig
from odradek.server.kafka_raft_server import KafkaRaftServer

ROUNDS = 7


def frame(api: Any, version: int, body: dict[str, Any]) -> bytes:
    header = encode_request_header(RequestHeader(api.api_key, version, 1, "bench"), api.request_header_version(version))
    return header + b"".join(bytes(b) for b in api.encode_request(version, body))


async def best_per_request(apis: KafkaApis, conn: ConnectionInfo, frame_bytes: bytes, n: int) -> float:
    per_round = n // ROUNDS
    best = float("inf")
    for _ in range(ROUNDS):
        frames = [bytearray(frame_bytes) for _ in range(per_round)]
        t0 = time.process_time()
        for f in frames:
            r = apis.handle(conn, f)
            if r is not None and not isinstance(r, list):
                await r  # type: ignore[misc]
        best = min(best, (time.process_time() - t0) / per_round)
    return best


async def main(requests: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        server = KafkaRaftServer(
            KafkaConfig({"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"})
        )
        await server.startup()
        try:
            broker = server.broker
            assert broker is not None and broker.broker_apis is not None
            apis = broker.broker_apis
            conn = ConnectionInfo("bench", "127.0.0.1:1", "PLAINTEXT")
            create = frame(m.CREATE_TOPICS, 7, {
                "topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1, "configs": []}],
                "timeout_ms": 5000,
            })
            r = apis.handle(conn, bytearray(create))
            if r is not None and not isinstance(r, list):
                await r  # type: ignore[misc]
            await asyncio.sleep(0.5)
            metadata = frame(m.METADATA, 12, {
                "topics": [{"topic_id": None, "name": "t"}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            })
            batch = build_batch([(b"k", b"v" * 100, [], 1000 + i) for i in range(10)])
            produce = frame(m.PRODUCE, 9, {
                "acks": 1, "timeout_ms": 5000, "transactional_id": None,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}],
            })
            sink = logging.NullHandler()
            request_logger.propagate = False
            request_logger.addHandler(sink)
            for name, f in (("Metadata v12", metadata), ("Produce v9 acks=1", produce)):
                apis.request_metrics = None
                off = await best_per_request(apis, conn, f, requests)
                apis.request_metrics = RequestMetrics()
                on = await best_per_request(apis, conn, f, requests)
                request_logger.setLevel(logging.DEBUG)
                logged = await best_per_request(apis, conn, f, requests)
                request_logger.setLevel(logging.NOTSET)
                print(
                    f"{name}: off {off * 1e6:.1f} us/request, metrics {on * 1e6:.1f} us/request "
                    f"({(on - off) * 1e6:+.1f}), metrics+debug log {logged * 1e6:.1f} us/request "
                    f"({(logged - off) * 1e6:+.1f})"
                )
        finally:
            await server.shutdown()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=7000)
    args = ap.parse_args()
    asyncio.run(main(args.requests))
