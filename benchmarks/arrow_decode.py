#!/usr/bin/env python3
"""Arrow decoding of fetched record batches (the Spark data source's Python hot path), no broker.

    python3 benchmarks/arrow_decode.py                        # 1,000,000 records, both variants
    python3 benchmarks/arrow_decode.py --records 200000 --repeat 3
    python3 benchmarks/arrow_decode.py --variant fixed --profile   # + cProfile of one pass

Measures :func:`odradek.spark.arrow_decode.decode_records` (batch header scan included) followed
by :func:`~odradek.spark.arrow_decode.to_record_batch` into spark-sql-kafka's schema (no
headers column), on one core, the way an executor of the data source runs them on the buffers
its fetcher returns.

The input is built beforehand in memory with :func:`odradek.records.builder.build_batch` the way
a producer would batch: ``--records`` records with 8-byte keys (big-endian record numbers),
uncompressed unless ``--codec`` says otherwise, timestamps advancing 1 ms every 1,000 records,
in batches that close when they reach a size drawn between 16 KB and 1 MB (so the offset-delta
varint of a large batch grows from 1 to 3 bytes), batches concatenated into "fetch responses"
of about ``--fetch-bytes`` (16 MB) each. Two variants:

* ``fixed``: every value is ``--value-size`` (100) bytes, the common case of a benchmark
  producer;
* ``variable``: value sizes drawn uniformly from ``[value-size/2, 3*value-size/2]``, and one
  key in 100 null.

Each variant is decoded ``--repeat`` (5) times; the best pass is reported as records/s, seconds
per million records and MB/s of fetched bytes. Every pass checks that it got every record, and
a first untimed pass that offsets and keys are right. The machine's other load shows in the
numbers: compare runs made one after the other, or several of them.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import sys
import time
from collections.abc import Sequence

import pyarrow as pa

from odradek.records.builder import RecordTuple, build_batch
from odradek.spark.arrow_decode import decode_records, to_record_batch

BASE_TS = 1_700_000_000_000
MIN_BATCH = 16 * 1024
MAX_BATCH = 1024 * 1024

SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)


def build_fetches(
    records: int, value_size: int, variable: bool, codec: int, fetch_bytes: int, seed: int
) -> list[bytes]:
    """``records`` records in producer-sized batches, grouped into fetch-response buffers."""
    rng = random.Random(seed)
    low, high = max(value_size // 2, 0), value_size + value_size // 2
    payload = rng.randbytes(2 * high + 1)
    fetches: list[bytes] = []
    current: list[bytes] = []
    current_size = 0
    offset = 0
    while offset < records:
        target = rng.randint(MIN_BATCH, MAX_BATCH)
        batch: list[RecordTuple] = []
        size = 0
        while size < target and offset + len(batch) < records:
            i = offset + len(batch)
            vsize = rng.randint(low, high) if variable else value_size
            start = i % (high + 1)
            key = None if variable and i % 100 == 7 else i.to_bytes(8, "big")
            batch.append((key, payload[start : start + vsize], (), BASE_TS + i // 1000))
            size += vsize + 16
        data = build_batch(batch, base_offset=offset, compression=codec)
        offset += len(batch)
        current.append(data)
        current_size += len(data)
        if current_size >= fetch_bytes:
            fetches.append(b"".join(current))
            current, current_size = [], 0
    if current:
        fetches.append(b"".join(current))
    return fetches


def decode_all(fetches: Sequence[bytes]) -> int:
    rows = 0
    for data in fetches:
        decoded = decode_records(data)
        rows += to_record_batch(decoded, "topic", 0, SCHEMA).num_rows
    return rows


def verify(fetches: Sequence[bytes], records: int) -> None:
    """The decoded offsets are 0..records-1 and each key is its record number (or null)."""
    first = 0
    for data in fetches:
        decoded = decode_records(data)
        if decoded.offsets.tolist() != list(range(first, first + decoded.count)):
            raise SystemExit(f"wrong offsets decoded from {first}")
        for offset, key in zip(decoded.offsets.tolist(), decoded.keys.to_pylist(), strict=True):
            if key is not None and int.from_bytes(key, "big") != offset:
                raise SystemExit(f"wrong key decoded at offset {offset}")
        first += decoded.count
    if first != records:
        raise SystemExit(f"decoded {first} records, expected {records}")


def measure(name: str, fetches: Sequence[bytes], records: int, repeat: int, profile: bool) -> None:
    verify(fetches, records)
    size = sum(len(f) for f in fetches)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        rows = decode_all(fetches)
        elapsed = time.perf_counter() - t0
        if rows != records:
            raise SystemExit(f"{name}: decoded {rows} records, expected {records}")
        best = min(best, elapsed)
    print(
        f"{name:<9} {records:>9,} records {size / 1e6:7.1f} MB in {len(fetches):>3} fetches: "
        f"{records / best:>12,.0f} records/s  {best / records * 1e6:6.3f} s/M  "
        f"{size / best / 1e6:7.0f} MB/s  (best of {repeat})",
        flush=True,
    )
    if profile:
        prof = cProfile.Profile()
        prof.runcall(decode_all, fetches)
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--fetch-bytes", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--codec", type=int, default=0, help="0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--variant", choices=["fixed", "variable", "both"], default="both")
    parser.add_argument("--profile", action="store_true", help="cProfile one more pass")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    variants = ["fixed", "variable"] if args.variant == "both" else [args.variant]
    for name in variants:
        t0 = time.perf_counter()
        fetches = build_fetches(
            args.records,
            args.value_size,
            name == "variable",
            args.codec,
            args.fetch_bytes,
            args.seed,
        )
        print(f"# {name}: built in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        measure(name, fetches, args.records, args.repeat, args.profile)


if __name__ == "__main__":
    main()
