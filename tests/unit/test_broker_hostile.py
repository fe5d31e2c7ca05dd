"""Hostile requests against the in-process broker: oversized decodes and partition counts
(issue 8, items 6 and 8)."""

from __future__ import annotations

import logging
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from test_broker_apis import broker, create, run

from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.header import RequestHeader, encode_request_header
from odradek.server.api_dispatcher import RequestContext
from odradek.server.group_apis import GroupApis

EXCESSIVE = "Unable to perform excessively large batch operation."


def test_a_request_past_the_decode_limits_closes_the_connection_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The DescribeGroups of one-byte group ids: 250,000 of them in 750 KB.
    n = 250_000
    header = encode_request_header(RequestHeader(15, 4, 7, "hostile"), 1)
    frame = header + struct.pack(">i", n) + b"\x00\x01a" * n + b"\x00"

    async def go() -> None:
        async with broker(tmp_path) as (server, c):
            caplog.clear()
            with caplog.at_level(logging.WARNING), pytest.raises(ConnectionClosed):
                await c.send_raw(struct.pack(">i", len(frame)) + frame)
            lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(lines) == 1, [r.getMessage() for r in lines]
            text = lines[0].getMessage()
            assert "malformed DescribeGroups v4 request" in text
            assert "past its limit of 200000 array elements" in text
            assert lines[0].exc_info is None  # a line, not a traceback
            # The broker keeps serving, and a describe of a few groups is answered.
            async with NetworkClient("127.0.0.1", server.bound_ports["PLAINTEXT"]) as c2:
                resp = await c2.send(m.DESCRIBE_GROUPS, 4, {"groups": ["a", "b"]})
                assert [g["group_id"] for g in resp["groups"]] == ["a", "b"]

    run(go)


async def _create(c: NetworkClient, name: str, partitions: int, validate_only: bool) -> dict[str, Any]:
    resp = await c.send(
        m.CREATE_TOPICS,
        7,
        {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "configs": []}],
            "timeout_ms": 5000,
            "validate_only": validate_only,
        },
    )
    return resp["topics"][0]  # type: ignore[no-any-return]


async def _add_partitions(c: NetworkClient, name: str, count: int, validate_only: bool) -> dict[str, Any]:
    resp = await c.send(
        m.CREATE_PARTITIONS,
        3,
        {
            "topics": [{"name": name, "count": count, "assignments": None}],
            "timeout_ms": 5000,
            "validate_only": validate_only,
        },
    )
    return resp["results"][0]  # type: ignore[no-any-return]


def test_create_topics_refuses_more_than_kafkas_records_per_operation(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            for n in (2**31 - 1, 100_000, 10_000):  # 10,000 partitions + the TopicRecord
                for validate_only in (True, False):
                    r = await _create(c, f"big-{n}", n, validate_only)
                    assert (r["error_code"], r["error_message"]) == (Errors.POLICY_VIOLATION, EXCESSIVE)
            # 9,999 partitions is 10,000 records: valid.
            r = await _create(c, "big-9999", 9_999, True)
            assert (r["error_code"], r["num_partitions"]) == (Errors.NONE, 9_999)
            # As Kafka, the limit holds for the whole request: two topics of 6,000 partitions.
            resp = await c.send(
                m.CREATE_TOPICS,
                7,
                {
                    "topics": [
                        {"name": f"half-{i}", "num_partitions": 6_000, "replication_factor": 1, "configs": []}
                        for i in range(2)
                    ],
                    "timeout_ms": 5000,
                    "validate_only": False,
                },
            )
            assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [
                ("half-0", Errors.POLICY_VIOLATION), ("half-1", Errors.POLICY_VIOLATION)
            ]
            r = await _create(c, "zero", 0, False)
            assert r["error_code"] == Errors.INVALID_PARTITIONS
            assert r["error_message"] == "Number of partitions was set to an invalid non-positive value."
            # Nothing was created, and the broker keeps serving.
            md = await c.send(m.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
            assert md["topics"] == []
            ok = await create(c, "normal", 3)
            assert (ok["error_code"], ok["num_partitions"]) == (Errors.NONE, 3)

    run(go)


def test_create_partitions_refuses_more_than_kafkas_records_per_operation(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            assert (await create(c, "t", 1))["error_code"] == Errors.NONE
            for count in (2**31 - 1, 100_001, 10_002):  # 10,001 new partitions and more
                for validate_only in (True, False):
                    r = await _add_partitions(c, "t", count, validate_only)
                    assert (r["error_code"], r["error_message"]) == (Errors.POLICY_VIOLATION, EXCESSIVE)
            r = await _add_partitions(c, "t", 10_001, True)  # 10,000 new: valid
            assert r["error_code"] == Errors.NONE
            r = await _add_partitions(c, "t", 3, False)
            assert r["error_code"] == Errors.NONE
            md = await c.send(m.METADATA, 12, {"topics": [{"name": "t"}], "allow_auto_topic_creation": False})
            assert len(md["topics"][0]["partitions"]) == 3

    run(go)


def test_describe_groups_answers_a_repeated_group_id_once(tmp_path: Path) -> None:
    # One-byte group ids can only be a few hundred different ones: the answer to a repeated id
    # is shared, not built again (it was ~330 bytes of dict and list per id).
    n = 100_000
    ids = [chr(ord("a") + i % 26) for i in range(n)]

    async def go() -> None:
        async with broker(tmp_path) as (server, _c):
            handler = GroupApis(server.broker.group_coordinator).handlers()[m.DESCRIBE_GROUPS]
            ctx = RequestContext(RequestHeader(15, 5, 1, "t"), None)  # type: ignore[arg-type]
            tracemalloc.start()
            try:
                resp = handler(ctx, {"groups": ids, "include_authorized_operations": False})
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert [g["group_id"] for g in resp["groups"]] == ids
            assert {g["group_state"] for g in resp["groups"]} == {"Dead"}
            assert peak < 16 * n  # the list of answers, not an answer per id (~33 MB before)
            parts = m.DESCRIBE_GROUPS.encode_response(5, resp)
            decoded, _ = m.DESCRIBE_GROUPS.decode_response(5, b"".join(bytes(p) for p in parts))
            assert len(decoded["groups"]) == n

    run(go)
