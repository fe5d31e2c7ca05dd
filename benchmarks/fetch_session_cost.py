"""Broker CPU per Fetch request, sessionless vs incremental fetch session (KIP-227).

    python3 benchmarks/fetch_session_cost.py --partitions 64 --requests 2100

Starts a broker in-process, writes 10 records to each partition of one topic, then times
``KafkaApis.handle`` (decode + handle + encode; no sockets) on encoded Fetch frames of a caught-up
consumer, i.e. nothing new to return: the steady state of a consumer long-polling for data.

* sessionless: session id 0, epoch -1, every partition listed (librdkafka, aiokafka);
* incremental: an established session, no partitions listed (the Java client, kafka-python).

Times are the CPU time of this process (``time.process_time``), the best of 7 rounds, so that
other load on the machine disturbs them little.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from typing import Any

from odradek.network.client import NetworkClient
from odradek.network.request_channel import ConnectionInfo
from odradek.protocol import messages as m
from odradek.protocol.header import RequestHeader, encode_request_header
from odradek.records.builder import build_batch
from odradek.server.kafka_apis import KafkaApis
from odradek.server.kafka_config import KafkaConfig
from odradek.server.kafka_raft_server import KafkaRaftServer

ROUNDS = 7


def frame(version: int, body: dict[str, Any]) -> bytearray:
    api = m.FETCH
    header = encode_request_header(RequestHeader(api.api_key, version, 1, "bench"), api.request_header_version(version))
    return bytearray(header + b"".join(bytes(b) for b in api.encode_request(version, body)))


def fetch_body(topic_id: uuid.UUID, partitions: int, session_id: int, epoch: int, listed: bool) -> dict[str, Any]:
    parts = [
        {"partition": p, "fetch_offset": 10, "partition_max_bytes": 1 << 20} for p in range(partitions)
    ]
    return {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
        "session_id": session_id, "session_epoch": epoch, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": "t", "topic_id": topic_id, "partitions": parts}] if listed else [],
    }


def best_per_request(apis: KafkaApis, conn: ConnectionInfo, frames: list[bytearray]) -> float:
    per_round = len(frames) // ROUNDS
    best = float("inf")
    for r in range(ROUNDS):
        chunk = frames[r * per_round : (r + 1) * per_round]
        t0 = time.process_time()
        for f in chunk:
            apis.handle(conn, f)
        best = min(best, (time.process_time() - t0) / per_round)
    return best


async def main(partitions: int, requests: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        server = KafkaRaftServer(
            KafkaConfig({"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"})
        )
        await server.startup()
        try:
            c = NetworkClient("127.0.0.1", server.bound_ports["PLAINTEXT"])
            await c.connect()
            await c.send(m.CREATE_TOPICS, 7, {
                "topics": [{"name": "t", "num_partitions": partitions, "replication_factor": 1, "configs": []}],
                "timeout_ms": 5000,
            })
            for p in range(partitions):
                batch = build_batch([(b"k", b"v" * 100, [], 1000 + i) for i in range(10)])
                await c.send(m.PRODUCE, 9, {
                    "acks": 1, "timeout_ms": 5000,
                    "topic_data": [{"name": "t", "partition_data": [{"index": p, "records": batch}]}],
                })
            await c.close()
            broker = server.broker
            assert broker is not None
            apis = broker.broker_apis
            assert apis is not None
            topic_id = broker.metadata_cache.get_topic_id("t")
            assert topic_id is not None
            conn = ConnectionInfo("bench", "127.0.0.1:1", "PLAINTEXT")
            cache = apis.fetch_manager.cache
            for version in (12, 16):
                plain = frame(version, fetch_body(topic_id, partitions, 0, -1, True))
                sessionless = best_per_request(apis, conn, [plain] * requests)
                apis.handle(conn, frame(version, fetch_body(topic_id, partitions, 0, 0, True)))
                session_id = next(reversed(cache.sessions))
                frames = [
                    frame(version, fetch_body(topic_id, partitions, session_id, e, False))
                    for e in range(1, requests + 1)
                ]
                incremental = best_per_request(apis, conn, frames)
                cache.remove(session_id)
                print(
                    f"Fetch v{version}, {partitions} partitions, nothing new: sessionless "
                    f"{sessionless * 1e6:.0f} us/request, incremental {incremental * 1e6:.0f} us/request"
                )
        finally:
            await server.shutdown()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--requests", type=int, default=2100)
    args = ap.parse_args()
    asyncio.run(main(args.partitions, args.requests))
