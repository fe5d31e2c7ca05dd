"""What a mixed cluster with Apache Kafka 4.x needs of Odradek's controller and broker (issue 12,
part 8; the real-process proof is tests/integration/test_mixed_kafka_cluster.py):

- Envelope (KIP-590) on the controller listener: a Kafka broker forwards its clients' admin
  requests wrapped; the answer is the one the request gets unwrapped, as bytes with the
  client's correlation id; bad envelopes get Kafka's error codes.
- New replicas are placed in the broker's only registered log directory (Kafka's
  ``ClusterControlManager.defaultDir``), so a Kafka broker has no AssignReplicasToDirs to send.
- A broker registers the ``directory.id`` of its log directories (KIP-858), and the controller
  records the directories a broker reports with AssignReplicasToDirs.
"""

from __future__ import annotations

import asyncio
import base64
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_controller_channel import CLUSTER_ID, CONFIG, ctx, new_controller

from odradek.controller.assign_replicas_to_dirs import assign_replicas_to_dirs
from odradek.controller.controller_apis import ControllerApis
from odradek.controller.replication_control import (
    DIRECTORY_MIGRATING,
    DIRECTORY_UNASSIGNED,
    ReplicationControlManager,
)
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, KafkaError
from odradek.protocol.header import RequestHeader, decode_response_header, encode_request_header
from odradek.protocol.messages import generated as g
from odradek.server import config_defs
from odradek.server.broker_lifecycle_manager import BrokerLifecycleManager
from odradek.server.meta_properties import directory_ids, ensure_formatted, read_meta_properties

D1, D2, D3 = (uuid.UUID(int=(1 << 100) + i) for i in range(3))


def _enveloped(api: Any, version: int, body: dict[str, Any], correlation_id: int = 4242) -> dict[str, Any]:
    header = RequestHeader(api.api_key, version, correlation_id, "kafka-admin")
    raw = encode_request_header(header, api.request_header_version(version)) + b"".join(
        bytes(p) for p in api.encode_request(version, body))
    return {"request_data": raw, "request_principal": b"\x00\x00\x04User\x09ANONYMOUS\x00",
            "client_host_address": bytes([127, 0, 0, 9])}


