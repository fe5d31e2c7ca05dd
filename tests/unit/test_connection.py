"""The sans-I/O Kafka connection core (odradek.network.connection), without sockets: framing
across arbitrary chunk boundaries, size limits, responses in request order, client correlation
matching, in-flight accounting, disconnects, and the reconnect backoff."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from odradek.network.connection import (
    CLOSE,
    FRAME_INITIAL_BYTES,
    STAGING_BUFFER_BYTES,
    ClientConnection,
    CorrelationIdMismatch,
    FrameTooLarge,
    InvalidFrameSize,
    ReconnectBackoff,
    ServerConnection,
    TooManyInFlight,
    frame_response,
)
from odradek.protocol import messages as m
from odradek.protocol.header import decode_request_header, encode_response_header

MiB = 1024 * 1024


def request(corr: int, body: bytes) -> bytes:
    """A size-prefixed request frame: api key 0, version 0, correlation id ``corr``, ``body``."""
    payload = struct.pack(">hhi", 0, 0, corr) + body
    return struct.pack(">i", len(payload)) + payload


def take_all(conn: ServerConnection[Any]) -> list[bytes]:
    out = []
    while (frame := conn.next_request()) is not None:
        assert isinstance(frame, bytearray)  # the handler may rewrite it in place
        out.append(bytes(frame))
    return out


def feed_in_pieces(conn: ServerConnection[Any], data: bytes, sizes: list[int]) -> list[bytes]:
    """Feed ``data`` in pieces of the given sizes, taking frames after every piece, through
    get_buffer/buffer_updated (as asyncio's BufferedProtocol does)."""
    frames: list[bytes] = []
    pos = 0
    for n in sizes:
        while n:
            buf = conn.get_buffer()
            k = min(n, len(buf), len(data) - pos)
            if k == 0:
                break
            buf[:k] = data[pos : pos + k]
            conn.buffer_updated(k)
            pos += k
            n -= k
            frames += take_all(conn)
    assert pos == len(data)
    return frames


BODIES = [b"", b"a", b"hello" * 10, bytes(range(256)) * 300, b"z" * (STAGING_BUFFER_BYTES - 12)]


def payloads() -> list[bytes]:
    return [request(i, body)[4:] for i, body in enumerate(BODIES)]


# ---- server side: framing -----------------------------------------------------------------


def test_frames_fed_one_byte_at_a_time() -> None:
    conn: ServerConnection[Any] = ServerConnection(10 * MiB)
    data = b"".join(request(i, b) for i, b in enumerate(BODIES))
    got: list[bytes] = []
    for i in range(len(data)):
        conn.receive_data(data[i : i + 1])
        got += take_all(conn)
    assert got == payloads()
    assert conn.buffered_bytes == 0 and not conn.has_partial_frame


def test_many_frames_in_one_chunk() -> None:
    conn: ServerConnection[Any] = ServerConnection(10 * MiB)
    data = b"".join(request(i, b"x" * (i % 7)) for i in range(2000))
    conn.receive_data(data)
    got = take_all(conn)
    assert len(got) == 2000
    assert got[1234] == request(1234, b"x" * (1234 % 7))[4:]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_chunk_boundaries_with_a_frame_larger_than_the_staging_buffer(seed: int) -> None:
    rnd = random.Random(seed)
    big = rnd.randbytes(3 * MiB)
    bodies = [b"first", big, b"after", rnd.randbytes(70_000), b"last"]
    data = b"".join(request(i, b) for i, b in enumerate(bodies))
    sizes = []
    while sum(sizes) < len(data):
        sizes.append(rnd.choice([1, 3, 4, 5, 100, 4096, 65_536, 700_000]))
    conn: ServerConnection[Any] = ServerConnection(10 * MiB)
    got = feed_in_pieces(conn, data, sizes)
    assert got == [request(i, b)[4:] for i, b in enumerate(bodies)]


def test_a_declared_size_is_not_allocated_up_front() -> None:
    conn: ServerConnection[Any] = ServerConnection(100 * MiB)
    conn.receive_data(struct.pack(">i", 90 * MiB) + b"\x00" * 1000)
    assert conn.next_request() is None
    assert conn.reading_large_frame
    assert conn.buffered_bytes == 1000
    assert len(conn.get_buffer()) <= FRAME_INITIAL_BYTES
    # The buffer offered is capped by a memory pool's room.
    assert len(conn.get_buffer(5000)) == 5000


@pytest.mark.parametrize("size", [-1, 0, 7, -(2**31)])
def test_negative_zero_and_too_small_sizes(size: int) -> None:
    conn: ServerConnection[Any] = ServerConnection(1000)
    conn.receive_data(request(1, b"ok") + struct.pack(">i", size) + b"\x00" * 8 + request(2, b"x"))
    assert conn.next_request() == request(1, b"ok")[4:]
    slot = conn.reserve_response()
    with pytest.raises(InvalidFrameSize) as info:
        conn.next_request()
    assert (info.value.size, info.value.limit) == (size, 8)
    # Nothing after the bad size is taken; the response owed goes out, then the close.
    assert conn.closing and conn.next_request() is None
    assert conn.next_response() is None
    conn.complete(slot, [b"one"])
    assert conn.next_response() == [b"one"]
    assert conn.next_response() is CLOSE


def test_size_over_the_limit_closes() -> None:
    conn: ServerConnection[Any] = ServerConnection(1000)
    conn.receive_data(request(1, b"x" * 992))  # exactly 1000 bytes: allowed
    assert conn.next_request() is not None
    conn.receive_data(struct.pack(">i", 1001))  # rejected on the size alone, no body needed
    with pytest.raises(FrameTooLarge) as info:
        conn.next_request()
    assert (info.value.size, info.value.limit) == (1001, 1000)
    assert conn.next_response() is CLOSE


# ---- server side: response order -----------------------------------------------------------


def test_responses_leave_in_request_order_when_completed_out_of_order() -> None:
    conn: ServerConnection[Any] = ServerConnection(MiB)
    slots = [conn.reserve_response() for _ in range(5)]
    assert conn.owed == 5 and conn.is_next(slots[0]) and not conn.is_next(slots[1])
    conn.complete(slots[3], "r3")
    conn.complete(slots[1], None)  # no response (acks=0): skipped
    conn.complete(slots[2], "r2")
    assert conn.next_response() is None  # 0 is not ready: nothing may overtake it
    conn.complete(slots[0], "r0")
    assert [conn.next_response() for _ in range(3)] == ["r0", "r2", "r3"]
    assert conn.next_response() is None and conn.owed == 1
    conn.complete(slots[4], "r4")
    assert conn.next_response() == "r4" and conn.owed == 0
    with pytest.raises(ValueError):
        conn.complete(slots[4], "again")


def test_a_close_in_the_order_drops_what_follows() -> None:
    conn: ServerConnection[Any] = ServerConnection(MiB)
    a, b, c = (conn.reserve_response() for _ in range(3))
    conn.complete(c, "c")
    conn.complete_close(b)  # e.g. a delayed operation that failed
    assert conn.closing
    assert conn.next_response() is None
    conn.complete(a, "a")
    assert conn.next_response() == "a"
    assert conn.next_response() is CLOSE and conn.next_response() is CLOSE
    # The connection goes: what was completed and never sent is handed back to be released.
    assert conn.connection_lost() == ["c"]
    late = conn.reserve_response()
    assert conn.complete(late, "late") is False  # gone: the caller releases it


def test_close_after_pending_and_connection_lost() -> None:
    conn: ServerConnection[Any] = ServerConnection(MiB)
    a = conn.reserve_response()
    b = conn.reserve_response()
    conn.close_after_pending()
    conn.close_after_pending()  # idempotent
    conn.receive_data(request(9, b"ignored"))
    assert conn.next_request() is None  # no request is taken once closing
    conn.complete(b, "b")
    assert conn.connection_lost() == ["b"]
    assert conn.owed == 0 and conn.buffered_bytes == 0
    assert conn.complete(a, "a") is False


def test_frame_response_prefixes_the_total_size() -> None:
    parts = frame_response([b"ab", bytearray(b"cde"), memoryview(b"fghi")])
    assert parts[0] == struct.pack(">i", 9)
    assert b"".join(bytes(p) for p in parts[1:]) == b"abcdefghi"


# ---- client side ------------------------------------------------------------------------------

API = m.API_VERSIONS
VERSION = 3
REQUEST_BODY = {"client_software_name": "t", "client_software_version": "1"}


def response_frame(corr: int, n_keys: int = 1) -> bytes:
    body = {
        "error_code": 0,
        "api_keys": [{"api_key": k, "min_version": 0, "max_version": 9} for k in range(n_keys)],
        "throttle_time_ms": 0,
    }
    payload = encode_response_header(corr, API.response_header_version(VERSION)) + b"".join(
        bytes(p) for p in API.encode_response(VERSION, body)
    )
    return struct.pack(">i", len(payload)) + payload


def client(**kw: Any) -> ClientConnection:
    kw.setdefault("max_in_flight", 5)
    return ClientConnection("unit", **kw)


def test_requests_are_encoded_with_increasing_correlation_ids() -> None:
    c = client()
    sent = []
    for _ in range(3):
        cid, parts = c.send_request(API, VERSION, REQUEST_BODY)
        data = b"".join(bytes(p) for p in parts)
        (size,) = struct.unpack_from(">i", data)
        assert size == len(data) - 4
        header, pos = decode_request_header(data[4:], API.request_header_version(VERSION))
        assert (header.api_key, header.api_version, header.client_id) == (18, 3, "unit")
        assert header.correlation_id == cid
        assert API.decode_request(VERSION, data[4:], pos)[0]["client_software_name"] == "t"
        sent.append(cid)
    assert sent == [1, 2, 3] and c.in_flight == 3


def test_responses_are_matched_to_their_requests_across_chunks() -> None:
    c = client()
    ids = [c.send_request(API, VERSION, REQUEST_BODY, context=f"ctx{i}")[0] for i in range(3)]
    data = b"".join(response_frame(cid, n_keys=i + 1) for i, cid in enumerate(ids))
    got = []
    for i in range(0, len(data), 3):
        c.receive_data(data[i : i + 3])
        while (resp := c.next_response()) is not None:
            got.append(resp)
    assert [r.request.correlation_id for r in got] == ids
    assert [r.request.context for r in got] == ["ctx0", "ctx1", "ctx2"]
    assert [len(r.body["api_keys"]) for r in got if r.body is not None] == [1, 2, 3]
    assert c.in_flight == 0


def test_unknown_correlation_id_is_a_protocol_error() -> None:
    c = client()
    c.send_request(API, VERSION, REQUEST_BODY)
    c.receive_data(response_frame(999))
    with pytest.raises(CorrelationIdMismatch, match=r"response \(999\) does not match request \(1\).*unknown"):
        c.next_response()
    with pytest.raises(CorrelationIdMismatch):  # the connection stays failed: close it
        c.send_request(API, VERSION, REQUEST_BODY)
    assert not c.can_send


def test_out_of_order_correlation_id_is_a_protocol_error() -> None:
    c = client()
    first, _ = c.send_request(API, VERSION, REQUEST_BODY)
    second, _ = c.send_request(API, VERSION, REQUEST_BODY)
    c.receive_data(response_frame(second))
    with pytest.raises(CorrelationIdMismatch, match="later request"):
        c.next_response()


def test_a_response_with_nothing_in_flight_is_a_protocol_error() -> None:
    c = client()
    c.receive_data(response_frame(1))
    with pytest.raises(CorrelationIdMismatch, match="no request in flight"):
        c.next_response()


def test_in_flight_accounting() -> None:
    c = client(max_in_flight=2)
    c.send_request(API, VERSION, REQUEST_BODY)
    c.send_request(API, VERSION, REQUEST_BODY)
    assert c.in_flight == 2 and not c.can_send
    with pytest.raises(TooManyInFlight):
        c.send_request(API, VERSION, REQUEST_BODY)
    # A request with no response (Produce acks=0) is never in flight.
    c.receive_data(response_frame(1))
    assert c.next_response() is not None and c.can_send
    c.send_request(m.PRODUCE, 9, {"acks": 0, "timeout_ms": 1, "topic_data": []}, expect_response=False)
    assert c.in_flight == 1 and c.oldest_in_flight is not None
    assert c.oldest_in_flight.correlation_id == 2


def test_disconnect_hands_back_the_pending_requests_and_ids_go_on() -> None:
    c = client()
    ids = [c.send_request(API, VERSION, REQUEST_BODY, context=i)[0] for i in range(3)]
    c.receive_data(response_frame(ids[0])[:7])  # half a response, then the connection is gone
    pending = c.connection_lost()
    assert [(p.correlation_id, p.context) for p in pending] == list(zip(ids, range(3), strict=True))
    assert "ApiVersions v3 (correlation id 1)" in pending[0].describe()
    assert c.in_flight == 0 and c.buffered_bytes == 0
    # A new connection: the half response is forgotten, correlation ids keep increasing.
    cid, _ = c.send_request(API, VERSION, REQUEST_BODY)
    assert cid == ids[-1] + 1
    c.receive_data(response_frame(cid))
    resp = c.next_response()
    assert resp is not None and resp.request.correlation_id == cid


def test_response_size_limit() -> None:
    c = client(max_response_bytes=100)
    c.send_request(API, VERSION, REQUEST_BODY)
    c.receive_data(struct.pack(">i", 101))
    with pytest.raises(FrameTooLarge, match="response of 101 bytes exceeds the limit of 100"):
        c.next_response()
    c2 = client()
    c2.send_request(API, VERSION, REQUEST_BODY)
    c2.receive_data(struct.pack(">i", -5))
    with pytest.raises(InvalidFrameSize):
        c2.next_response()


def test_raw_requests_take_the_next_response_whatever_its_id() -> None:
    c = client()
    parts = c.send_raw(b"\x00\x00\x00\x08" + struct.pack(">hhi", 18, 99, 7), context="raw")
    assert parts == [b"\x00\x00\x00\x08" + struct.pack(">hhi", 18, 99, 7)]
    c.receive_data(struct.pack(">iih", 6, 7, 35))
    resp = c.next_response()
    assert resp is not None and resp.body is None and bytes(resp.frame) == struct.pack(">ih", 7, 35)


def test_reused_buffers_for_small_and_large_responses() -> None:
    c = client(reuse_buffer=True, max_in_flight=1)
    for n_keys in (1, 20_000, 30_000, 2):  # 20,000 keys: a response larger than the staging buffer
        cid, _ = c.send_request(API, VERSION, REQUEST_BODY)
        data = response_frame(cid, n_keys)
        for i in range(0, len(data), 50_000):
            c.receive_data(data[i : i + 50_000])
        resp = c.next_response()
        assert resp is not None and isinstance(resp.frame, memoryview)
        assert bytes(resp.frame) == data[4:]
        assert resp.body is not None and len(resp.body["api_keys"]) == n_keys


# ---- reconnect backoff --------------------------------------------------------------------


def test_reconnect_backoff_doubles_with_jitter_up_to_the_max_and_resets() -> None:
    b = ReconnectBackoff(50, 1000, rng=random.Random(3))
    assert b.delay_ms(0) == 0  # never connected: no wait
    b.connecting(0)
    delays = []
    for attempt in range(8):
        b.disconnected(1000.0 * attempt)
        delays.append(b.backoff_ms)
        base = min(50 * 2**attempt, 1000)
        assert 0.8 * base - 1 <= b.backoff_ms <= min(1.2 * base, 1000)
    assert delays[-1] <= 1000 and delays[-1] >= 800
    b.disconnected(10_000)
    assert b.delay_ms(10_000) == b.backoff_ms
    assert b.delay_ms(10_000 + b.backoff_ms / 2) == pytest.approx(b.backoff_ms / 2)
    assert b.delay_ms(10_000 + b.backoff_ms) == 0
    b.ready()
    assert b.failed_attempts == 0 and 40 <= b.backoff_ms <= 60


def test_reconnect_backoff_without_room_to_grow_is_constant() -> None:
    b = ReconnectBackoff(500, 100, rng=random.Random(1))  # max below the base: the max wins
    for t in range(3):
        b.disconnected(t)
        assert b.backoff_ms == 100


def test_a_large_frame_not_taken_is_not_overwritten_by_the_next() -> None:
    """Bytes keep arriving while a complete large frame waits to be taken (reading paused):
    the next large frame waits in the staging buffer instead of replacing it."""
    rnd = random.Random(9)
    bodies = [rnd.randbytes(200_000), rnd.randbytes(300_000), b"small"]
    data = b"".join(request(i, b) for i, b in enumerate(bodies))
    for reuse in (False, True):
        c = ClientConnection("unit", max_in_flight=5, max_response_bytes=MiB, reuse_buffer=reuse)
        conn: Any = c
        conn.receive_data(data)  # all of it before anything is taken
        frames = []
        while (f := conn._next_frame()) is not None:
            frames.append(bytes(f))
        assert frames == [request(i, b)[4:] for i, b in enumerate(bodies)]
