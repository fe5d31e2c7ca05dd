"""KafkaNetworkChannel's answers for requests it cannot deliver, as Kafka's: a refused or lost
connection comes back at once as ``BROKER_NOT_AVAILABLE`` (also while the peer's reconnect
backoff runs: the request does not wait it out, so the core can ask another node), a request not
answered in time as ``REQUEST_TIMED_OUT``. Versions are negotiated with ApiVersions once per
connection: Vote goes out at v2 (KIP-996's pre-vote) to a peer that serves it, lower to one that
does not, and a pre-vote or an API the peer cannot take comes back ``UNSUPPORTED_VERSION``."""

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


class FakePeer:
    """A Raft peer on loopback that answers ApiVersions with ``serves`` (api key -> (min, max))
    — a list of them: one per connection, the last for any further — and Vote granting it,
    recording each request (``seen``); it hangs up after ``close_after`` Votes on a connection."""

    def __init__(self, serves: list[dict[int, tuple[int, int]]], close_after: int = 0) -> None:
        self.serves = serves
        self.close_after = close_after
        self.seen: list[dict[str, Any]] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    def close(self) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from odradek.protocol.messages import generated as g

        serves = self.serves[min(self.connections, len(self.serves) - 1)]
        self.connections += 1
        votes = 0
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                frame = await reader.readexactly(size)
                api_key, version = int.from_bytes(frame[:2], "big"), int.from_bytes(frame[2:4], "big")
                correlation = frame[4:8]
                client_len = int.from_bytes(frame[8:10], "big")
                body_at = 10 + client_len + 1  # flexible header: client id, then empty tagged fields
                self.seen.append({"api_key": api_key, "version": version})
                if api_key == g.API_VERSIONS.api_key:
                    keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in serves.items()]
                    resp = {"error_code": 0, "api_keys": keys, "throttle_time_ms": 0}
                    out = correlation + b"".join(g.API_VERSIONS.encode_response(version, resp))
                else:
                    assert api_key == g.VOTE.api_key
                    body, _ = g.VOTE.decode_request(version, frame[body_at:])
                    self.seen[-1].update(body)
                    resp_bytes = g.VOTE.encode_response(version, msgs.vote_response(0, 3, -1, True))
                    out = correlation + b"\x00" + b"".join(resp_bytes)
                    votes += 1
                writer.write(len(out).to_bytes(4, "big") + out)
                await writer.drain()
                if self.close_after and votes >= self.close_after:
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()


OTHERS = {18: (0, 4), 1: (0, 17), 53: (0, 1), 54: (0, 1), 55: (0, 2), 59: (0, 1)}


def _vote(correlation: int, pre_vote: bool) -> RaftMessage:
    data = msgs.vote_request("c", 1, 3, OffsetAndEpoch(5, 3), 2, pre_vote=pre_vote)
    return RaftMessage(1, 2, msgs.VOTE, correlation, data)


def _votes(peer: FakePeer) -> list[dict[str, Any]]:
    return [r for r in peer.seen if r["api_key"] == msgs.VOTE]


def test_vote_is_sent_at_v2_with_the_pre_vote_flag_to_a_peer_that_serves_it() -> None:
    async def go() -> None:
        peer = FakePeer([{**OTHERS, 52: (0, 2)}])
        channel = KafkaNetworkChannel(1, {2: ("127.0.0.1", await peer.start())}, BatchCodec(METADATA_RECORD_SERDE))
        try:
            got = await _collect(channel, [_vote(9, True)], 5)
        finally:
            peer.close()
        assert [r["api_key"] for r in peer.seen] == [18, 52]  # ApiVersions first, as Kafka's client
        (vote,) = _votes(peer)
        assert vote["version"] == 2 and vote["topics"][0]["partitions"][0]["pre_vote"] is True
        assert len(got) == 1 and msgs.single_partition(got[0][1].data)["vote_granted"]  # type: ignore[index]

    asyncio.run(go())


def test_vote_is_negotiated_down_to_a_peer_that_serves_v0_to_v1() -> None:
    """A Kafka 3.x voter (Vote v0-v1): a vote goes at v1; a pre-vote, which v1 cannot say, is
    not sent and comes back UNSUPPORTED_VERSION; ApiVersions is asked once per connection."""
    async def go() -> None:
        peer = FakePeer([{**OTHERS, 52: (0, 1)}])
        channel = KafkaNetworkChannel(1, {2: ("127.0.0.1", await peer.start())}, BatchCodec(METADATA_RECORD_SERDE))
        try:
            got = await _collect(channel, [_vote(1, False), _vote(2, True), _vote(3, False)], 5)
        finally:
            peer.close()
        assert [r["api_key"] for r in peer.seen] == [18, 52, 52]
        assert [v["version"] for v in _votes(peer)] == [1, 1]
        sent = msgs.single_partition(_vote(1, False).data)
        assert [v["topics"][0]["partitions"][0] for v in _votes(peer)] == [sent, sent]
        by_id = {m.correlation_id: m.data for _, m in got}
        assert sorted(by_id) == [1, 2, 3]
        assert by_id[2]["error_code"] == msgs.UNSUPPORTED_VERSION
        assert msgs.single_partition(by_id[1])["vote_granted"]  # type: ignore[index]

    asyncio.run(go())


def test_versions_are_asked_again_on_a_new_connection_and_an_api_not_served_is_unsupported() -> None:
    async def go() -> None:
        # First connection: Vote v0-v2; it hangs up after one Vote; the next serves Vote v0 only.
        peer = FakePeer([{**OTHERS, 52: (0, 2)}, {**OTHERS, 52: (0, 0)}], close_after=1)
        port = await peer.start()
        channel = KafkaNetworkChannel(1, {2: ("127.0.0.1", port)}, BatchCodec(METADATA_RECORD_SERDE),
                                      reconnect_backoff_ms=1, reconnect_backoff_max_ms=1)
        got: list[RaftMessage] = []
        channel.start(got.append)
        try:
            for i, pre in enumerate((False, False), start=1):
                channel.send(_vote(i, pre))
                end = time.monotonic() + 5
                while len(got) < i and time.monotonic() < end:
                    await asyncio.sleep(0.005)
                end = time.monotonic() + 5
                while channel._clients[2].connected and time.monotonic() < end:
                    await asyncio.sleep(0.005)  # the peer hangs up after each Vote
                await asyncio.sleep(0.05)  # past the reconnect backoff
            # An API the peer does not advertise at all.
            peer.serves.append({k: v for k, v in OTHERS.items() if k != msgs.BEGIN_QUORUM_EPOCH})
            begin = msgs.begin_quorum_epoch_request("c", 3, 1, 2)
            channel.send(RaftMessage(1, 2, msgs.BEGIN_QUORUM_EPOCH, 7, begin))
            end = time.monotonic() + 5
            while len(got) < 3 and time.monotonic() < end:
                await asyncio.sleep(0.005)
        finally:
            await channel.close()
            peer.close()
        assert [v["version"] for v in _votes(peer)] == [2, 0]
        assert [r["api_key"] for r in peer.seen] == [18, 52, 18, 52, 18]
        assert [m.correlation_id for m in got] == [1, 2, 7]
        assert got[2].data["error_code"] == msgs.UNSUPPORTED_VERSION

    asyncio.run(go())
