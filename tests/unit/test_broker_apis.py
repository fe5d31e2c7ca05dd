"""The broker in-process: requests encoded with our codec, sent over a real socket."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.records.batch import iter_batches
from odradek.records.builder import build_batch
from odradek.records.records import decode_batch
from odradek.server.kafka_config import KafkaConfig
from odradek.server.kafka_raft_server import KafkaRaftServer


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro_fn())  # type: ignore[arg-type]


@asynccontextmanager
async def broker(data: Path, **overrides: str) -> AsyncIterator[tuple[KafkaRaftServer, NetworkClient]]:
    props = {
        "log.dirs": str(data),
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        **overrides,
    }
    server = KafkaRaftServer(KafkaConfig(props))
    await server.startup()
    client = NetworkClient("127.0.0.1", server.bound_ports["PLAINTEXT"])
    await client.connect()
    try:
        yield server, client
    finally:
        await client.close()
        await server.shutdown()


async def create(c: NetworkClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None, rf: int = 1) -> dict[str, Any]:
    resp = await c.send(
        m.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": rf,
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
            ],
            "timeout_ms": 5000,
        },
    )
    return resp["topics"][0]  # type: ignore[no-any-return]


def batch(values: list[bytes], ts: int = 1_000, **kw: Any) -> bytes:
    return build_batch([(b"k", v, [("h", b"1")], ts + i) for i, v in enumerate(values)], **kw)


async def produce(c: NetworkClient, topic: str, partition: int, data: bytes, acks: int = -1, version: int = 9) -> dict[str, Any]:
    resp = await c.send(
        m.PRODUCE,
        version,
        {
            "acks": acks,
            "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": data}]}],
        },
    )
    return resp["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


async def fetch(c: NetworkClient, topic: str, partition: int, offset: int, max_wait: int = 0, min_bytes: int = 1) -> dict[str, Any]:
    resp = await c.send(
        m.FETCH,
        11,
        {
            "replica_id": -1,
            "max_wait_ms": max_wait,
            "min_bytes": min_bytes,
            "max_bytes": 50 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1}
                    ],
                }
            ],
        },
    )
    return resp["responses"][0]["partitions"][0]  # type: ignore[no-any-return]


def records_of(data: bytes | memoryview) -> list[Any]:
    raw = bytes(data)
    out = []
    for h in iter_batches(raw):
        out.extend(decode_batch(raw[h.position : h.position + h.size]))
    return out


async def list_offset(c: NetworkClient, topic: str, ts: int, version: int = 7) -> dict[str, Any]:
    resp = await c.send(
        m.LIST_OFFSETS,
        version,
        {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1}]}]},
    )
    return resp["topics"][0]["partitions"][0]  # type: ignore[no-any-return]


def test_api_versions_advertises_exactly_the_handlers(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (server, c):
            resp = await c.send(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
            assert resp["error_code"] == 0
            advertised = {(a["api_key"], a["min_version"], a["max_version"]) for a in resp["api_keys"]}
            # SASL and SCRAM credentials, the ACL APIs (SECURITY_DISABLED without an authorizer) and
            # the KRaft broker's client quota APIs (odradek.server.client_quotas).
            served = [*m.ALL_APIS, *m.SECURITY_APIS, *m.ACL_APIS]
            assert advertised == {(a.api_key, m.advertised_min_version(a), a.max_version) for a in served} | {
                (g.DESCRIBE_CLIENT_QUOTAS.api_key, 0, 1), (g.ALTER_CLIENT_QUOTAS.api_key, 0, 1)}
            # The transaction coordinator's APIs are there, EndTxn up to v5 (transactions version
            # 2, KIP-890 part 2), Produce to v12 and TxnOffsetCommit to v5 (Kafka 4.0's).
            assert (m.END_TXN.api_key, 0, 5) in advertised
            assert (m.PRODUCE.api_key, 0, 12) in advertised
            assert (m.TXN_OFFSET_COMMIT.api_key, 0, 5) in advertised
            # Produce is advertised from v0 (KAFKA-18659) though only v3+ is served
            assert (m.PRODUCE.api_key, 0, m.PRODUCE.max_version) in advertised
            # An ApiVersions version we do not know: answered in v0 with UNSUPPORTED_VERSION.
            frame = bytearray(struct.pack(">hhih", 18, 99, 7, 1) + b"x")
            raw = await c.send_raw(struct.pack(">i", len(frame)) + frame)
            assert raw is not None
            cid, code = struct.unpack_from(">ih", raw, 0)
            assert (cid, code) == (7, Errors.UNSUPPORTED_VERSION)

    run(go)


def test_combined_node_answers_describe_quorum_on_its_client_listener(tmp_path: Path) -> None:
    """The broker listener advertises DescribeQuorum with the controller's versions and forwards
    it to the controller (Kafka's handleDescribeQuorumRequest): the same quorum as on the
    controller listener, at every version."""
    body = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}

    def quorum(resp: dict[str, Any]) -> tuple[Any, ...]:
        part = resp["topics"][0]["partitions"][0]
        return (
            resp["error_code"], part["error_code"], part["leader_id"], part["leader_epoch"],
            part["high_watermark"], [v["replica_id"] for v in part["current_voters"]],
        )

    async def go() -> None:
        async with broker(tmp_path, **{"metadata.max.idle.interval.ms": "0"}) as (server, c):
            resp = await c.send(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
            advertised = {a["api_key"]: (a["min_version"], a["max_version"]) for a in resp["api_keys"]}
            assert advertised[g.DESCRIBE_QUORUM.api_key] == (g.DESCRIBE_QUORUM.min_version, g.DESCRIBE_QUORUM.max_version)
            async with NetworkClient("127.0.0.1", server.bound_ports["CONTROLLER"]) as ctl:
                resp = await ctl.send(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
                on_controller = {a["api_key"]: (a["min_version"], a["max_version"]) for a in resp["api_keys"]}
                assert on_controller[g.DESCRIBE_QUORUM.api_key] == advertised[g.DESCRIBE_QUORUM.api_key]
                for v in range(g.DESCRIBE_QUORUM.min_version, g.DESCRIBE_QUORUM.max_version + 1):
                    theirs = quorum(await ctl.send(g.DESCRIBE_QUORUM, v, body))
                    ours = quorum(await c.send(g.DESCRIBE_QUORUM, v, body))
                    assert ours == theirs, v
                    assert ours[:4] == (Errors.NONE, Errors.NONE, 1, 1) and ours[5] == [1] and ours[4] >= 0
            # Another partition: the core's UNKNOWN_TOPIC_OR_PARTITION comes back through the broker.
            bad = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 1}]}]}
            resp = await c.send(g.DESCRIBE_QUORUM, 2, bad)
            assert Errors.UNKNOWN_TOPIC_OR_PARTITION in {
                resp["error_code"], *(p["error_code"] for t in resp["topics"] for p in t["partitions"])
            }

    run(go)


def test_controller_listener_serves_the_controller_apis(tmp_path: Path) -> None:
    """The controller listener advertises and serves what ControllerApis implements there (plus
    ApiVersions), nothing of the broker's: a Metadata request closes the connection."""

    async def go() -> None:
        async with broker(tmp_path) as (server, _c):
            async with NetworkClient("127.0.0.1", server.bound_ports["CONTROLLER"]) as c:
                resp = await c.send(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
                assert {a["api_key"] for a in resp["api_keys"]} == {
                    m.API_VERSIONS.api_key, m.CREATE_TOPICS.api_key, m.DELETE_TOPICS.api_key,
                    m.CREATE_PARTITIONS.api_key, m.ALTER_CONFIGS.api_key,
                    m.INCREMENTAL_ALTER_CONFIGS.api_key, m.DESCRIBE_CLUSTER.api_key,
                    g.BROKER_REGISTRATION.api_key, g.BROKER_HEARTBEAT.api_key, g.ALLOCATE_PRODUCER_IDS.api_key,
                    g.FETCH_SNAPSHOT.api_key, g.ALTER_PARTITION.api_key,  # partition leaders' ISR changes (issue 12)
                    m.ELECT_LEADERS.api_key, m.ALTER_PARTITION_REASSIGNMENTS.api_key,
                    m.LIST_PARTITION_REASSIGNMENTS.api_key,
                    m.SASL_HANDSHAKE.api_key, m.SASL_AUTHENTICATE.api_key, m.ALTER_USER_SCRAM_CREDENTIALS.api_key,
                    # the quorum's RaftApis: Fetch (of __cluster_metadata), Vote,
                    # BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum
                    m.FETCH.api_key, g.VOTE.api_key, g.BEGIN_QUORUM_EPOCH.api_key,
                    g.END_QUORUM_EPOCH.api_key, g.DESCRIBE_QUORUM.api_key,
                    # KIP-853: AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter
                    g.ADD_RAFT_VOTER.api_key, g.REMOVE_RAFT_VOTER.api_key, g.UPDATE_RAFT_VOTER.api_key,
                    g.ENVELOPE.api_key,  # admin requests a Kafka broker forwards (KIP-590)
                    g.ASSIGN_REPLICAS_TO_DIRS.api_key,  # replica directories (KIP-858)
                    g.CREATE_ACLS.api_key, g.DELETE_ACLS.api_key, g.DESCRIBE_ACLS.api_key,  # the ACLs (issue 16)
                    g.ALTER_CLIENT_QUOTAS.api_key,  # client quotas (issue 16)
                }
                resp = await c.send(m.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2})
                assert (resp["error_code"], resp["endpoint_type"], resp["controller_id"]) == (0, 2, 1)
                assert [(b["broker_id"], b["port"]) for b in resp["brokers"]] == [(1, server.bound_ports["CONTROLLER"])]
                resp = await create(c, "made-on-the-controller-listener")
                assert resp["error_code"] == Errors.NONE
                with pytest.raises(ConnectionClosed):
                    await c.send(m.METADATA, 12, {"topics": None})
            assert "made-on-the-controller-listener" in server.broker.metadata_cache.get_all_topics()

    run(go)


def test_unknown_api_key_and_unsupported_produce_version_close_the_connection(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (server, c):
            frame = struct.pack(">hhih", 9999, 0, 1, -1)
            with pytest.raises(ConnectionClosed):
                await c.send_raw(struct.pack(">i", len(frame)) + frame)
            async with NetworkClient("127.0.0.1", server.bound_ports["PLAINTEXT"]) as c2:
                with pytest.raises(ConnectionClosed):
                    await c2.send(m.PRODUCE, 2, {"acks": 1, "timeout_ms": 10, "topic_data": []})
            async with NetworkClient("127.0.0.1", server.bound_ports["PLAINTEXT"]) as c3:
                resp = await c3.send(m.METADATA, 12, {"topics": None})
                assert resp["brokers"][0]["node_id"] == 1

    run(go)


def test_create_topics_validation(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            ok = await create(c, "orders", 3, {"retention.ms": "1000"})
            assert ok["error_code"] == 0 and ok["num_partitions"] == 3
            assert ok["topic_id"] != uuid.UUID(int=0)
            assert {x["name"]: x["value"] for x in ok["configs"]}["retention.ms"] == "1000"
            assert (await create(c, "orders"))["error_code"] == Errors.TOPIC_ALREADY_EXISTS
            assert (await create(c, "bad name!"))["error_code"] == Errors.INVALID_TOPIC_EXCEPTION
            assert (await create(c, "a" * 250))["error_code"] == Errors.INVALID_TOPIC_EXCEPTION
            assert (await create(c, ".."))["error_code"] == Errors.INVALID_TOPIC_EXCEPTION
            assert (await create(c, "orders_"))["error_code"] == 0
            assert (await create(c, "orders."))["error_code"] == Errors.INVALID_TOPIC_EXCEPTION  # collides
            assert (await create(c, "x", 0))["error_code"] == Errors.INVALID_PARTITIONS
            assert (await create(c, "x", 1, rf=3))["error_code"] == Errors.INVALID_REPLICATION_FACTOR
            bad = await create(c, "x", 1, {"retention.ms": "soon"})
            assert bad["error_code"] == Errors.INVALID_CONFIG and "retention.ms" in bad["error_message"]
            assert (await create(c, "x", 1, {"no.such.config": "1"}))["error_code"] == Errors.INVALID_CONFIG
            md = await c.send(m.METADATA, 12, {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False})
            t = md["topics"][0]
            assert t["topic_id"] == ok["topic_id"] and len(t["partitions"]) == 3
            assert all(p["leader_id"] == 1 and p["isr_nodes"] == [1] for p in t["partitions"])
            md = await c.send(m.METADATA, 12, {"topics": [{"name": "missing"}], "allow_auto_topic_creation": False})
            assert md["topics"][0]["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION

    run(go)


def test_produce_fetch_round_trip_and_errors(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "t", 2)
            r = await produce(c, "t", 0, batch([b"a", b"b", b"c"]))
            assert r["error_code"] == 0 and r["base_offset"] == 0
            r = await produce(c, "t", 0, batch([b"d"]), acks=1)
            assert r["base_offset"] == 3
            f = await fetch(c, "t", 0, 0)
            assert f["high_watermark"] == 4
            recs = records_of(f["records"])
            assert [x.value for x in recs] == [b"a", b"b", b"c", b"d"]
            assert [x.offset for x in recs] == [0, 1, 2, 3]
            assert recs[0].headers == [("h", b"1")] and recs[1].timestamp == 1001
            # Corrupt CRC
            bad = bytearray(batch([b"x"]))
            bad[-1] ^= 0xFF
            assert (await produce(c, "t", 0, bytes(bad)))["error_code"] == Errors.CORRUPT_MESSAGE
            assert (await produce(c, "t", 7, batch([b"x"])))["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
            assert (await produce(c, "t", -1, batch([b"x"])))["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
            assert (await produce(c, "nope", 0, batch([b"x"])))["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
            assert (await produce(c, "bad name", 0, batch([b"x"])))["error_code"] == Errors.INVALID_TOPIC_EXCEPTION
            two = batch([b"x"]) + batch([b"y"])
            assert (await produce(c, "t", 0, two))["error_code"] == Errors.INVALID_RECORD
            big = batch([b"z" * 2_000_000])
            assert (await produce(c, "t", 0, big))["error_code"] == Errors.MESSAGE_TOO_LARGE
            assert (await produce(c, "t", 0, batch([b"e"]), acks=2))["error_code"] == Errors.INVALID_REQUIRED_ACKS
            # Nothing acknowledged was lost along the way.
            f = await fetch(c, "t", 0, 0)
            assert [x.value for x in records_of(f["records"])] == [b"a", b"b", b"c", b"d"]
            assert (await fetch(c, "t", 0, 99))["error_code"] == Errors.OFFSET_OUT_OF_RANGE
            assert (await fetch(c, "nope", 0, 0))["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION

    run(go)


def test_long_poll_fetch_wakes_on_append(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (server, c):
            await create(c, "lp", 1)
            start = time.monotonic()
            pending = asyncio.ensure_future(fetch(c, "lp", 0, 0, max_wait=10_000))
            await asyncio.sleep(0.3)
            assert not pending.done()  # it is waiting in the purgatory
            async with NetworkClient("127.0.0.1", server.bound_ports["PLAINTEXT"]) as p:
                await produce(p, "lp", 0, batch([b"wake"]))
            f = await asyncio.wait_for(pending, 8)
            assert [x.value for x in records_of(f["records"])] == [b"wake"]
            assert time.monotonic() - start < 8  # woken by the append, not by max_wait
            # With nothing arriving, max_wait expires and an empty answer comes back.
            f = await fetch(c, "lp", 0, 1, max_wait=200)
            assert f["error_code"] == 0 and len(f["records"]) == 0

    run(go)


def test_list_offsets_and_delete_records(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "lo", 1)
            await produce(c, "lo", 0, batch([b"a", b"b"], ts=1000))
            await produce(c, "lo", 0, batch([b"c", b"d"], ts=5000))
            await produce(c, "lo", 0, batch([b"e"], ts=3000))
            assert (await list_offset(c, "lo", -2))["offset"] == 0
            assert (await list_offset(c, "lo", -1))["offset"] == 5
            mx = await list_offset(c, "lo", -3)
            assert mx["timestamp"] == 5001 and mx["offset"] in (3, 2)
            assert (await list_offset(c, "lo", 4000))["offset"] == 2
            assert (await list_offset(c, "lo", 1001))["offset"] == 1  # record-level, as Kafka
            assert (await list_offset(c, "lo", 99_999))["offset"] == -1
            # Special timestamps exist from the version that defined them; before it, and for
            # negative values no version defines, Kafka answers UNSUPPORTED_VERSION.
            assert (await list_offset(c, "lo", -3, version=6))["error_code"] == Errors.UNSUPPORTED_VERSION
            assert (await list_offset(c, "lo", -4, version=7))["error_code"] == Errors.UNSUPPORTED_VERSION
            assert (await list_offset(c, "lo", -4, version=8))["offset"] == 0
            assert (await list_offset(c, "lo", -5, version=8))["error_code"] == Errors.UNSUPPORTED_VERSION
            latest_tiered = await list_offset(c, "lo", -5, version=9)
            assert (latest_tiered["error_code"], latest_tiered["offset"]) == (Errors.NONE, -1)
            assert (await list_offset(c, "lo", -7, version=10))["error_code"] == Errors.UNSUPPORTED_VERSION
            resp = await c.send(
                m.DELETE_RECORDS, 2,
                {"topics": [{"name": "lo", "partitions": [{"partition_index": 0, "offset": 2}]}], "timeout_ms": 1000},
            )
            assert resp["topics"][0]["partitions"][0] == {"partition_index": 0, "low_watermark": 2, "error_code": 0}
            assert (await list_offset(c, "lo", -2))["offset"] == 2
            assert (await fetch(c, "lo", 0, 0))["error_code"] == Errors.OFFSET_OUT_OF_RANGE
            resp = await c.send(
                m.DELETE_RECORDS, 2,
                {"topics": [{"name": "lo", "partitions": [{"partition_index": 0, "offset": 50}]}], "timeout_ms": 1000},
            )
            assert resp["topics"][0]["partitions"][0]["error_code"] == Errors.OFFSET_OUT_OF_RANGE

    run(go)


def test_idempotent_producer_dedups_retries(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "idem", 1)
            ip = await c.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
            assert ip["error_code"] == 0 and ip["producer_id"] >= 0
            ip2 = await c.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
            assert ip2["producer_id"] != ip["producer_id"]
            pid = ip["producer_id"]
            b0 = batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0)
            assert (await produce(c, "idem", 0, b0))["base_offset"] == 0
            assert (await produce(c, "idem", 0, b0))["base_offset"] == 0  # retry: same offset
            b1 = batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=2)
            assert (await produce(c, "idem", 0, b1))["base_offset"] == 2
            b_gap = batch([b"x"], producer_id=pid, producer_epoch=0, base_sequence=9)
            assert (await produce(c, "idem", 0, b_gap))["error_code"] == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
            f = await fetch(c, "idem", 0, 0)
            assert [x.value for x in records_of(f["records"])] == [b"a", b"b", b"c"]

    run(go)


def test_configs_partitions_and_delete(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "cfg", 1)
            r = await c.send(
                m.INCREMENTAL_ALTER_CONFIGS, 1,
                {"resources": [{"resource_type": 2, "resource_name": "cfg", "configs": [
                    {"name": "retention.ms", "config_operation": 0, "value": "12345"},
                    {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
                ]}], "validate_only": False},
            )
            assert r["responses"][0]["error_code"] == 0
            d = await c.send(
                m.DESCRIBE_CONFIGS, 4,
                {"resources": [{"resource_type": 2, "resource_name": "cfg", "configuration_keys": None}], "include_synonyms": True},
            )
            cfg = {x["name"]: x for x in d["results"][0]["configs"]}
            assert cfg["retention.ms"]["value"] == "12345" and cfg["retention.ms"]["config_source"] == 1
            assert cfg["cleanup.policy"]["value"] == "delete,compact"
            assert cfg["segment.bytes"]["config_source"] == 5
            r = await c.send(
                m.ALTER_CONFIGS, 2,
                {"resources": [{"resource_type": 2, "resource_name": "cfg", "configs": [{"name": "retention.ms", "value": "-5"}]}], "validate_only": False},
            )
            assert r["responses"][0]["error_code"] == Errors.INVALID_CONFIG
            r = await c.send(
                m.ALTER_CONFIGS, 2,
                {"resources": [{"resource_type": 2, "resource_name": "nope", "configs": []}], "validate_only": False},
            )
            assert r["responses"][0]["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
            r = await c.send(m.CREATE_PARTITIONS, 3, {"topics": [{"name": "cfg", "count": 4, "assignments": None}], "timeout_ms": 1000, "validate_only": False})
            assert r["results"][0]["error_code"] == 0
            r = await c.send(m.CREATE_PARTITIONS, 3, {"topics": [{"name": "cfg", "count": 2, "assignments": None}], "timeout_ms": 1000, "validate_only": False})
            assert r["results"][0]["error_code"] == Errors.INVALID_PARTITIONS
            assert (await produce(c, "cfg", 3, batch([b"p3"])))["error_code"] == 0
            r = await c.send(m.DELETE_TOPICS, 6, {"topics": [{"name": "cfg"}], "timeout_ms": 1000})
            assert r["responses"][0]["error_code"] == 0
            r = await c.send(m.DELETE_TOPICS, 6, {"topics": [{"name": "cfg"}], "timeout_ms": 1000})
            assert r["responses"][0]["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
            await create(c, "cfg", 1)
            f = await fetch(c, "cfg", 0, 0)
            assert f["high_watermark"] == 0  # a recreated topic starts empty

    run(go)


def test_restart_keeps_topics_data_and_producer_ids(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "keep", 2, {"retention.ms": "86400000"})
            await produce(c, "keep", 1, batch([b"1", b"2"]))
            pid1 = (await c.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": None}))["producer_id"]
        async with broker(tmp_path) as (server, c):
            md = await c.send(m.METADATA, 12, {"topics": None})
            assert [t["name"] for t in md["topics"]] == ["keep"]
            f = await fetch(c, "keep", 1, 0)
            assert [x.value for x in records_of(f["records"])] == [b"1", b"2"]
            assert (await produce(c, "keep", 1, batch([b"3"])))["base_offset"] == 2
            pid2 = (await c.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": None}))["producer_id"]
            assert pid2 > pid1  # ids are never handed out twice
            assert server.broker.metadata_cache.topic_config("keep") == {"retention.ms": "86400000"}

    run(go)


def test_flush_messages_fsyncs_before_the_ack(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (server, c):
            await create(c, "durable", 1, {"flush.messages": "1"})
            await create(c, "lazy", 1)
            assert (await produce(c, "durable", 0, batch([b"a", b"b"]), acks=1))["error_code"] == 0
            assert (await produce(c, "lazy", 0, batch([b"a", b"b"]), acks=1))["error_code"] == 0
            assert server.broker.log_manager is not None
            durable = server.broker.log_manager.get_log("durable", 0)
            lazy = server.broker.log_manager.get_log("lazy", 0)
            assert durable is not None and lazy is not None
            assert durable.recovery_point == 2  # flushed before the response was sent
            assert lazy.recovery_point == 0  # default: rely on the page cache, as Kafka does

    run(go)


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
@pytest.mark.parametrize("socket_full_after", [None, 1000])
def test_fetch_is_sent_with_sendfile_and_falls_back_when_the_socket_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loop_kind: str, socket_full_after: int | None
) -> None:
    import os

    from odradek.network import socket_server

    real_sendfile = os.sendfile

    calls: list[int] = []

    def fake_sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        calls.append(count)
        if socket_full_after is not None:
            if len(calls) > 1:
                raise BlockingIOError  # the socket buffer is full: the rest goes via the transport
            count = min(count, socket_full_after)
        return real_sendfile(out_fd, in_fd, offset, count)

    monkeypatch.setattr(socket_server.os, "sendfile", fake_sendfile)
    values = [bytes([i % 251]) * 3000 for i in range(60)]

    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            await create(c, "zc", 1)
            for i in range(0, 60, 10):
                await produce(c, "zc", 0, batch(values[i : i + 10]))
            f = await fetch(c, "zc", 0, 0)
            assert [r.value for r in records_of(f["records"])] == values

    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(go())
    else:
        asyncio.run(go())
    assert calls, "the fetch response did not use sendfile"


def test_compacted_topic_keeps_latest_value_per_key_across_restart(tmp_path: Path) -> None:
    keys = [f"k{i}".encode() for i in range(20)]

    def keyed(round_: int) -> bytes:
        return build_batch([(k, b"v%d" % round_, [], 1000 + round_) for k in keys])

    async def latest_values(c: NetworkClient) -> tuple[dict[bytes, bytes], int]:
        values: dict[bytes, bytes] = {}
        count = 0
        offset = 0
        while True:
            f = await fetch(c, "compacted", 0, offset)
            recs = records_of(f["records"])
            if not recs:
                return values, count
            for r in recs:
                assert r.key is not None and r.value is not None
                values[r.key] = r.value
                count += 1
            offset = recs[-1].offset + 1

    async def go() -> None:
        async with broker(tmp_path, **{"log.cleaner.backoff.ms": "50"}) as (server, c):
            await create(
                c, "compacted", 1,
                {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"},
            )
            for round_ in range(30):
                assert (await produce(c, "compacted", 0, keyed(round_)))["error_code"] == 0
            keyless = build_batch([(None, b"x", [], 1)])
            assert (await produce(c, "compacted", 0, keyless))["error_code"] == Errors.INVALID_RECORD
            deadline = time.monotonic() + 30
            while True:
                values, count = await latest_values(c)
                if count < 30 * len(keys) // 2 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert values == {k: b"v29" for k in keys}
            assert count < 30 * len(keys) // 2, "the cleaner never compacted the log"
        async with broker(tmp_path) as (_s, c):
            values, count_after = await latest_values(c)
            assert values == {k: b"v29" for k in keys}
            assert count_after <= count
            assert (await produce(c, "compacted", 0, keyed(30)))["error_code"] == 0

    run(go)


def test_shutdown_answers_requests_already_taken(tmp_path: Path) -> None:
    """A clean stop drains: requests read before it get their responses, then connections close."""

    async def go() -> None:
        props = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"}
        server = KafkaRaftServer(KafkaConfig(props))
        await server.startup()
        c = await NetworkClient("127.0.0.1", server.bound_ports["PLAINTEXT"]).connect()
        try:
            await create(c, "drain", 2)
            # A long poll on a partition nobody writes to: it is still waiting at shutdown, and
            # the produce responses queue behind it on the same connection.
            waiting = asyncio.ensure_future(fetch(c, "drain", 1, 0, max_wait=30_000))
            produced = [asyncio.ensure_future(produce(c, "drain", 0, batch([b"%d" % i]))) for i in range(20)]
            await asyncio.sleep(0.2)
            await server.shutdown()
            f = await asyncio.wait_for(waiting, 5)
            # Answered: the controlled shutdown comes first (Kafka's order), so the partition of
            # this only replica went offline under the waiting fetch (as in Kafka).
            assert f["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER
            offsets = sorted([(await p)["base_offset"] for p in produced])
            assert offsets == list(range(20))  # every append taken was acknowledged
        finally:
            await c.close()

    run(go)
