"""Differential tests: the same requests to Apache Kafka 4.x and to Odradek; error codes must agree.

A corpus of admin edge cases and bad inputs (invalid names and configs, impossible partition
counts, unknown topics, out-of-range offsets, oversized records, bad CRCs, invalid group
requests) goes over a raw connection to a real Apache Kafka broker (single node, KRaft) and to an
Odradek broker started the same way. Each case reduces a response to its error codes; the two
must be equal, except for the cases in ``KNOWN_DIFFERENCES``, each with the reason. A known
difference that has gone away fails too, so the list (and the README table made from it) stays
true.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from odradek.embedded import EmbeddedBroker
from odradek.protocol import messages as m
from odradek.protocol.schema import Api
from odradek.records.builder import build_batch

from .kafka_reference import KafkaServer, find_kafka_tools
from .support import RawConnection

PREFIX = f"diff-{uuid.uuid4().hex[:6]}"
EXISTING = f"{PREFIX}-existing"  # 2 partitions, 5 records in partition 0
DOTTED = f"{PREFIX}.dotted"  # collides with PREFIX_dotted
NOW_MS = int(time.time() * 1000)


@dataclass(frozen=True)
class Case:
    name: str
    api: Api
    version: int
    body: dict[str, Any]
    codes: Callable[[dict[str, Any]], Any]


def _topics_codes(resp: dict[str, Any]) -> list[tuple[str, int]]:
    return [(t["name"], t["error_code"]) for t in resp["topics"]]


def _create(name: str, partitions: int = 1, rf: int = 1, configs: dict[str, str] | None = None,
            validate_only: bool = False, assignments: list[list[int]] | None = None) -> dict[str, Any]:
    return {
        "topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": [{"partition_index": i, "broker_ids": b} for i, b in enumerate(assignments or [])],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
        }],
        "timeout_ms": 30_000, "validate_only": validate_only,
    }


def _create_case(name: str, topic: str, **kw: Any) -> Case:
    return Case(name, m.CREATE_TOPICS, 7, _create(topic, **kw), _topics_codes)


def _create_partitions(topic: str, count: int, validate_only: bool = False) -> dict[str, Any]:
    return {"topics": [{"name": topic, "count": count, "assignments": None}],
            "timeout_ms": 30_000, "validate_only": validate_only}


def _results_codes(resp: dict[str, Any]) -> list[tuple[str, int]]:
    return [(r["name"], r["error_code"]) for r in resp["results"]]


def _resources_codes(resp: dict[str, Any]) -> list[tuple[str, int]]:
    key = "responses" if "responses" in resp else "results"
    return [(r["resource_name"], r["error_code"]) for r in resp[key]]


def _alter(resource_type: int, name: str, configs: list[tuple[str, int, str | None]],
           validate_only: bool = True) -> dict[str, Any]:
    return {"resources": [{"resource_type": resource_type, "resource_name": name,
                           "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in configs]}],
            "validate_only": validate_only}


def _partition_codes(resp: dict[str, Any], topics_key: str = "topics", parts_key: str = "partitions",
                     index: str = "partition_index") -> list[tuple[int, int]]:
    return [(p[index], p["error_code"]) for t in resp[topics_key] for p in t[parts_key]]


def _records(n: int = 1, value_size: int = 10, **kw: Any) -> bytes:
    return build_batch([(b"k", b"v" * value_size, [], NOW_MS)] * n, **kw)


def _bad_crc() -> bytes:
    batch = bytearray(_records())
    struct.pack_into(">I", batch, 17, 0xDEADBEEF)
    return bytes(batch)


def _produce(topic: str, partition: int, records: bytes, acks: int = -1) -> dict[str, Any]:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def _produce_codes(resp: dict[str, Any]) -> list[tuple[int, int]]:
    return _partition_codes(resp, "responses", "partition_responses", "index")


def _fetch(topic: str, partition: int, offset: int) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                        "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _list_offsets(topic: str, partition: int, timestamp: int) -> dict[str, Any]:
    return {"replica_id": -1, "isolation_level": 0, "timeout_ms": 10_000,
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp}]}]}


def _delete_records(topic: str, partition: int, offset: int) -> dict[str, Any]:
    return {"topics": [{"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}],
            "timeout_ms": 10_000}


def _join(group: str, session_timeout_ms: int = 10_000, protocol_type: str = "consumer",
          member_id: str = "") -> dict[str, Any]:
    return {"group_id": group, "session_timeout_ms": session_timeout_ms, "rebalance_timeout_ms": 10_000,
            "member_id": member_id, "protocol_type": protocol_type,
            "protocols": [{"name": "range", "metadata": b""}]}


def _offset_commit(group: str, generation: int, member: str, topic: str) -> dict[str, Any]:
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                        "committed_metadata": None}]}]}


def _error_code(resp: dict[str, Any]) -> int:
    return int(resp["error_code"])


CASES: list[Case] = [
    # CreateTopics: names
    _create_case("create: empty name", ""),
    _create_case("create: name '.'", "."),
    _create_case("create: name '..'", ".."),
    _create_case("create: 250-character name", "a" * 250),
    _create_case("create: 249-character name (legal)", f"{PREFIX}-" + "b" * (248 - len(PREFIX))),
    _create_case("create: name with a space", "has space"),
    _create_case("create: name with a slash", "a/b"),
    _create_case("create: name colliding with '.' vs '_'", f"{PREFIX}_dotted"),
    _create_case("create: existing topic", EXISTING),
    # CreateTopics: counts
    _create_case("create: 0 partitions", f"{PREFIX}-p0", partitions=0),
    _create_case("create: -2 partitions", f"{PREFIX}-pm2", partitions=-2),
    _create_case("create: 2^31-1 partitions, validate only", f"{PREFIX}-pmax", partitions=2**31 - 1, validate_only=True),
    _create_case("create: replication factor 0", f"{PREFIX}-rf0", rf=0),
    _create_case("create: replication factor 2 on one broker", f"{PREFIX}-rf2", rf=2),
    _create_case("create: replication factor -2", f"{PREFIX}-rfm2", rf=-2),
    _create_case("create: assignment to an unknown broker", f"{PREFIX}-asg", partitions=-1, rf=-1, assignments=[[7]]),
    _create_case("create: assignment with partitions given", f"{PREFIX}-asg2", partitions=1, rf=-1, assignments=[[1]]),
    _create_case("create: validate only", f"{PREFIX}-vo", partitions=3, validate_only=True),
    # CreateTopics: configs
    _create_case("create: retention.ms=abc", f"{PREFIX}-c1", configs={"retention.ms": "abc"}),
    _create_case("create: unknown config", f"{PREFIX}-c2", configs={"no.such.config": "1"}),
    _create_case("create: cleanup.policy=bogus", f"{PREFIX}-c3", configs={"cleanup.policy": "bogus"}),
    _create_case("create: min.insync.replicas=0", f"{PREFIX}-c4", configs={"min.insync.replicas": "0"}),
    _create_case("create: segment.bytes=1", f"{PREFIX}-c5", configs={"segment.bytes": "1"}),
    Case("create: the same name twice in one request", m.CREATE_TOPICS, 7,
         {"topics": _create(f"{PREFIX}-dup")["topics"] * 2, "timeout_ms": 30_000, "validate_only": False},
         _topics_codes),
    # DeleteTopics
    Case("delete: unknown name", m.DELETE_TOPICS, 6,
         {"topics": [{"name": f"{PREFIX}-nope", "topic_id": uuid.UUID(int=0)}], "timeout_ms": 10_000},
         lambda r: [t["error_code"] for t in r["responses"]]),
    Case("delete: unknown topic id", m.DELETE_TOPICS, 6,
         {"topics": [{"name": None, "topic_id": uuid.uuid4()}], "timeout_ms": 10_000},
         lambda r: [t["error_code"] for t in r["responses"]]),
    # CreatePartitions
    Case("partitions: unknown topic", m.CREATE_PARTITIONS, 3, _create_partitions(f"{PREFIX}-nope", 3), _results_codes),
    Case("partitions: same count", m.CREATE_PARTITIONS, 3, _create_partitions(EXISTING, 2), _results_codes),
    Case("partitions: decrease", m.CREATE_PARTITIONS, 3, _create_partitions(EXISTING, 1), _results_codes),
    Case("partitions: 2^31-1, validate only", m.CREATE_PARTITIONS, 3,
         _create_partitions(EXISTING, 2**31 - 1, validate_only=True), _results_codes),
    # DescribeConfigs / IncrementalAlterConfigs
    Case("describe configs: unknown topic", m.DESCRIBE_CONFIGS, 4,
         {"resources": [{"resource_type": 2, "resource_name": f"{PREFIX}-nope", "configuration_keys": None}]},
         _resources_codes),
    Case("describe configs: broker name not a number", m.DESCRIBE_CONFIGS, 4,
         {"resources": [{"resource_type": 4, "resource_name": "abc", "configuration_keys": None}]},
         _resources_codes),
    Case("describe configs: unknown resource type", m.DESCRIBE_CONFIGS, 4,
         {"resources": [{"resource_type": 99, "resource_name": "x", "configuration_keys": None}]},
         _resources_codes),
    Case("alter configs: unknown topic", m.INCREMENTAL_ALTER_CONFIGS, 1,
         _alter(2, f"{PREFIX}-nope", [("retention.ms", 0, "1000")]), _resources_codes),
    Case("alter configs: invalid value", m.INCREMENTAL_ALTER_CONFIGS, 1,
         _alter(2, EXISTING, [("retention.ms", 0, "soon")]), _resources_codes),
    Case("alter configs: unknown key", m.INCREMENTAL_ALTER_CONFIGS, 1,
         _alter(2, EXISTING, [("no.such.config", 0, "1")]), _resources_codes),
    Case("alter configs: APPEND to a non-list config", m.INCREMENTAL_ALTER_CONFIGS, 1,
         _alter(2, EXISTING, [("retention.ms", 2, "1000")]), _resources_codes),
    Case("alter configs: unknown operation", m.INCREMENTAL_ALTER_CONFIGS, 1,
         _alter(2, EXISTING, [("retention.ms", 9, "1000")]), _resources_codes),
    Case("alter configs: the same key twice", m.INCREMENTAL_ALTER_CONFIGS, 1,
         _alter(2, EXISTING, [("retention.ms", 0, "1000"), ("retention.ms", 0, "2000")]), _resources_codes),
    # Produce
    Case("produce: unknown topic", m.PRODUCE, 9, _produce(f"{PREFIX}-nope", 0, _records()), _produce_codes),
    Case("produce: unknown partition", m.PRODUCE, 9, _produce(EXISTING, 9, _records()), _produce_codes),
    Case("produce: acks=2", m.PRODUCE, 9, _produce(EXISTING, 1, _records(), acks=2), _produce_codes),
    Case("produce: bad CRC", m.PRODUCE, 9, _produce(EXISTING, 1, _bad_crc()), _produce_codes),
    Case("produce: record larger than message.max.bytes", m.PRODUCE, 9,
         _produce(EXISTING, 1, _records(value_size=1_100_000)), _produce_codes),
    Case("produce: timestamp two hours ahead", m.PRODUCE, 9,
         _produce(EXISTING, 1, build_batch([(b"k", b"v", [], NOW_MS + 7_200_000)])), _produce_codes),
    Case("produce: sequence without producer id", m.PRODUCE, 9,
         _produce(EXISTING, 1, _records(base_sequence=5)), _produce_codes),
    Case("produce: unknown producer id", m.PRODUCE, 9,
         _produce(EXISTING, 1, _records(producer_id=987654, producer_epoch=0, base_sequence=0)),
         _produce_codes),
    # Fetch / ListOffsets / DeleteRecords
    Case("fetch: offset past the end", m.FETCH, 12, _fetch(EXISTING, 0, 999),
         lambda r: _partition_codes(r, "responses", "partitions")),
    Case("fetch: unknown partition", m.FETCH, 12, _fetch(EXISTING, 9, 0),
         lambda r: _partition_codes(r, "responses", "partitions")),
    Case("list offsets: unknown partition", m.LIST_OFFSETS, 7, _list_offsets(EXISTING, 9, -1), _partition_codes),
    Case("list offsets: timestamp -7", m.LIST_OFFSETS, 7, _list_offsets(EXISTING, 0, -7), _partition_codes),
    Case("list offsets: max timestamp (-3) at v6", m.LIST_OFFSETS, 6, _list_offsets(EXISTING, 0, -3), _partition_codes),
    Case("list offsets: earliest local (-4) at v7", m.LIST_OFFSETS, 7, _list_offsets(EXISTING, 0, -4), _partition_codes),
    Case("list offsets: latest tiered (-5) at v9", m.LIST_OFFSETS, 9, _list_offsets(EXISTING, 0, -5),
         lambda r: [(p["error_code"], p["offset"]) for t in r["topics"] for p in t["partitions"]]),
    Case("delete records: beyond the high watermark", m.DELETE_RECORDS, 2,
         _delete_records(EXISTING, 0, 99), _partition_codes),
    Case("delete records: unknown partition", m.DELETE_RECORDS, 2,
         _delete_records(EXISTING, 9, 0), _partition_codes),
    # Groups
    Case("join: empty group id", m.JOIN_GROUP, 9, _join(""), _error_code),
    Case("join: session timeout 1 ms", m.JOIN_GROUP, 9, _join(f"{PREFIX}-g1", session_timeout_ms=1), _error_code),
    Case("join: empty protocol type", m.JOIN_GROUP, 9, _join(f"{PREFIX}-g2", protocol_type=""), _error_code),
    Case("join: unknown member id", m.JOIN_GROUP, 9, _join(f"{PREFIX}-g3", member_id="ghost"), _error_code),
    Case("heartbeat: unknown group", m.HEARTBEAT, 4,
         {"group_id": f"{PREFIX}-g4", "generation_id": 1, "member_id": "ghost"}, _error_code),
    Case("offset commit: stale generation in an unknown group", m.OFFSET_COMMIT, 8,
         _offset_commit(f"{PREFIX}-g5", 3, "ghost", EXISTING), _partition_codes),
    Case("offset commit: unknown topic, simple group", m.OFFSET_COMMIT, 8,
         _offset_commit(f"{PREFIX}-g6", -1, "", f"{PREFIX}-nope"), _partition_codes),
    Case("find coordinator: key type 7", m.FIND_COORDINATOR, 4,
         {"key_type": 7, "coordinator_keys": ["x"]}, lambda r: [c["error_code"] for c in r["coordinators"]]),
    Case("describe groups: unknown group", m.DESCRIBE_GROUPS, 5,
         {"groups": [f"{PREFIX}-g7"], "include_authorized_operations": False},
         lambda r: [(g["error_code"], g["group_state"]) for g in r["groups"]]),
    Case("delete groups: unknown group", m.DELETE_GROUPS, 2, {"groups_names": [f"{PREFIX}-g8"]},
         lambda r: [x["error_code"] for x in r["results"]]),
]

# Case name -> why Odradek answers differently on purpose (listed in the README).
KNOWN_DIFFERENCES: dict[str, str] = {
    "partitions: 2^31-1, validate only": (
        "Kafka 4.x fails with UNKNOWN_SERVER_ERROR (the too-large operation escapes its error "
        "mapping); Odradek answers POLICY_VIOLATION, as Kafka does for the same count in CreateTopics"
    ),
    "alter configs: unknown operation": (
        "Kafka 4.x fails the resource with UNKNOWN_SERVER_ERROR (an unhandled exception for an "
        "operation code it does not know); Odradek answers INVALID_REQUEST"
    ),
}


def _wait_for_group_coordinator(conn: RawConnection) -> None:
    """Both brokers create __consumer_offsets on the first FindCoordinator; wait until it answers."""
    deadline = time.monotonic() + 60
    while True:
        resp = conn.request(m.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [f"{PREFIX}-warm"]})
        if resp["coordinators"][0]["error_code"] == 0:
            break
        assert time.monotonic() < deadline, f"no group coordinator: {resp}"
        time.sleep(0.2)
    while conn.request(m.LIST_GROUPS, 4, {"states_filter": []})["error_code"] != 0:
        assert time.monotonic() < deadline, "groups not loaded"
        time.sleep(0.2)


def _setup(conn: RawConnection) -> None:
    _wait_for_group_coordinator(conn)
    resp = conn.request(m.CREATE_TOPICS, 7, _create(EXISTING, partitions=2))
    assert resp["topics"][0]["error_code"] == 0, resp
    resp = conn.request(m.CREATE_TOPICS, 7, _create(DOTTED))
    assert resp["topics"][0]["error_code"] == 0, resp
    deadline = time.monotonic() + 30
    while True:
        resp = conn.request(m.PRODUCE, 9, _produce(EXISTING, 0, _records(5)))
        if _produce_codes(resp) == [(0, 0)]:
            return
        assert time.monotonic() < deadline, f"cannot produce to {EXISTING}: {resp}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a real Apache Kafka 4.x broker, set up like ``odradek``."""
    tools = find_kafka_tools("4")
    with KafkaServer(tools, tmp_path_factory.mktemp("kafka") / "data") as kafka:
        with RawConnection("127.0.0.1", kafka.port, timeout=30) as conn:
            _setup(conn)
        yield kafka.port


