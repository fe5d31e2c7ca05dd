"""Authorized operations: Kafka's AclOperation codes and the bitfields responses carry.

Metadata, DescribeCluster, DescribeGroups and ConsumerGroupDescribe return, when the client asks,
the operations it may perform on a resource as a 32-bit field with bit ``1 << code`` set for
each allowed AclOperation (Kafka's ``Utils.to32BitField``). Odradek has no authorizer, so, as
Kafka without one (``AuthHelper.authorizedOperations``), every operation the resource type
supports is allowed (``AclEntry.supportedOperations``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

# The value of an authorized-operations field the client did not ask for.
AUTHORIZED_OPS_OMITTED = -(2**31)


class AclOperation(enum.IntEnum):
    """org.apache.kafka.common.acl.AclOperation codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


def to_bitfield(operations: Iterable[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``1 << code`` for each operation."""
    value = 0
    for op in operations:
        value |= 1 << int(op)
    return value


_A = AclOperation
TOPIC_OPERATIONS = frozenset(
    {_A.READ, _A.WRITE, _A.CREATE, _A.DESCRIBE, _A.DELETE, _A.ALTER, _A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS}
)
CLUSTER_OPERATIONS = frozenset(
    {_A.CREATE, _A.CLUSTER_ACTION, _A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS, _A.IDEMPOTENT_WRITE, _A.ALTER, _A.DESCRIBE}
)
# Kafka 3.8+ (KIP-848 group configs) adds DESCRIBE_CONFIGS and ALTER_CONFIGS to READ, DESCRIBE, DELETE.
GROUP_OPERATIONS = frozenset({_A.READ, _A.DESCRIBE, _A.DELETE, _A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS})

TOPIC_AUTHORIZED_OPERATIONS = to_bitfield(TOPIC_OPERATIONS)
CLUSTER_AUTHORIZED_OPERATIONS = to_bitfield(CLUSTER_OPERATIONS)
GROUP_AUTHORIZED_OPERATIONS = to_bitfield(GROUP_OPERATIONS)
