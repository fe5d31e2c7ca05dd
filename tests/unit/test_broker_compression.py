"""compression.type through the in-process broker: what a produce stores on disk and what a
fetch returns, per topic and broker-wide; the level configs through CreateTopics/AlterConfigs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_broker_apis import broker, create, fetch, produce, records_of, run

from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.records.batch import is_batch_crc_valid, iter_batches
from odradek.records.builder import build_batch
from odradek.records.records import decode_batch

RECORDS: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
    (b"key-%d" % i if i % 3 else None, None if i == 4 else b"value %d " % i * 20,
     [("trace", b"%d" % i), ("empty", None)] if i % 2 else [], 1_000 + i)
    for i in range(10)
]


def sent(codec: int) -> bytes:
    return build_batch(RECORDS, compression=codec)


def content(recs: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.key, r.value, r.headers, r.timestamp) for r in recs]


EXPECTED = [(k, v, h, ts) for k, v, h, ts in RECORDS]


def on_disk(data: Path, topic: str) -> list[tuple[int, list[tuple[Any, ...]]]]:
    """(codec, records) of every batch in the partition's segment files."""
    out = []
    for seg in sorted((data / f"{topic}-0").glob("*.log")):
        raw = seg.read_bytes()
        for h in iter_batches(raw):
            b = raw[h.position : h.position + h.size]
            assert is_batch_crc_valid(b, 0, len(b))
            out.append((h.compression, content(decode_batch(b))))
    return out


async def fetched(c: NetworkClient, topic: str) -> tuple[list[int], list[tuple[Any, ...]]]:
    f = await fetch(c, topic, 0, 0)
    assert f["error_code"] == 0
    raw = bytes(f["records"])
    return [h.compression for h in iter_batches(raw)], content(records_of(raw))


