"""KIP-467 over the wire: a Produce refused because some records are invalid carries
record_errors (the batch index and Kafka's message of every bad record) and error_message, from
Produce v8; older versions get the error code alone."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from test_broker_apis import broker, create, fetch, produce, records_of

from odradek.log.record_validation import MAX_RECORD_ERRORS
from odradek.records.builder import build_batch

NOW_MS = int(time.time() * 1000)


def keyed(pattern: str, codec: int = 0) -> bytes:
    """A batch with one record per character: 'k' keyed, '-' keyless."""
    return build_batch(
        [(b"key-%d" % i if c == "k" else None, b"value-%d" % i, [], NOW_MS) for i, c in enumerate(pattern)],
        compression=codec,
    )


def no_key(topic: str) -> str:
    return f"Compacted topic cannot accept message without key in topic partition {topic}-0"


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_every_keyless_record_is_named(tmp_path: Path, codec: int) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            assert (await create(c, "cmp", 1, {"cleanup.policy": "compact"}))["error_code"] == 0
            r = await produce(c, "cmp", 0, keyed("k-k--kk-", codec))
            assert r["error_code"] == 87  # INVALID_RECORD
            assert r["base_offset"] == -1
            assert r["record_errors"] == [
                {"batch_index": i, "batch_index_error_message": no_key("cmp")} for i in (1, 3, 4, 7)
            ]
            first3 = ", ".join(
                f"RecordError(batchIndex={i}, message='{no_key('cmp')}')" for i in (1, 3, 4)
            )
            assert r["error_message"] == (
                "One or more records have been rejected due to 4 record errors in total, and "
                f"only showing the first three errors at most: [{first3}]"
            )
            # nothing of the batch was stored; the partition takes the next batch
            r = await produce(c, "cmp", 0, keyed("kk", codec))
            assert (r["error_code"], r["base_offset"], r["record_errors"]) == (0, 0, [])
            f = await fetch(c, "cmp", 0, 0)
            assert [x.key for x in records_of(bytes(f["records"]))] == [b"key-0", b"key-1"]

    asyncio.run(go())


def test_versions_before_8_get_the_error_code_alone(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "cmp", 1, {"cleanup.policy": "compact"})
            r = await produce(c, "cmp", 0, keyed("-k"), version=7)
            # the fields are not on the wire before v8: decoded as their defaults
            assert (r["error_code"], r["record_errors"], r["error_message"]) == (87, [], None)
            r = await produce(c, "cmp", 0, keyed("-k"), version=8)
            assert r["error_code"] == 87 and [e["batch_index"] for e in r["record_errors"]] == [0]

    asyncio.run(go())


def test_out_of_range_timestamps_are_named_with_invalid_timestamp(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "ts", 1, {"message.timestamp.after.max.ms": "60000"})
            late = NOW_MS + 24 * 3600 * 1000
            batch = build_batch(
                [(None, b"a", [], NOW_MS), (b"k", b"b", [], late), (None, b"c", [], NOW_MS)]
            )
            r = await produce(c, "ts", 0, batch)
            assert r["error_code"] == 32  # INVALID_TIMESTAMP
            assert r["error_message"] == "One or more records have been rejected due to invalid timestamp"
            [e] = r["record_errors"]  # keyless records are fine on a topic that is not compacted
            assert e["batch_index"] == 1
            assert e["batch_index_error_message"].startswith(
                f"Timestamp {late} of message with offset 1 is out of range. "
                "The timestamp should be within ["
            )
            # on a compacted topic keys and timestamps are checked together: any bad timestamp
            # makes it INVALID_TIMESTAMP, and the keyless records are named too (as Kafka does)
            await create(c, "both", 1, {"cleanup.policy": "compact", "message.timestamp.after.max.ms": "60000"})
            batch = build_batch([(None, b"a", [], NOW_MS), (b"k", b"b", [], late), (b"k", b"c", [], NOW_MS)])
            r = await produce(c, "both", 0, batch)
            assert r["error_code"] == 32
            assert [(e["batch_index"], e["batch_index_error_message"][:9]) for e in r["record_errors"]] == [
                (0, "Compacted"), (1, "Timestamp"),
            ]

    asyncio.run(go())


def test_record_errors_are_capped_but_all_counted(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "many", 1, {"cleanup.policy": "compact"})
            n = MAX_RECORD_ERRORS + 5
            r = await produce(c, "many", 0, build_batch([(None, b"", [], NOW_MS)] * n, compression=4))
            assert r["error_code"] == 87
            assert [e["batch_index"] for e in r["record_errors"]] == list(range(MAX_RECORD_ERRORS))
            assert f"due to {n} record errors in total" in r["error_message"]

    asyncio.run(go())