@pytest.fixture(scope="module")
def odradek() -> Iterator[int]:
    with EmbeddedBroker() as b:
        with RawConnection("127.0.0.1", b.port, timeout=30) as conn:
            _setup(conn)
        yield b.port


def _answer(port: int, case: Case) -> Any:
    """The case's error codes, or how the broker failed to answer (each case on a new connection)."""
    with RawConnection("127.0.0.1", port, timeout=20) as conn:
        try:
            return case.codes(conn.request(case.api, case.version, case.body))
        except TimeoutError:
            return "no answer in 20 s"
        except AssertionError as e:  # the broker closed the connection
            return f"closed: {e}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_same_error_codes_as_kafka(case: Case, reference: int, odradek: int) -> None:
    kafka_answer = _answer(reference, case)
    odradek_answer = _answer(odradek, case)
    reason = KNOWN_DIFFERENCES.get(case.name)
    if reason is None:
        assert odradek_answer == kafka_answer, f"Kafka answers {kafka_answer}, Odradek {odradek_answer}"
    else:
        assert odradek_answer != kafka_answer, (
            f"listed as a known difference ({reason}) but both answer {kafka_answer}: remove it"
        )


def known_differences_markdown() -> str:
    """The README's table of deliberate differences."""
    rows = ["| request | why Odradek differs |", "| --- | --- |"]
    rows += [f"| {name} | {why} |" for name, why in KNOWN_DIFFERENCES.items()]
    return "\n".join(rows)


def test_known_differences_name_real_cases() -> None:
    names = {c.name for c in CASES}
    assert len(names) == len(CASES), "case names must be unique"
    assert set(KNOWN_DIFFERENCES) <= names
