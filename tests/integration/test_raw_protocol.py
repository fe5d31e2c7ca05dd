"""Bad input over a plain socket: broken frames, unknown APIs and versions, bad record batches.

Valid parts of each request are encoded with Odradek's own codecs (``odradek.protocol``) and
record batches with ``odradek.records.builder.build_batch``; the broken part is made by hand.
After every case the broker must still answer a Metadata request on a new connection, and the
records acknowledged at the start of the module must still read back byte for byte.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.embedded import EmbeddedBroker
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.records.batch import COMPRESSION_GZIP, COMPRESSION_ZSTD, CRC_OFFSET
from odradek.records.builder import build_batch

from .support import BASE_TIMESTAMP_MS, RawConnection, fetch, metadata, produce

pytestmark = pytest.mark.integration

MAX_REQUEST_BYTES = 300_000
TOPIC = "raw-protocol"
SMALL_TOPIC = "raw-protocol-small"  # max.message.bytes=2000


class RawBroker:
    def __init__(self, broker: EmbeddedBroker) -> None:
        self.broker = broker
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, base offset, batch as sent)

    def connect(self) -> RawConnection:
        return RawConnection.to(self.broker)

    def check_healthy(self) -> None:
        """Metadata on a new connection works and every acknowledged batch reads back."""
        with self.connect() as conn:
            md = metadata(conn, [TOPIC, SMALL_TOPIC])
            assert [b["node_id"] for b in md["brokers"]] == [1]
            assert [(t["name"], t["error_code"], len(t["partitions"])) for t in md["topics"]] == [
                (TOPIC, 0, 2),
                (SMALL_TOPIC, 0, 1),
            ]
            for partition, base_offset, sent in self.acked:
                result = fetch(conn, TOPIC, partition, base_offset)
                assert result["error_code"] == 0
                got = bytes(result["records"])
                assert len(got) >= len(sent), f"partition {partition} offset {base_offset}: short read"
                stored = got[: len(sent)]
                # the broker rewrites base offset and partition leader epoch, then the CRC covers
                # attributes onward: compare everything after the leader epoch except the CRC
                assert struct.unpack_from(">q", stored)[0] == base_offset
                assert stored[16] == sent[16]  # magic
                assert stored[CRC_OFFSET + 4 :] == sent[CRC_OFFSET + 4 :]
                assert stored[CRC_OFFSET : CRC_OFFSET + 4] == sent[CRC_OFFSET : CRC_OFFSET + 4]


def create_topic(conn: RawConnection, name: str, partitions: int, configs: dict[str, str]) -> None:
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
        ],
        "timeout_ms": 30_000,
        "validate_only": False,
    }
    resp = conn.request(m.CREATE_TOPICS, 7, body)
    assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [(name, 0)], resp


def batch(n: int = 3, tag: str = "r", *, compression: int = 0, size: int = 10) -> bytes:
    return build_batch(
        [
            (f"k{i}".encode(), f"{tag}-{i}-".encode() + b"v" * size, [("h", b"x")], BASE_TIMESTAMP_MS + i)
            for i in range(n)
        ],
        compression=compression,
    )


@pytest.fixture(scope="module")
def raw() -> Iterator[RawBroker]:
    with EmbeddedBroker({"socket.request.max.bytes": str(MAX_REQUEST_BYTES)}) as broker:
        rb = RawBroker(broker)
        with rb.connect() as conn:
            create_topic(conn, TOPIC, 2, {})
            create_topic(conn, SMALL_TOPIC, 1, {"max.message.bytes": "2000"})
            for partition, payload in [
                (0, batch(5, "first")),
                (1, batch(50, "gz", compression=COMPRESSION_GZIP)),
                (0, batch(20, "zstd", compression=COMPRESSION_ZSTD)),
            ]:
                resp = produce(conn, TOPIC, partition, payload)
                assert resp["error_code"] == 0, resp
                rb.acked.append((partition, resp["base_offset"], payload))
        assert [(p, o) for p, o, _ in rb.acked] == [(0, 0), (1, 0), (0, 5)]
        rb.check_healthy()
        yield rb


@pytest.fixture
def after(raw: RawBroker) -> Iterator[RawBroker]:
    """Runs the test, then checks the broker is still up and the acknowledged data intact."""
    yield raw
    raw.check_healthy()


# ---- framing ----------------------------------------------------------------------------------


def test_negative_size(after: RawBroker) -> None:
    with after.connect() as conn:
        conn.send_raw(struct.pack(">i", -1) + b"\x00" * 16)
        assert conn.is_closed_by_peer()


def test_size_smaller_than_a_header(after: RawBroker) -> None:
    with after.connect() as conn:
        conn.send_raw(struct.pack(">i", 3) + b"abc")
        assert conn.is_closed_by_peer()


def test_oversized_size_prefix(after: RawBroker) -> None:
    with after.connect() as conn:
        conn.send_raw(struct.pack(">i", MAX_REQUEST_BYTES + 1))  # no body follows: not read
        assert conn.is_closed_by_peer()
    with after.connect() as conn:
        conn.send_raw(struct.pack(">i", 2**31 - 1) + b"\x00" * 1024)
        assert conn.is_closed_by_peer()


def test_request_at_the_size_limit_is_served(after: RawBroker) -> None:
    """A produce just under socket.request.max.bytes still works on the same broker."""
    with after.connect() as conn:
        payload = batch(1, "big", size=MAX_REQUEST_BYTES // 2)
        resp = produce(conn, TOPIC, 1, payload)
        assert resp["error_code"] == 0, resp
        after.acked.append((1, resp["base_offset"], payload))


def test_truncated_frame_then_disconnect(after: RawBroker) -> None:
    with after.connect() as conn:
        _, request = conn.encode_request(m.METADATA, 12, {"topics": None})
        conn.send_raw(struct.pack(">i", len(request)) + request[: len(request) // 2])
    with after.connect() as conn:  # and a frame that stops inside its size prefix
        conn.send_raw(b"\x00\x00")


@pytest.mark.parametrize(
    "frame",
    [
        b"\xff" * 40,  # api key -1
        struct.pack(">hhi", 3, 12, 7) + b"\x7f\xff" + b"x" * 4,  # client id longer than the frame
        struct.pack(">hhi", 3, 12, 7) + b"\x00\x00" + b"\xff\xff\xff\xff\xff\xff",  # bad tagged fields
        struct.pack(">hhi", 0, 9, 7) + b"\x00\x00\x00" + b"\x00" * 3,  # Produce with a cut body
        struct.pack(">hhi", 18, 3, 7) + b"\x00\x00\x00\x05\xc3\x28",  # ApiVersions v3, bad UTF-8
    ],
    ids=["negative-api-key", "long-client-id", "bad-tagged-fields", "cut-produce", "bad-utf8"],
)
def test_garbage_header_or_body_closes_connection(after: RawBroker, frame: bytes) -> None:
    with after.connect() as conn:
        conn.send_frame(frame)
        assert conn.is_closed_by_peer()


# ---- unknown APIs and versions ----------------------------------------------------------------


@pytest.mark.parametrize("api_key", ["first-unimplemented", 999, 32767])
def test_unknown_api_key_closes_connection(after: RawBroker, api_key: int | str) -> None:
    with after.connect() as conn:
        supported = {
            k["api_key"] for k in conn.request(m.API_VERSIONS, 3, software())["api_keys"]
        }
        if api_key == "first-unimplemented":  # a real Kafka API this broker does not advertise
            key = min(set(range(100)) - supported)
        else:
            key = int(api_key)
        assert key not in supported
        conn.send_frame(struct.pack(">hhi", key, 0, 42) + b"\x00\x04test" + b"\x00" * 8)
        assert conn.is_closed_by_peer()


def software() -> dict[str, Any]:
    return {"client_software_name": "odradek-tests", "client_software_version": "1.0"}


def test_api_versions(after: RawBroker) -> None:
    with after.connect() as conn:
        resp = conn.request(m.API_VERSIONS, 3, software())
        assert resp["error_code"] == 0
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
        # advertised from v0 as Kafka 4.0 does (KAFKA-18659); v0-v2 requests close the connection
        assert keys[m.PRODUCE.api_key] == (0, m.PRODUCE.max_version)
        assert keys[m.API_VERSIONS.api_key][0] == 0
        # v0 still answers (no client software fields)
        assert conn.request(m.API_VERSIONS, 0, {})["error_code"] == 0


@pytest.mark.parametrize("version", [5, 100, 32767])
def test_unsupported_api_versions_version(after: RawBroker, version: int) -> None:
    """Answered with a v0 response: UNSUPPORTED_VERSION and the versions the broker has."""
    with after.connect() as conn:
        header = struct.pack(">hhi", m.API_VERSIONS.api_key, version, 77) + b"\x00\x04test\x00"
        conn.send_frame(header + b"\x05odra\x041.0\x00")
        frame = conn.recv_frame()
        assert frame is not None, "connection closed instead of a v0 answer"
        (cid,) = struct.unpack_from(">i", frame)
        assert cid == 77
        body, end = m.API_VERSIONS.decode_response(0, frame, 4)
        assert end == len(frame)
        assert body["error_code"] == Errors.UNSUPPORTED_VERSION == 35
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
        assert keys[m.API_VERSIONS.api_key] == (m.API_VERSIONS.min_version, m.API_VERSIONS.max_version)
        assert m.METADATA.api_key in keys
        # the connection stays usable
        assert conn.request(m.API_VERSIONS, 3, software())["error_code"] == 0


@pytest.mark.parametrize("version", [0, 1, 2, 12, 99])
def test_unsupported_produce_version_closes_connection(after: RawBroker, version: int) -> None:
    with after.connect() as conn:
        # a v2-shaped Produce: acks, timeout, topics (no transactional id before v3)
        body = struct.pack(">hi", -1, 5000) + struct.pack(">i", 1) + struct.pack(">h", len(TOPIC))
        body += TOPIC.encode() + struct.pack(">i", 1) + struct.pack(">i", 0)
        payload = batch(1, "old")
        body += struct.pack(">i", len(payload)) + payload
        conn.send_frame(struct.pack(">hhi", 0, version, 5) + b"\x00\x04test" + body)
        assert conn.is_closed_by_peer()


def test_unsupported_fetch_version_closes_connection(after: RawBroker) -> None:
    with after.connect() as conn:
        conn.send_frame(struct.pack(">hhi", m.FETCH.api_key, 3, 5) + b"\x00\x04test" + b"\x00" * 40)
        assert conn.is_closed_by_peer()


# ---- bad produce payloads ---------------------------------------------------------------------


def test_corrupted_crc(after: RawBroker) -> None:
    with after.connect() as conn:
        good = bytearray(batch(4, "crc"))
        good[-1] ^= 0xFF  # flip bits in the last record: the CRC no longer matches
        assert produce(conn, TOPIC, 0, bytes(good))["error_code"] == Errors.CORRUPT_MESSAGE == 2
        bad_crc = bytearray(batch(4, "crc2"))
        bad_crc[CRC_OFFSET] ^= 0x01
        assert produce(conn, TOPIC, 0, bytes(bad_crc))["error_code"] == Errors.CORRUPT_MESSAGE
        # the same connection keeps working
        assert produce(conn, TOPIC, 0, batch(1, "ok"))["error_code"] == 0


def test_truncated_batch(after: RawBroker) -> None:
    with after.connect() as conn:
        payload = batch(4, "cut")
        resp = produce(conn, TOPIC, 0, payload[:-7])
        assert resp["error_code"] == Errors.CORRUPT_MESSAGE, resp


def magic_v1_message_set(value: bytes) -> bytes:
    """One legacy (magic 1) message: offset, size, crc32, magic, attributes, timestamp, key, value."""
    body = struct.pack(">bbq", 1, 0, BASE_TIMESTAMP_MS) + struct.pack(">i", -1)
    body += struct.pack(">i", len(value)) + value
    crc = zlib.crc32(body) & 0xFFFFFFFF
    message = struct.pack(">I", crc) + body
    return struct.pack(">qi", 0, len(message)) + message


def test_magic_v1_batch(after: RawBroker) -> None:
    """Kafka 4 rejects old message formats with INVALID_RECORD (87), from
    ProduceRequest.validateRecords; nothing is appended."""
    with after.connect() as conn:
        before = fetch(conn, TOPIC, 1, 0)["high_watermark"]
        resp = produce(conn, TOPIC, 1, magic_v1_message_set(b"legacy"))
        assert resp["error_code"] == Errors.INVALID_RECORD, resp
        assert fetch(conn, TOPIC, 1, 0)["high_watermark"] == before


def test_two_batches_in_one_partition(after: RawBroker) -> None:
    """Produce v3+ carries exactly one batch per partition; Kafka answers INVALID_RECORD (87)."""
    with after.connect() as conn:
        resp = produce(conn, TOPIC, 1, batch(2, "two-a") + batch(2, "two-b"))
        assert resp["error_code"] == Errors.INVALID_RECORD == 87, resp


def test_empty_records(after: RawBroker) -> None:
    with after.connect() as conn:
        assert produce(conn, TOPIC, 1, b"")["error_code"] == Errors.INVALID_RECORD


def test_record_larger_than_max_message_bytes(after: RawBroker) -> None:
    with after.connect() as conn:
        small = produce(conn, SMALL_TOPIC, 0, batch(1, "fits", size=100))
        assert small["error_code"] == 0
        big = produce(conn, SMALL_TOPIC, 0, batch(1, "too-big", size=5000))
        assert big["error_code"] == Errors.MESSAGE_TOO_LARGE == 10, big
        assert fetch(conn, SMALL_TOPIC, 0, 0)["high_watermark"] == 1


@pytest.mark.parametrize("name", ["bad topic!", "", ".", "x" * 300])
def test_produce_to_invalid_topic_name(after: RawBroker, name: str) -> None:
    with after.connect() as conn:
        resp = produce(conn, name, 0, batch(1, "bad"))
        assert resp["error_code"] == Errors.INVALID_TOPIC_EXCEPTION == 17, resp


@pytest.mark.parametrize("partition", [-1, -2147483648, 2, 1000])
def test_produce_to_unknown_partition(after: RawBroker, partition: int) -> None:
    with after.connect() as conn:
        resp = produce(conn, TOPIC, partition, batch(1, "nowhere"))
        assert resp["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION == 3, resp


def test_produce_with_acks_zero_error_closes_connection(after: RawBroker) -> None:
    """acks=0 has no response to carry an error: Kafka closes the connection instead."""
    with after.connect() as conn:
        _, request = conn.encode_request(
            m.PRODUCE,
            9,
            {
                "transactional_id": None,
                "acks": 0,
                "timeout_ms": 1000,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": 77, "records": batch(1, "z")}]}],
            },
        )
        conn.send_frame(request)
        assert conn.is_closed_by_peer()


def test_invalid_acks(after: RawBroker) -> None:
    with after.connect() as conn:
        resp = produce(conn, TOPIC, 0, batch(1, "acks"), acks=2)
        assert resp["error_code"] == Errors.INVALID_REQUIRED_ACKS == 21, resp


def test_fetch_unknown_topic_and_partition(after: RawBroker) -> None:
    with after.connect() as conn:
        assert fetch(conn, TOPIC, 9, 0)["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
        assert fetch(conn, "no-such-topic-" + uuid.uuid4().hex, 0, 0)["error_code"] in {
            Errors.UNKNOWN_TOPIC_OR_PARTITION,
            Errors.UNKNOWN_TOPIC_ID,
        }
        assert fetch(conn, TOPIC, 0, 10**9)["error_code"] == Errors.OFFSET_OUT_OF_RANGE


def test_pipelined_requests_answered_in_order(after: RawBroker) -> None:
    with after.connect() as conn:
        ids = []
        for _ in range(20):
            cid, request = conn.encode_request(m.METADATA, 12, {"topics": None})
            ids.append(cid)
            conn.send_frame(request)
        got = []
        for _ in ids:
            frame = conn.recv_frame()
            assert frame is not None
            got.append(struct.unpack_from(">i", frame)[0])
        assert got == ids