def test_gzip_topic_stores_gzip_batches_from_an_uncompressed_produce(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            assert (await create(c, "gz", 1, {"compression.type": "gzip"}))["error_code"] == 0
            r = await produce(c, "gz", 0, sent(0))
            assert r["error_code"] == 0 and r["base_offset"] == 0
            r = await produce(c, "gz", 0, sent(0))
            assert r["base_offset"] == 10
            assert on_disk(tmp_path, "gz") == [(1, EXPECTED), (1, EXPECTED)]
            codecs, recs = await fetched(c, "gz")
            assert codecs == [1, 1] and recs == EXPECTED * 2

    run(go)


def test_uncompressed_topic_stores_an_lz4_produce_uncompressed(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "plain", 1, {"compression.type": "uncompressed"})
            assert (await produce(c, "plain", 0, sent(3)))["error_code"] == 0
            assert on_disk(tmp_path, "plain") == [(0, EXPECTED)]
            assert await fetched(c, "plain") == ([0], EXPECTED)

    run(go)


def test_broker_compression_type_applies_to_topics_without_their_own(tmp_path: Path) -> None:
    async def go() -> None:
        overrides = {"compression.type": "zstd", "compression.zstd.level": "9"}
        async with broker(tmp_path, **overrides) as (_s, c):
            await create(c, "inherits", 1)
            await create(c, "own", 1, {"compression.type": "producer"})
            await create(c, "snap", 1, {"compression.type": "snappy"})
            for topic in ("inherits", "own", "snap"):
                assert (await produce(c, topic, 0, sent(1)))["error_code"] == 0
            assert on_disk(tmp_path, "inherits") == [(4, EXPECTED)]
            assert on_disk(tmp_path, "own") == [(1, EXPECTED)]
            assert on_disk(tmp_path, "snap") == [(2, EXPECTED)]
            d = await c.send(
                m.DESCRIBE_CONFIGS, 4,
                {"resources": [{"resource_type": 2, "resource_name": "inherits",
                                "configuration_keys": ["compression.type", "compression.zstd.level"]}],
                 "include_synonyms": False},
            )
            cfg = {x["name"]: (x["value"], x["config_source"]) for x in d["results"][0]["configs"]}
            assert cfg == {"compression.type": ("zstd", 4), "compression.zstd.level": ("9", 4)}

    run(go)


def test_altering_compression_type_applies_to_later_produces(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "alt", 1)
            await produce(c, "alt", 0, sent(2))
            r = await c.send(
                m.INCREMENTAL_ALTER_CONFIGS, 1,
                {"resources": [{"resource_type": 2, "resource_name": "alt", "configs": [
                    {"name": "compression.type", "config_operation": 0, "value": "lz4"},
                ]}], "validate_only": False},
            )
            assert r["responses"][0]["error_code"] == 0
            await produce(c, "alt", 0, sent(2))
            assert [codec for codec, _ in on_disk(tmp_path, "alt")] == [2, 3]
            codecs, recs = await fetched(c, "alt")
            assert codecs == [2, 3] and recs == EXPECTED * 2

    run(go)


def test_out_of_range_levels_are_invalid_config(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            bad = await create(c, "x", 1, {"compression.type": "gzip", "compression.gzip.level": "0"})
            assert bad["error_code"] == Errors.INVALID_CONFIG
            assert bad["error_message"] == (
                "Invalid value 0 for configuration compression.gzip.level: "
                "Value must be between 1 and 9 or equal to -1"
            )
            bad = await create(c, "x", 1, {"compression.lz4.level": "18"})
            assert bad["error_code"] == Errors.INVALID_CONFIG
            assert "compression.lz4.level" in bad["error_message"]
            ok = await create(c, "x", 1, {"compression.type": "gzip", "compression.gzip.level": "9"})
            assert ok["error_code"] == 0
            r = await c.send(
                m.INCREMENTAL_ALTER_CONFIGS, 1,
                {"resources": [{"resource_type": 2, "resource_name": "x", "configs": [
                    {"name": "compression.zstd.level", "config_operation": 0, "value": "23"},
                ]}], "validate_only": False},
            )
            res = r["responses"][0]
            assert res["error_code"] == Errors.INVALID_CONFIG
            assert "compression.zstd.level" in res["error_message"]
            r = await c.send(
                m.ALTER_CONFIGS, 2,
                {"resources": [{"resource_type": 2, "resource_name": "x", "configs": [
                    {"name": "compression.gzip.level", "value": "10"},
                ]}], "validate_only": False},
            )
            res = r["responses"][0]
            assert res["error_code"] == Errors.INVALID_CONFIG
            assert "compression.gzip.level" in res["error_message"]
            assert (await produce(c, "x", 0, sent(0)))["error_code"] == 0
            assert on_disk(tmp_path, "x") == [(1, EXPECTED)]

    run(go)


def test_zstd_topic_refuses_fetch_versions_older_than_10(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "z", 1, {"compression.type": "zstd"})
            await create(c, "p", 1)
            await produce(c, "z", 0, sent(0))
            await produce(c, "p", 0, sent(4))  # zstd as produced: not the topic's config

            async def fetch_v(topic: str, version: int) -> dict[str, Any]:
                resp = await c.send(m.FETCH, version, {
                    "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": topic, "partitions": [{
                        "partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                        "current_leader_epoch": -1, "log_start_offset": -1}]}],
                    "forgotten_topics_data": [], "rack_id": "",
                })
                return resp["responses"][0]["partitions"][0]  # type: ignore[no-any-return]

            old = await fetch_v("z", 9)
            assert old["error_code"] == Errors.UNSUPPORTED_COMPRESSION_TYPE and len(old["records"]) == 0
            assert old["high_watermark"] == -1
            new = await fetch_v("z", 10)
            assert new["error_code"] == 0 and content(records_of(new["records"])) == EXPECTED
            other = await fetch_v("p", 4)
            assert other["error_code"] == 0 and content(records_of(other["records"])) == EXPECTED

    run(go)


def test_zstd_produce_needs_produce_v7(tmp_path: Path) -> None:
    """Kafka refuses zstd batches in Produce requests older than v7 (clients that old cannot
    read them back); other codecs are fine at any version, and nothing is appended."""
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "t", 1)
            old = await produce(c, "t", 0, sent(4), version=6)
            assert old["error_code"] == Errors.UNSUPPORTED_COMPRESSION_TYPE
            assert old["base_offset"] == -1
            assert (await produce(c, "t", 0, sent(1), version=3))["error_code"] == 0
            assert (await produce(c, "t", 0, sent(4), version=7))["error_code"] == 0
            got = records_of((await fetch(c, "t", 0, 0))["records"])
            assert content(got) == EXPECTED * 2  # the v6 zstd batch was not appended

    run(go)