def test_an_enveloped_create_topics_gets_the_answer_of_the_request_itself(tmp_path: Path) -> None:
    async def go() -> None:
        controller = new_controller(tmp_path, node_id=3000)
        capis = ControllerApis(node_id=3000, cluster_id=CLUSTER_ID, config=CONFIG, controller=controller,
                               leader_id=lambda: 3000)
        handlers = capis.handlers()
        assert g.ENVELOPE in handlers
        body = {"topics": [{"name": "forwarded", "num_partitions": 3, "replication_factor": 1,
                            "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": True}
        direct = await handlers[m.CREATE_TOPICS](ctx(m.CREATE_TOPICS.api_key, 7), dict(body))
        resp = await handlers[g.ENVELOPE](ctx(g.ENVELOPE.api_key, 0), _enveloped(m.CREATE_TOPICS, 7, body))
        assert resp["error_code"] == Errors.NONE
        raw = resp["response_data"]
        correlation_id, pos = decode_response_header(raw, m.CREATE_TOPICS.response_header_version(7))
        inner, end = m.CREATE_TOPICS.decode_response(7, raw, pos)
        assert correlation_id == 4242 and end == len(raw)
        assert inner["topics"][0]["name"] == "forwarded"
        assert [(t["name"], t["error_code"], t["error_message"]) for t in inner["topics"]] == [
            (t["name"], t["error_code"], t["error_message"]) for t in direct["topics"]]

        # Bytes that are no request, an API that is not forwarded, a version not served.
        bad = await handlers[g.ENVELOPE](ctx(g.ENVELOPE.api_key, 0), {
            "request_data": b"\x00\x13", "request_principal": None, "client_host_address": b""})
        assert (bad["error_code"], bad["response_data"]) == (Errors.INVALID_REQUEST, None)
        meta = await handlers[g.ENVELOPE](ctx(g.ENVELOPE.api_key, 0), _enveloped(m.METADATA, 12, {
            "topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}))
        assert meta["error_code"] == Errors.INVALID_REQUEST
        raw = bytearray(_enveloped(m.CREATE_TOPICS, 7, body)["request_data"])
        raw[2:4] = (99).to_bytes(2, "big")  # CreateTopics v99
        old = await handlers[g.ENVELOPE](ctx(g.ENVELOPE.api_key, 0), {
            "request_data": bytes(raw), "request_principal": None, "client_host_address": b""})
        assert old["error_code"] == Errors.UNSUPPORTED_VERSION
        truncated = _enveloped(m.CREATE_TOPICS, 7, body)
        truncated["request_data"] = truncated["request_data"][:-5]
        cut = await handlers[g.ENVELOPE](ctx(g.ENVELOPE.api_key, 0), truncated)
        assert cut["error_code"] == Errors.INVALID_REQUEST

    asyncio.run(go())


def _register(broker_id: int, log_dirs: list[uuid.UUID]) -> dict[str, Any]:
    return {
        "broker_id": broker_id, "incarnation_id": uuid.UUID(int=broker_id), "broker_epoch": broker_id,
        "end_points": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9000 + broker_id, "security_protocol": 0}],
        "features": [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 21}],
        "rack": None, "fenced": False, "in_controlled_shutdown": False, "log_dirs": log_dirs,
    }


def test_new_replicas_are_placed_in_the_brokers_only_directory() -> None:
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 21})
    delta.replay("RegisterBrokerRecord", _register(1, [D1]))
    delta.replay("RegisterBrokerRecord", _register(2, []))
    delta.replay("RegisterBrokerRecord", _register(3, [D2, D3]))
    rc = ReplicationControlManager(delta.apply(), default_partitions=1, default_replication_factor=3,
                                   validate_config=config_defs.validate_topic_config, rng=random.Random(1))
    assert rc.default_dir(1) == D1
    assert rc.default_dir(2) == DIRECTORY_MIGRATING
    assert rc.default_dir(3) == DIRECTORY_UNASSIGNED
    assert rc.default_dir(4) == DIRECTORY_UNASSIGNED  # not registered
    _, records = rc.create_topic("t", -1, -1, [{"partition_index": 0, "broker_ids": [3, 1, 2]}], [],
                                 pending_names=set())
    parts = [r for name, r in records if name == "PartitionRecord"]
    assert len(parts) == 1
    assert parts[0]["replicas"] == [3, 1, 2]
    assert parts[0]["directories"] == [DIRECTORY_UNASSIGNED, D1, DIRECTORY_MIGRATING]


