"""Codec cost of the hot request/response paths, no broker and no sockets.

    python3 benchmarks/protocol_codec.py [--rounds 7] [--number 2000]

Times, with ``timeit`` (best of ``--rounds``, microseconds per call):

* Produce request decode, v3 and v9 (10 topics x 10 partitions, 1 KiB of records each — the
  records stay memoryviews, so this is the cost of walking the structure);
* Fetch response encode, v11 and v16 (10 topics x 10 partitions, 512 bytes of records each);
* Metadata response encode, v8 and v12 (3 brokers, 20 topics x 8 partitions).

Use it to compare two versions of the definitions (e.g. before and after regenerating them):
run it on each checkout on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import timeit
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from odradek.protocol import messages as m


def produce_request(version: int) -> bytes:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [
            {
                "name": f"topic-{t}",
                "partition_data": [{"index": p, "records": bytes(1024)} for p in range(10)],
            }
            for t in range(10)
        ],
    }
    return b"".join(m.PRODUCE.encode_request(version, body))


def fetch_response(version: int) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": f"topic-{t}",
                "topic_id": uuid.UUID(int=t + 1),
                "partitions": [
                    {
                        "partition_index": p,
                        "error_code": 0,
                        "high_watermark": 1000,
                        "last_stable_offset": 1000,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": bytes(512),
                    }
                    for p in range(10)
                ],
            }
            for t in range(10)
        ],
    }


def metadata_response() -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": b, "host": "localhost", "port": 9092 + b, "rack": None} for b in range(3)],
        "cluster_id": "odradek-cluster",
        "controller_id": 0,
        "topics": [
            {
                "error_code": 0,
                "name": f"topic-{t}",
                "topic_id": uuid.UUID(int=t + 1),
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": p,
                        "leader_id": p % 3,
                        "leader_epoch": 0,
                        "replica_nodes": [0, 1, 2],
                        "isr_nodes": [0, 1, 2],
                        "offline_replicas": [],
                    }
                    for p in range(8)
                ],
                "topic_authorized_operations": -2147483648,
            }
            for t in range(20)
        ],
        "cluster_authorized_operations": -2147483648,
    }


def cases() -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {}
    for v in (3, 9):
        frame = produce_request(v)
        out[f"Produce v{v} request decode"] = partial(m.PRODUCE.decode_request, v, frame)
    fetch = fetch_response(12)
    for v in (11, 16):
        out[f"Fetch v{v} response encode"] = partial(m.FETCH.encode_response, v, fetch)
    meta = metadata_response()
    for v in (8, 12):
        out[f"Metadata v{v} response encode"] = partial(m.METADATA.encode_response, v, meta)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=2000)
    args = ap.parse_args()
    for name, fn in cases().items():
        fn()  # compile the codec for this version outside the timing
        best = min(timeit.repeat(fn, number=args.number, repeat=args.rounds)) / args.number
        print(f"{name:32s} {best * 1e6:9.1f} us")


if __name__ == "__main__":
    main()
