"""KafkaNetworkChannel's answers for requests it cannot deliver, as Kafka's: a refused or lost
connection comes back at once as ``BROKER_NOT_AVAILABLE`` (also while the peer's reconnect
backoff runs: the request does not wait it out, so the core can ask another node), a request not
answered in time as ``REQUEST_TIMED_OUT``; Vote goes out at v2, carrying KIP-996's pre-vote."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.raft import raft_messages as msgs
from odradek.raft.kafka_network_channel import KafkaNetworkChannel
from odradek.raft.raft_log import OffsetAndEpoch
from odradek.raft.raft_messages import RaftMessage
from odradek.raft.record_batches import BatchCodec


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def _fetch(correlation: int) -> RaftMessage:
    data = msgs.fetch_request("c", 1, 3, 0, 0)
    return RaftMessage(1, 2, msgs.FETCH, correlation, data)


async def _collect(channel: KafkaNetworkChannel[Any], requests: list[RaftMessage], wait_s: float) -> list[tuple[float, RaftMessage]]:
    got: list[tuple[float, RaftMessage]] = []
    channel.start(lambda m: got.append((time.monotonic(), m)))
    for r in requests:
        channel.send(r)
        await asyncio.sleep(0)
    end = time.monotonic() + wait_s
    while len(got) < len(requests) and time.monotonic() < end:
        await asyncio.sleep(0.005)
    await channel.close()
    return got


def test_refused_connection_fails_at_once_also_during_the_reconnect_backoff() -> None:
    async def go() -> None:
        channel = KafkaNetworkChannel(1, {2: ("127.0.0.1", _closed_port())}, BatchCodec(METADATA_RECORD_SERDE),
                                      reconnect_backoff_ms=1000, reconnect_backoff_max_ms=1000)
        got: list[tuple[float, RaftMessage]] = []
        channel.start(lambda m: got.append((time.monotonic(), m)))
        start = time.monotonic()
        channel.send(_fetch(1))
        while not got and time.monotonic() < start + 5:
            await asyncio.sleep(0.005)
        channel.send(_fetch(2))  # the 1 s reconnect backoff has just begun
        while len(got) < 2 and time.monotonic() < start + 5:
            await asyncio.sleep(0.005)
        await channel.close()
        assert [m.correlation_id for _, m in got] == [1, 2]
        assert all(m.is_response and m.data["error_code"] == msgs.BROKER_NOT_AVAILABLE for _, m in got)
        # The second did not wait out the backoff (it would have come a second later).
        assert got[1][0] - got[0][0] < 0.5

    asyncio.run(go())


def test_no_answer_in_time_is_request_timed_out() -> None:
    async def go() -> None:
        release = asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1 << 16)
            await release.wait()
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        channel = KafkaNetworkChannel(1, {2: ("127.0.0.1", port)}, BatchCodec(METADATA_RECORD_SERDE), request_timeout_ms=100)
        channel.timeout_s = 0.2
        try:
            got = await _collect(channel, [_fetch(1)], 3)
        finally:
            release.set()
            server.close()
            await asyncio.sleep(0.01)
        assert len(got) == 1 and got[0][1].data["error_code"] == msgs.REQUEST_TIMED_OUT

    asyncio.run(go())


def test_vote_is_sent_at_v2_with_the_pre_vote_flag() -> None:
    from odradek.protocol.messages import generated as g

    async def go() -> None:
        seen: list[dict[str, Any]] = []

        async def voter(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            size = int.from_bytes(await reader.readexactly(4), "big")
            frame = await reader.readexactly(size)
            api_key, version = int.from_bytes(frame[:2], "big"), int.from_bytes(frame[2:4], "big")
            correlation = frame[4:8]
            client_len = int.from_bytes(frame[8:10], "big")
            body_at = 10 + client_len + 1  # flexible header: client id, then empty tagged fields
            body, _ = g.VOTE.decode_request(version, frame[body_at:])
            seen.append({"api_key": api_key, "version": version, **body})
            resp = b"".join(g.VOTE.encode_response(version, msgs.vote_response(0, 3, -1, True)))
            out = correlation + b"\x00" + resp
            writer.write(len(out).to_bytes(4, "big") + out)
            await writer.drain()

        server = await asyncio.start_server(voter, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        channel = KafkaNetworkChannel(1, {2: ("127.0.0.1", port)}, BatchCodec(METADATA_RECORD_SERDE))
        data = msgs.vote_request("c", 1, 3, OffsetAndEpoch(5, 3), 2, pre_vote=True)
        try:
            got = await _collect(channel, [RaftMessage(1, 2, msgs.VOTE, 9, data)], 5)
        finally:
            server.close()
        assert seen and seen[0]["api_key"] == 52 and seen[0]["version"] == 2
        assert seen[0]["topics"][0]["partitions"][0]["pre_vote"] is True
        assert len(got) == 1 and msgs.single_partition(got[0][1].data)["vote_granted"]  # type: ignore[index]

    asyncio.run(go())
