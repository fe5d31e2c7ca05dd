"""Authorized operations (Metadata, DescribeCluster, DescribeGroups, ConsumerGroupDescribe).

Without an authorizer Kafka answers every operation the resource type supports, as a bitfield of
AclOperation codes; "not included" (-2^31) only when the client did not ask.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from test_consumer_group_apis import Member, broker, coordinator_ready, create_topic, run

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.server.acl_operations import (
    AUTHORIZED_OPS_OMITTED,
    CLUSTER_AUTHORIZED_OPERATIONS,
    GROUP_AUTHORIZED_OPERATIONS,
    TOPIC_AUTHORIZED_OPERATIONS,
    AclOperation,
    to_bitfield,
)


def test_bitfields_are_kafkas_acl_operation_codes() -> None:
    # READ=3 WRITE=4 CREATE=5 DELETE=6 ALTER=7 DESCRIBE=8 DESCRIBE_CONFIGS=10 ALTER_CONFIGS=11
    assert TOPIC_AUTHORIZED_OPERATIONS == 0b1101_1111_1000 == 3576
    # CREATE=5 ALTER=7 DESCRIBE=8 CLUSTER_ACTION=9 DESCRIBE_CONFIGS=10 ALTER_CONFIGS=11 IDEMPOTENT_WRITE=12
    assert CLUSTER_AUTHORIZED_OPERATIONS == 0b1_1111_1010_0000 == 8096
    # READ=3 DELETE=6 DESCRIBE=8 DESCRIBE_CONFIGS=10 ALTER_CONFIGS=11
    assert GROUP_AUTHORIZED_OPERATIONS == 0b1101_0100_1000 == 3400
    assert bin(TOPIC_AUTHORIZED_OPERATIONS).count("1") == 8
    assert bin(CLUSTER_AUTHORIZED_OPERATIONS).count("1") == 7
    assert to_bitfield([AclOperation.READ, AclOperation.READ]) == 8
    assert to_bitfield([]) == 0


def test_metadata_and_describe_cluster_return_them_when_asked(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (_, c):
            await create_topic(c, "ops", 2)
            for version in (8, 10, 12):
                ask = {"topics": [{"name": "ops", "topic_id": uuid.UUID(int=0)}, {"name": "nope", "topic_id": uuid.UUID(int=0)}],
                       "allow_auto_topic_creation": False,
                       "include_cluster_authorized_operations": True,
                       "include_topic_authorized_operations": True}
                r = await c.send(m.METADATA, version, ask)
                by_name = {t["name"]: t for t in r["topics"]}
                assert by_name["ops"]["topic_authorized_operations"] == TOPIC_AUTHORIZED_OPERATIONS
                # Kafka sets it on every named topic of the answer, unknown ones too
                assert by_name["nope"]["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
                assert by_name["nope"]["topic_authorized_operations"] == TOPIC_AUTHORIZED_OPERATIONS
                if version <= 10:  # the cluster field exists in v8-v10 only
                    assert r["cluster_authorized_operations"] == CLUSTER_AUTHORIZED_OPERATIONS
                r = await c.send(m.METADATA, version, {**ask, "include_cluster_authorized_operations": False,
                                                       "include_topic_authorized_operations": False})
                assert {t["topic_authorized_operations"] for t in r["topics"]} == {AUTHORIZED_OPS_OMITTED}
                if version <= 10:
                    assert r["cluster_authorized_operations"] == AUTHORIZED_OPS_OMITTED
            for include, expected in ((True, CLUSTER_AUTHORIZED_OPERATIONS), (False, AUTHORIZED_OPS_OMITTED)):
                r = await c.send(m.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": include,
                                                        "endpoint_type": 1})
                assert r["error_code"] == Errors.NONE
                assert r["cluster_authorized_operations"] == expected

    run(main)


def test_group_describes_return_them_when_asked(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (_, c):
            await create_topic(c, "t", 2)
            group = "g-" + uuid.uuid4().hex[:6]
            await coordinator_ready(c, group)
            member = Member(c, group, ["t"])
            assert (await member.heartbeat())["error_code"] == Errors.NONE
            for include, expected in ((True, GROUP_AUTHORIZED_OPERATIONS), (False, AUTHORIZED_OPS_OMITTED)):
                r = await c.send(m.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [group, ""],
                                                                "include_authorized_operations": include})
                ok, bad = r["groups"]
                assert ok["error_code"] == Errors.NONE and ok["authorized_operations"] == expected
                assert bad["error_code"] != Errors.NONE and bad["authorized_operations"] == AUTHORIZED_OPS_OMITTED

            classic = "c-" + uuid.uuid4().hex[:6]
            await coordinator_ready(c, classic)
            jg = await c.send(m.JOIN_GROUP, 5, {"group_id": classic, "session_timeout_ms": 10000,
                                                "rebalance_timeout_ms": 10000, "member_id": "",
                                                "group_instance_id": None, "protocol_type": "consumer",
                                                "protocols": [{"name": "range", "metadata": b""}]})
            assert jg["error_code"] in (Errors.NONE, Errors.MEMBER_ID_REQUIRED)
            for version in (3, 5):
                for include, expected in ((True, GROUP_AUTHORIZED_OPERATIONS), (False, AUTHORIZED_OPS_OMITTED)):
                    r = await c.send(m.DESCRIBE_GROUPS, version, {"groups": [classic],
                                                                  "include_authorized_operations": include})
                    (g,) = r["groups"]
                    assert g["error_code"] == Errors.NONE and g["authorized_operations"] == expected

    run(main)
