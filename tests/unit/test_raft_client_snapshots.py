"""FetchSnapshot through KafkaRaftClient and its driver, on real metadata logs in temporary
directories and the wire encoding of every request and response (test_raft_client.py's fake
network through RaftApis): a voter that was away while the leader snapshotted and moved its log
start fetches the snapshot file in pieces, freezes it as ``<offset>-<epoch>.checkpoint``, starts
its log there, hands the snapshot to its listeners and goes on committing."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

from test_raft_client import FAST, FakeChannel, FakeNetwork, Recorder, _client, _feature, _until

from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE, MetadataRecord
from odradek.raft import raft_messages as msgs
from odradek.raft.kafka_raft_client import KafkaRaftClient, KafkaRaftClientDriver
from odradek.raft.record_batches import BatchCodec
from odradek.raft.snapshot import SnapshotId, list_snapshots
from odradek.server.raft_apis import RaftApis


def test_a_voter_behind_the_log_start_catches_up_from_the_leaders_snapshot(tmp_path: Path) -> None:
    async def run() -> None:
        net = FakeNetwork()
        clients: dict[int, KafkaRaftClient[MetadataRecord]] = {}
        drivers: dict[int, KafkaRaftClientDriver] = {}
        events: dict[int, list[tuple[str, str, object]]] = {}
        sent: list[int] = []
        for n in (1, 2, 3):
            c = _client(tmp_path / f"n{n}", n, voters=frozenset({1, 2, 3}), cluster_id="c1", config=FAST,
                        rng=random.Random(n))
            clients[n] = c
            events[n] = []
            c.register(Recorder(str(n), events[n]))
            net.apis[n] = RaftApis(c, BatchCodec(METADATA_RECORD_SERDE))
            channel = FakeChannel(n, net)
            send = channel.send

            def counting(request: msgs.RaftMessage, send=send) -> None:  # type: ignore[no-untyped-def]
                if request.api_key == msgs.FETCH_SNAPSHOT:
                    sent.append(request.source)
                send(request)

            channel.send = counting  # type: ignore[method-assign]
            drivers[n] = KafkaRaftClientDriver(c, channel)
        for d in drivers.values():
            d.start()
        try:
            def leaders() -> list[int]:
                return [n for n, c in clients.items() if c.core.is_leader() and n not in net.down]

            await _until(lambda: len(leaders()) == 1, 10, "a leader")
            leader = leaders()[0]
            client = clients[leader]
            epoch = client.leader_and_epoch.epoch
            await _until(lambda: any(e[1] == "leader" for e in events[leader]), 5, "the leader's listener")
            away = next(n for n in (1, 2, 3) if n != leader)
            net.down.add(away)
            mlog = client._log
            for snapshot_no in range(2):
                for level in range(10):
                    last = client.prepare_append(epoch, [_feature(level)])
                    client.schedule_prepared_append()
                await _until(lambda: client.high_watermark > last, 5, "commits without one voter")  # noqa: B023
                sid = SnapshotId(client.high_watermark, epoch)
                records = [_feature(snapshot_no)] * 40
                assert mlog.create_snapshot(sid, records, 0, 0) is not None
            # The oldest snapshot goes and the log starts at the newest (the records below are
            # no longer served by Fetch).
            assert mlog.maybe_clean(0, -1, 0)
            assert mlog.log.log_start_offset == sid.end_offset
            client.refresh_snapshots()
            assert client.core.log.start.offset == sid.end_offset
            clients[away].core.snapshot_fetch_max_bytes = 200  # several FetchSnapshot rounds
            net.down.clear()
            await _until(lambda: (str(away), "snapshot", sid.end_offset) in events[away], 10,
                         "the snapshot loaded on the voter that was away")
            away_dir = tmp_path / f"n{away}"
            assert list_snapshots(str(away_dir)) == [sid]
            mine = (away_dir / sid.filename).read_bytes()
            assert mine == (tmp_path / f"n{leader}" / sid.filename).read_bytes()
            assert len(sent) >= -(-len(mine) // 200) and set(sent) == {away}
            assert clients[away]._log.log.log_start_offset == sid.end_offset
            assert not [f for f in os.listdir(away_dir) if f.endswith(".part")]
            # It goes on: a new record commits there too.
            kept = client.prepare_append(epoch, [_feature(99)])
            client.schedule_prepared_append()
            await _until(lambda: (str(away), "commit", (kept, ["FeatureLevelRecord"])) in events[away], 10,
                         "a commit after the snapshot")
            commits = [e[2] for e in events[away] if e[1] == "commit"]
            assert all(off >= sid.end_offset for off, _names in commits[-1:])  # type: ignore[misc]
        finally:
            for d in drivers.values():
                await d.shutdown()
            for c in clients.values():
                c._log.log.close()

    asyncio.run(asyncio.wait_for(run(), 60))


def test_a_snapshot_loaded_on_a_running_node_reports_what_it_no_longer_has() -> None:
    """A broker that fetched the leader's snapshot: topics deleted meanwhile (absent from the
    snapshot) reach the publishers as deleted, a config gone as changed (Kafka's
    MetadataDelta.finishSnapshot), the topics it has as created."""
    import uuid

    from odradek.metadata.delta import MetadataDelta
    from odradek.metadata.image import TOPIC_RESOURCE, MetadataImage
    from odradek.metadata.loader import MetadataLoader
    from odradek.metadata.metadata_cache import KRaftMetadataCache
    from odradek.raft.raft_client import Batch, SnapshotReader

    def topic(name: str, tid: uuid.UUID) -> list[MetadataRecord]:
        return [
            ("TopicRecord", {"name": name, "topic_id": tid}),
            ("PartitionRecord", {
                "partition_id": 0, "topic_id": tid, "replicas": [1], "isr": [1], "removing_replicas": [],
                "adding_replicas": [], "leader": 1, "leader_epoch": 0, "partition_epoch": 0,
                "directories": [uuid.UUID(int=0)],
            }),
        ]

    kept, gone = uuid.uuid4(), uuid.uuid4()
    config: MetadataRecord = ("ConfigRecord", {"resource_type": TOPIC_RESOURCE, "resource_name": "kept",
                                               "name": "retention.ms", "value": "1000"})
    loader = MetadataLoader(KRaftMetadataCache())
    deltas: list[MetadataDelta] = []

    def publish(delta: MetadataDelta, image: MetadataImage) -> None:
        deltas.append(delta)

    loader.publishers.append(publish)
    records = topic("kept", kept) + topic("gone", gone) + [config]
    loader.handle_commit([Batch(0, 1, 0, records)])
    assert sorted(loader.metadata_cache.image.topics.by_name) == ["gone", "kept"]
    loader.handle_load_snapshot(SnapshotReader(40, 2, topic("kept", kept) + topic("new", uuid.uuid4())))
    delta = deltas[-1]
    assert sorted(loader.metadata_cache.image.topics.by_name) == ["kept", "new"]
    assert sorted(delta.deleted_topics) == ["gone"]
    assert delta.changed_topic_configs == {"kept"}  # its retention.ms is gone
    assert {"kept", "new"} <= delta.created_topics


def test_raft_apis_answer_bad_fetch_snapshot_requests_with_kafka_errors(tmp_path: Path) -> None:
    """FetchSnapshot through RaftApis and the wire encoding (v1): another cluster, a node that
    does not lead, a snapshot that does not exist, a position outside it."""
    from odradek.network.request_channel import ConnectionInfo
    from odradek.protocol.header import RequestHeader
    from odradek.protocol.messages import generated as g
    from odradek.raft.raft_log import OffsetAndEpoch
    from odradek.raft.snapshot_fetch import fetch_snapshot_request
    from odradek.server.api_dispatcher import RequestContext

    async def run() -> None:
        client = _client(tmp_path / "n1", 1, cluster_id="c1")
        client.step()  # the only voter leads epoch 1
        apis = RaftApis(client, BatchCodec(METADATA_RECORD_SERDE))
        driver = KafkaRaftClientDriver(client, None)
        driver.start()
        handler = next(h for a, h in apis.handlers().items() if a.api_key == msgs.FETCH_SNAPSHOT)
        ctx = RequestContext(RequestHeader(59, 1, 1, "x"), ConnectionInfo("c", "peer", "CONTROLLER"))

        async def ask(data: dict[str, object]) -> dict[str, object]:
            wire = b"".join(bytes(p) for p in g.FETCH_SNAPSHOT.encode_request(1, data))
            decoded, _ = g.FETCH_SNAPSHOT.decode_request(1, wire)
            body = await handler(ctx, decoded)
            resp = b"".join(bytes(p) for p in g.FETCH_SNAPSHOT.encode_response(1, body))
            return dict(g.FETCH_SNAPSHOT.decode_response(1, resp)[0])

        try:
            epoch = client.leader_and_epoch.epoch
            sid = OffsetAndEpoch(1, epoch)
            resp = await ask(fetch_snapshot_request("other", 2, epoch, sid, 0, 100))
            assert resp["error_code"] == msgs.INCONSISTENT_CLUSTER_ID
            resp = await ask(fetch_snapshot_request("c1", 2, epoch, sid, 0, 100))
            part = resp["topics"][0]["partitions"][0]  # type: ignore[index]
            assert part["error_code"] == msgs.SNAPSHOT_NOT_FOUND
            assert part["current_leader"] == {"leader_id": 1, "leader_epoch": epoch}
            resp = await ask(fetch_snapshot_request("c1", 2, epoch + 1, sid, 0, 100))
            assert resp["topics"][0]["partitions"][0]["error_code"] == msgs.UNKNOWN_LEADER_EPOCH  # type: ignore[index]
            # A real snapshot: its bytes, then a position past its end.
            hw = client.high_watermark
            snap = SnapshotId(hw, epoch)
            assert client._log.create_snapshot(snap, [_feature(1)] * 5, 0, 0) is not None
            client.refresh_snapshots()
            size = (tmp_path / "n1" / snap.filename).stat().st_size
            resp = await ask(fetch_snapshot_request("c1", 2, epoch, OffsetAndEpoch(hw, epoch), 10, 1 << 20))
            part = resp["topics"][0]["partitions"][0]  # type: ignore[index]
            assert (part["error_code"], part["size"], part["position"]) == (0, size, 10)
            assert bytes(part["unaligned_records"]) == (tmp_path / "n1" / snap.filename).read_bytes()[10:]
            resp = await ask(fetch_snapshot_request("c1", 2, epoch, OffsetAndEpoch(hw, epoch), size, 100))
            assert resp["topics"][0]["partitions"][0]["error_code"] == msgs.POSITION_OUT_OF_RANGE  # type: ignore[index]
        finally:
            await driver.shutdown()
            client._log.log.close()

    asyncio.run(asyncio.wait_for(run(), 30))
