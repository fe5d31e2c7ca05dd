"""ZooKeeper mode, the broker side: the controller's LeaderAndIsr / UpdateMetadata / StopReplica,
encoded with the generated protocol and sent through KafkaApis (with ZkControllerApis as its
extension) onto a real ReplicaManager and LogManager in a temporary directory, with the
ZkMetadataCache under KafkaApis' own Metadata handler."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from purgatory_support import FakeTimer, ManualLogWorker

from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.metadata.zk_metadata_cache import ZkMetadataCache
from odradek.network.request_channel import ConnectionInfo
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.header import RequestHeader, decode_response_header, encode_request_header
from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api
from odradek.records.builder import build_batch
from odradek.server.controller_channel import InMemoryControllerChannel
from odradek.server.kafka_apis import KafkaApis
from odradek.server.kafka_config import KafkaConfig
from odradek.server.replica_fetcher_manager import ReplicaFetcherManager
from odradek.server.replica_fetcher_thread import FetcherConfig
from odradek.server.replica_manager import ReplicaManager
from odradek.server.zk_controller_apis import ZkControllerApis

ME = 1
BROKER_EPOCH = 0x100  # this broker's /brokers/ids/1 czxid
T1 = uuid.UUID(int=0x71)
CONN = ConnectionInfo("c1", "127.0.0.1:5555", "PLAINTEXT")
CONFIG = KafkaConfig({"log.dirs": "/nonexistent", "auto.create.topics.enable": "false"})


def brokers(*ids: int, version: int = 8) -> list[dict[str, Any]]:
    out = []
    for i in ids:
        ep = {"port": 9000 + i, "host": "127.0.0.1", "listener": "PLAINTEXT", "security_protocol": 0}
        out.append({"id": i, "v0_host": "127.0.0.1", "v0_port": 9000 + i, "endpoints": [ep], "rack": f"r{i}"})
    return out


def lisr_part(p: int, leader: int, leader_epoch: int, isr: list[int], replicas: list[int],
              partition_epoch: int = 0, controller_epoch: int = 1) -> dict[str, Any]:
    return {"topic_name": "t", "partition_index": p, "controller_epoch": controller_epoch, "leader": leader,
            "leader_epoch": leader_epoch, "isr": isr, "partition_epoch": partition_epoch, "replicas": replicas,
            "adding_replicas": [], "removing_replicas": [], "is_new": False, "leader_recovery_state": 0}


def um_part(p: int, leader: int, leader_epoch: int, isr: list[int], replicas: list[int],
            topic: str = "t") -> dict[str, Any]:
    return {"topic_name": topic, "partition_index": p, "controller_epoch": 1, "leader": leader,
            "leader_epoch": leader_epoch, "isr": isr, "zk_version": leader_epoch, "replicas": replicas,
            "offline_replicas": []}


class Broker:
    def __init__(self, path: Path) -> None:
        self.cache = ZkMetadataCache(ME)
        self.lm = LogManager([str(path)], LogConfig(), lambda: 0)
        self.worker = ManualLogWorker()
        self.rm = ReplicaManager(ME, self.lm, self.cache, lambda _t: LogConfig(), lambda: 0,
                                 timer=FakeTimer(), log_worker=self.worker)
        self.zk_apis = ZkControllerApis(ME, self.cache, self.rm, lambda: BROKER_EPOCH)
        self.apis = KafkaApis(
            node_id=ME, cluster_id="zk-cluster-id", config=CONFIG, metadata_cache=self.cache,
            replica_manager=self.rm, controller_channel=InMemoryControllerChannel({}, self.cache.get_controller_id),
            log_manager=self.lm, enabled_apis=[m.API_VERSIONS, m.METADATA], extensions=[self.zk_apis],
        )
        self.cid = 0

    def send(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        """One request frame through KafkaApis, the response decoded."""
        self.cid += 1
        header = encode_request_header(RequestHeader(api.api_key, version, self.cid, "controller-2"),
                                       api.request_header_version(version))
        frame = bytearray(header + b"".join(bytes(b) for b in api.encode_request(version, body)))
        out = self.apis.handle(CONN, frame)
        assert isinstance(out, list)
        buf = b"".join(bytes(b) for b in out)
        cid, pos = decode_response_header(buf, api.response_header_version(version))
        assert cid == self.cid
        resp, _ = api.decode_response(version, buf, pos)
        return resp

    def leader_and_isr(self, *parts: dict[str, Any], controller_epoch: int = 1, broker_epoch: int = BROKER_EPOCH,
                       version: int = 7, topic_id: uuid.UUID = T1) -> dict[str, Any]:
        body = {"controller_id": 2, "is_k_raft_controller": False, "controller_epoch": controller_epoch,
                "broker_epoch": broker_epoch, "type": 0, "ungrouped_partition_states": list(parts),
                "topic_states": [{"topic_name": "t", "topic_id": topic_id, "partition_states": list(parts)}],
                "live_leaders": []}
        return self.send(g.LEADER_AND_ISR, version, body)

    def update_metadata(self, *parts: dict[str, Any], live: tuple[int, ...] = (1, 2, 3), controller_epoch: int = 1,
                        version: int = 8, topic_ids: dict[str, uuid.UUID] | None = None,
                        broker_epoch: int = BROKER_EPOCH, controller_id: int = 2) -> dict[str, Any]:
        ids = topic_ids if topic_ids is not None else {"t": T1}
        topics: dict[str, list[dict[str, Any]]] = {}
        for p in parts:
            topics.setdefault(p["topic_name"], []).append(p)
        body = {"controller_id": controller_id, "is_k_raft_controller": False, "type": 0,
                "controller_epoch": controller_epoch,
                "broker_epoch": broker_epoch, "ungrouped_partition_states": list(parts),
                "topic_states": [{"topic_name": t, "topic_id": ids.get(t, uuid.UUID(int=0)), "partition_states": ps}
                                 for t, ps in topics.items()],
                "live_brokers": brokers(*live)}
        return self.send(g.UPDATE_METADATA, version, body)

    def stop_replica(self, *parts: tuple[int, int, bool], controller_epoch: int = 1, version: int = 4,
                     broker_epoch: int = BROKER_EPOCH) -> dict[str, Any]:
        body = {"controller_id": 2, "is_k_raft_controller": False, "controller_epoch": controller_epoch,
                "broker_epoch": broker_epoch, "delete_partitions": any(d for _, _, d in parts),
                "ungrouped_partitions": [{"topic_name": "t", "partition_index": p} for p, _, _ in parts],
                "topics": [{"name": "t", "partition_indexes": [p for p, _, _ in parts]}],
                "topic_states": [{"topic_name": "t", "partition_states": [
                    {"partition_index": p, "leader_epoch": e, "delete_partition": d} for p, e, d in parts]}]}
        return self.send(g.STOP_REPLICA, version, body)

    def metadata(self, *topics: str) -> dict[str, Any]:
        return self.send(m.METADATA, 12, {
            "topics": [{"name": t, "topic_id": uuid.UUID(int=0)} for t in topics] if topics else None,
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
        })


def lisr_errors(resp: dict[str, Any]) -> dict[int, int]:
    return {pe["partition_index"]: pe["error_code"] for t in resp["topics"] for pe in t["partition_errors"]}


@pytest.fixture
def b(tmp_path: Path) -> Broker:
    return Broker(tmp_path)


def test_leader_and_isr_makes_this_broker_leader_and_it_serves_produce(b: Broker) -> None:
    b.update_metadata(um_part(0, 1, 3, [1, 2], [1, 2]))
    resp = b.leader_and_isr(lisr_part(0, leader=ME, leader_epoch=3, isr=[1, 2], replicas=[1, 2], partition_epoch=5))
    assert resp["error_code"] == Errors.NONE
    assert [(t["topic_id"], lisr_errors({"topics": [t]})) for t in resp["topics"]] == [(T1, {0: Errors.NONE})]
    assert b.worker.run_all() == 1  # the log is created on the worker
    p = b.rm.partitions[("t", 0)]
    assert (p.is_leader, p.leader_epoch, p.partition_epoch, p.controller_epoch, p.topic_id) == (True, 3, 5, 1, T1)
    lg = b.lm.get_log("t", 0)
    assert lg is not None and lg.topic_id == T1.bytes
    out = b.rm.append_records(1000, 1, {("t", 0): bytearray(build_batch([(b"k", b"v", [], 1)]))})
    assert isinstance(out, dict) and out[("t", 0)].error == Errors.NONE


def test_leader_and_isr_makes_a_follower_that_fetches_from_the_leader_in_the_cache(b: Broker) -> None:
    fm = ReplicaFetcherManager(b.rm, FetcherConfig(node_id=ME))
    b.rm.replica_fetcher_manager = fm

    async def run() -> None:
        b.update_metadata(um_part(0, 3, 1, [3, 1], [3, 1]))
        resp = b.leader_and_isr(lisr_part(0, leader=3, leader_epoch=1, isr=[3, 1], replicas=[3, 1]))
        assert lisr_errors(resp) == {0: Errors.NONE}
        b.worker.run_all()
        p = b.rm.partitions[("t", 0)]
        assert (p.is_leader, p.leader_id, p.leader_epoch) == (False, 3, 1)
        st = fm.fetch_state(("t", 0))
        assert st is not None and (st.fetch_offset, st.current_leader_epoch, st.topic_id) == (0, 1, T1)
        (f,) = fm.fetchers.values()
        # Broker 3's PLAINTEXT endpoint, as UpdateMetadata gave it.
        assert (f.source.broker_id, f.source.host, f.source.port) == (3, "127.0.0.1", 9003)
        await fm.shutdown()

    asyncio.run(asyncio.wait_for(run(), 30))


def test_a_follower_whose_leader_is_not_in_the_cache_fetches_after_update_metadata(b: Broker) -> None:
    fm = ReplicaFetcherManager(b.rm, FetcherConfig(node_id=ME))
    b.rm.replica_fetcher_manager = fm

    async def run() -> None:
        b.update_metadata(live=(1,))  # broker 3 not known yet
        b.leader_and_isr(lisr_part(0, leader=3, leader_epoch=1, isr=[3, 1], replicas=[3, 1]))
        b.worker.run_all()
        assert fm.fetch_state(("t", 0)) is None
        b.update_metadata(um_part(0, 3, 1, [3, 1], [3, 1]), live=(1, 3))
        st = fm.fetch_state(("t", 0))
        assert st is not None and st.current_leader_epoch == 1
        await fm.shutdown()

    asyncio.run(asyncio.wait_for(run(), 30))


def test_a_stale_controller_epoch_is_refused_and_changes_nothing(b: Broker) -> None:
    b.leader_and_isr(lisr_part(0, leader=ME, leader_epoch=2, isr=[1], replicas=[1]), controller_epoch=5)
    b.worker.run_all()
    before = b.rm.partitions[("t", 0)]
    # An old controller (epoch 4) makes broker 2 leader at a higher leader epoch, adds partition 1.
    resp = b.leader_and_isr(lisr_part(0, leader=2, leader_epoch=9, isr=[2, 1], replicas=[2, 1]),
                            lisr_part(1, leader=ME, leader_epoch=0, isr=[1], replicas=[1]), controller_epoch=4)
    assert resp["error_code"] == Errors.STALE_CONTROLLER_EPOCH
    assert lisr_errors(resp) == {0: Errors.STALE_CONTROLLER_EPOCH, 1: Errors.STALE_CONTROLLER_EPOCH}
    assert b.rm.partitions[("t", 0)] is before and before.is_leader and before.leader_epoch == 2
    assert ("t", 1) not in b.rm.partitions and b.worker.jobs == []
    # UpdateMetadata and StopReplica from it are refused too.
    assert b.update_metadata(um_part(0, 2, 9, [2], [2, 1]), controller_epoch=4)["error_code"] == Errors.STALE_CONTROLLER_EPOCH
    assert b.cache.get_partition_info("t", 0) is None and b.cache.get_controller_id() is None
    resp = b.stop_replica((0, -2, True), controller_epoch=4)
    assert (resp["error_code"], resp["partition_errors"]) == (Errors.STALE_CONTROLLER_EPOCH, [])
    assert ("t", 0) in b.rm.partitions and b.lm.get_log("t", 0) is not None
    # The current controller's (epoch 5) is accepted.
    assert b.update_metadata(um_part(0, 1, 2, [1], [1]), controller_epoch=5)["error_code"] == Errors.NONE


def test_a_stale_broker_epoch_is_refused(b: Broker) -> None:
    old = BROKER_EPOCH - 1  # meant for this broker id's previous registration
    resp = b.leader_and_isr(lisr_part(0, leader=ME, leader_epoch=0, isr=[1], replicas=[1]), broker_epoch=old)
    assert resp["error_code"] == Errors.STALE_BROKER_EPOCH and lisr_errors(resp) == {0: Errors.STALE_BROKER_EPOCH}
    assert b.rm.partitions == {}
    assert b.update_metadata(um_part(0, 1, 0, [1], [1]), broker_epoch=old)["error_code"] == Errors.STALE_BROKER_EPOCH
    assert b.stop_replica((0, 0, True), broker_epoch=old)["error_code"] == Errors.STALE_BROKER_EPOCH
    assert b.cache.get_all_topics() == set()
    # -1 (unknown) and a newer epoch (the controller learnt of it first) are accepted.
    assert lisr_errors(b.leader_and_isr(lisr_part(0, leader=ME, leader_epoch=0, isr=[1], replicas=[1]),
                                        broker_epoch=-1)) == {0: Errors.NONE}
    assert b.update_metadata(um_part(0, 1, 0, [1], [1]), broker_epoch=BROKER_EPOCH + 5)["error_code"] == Errors.NONE


def test_per_partition_leader_epochs_not_newer_are_skipped(b: Broker) -> None:
    b.leader_and_isr(lisr_part(0, leader=ME, leader_epoch=4, isr=[1, 2], replicas=[1, 2]),
                     lisr_part(1, leader=ME, leader_epoch=4, isr=[1, 2], replicas=[1, 2]))
    b.worker.run_all()
    resp = b.leader_and_isr(
        lisr_part(0, leader=2, leader_epoch=3, isr=[2], replicas=[1, 2]),  # older
        lisr_part(1, leader=2, leader_epoch=4, isr=[2], replicas=[1, 2]),  # the same epoch
        lisr_part(2, leader=2, leader_epoch=0, isr=[2], replicas=[2, 3]),  # not a replica here
        lisr_part(3, leader=ME, leader_epoch=0, isr=[1], replicas=[1]),  # new
    )
    assert resp["error_code"] == Errors.NONE
    assert lisr_errors(resp) == {0: Errors.STALE_CONTROLLER_EPOCH, 1: Errors.STALE_CONTROLLER_EPOCH,
                                 2: Errors.UNKNOWN_TOPIC_OR_PARTITION, 3: Errors.NONE}
    for i in (0, 1):
        p = b.rm.partitions[("t", i)]
        assert (p.leader_id, p.leader_epoch) == (ME, 4)
    assert ("t", 2) not in b.rm.partitions and ("t", 3) in b.rm.partitions


def test_another_topic_id_for_a_hosted_partition_is_inconsistent(b: Broker) -> None:
    b.leader_and_isr(lisr_part(0, leader=ME, leader_epoch=0, isr=[1], replicas=[1]))
    b.worker.run_all()
    resp = b.leader_and_isr(lisr_part(0, leader=ME, leader_epoch=1, isr=[1], replicas=[1]),
                            topic_id=uuid.UUID(int=0x99))
    assert lisr_errors(resp) == {0: Errors.INCONSISTENT_TOPIC_ID}
    assert b.rm.partitions[("t", 0)].leader_epoch == 0 and b.rm.partitions[("t", 0)].topic_id == T1


def test_leader_and_isr_v1_without_topic_ids(b: Broker) -> None:
    resp = b.leader_and_isr(lisr_part(0, leader=ME, leader_epoch=0, isr=[1], replicas=[1]), version=1)
    assert resp["partition_errors"] == [{"topic_name": "t", "partition_index": 0, "error_code": 0}]
    assert b.rm.partitions[("t", 0)].leader_epoch == 0


def test_stop_replica_with_delete_removes_the_log_and_a_lower_leader_epoch_is_fenced(b: Broker) -> None:
    b.leader_and_isr(lisr_part(0, leader=ME, leader_epoch=3, isr=[1], replicas=[1]),
                     lisr_part(1, leader=ME, leader_epoch=3, isr=[1], replicas=[1]),
                     lisr_part(2, leader=ME, leader_epoch=3, isr=[1], replicas=[1]))
    b.worker.run_all()
    log_dir = Path(b.lm.get_log("t", 0).dir)  # type: ignore[union-attr]
    assert log_dir.exists()
    resp = b.stop_replica((0, 3, True), (1, 2, True), (2, 4, False))
    assert resp["error_code"] == Errors.NONE
    assert {pe["partition_index"]: pe["error_code"] for pe in resp["partition_errors"]} == {
        0: Errors.NONE, 1: Errors.FENCED_LEADER_EPOCH, 2: Errors.NONE}
    b.worker.run_all()
    assert ("t", 0) not in b.rm.partitions and b.lm.get_log("t", 0) is None and not log_dir.exists()
    assert ("t", 1) in b.rm.partitions and b.lm.get_log("t", 1) is not None  # fenced: untouched
    assert ("t", 2) not in b.rm.partitions and b.lm.get_log("t", 2) is not None  # stopped, log kept
    # The deletion sentinel (-2) passes any leader epoch; so does v0-v2's "no epoch".
    resp = b.stop_replica((1, -2, True))
    assert resp["partition_errors"] == [{"topic_name": "t", "partition_index": 1, "error_code": 0}]
    b.worker.run_all()
    assert b.lm.get_log("t", 1) is None
    assert b.stop_replica((2, 0, True), version=1)["partition_errors"][0]["error_code"] == Errors.NONE
    b.worker.run_all()
    assert b.lm.get_log("t", 2) is None


def test_update_metadata_changes_what_metadata_answers(b: Broker) -> None:
    seen: list[tuple[list[str], list[tuple[str, int]]]] = []
    b.zk_apis.update_metadata_listeners.append(lambda topics, deleted: seen.append((topics, deleted)))
    before = b.metadata()
    assert (before["topics"], before["brokers"], before["controller_id"]) == ([], [], -1)
    b.update_metadata(um_part(0, 1, 2, [1, 2], [1, 2]), um_part(1, 2, 0, [2], [2, 3]),
                      um_part(0, 3, 0, [3], [3], topic="u"), topic_ids={"t": T1, "u": uuid.UUID(int=0x75)})
    md = b.metadata()
    assert md["controller_id"] == 2
    assert [(n["node_id"], n["host"], n["port"], n["rack"]) for n in md["brokers"]] == [
        (1, "127.0.0.1", 9001, "r1"), (2, "127.0.0.1", 9002, "r2"), (3, "127.0.0.1", 9003, "r3")]
    t = {x["name"]: x for x in md["topics"]}
    assert set(t) == {"t", "u"} and t["t"]["topic_id"] == T1
    assert [(p["partition_index"], p["leader_id"], p["leader_epoch"], p["isr_nodes"], p["replica_nodes"])
            for p in t["t"]["partitions"]] == [(0, 1, 2, [1, 2], [1, 2]), (1, 2, 0, [2], [2, 3])]
    assert seen == [(["t", "u"], [])]
    # A partial update: broker 3 is gone (its partition's leader not available), t-0 has a new leader.
    b.update_metadata(um_part(0, 2, 3, [2], [1, 2]), live=(1, 2))
    md = b.metadata("t", "u")
    t = {x["name"]: x for x in md["topics"]}
    assert [(p["partition_index"], p["leader_id"], p["leader_epoch"]) for p in t["t"]["partitions"]] == [
        (0, 2, 3), (1, 2, 0)]
    assert t["t"]["partitions"][1]["offline_replicas"] == [3]
    assert t["u"]["partitions"][0]["error_code"] == Errors.LEADER_NOT_AVAILABLE


def test_the_deletion_sentinel_removes_partitions_then_the_topic(b: Broker) -> None:
    seen: list[list[tuple[str, int]]] = []
    b.zk_apis.update_metadata_listeners.append(lambda _topics, deleted: seen.append(deleted))
    b.update_metadata(um_part(0, 1, 0, [1], [1]), um_part(1, 2, 0, [2], [2]))
    b.update_metadata(um_part(1, -2, 0, [2], [2]))  # LeaderDuringDelete
    assert sorted(b.cache.get_topic_partitions("t")) == [0] and seen[-1] == [("t", 1)]
    assert [len(x["partitions"]) for x in b.metadata("t")["topics"]] == [1]
    b.update_metadata(um_part(0, -2, 0, [1], [1]))
    assert not b.cache.contains_topic("t") and b.cache.get_topic_name(T1) is None
    (topic,) = b.metadata("t")["topics"]
    assert topic["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("version", range(g.UPDATE_METADATA.min_version, g.UPDATE_METADATA.max_version + 1))
def test_every_update_metadata_version_fills_the_cache(b: Broker, version: int) -> None:
    assert b.update_metadata(um_part(0, 2, 1, [2, 1], [2, 1]), version=version)["error_code"] == Errors.NONE
    reg = b.cache.get_partition_info("t", 0)
    assert reg is not None and (reg.leader, reg.leader_epoch, reg.isr) == (2, 1, (2, 1))
    node = b.cache.get_alive_broker_node(2, "PLAINTEXT")
    assert node is not None and (node.host, node.port) == ("127.0.0.1", 9002)
    assert node.rack == ("r2" if version >= 2 else None)
    assert b.cache.get_topic_id("t") == (T1 if version >= 7 else uuid.UUID(int=0))
    assert b.cache.get_controller_id() == 2