def test_a_broker_registers_the_directory_ids_of_its_log_dirs(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    ensure_formatted(dirs, node_id=5, cluster_id=CLUSTER_ID)
    ids = directory_ids(dirs)
    expected = []
    for d in dirs:
        text = read_meta_properties(f"{d}/meta.properties")["directory.id"]
        expected.append(uuid.UUID(bytes=base64.urlsafe_b64decode(text + "==")))
    assert ids == expected and len(set(ids)) == 2
    assert directory_ids([str(tmp_path / "missing")]) == []


def test_assign_replicas_to_dirs_records_the_directory_of_each_replica() -> None:
    topic_id, other_id = uuid.UUID(int=77), uuid.UUID(int=78)
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 21})
    delta.replay("RegisterBrokerRecord", _register(1, [D2, D3]))
    delta.replay("RegisterBrokerRecord", _register(2, [D1]))
    delta.replay("TopicRecord", {"name": "t", "topic_id": topic_id})
    for pid, replicas in ((0, [1, 2]), (1, [2, 1]), (2, [2])):
        delta.replay("PartitionRecord", {
            "partition_id": pid, "topic_id": topic_id, "replicas": replicas, "isr": replicas,
            "removing_replicas": [], "adding_replicas": [], "leader": replicas[0], "leader_epoch": 0,
            "partition_epoch": 0, "directories": [DIRECTORY_UNASSIGNED if r == 1 else D1 for r in replicas]})
    image = delta.apply()
    request = {"broker_id": 1, "broker_epoch": 1, "directories": [
        {"id": D3, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition_index": 0}, {"partition_index": 1},
                                                  {"partition_index": 2}, {"partition_index": 9}]},
            {"topic_id": other_id, "partitions": [{"partition_index": 0}]},
        ]},
    ]}
    resp, records = assign_replicas_to_dirs(image, request, 21)
    errors = [(t["topic_id"], p["partition_index"], p["error_code"])
              for d in resp["directories"] for t in d["topics"] for p in t["partitions"]]
    assert resp["error_code"] == Errors.NONE and errors == [
        (topic_id, 0, Errors.NONE), (topic_id, 1, Errors.NONE),
        (topic_id, 2, Errors.NOT_LEADER_OR_FOLLOWER),  # broker 1 holds no replica of it
        (topic_id, 9, Errors.UNKNOWN_TOPIC_OR_PARTITION), (other_id, 0, Errors.UNKNOWN_TOPIC_ID)]
    assert records == [
        ("PartitionChangeRecord", {"partition_id": 0, "topic_id": topic_id, "directories": [D3, D1]}),
        ("PartitionChangeRecord", {"partition_id": 1, "topic_id": topic_id, "directories": [D1, D3]}),
    ]
    after = MetadataDelta(image)
    for name, rec in records:
        after.replay(name, rec)
    img = after.apply()
    p0 = img.topics_by_id[topic_id].partitions[0]
    assert (p0.directories, p0.partition_epoch, p0.leader_epoch) == ((D3, D1), 1, 0)
    # Already there: nothing to write.
    assert assign_replicas_to_dirs(img, request, 21)[1] == []
    with pytest.raises(KafkaError) as e:
        assign_replicas_to_dirs(image, request, 16)  # before 3.7-IV2
    assert e.value.code == Errors.UNSUPPORTED_VERSION
    with pytest.raises(KafkaError) as e:
        assign_replicas_to_dirs(image, {**request, "broker_id": 5}, 21)
    assert e.value.code == Errors.BROKER_ID_NOT_REGISTERED


def test_a_refused_registration_says_what_the_broker_runs(caplog: pytest.LogCaptureFixture) -> None:
    """An Apache Kafka controller at a metadata.version above Odradek's answers the registration
    with a bare UNSUPPORTED_VERSION (BrokerRegistrationResponse has no message): the broker's
    log line says what that means and which levels it runs. The registration carries the log
    directory ids."""
    sent: list[dict[str, Any]] = []

    class Refusing:
        async def send(self, request: Any) -> dict[str, Any]:
            sent.append(request.data)
            return {"throttle_time_ms": 0, "error_code": Errors.UNSUPPORTED_VERSION, "broker_epoch": -1}

    async def go() -> None:
        lifecycle = BrokerLifecycleManager(node_id=100, cluster_id=CLUSTER_ID, channel=Refusing(),  # type: ignore[arg-type]
                                           heartbeat_interval_ms=lambda: 50, metadata_offset=lambda: -1)
        lifecycle.start([("PLAINTEXT", "127.0.0.1", 9092)], {"metadata.version": (7, 21)}, None, [D1, D2])
        for _ in range(100):  # bounded
            if "UNSUPPORTED_VERSION" in caplog.text:
                break
            await asyncio.sleep(0.01)
        await lifecycle.close()

    with caplog.at_level("WARNING", logger="odradek.server.broker_lifecycle_manager"):
        asyncio.run(go())
    assert "Registration of broker 100 failed: UNSUPPORTED_VERSION" in caplog.text
    assert "--release-version 3.9-IV0" in caplog.text and "metadata.version 7-21" in caplog.text
    assert sent and sent[0]["log_dirs"] == [D1, D2]
