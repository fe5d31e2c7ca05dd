"""The APIs the broker serves: a small hand-written layer over the generated definitions.

:mod:`odradek.protocol.messages.generated` declares every request/response pair in Kafka's
message schemas (written by ``scripts/generate_protocol.py``; never edit it by hand). This module
chooses which of them the broker implements and the versions it serves: Kafka 4.0's floor from
KIP-896 up to the newest version in the reference. :data:`ALL_APIS` is what KafkaApis and its
extensions declare handlers for, and ApiVersions advertises exactly the APIs that have a
handler; a definition alone (Vote, LeaderAndIsr, ...) is neither advertised nor served.

Nothing in the generated field definitions is overridden. The zero-copy handling of ``records``
fields (Produce's record batches decoded as memoryviews into the request buffer, so the broker
rewrites their headers in place; Fetch's log data written as chunks of its own, sent with
sendfile) belongs to the codec's ``records`` type (:mod:`odradek.protocol.schema`), which is
what Kafka's schemas declare for those fields.
"""

from dataclasses import replace

from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api


def served_from(api: Api, min_version: int) -> Api:
    """``api`` served from ``min_version`` up: Kafka 4.0 no longer serves the versions KIP-896
    removed, which the reference schemas (Kafka 3.9) still list as valid."""
    if not api.min_version < min_version <= api.max_version:
        raise ValueError(f"{api.name}: cannot serve from v{min_version}")
    return replace(api, min_version=min_version, _cache={})


PRODUCE = served_from(g.PRODUCE, 3)
FETCH = served_from(g.FETCH, 4)
LIST_OFFSETS = served_from(g.LIST_OFFSETS, 1)
METADATA = g.METADATA
OFFSET_FOR_LEADER_EPOCH = served_from(g.OFFSET_FOR_LEADER_EPOCH, 2)
API_VERSIONS = g.API_VERSIONS
CREATE_TOPICS = served_from(g.CREATE_TOPICS, 2)
DELETE_TOPICS = served_from(g.DELETE_TOPICS, 1)
DELETE_RECORDS = g.DELETE_RECORDS
DESCRIBE_CONFIGS = served_from(g.DESCRIBE_CONFIGS, 1)
ALTER_CONFIGS = g.ALTER_CONFIGS
CREATE_PARTITIONS = g.CREATE_PARTITIONS
DESCRIBE_LOG_DIRS = served_from(g.DESCRIBE_LOG_DIRS, 1)
INCREMENTAL_ALTER_CONFIGS = g.INCREMENTAL_ALTER_CONFIGS
DESCRIBE_CLUSTER = g.DESCRIBE_CLUSTER
INIT_PRODUCER_ID = g.INIT_PRODUCER_ID
DESCRIBE_QUORUM = g.DESCRIBE_QUORUM  # forwarded to the controller, as a Kafka broker does
# KIP-853 voter changes from admin clients: forwarded too (Kafka 4's KafkaApis)
ADD_RAFT_VOTER = g.ADD_RAFT_VOTER
REMOVE_RAFT_VOTER = g.REMOVE_RAFT_VOTER
OFFSET_COMMIT = served_from(g.OFFSET_COMMIT, 2)
OFFSET_FETCH = served_from(g.OFFSET_FETCH, 1)
FIND_COORDINATOR = g.FIND_COORDINATOR
JOIN_GROUP = served_from(g.JOIN_GROUP, 2)
HEARTBEAT = g.HEARTBEAT
LEAVE_GROUP = g.LEAVE_GROUP
SYNC_GROUP = g.SYNC_GROUP
DESCRIBE_GROUPS = g.DESCRIBE_GROUPS
LIST_GROUPS = g.LIST_GROUPS
DELETE_GROUPS = g.DELETE_GROUPS
OFFSET_DELETE = g.OFFSET_DELETE
CONSUMER_GROUP_HEARTBEAT = g.CONSUMER_GROUP_HEARTBEAT
CONSUMER_GROUP_DESCRIBE = g.CONSUMER_GROUP_DESCRIBE
# Every version (KIP-896 removed none), and v5 (KIP-890 part 2, the same as v4 on the wire).
TXN_OFFSET_COMMIT = g.TXN_OFFSET_COMMIT
# Forwarded to the controller, as a Kafka broker does (odradek.controller.replication_ops)
ELECT_LEADERS = g.ELECT_LEADERS
ALTER_PARTITION_REASSIGNMENTS = g.ALTER_PARTITION_REASSIGNMENTS
LIST_PARTITION_REASSIGNMENTS = g.LIST_PARTITION_REASSIGNMENTS
# The partition side of transactions (odradek.server.txn_partition_apis)
WRITE_TXN_MARKERS = g.WRITE_TXN_MARKERS
DESCRIBE_PRODUCERS = g.DESCRIBE_PRODUCERS
# The transaction coordinator (odradek.server.txn_apis); EndTxn v5 is KIP-890 part 2 (an epoch
# bump per transaction), served as transactions version 2 while transaction.version 2 is
# finalized.
ADD_PARTITIONS_TO_TXN = g.ADD_PARTITIONS_TO_TXN
ADD_OFFSETS_TO_TXN = g.ADD_OFFSETS_TO_TXN
END_TXN = g.END_TXN
DESCRIBE_TRANSACTIONS = g.DESCRIBE_TRANSACTIONS
LIST_TRANSACTIONS = g.LIST_TRANSACTIONS
# SASL (odradek.security.sasl_apis; on a SASL listener the authenticator answers them first)
SASL_HANDSHAKE = g.SASL_HANDSHAKE
SASL_AUTHENTICATE = g.SASL_AUTHENTICATE
DESCRIBE_USER_SCRAM_CREDENTIALS = g.DESCRIBE_USER_SCRAM_CREDENTIALS
ALTER_USER_SCRAM_CREDENTIALS = g.ALTER_USER_SCRAM_CREDENTIALS
# Served on a KRaft broker's listeners besides ALL_APIS (odradek.security.sasl_apis,
# odradek.server.user_scram_apis); the controller listener serves all but DescribeUserScramCredentials.
SECURITY_APIS: list[Api] = [
    SASL_HANDSHAKE, SASL_AUTHENTICATE, DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS,
]
# The ACLs (odradek.server.acl_apis): served on a KRaft broker's listeners and on the controller
# listener, SECURITY_DISABLED without an authorizer.
CREATE_ACLS = g.CREATE_ACLS
DESCRIBE_ACLS = g.DESCRIBE_ACLS
DELETE_ACLS = g.DELETE_ACLS
ACL_APIS: list[Api] = [CREATE_ACLS, DESCRIBE_ACLS, DELETE_ACLS]

ALL_APIS: list[Api] = [
    PRODUCE,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DELETE_RECORDS,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    CREATE_PARTITIONS,
    DESCRIBE_LOG_DIRS,
    INCREMENTAL_ALTER_CONFIGS,
    DESCRIBE_CLUSTER,
    INIT_PRODUCER_ID,
    DESCRIBE_QUORUM,
    ADD_RAFT_VOTER,
    REMOVE_RAFT_VOTER,
    ELECT_LEADERS,
    ALTER_PARTITION_REASSIGNMENTS,
    LIST_PARTITION_REASSIGNMENTS,
    # Group coordinator (served by odradek.server.group_apis.GroupApis)
    OFFSET_COMMIT,
    OFFSET_FETCH,
    FIND_COORDINATOR,
    JOIN_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    SYNC_GROUP,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    DELETE_GROUPS,
    OFFSET_DELETE,
    CONSUMER_GROUP_HEARTBEAT,
    CONSUMER_GROUP_DESCRIBE,
    TXN_OFFSET_COMMIT,
    WRITE_TXN_MARKERS,
    DESCRIBE_PRODUCERS,
    # Transaction coordinator (served by odradek.server.txn_apis.TxnApis)
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
]

APIS: dict[int, Api] = {api.api_key: api for api in ALL_APIS}

# The lowest version ApiVersions advertises, where it differs from the lowest version served.
# Produce: Kafka 4.0 serves v3+ (KIP-896) but advertises v0+ (KAFKA-18659): librdkafka before
# 2.11.1 checks that the broker's Produce range overlaps v0 before it compresses with gzip,
# snappy or lz4, and otherwise sends every batch uncompressed. A Produce v0-v2 request still
# closes the connection, as in Kafka 4.0.
ADVERTISED_MIN_VERSIONS: dict[int, int] = {PRODUCE.api_key: 0}


def advertised_min_version(api: Api) -> int:
    """The min version ApiVersions advertises for ``api``."""
    return ADVERTISED_MIN_VERSIONS.get(api.api_key, api.min_version)


__all__ = [
    "CONSUMER_GROUP_DESCRIBE",
    "CONSUMER_GROUP_HEARTBEAT",
    "DELETE_GROUPS",
    "DESCRIBE_GROUPS",
    "FIND_COORDINATOR",
    "HEARTBEAT",
    "JOIN_GROUP",
    "LEAVE_GROUP",
    "LIST_GROUPS",
    "OFFSET_COMMIT",
    "OFFSET_DELETE",
    "OFFSET_FETCH",
    "SYNC_GROUP",
    "TXN_OFFSET_COMMIT",
    "ADVERTISED_MIN_VERSIONS",
    "ALL_APIS",
    "APIS",
    "advertised_min_version",
    "served_from",
    "ALTER_CONFIGS",
    "DESCRIBE_PRODUCERS",
    "WRITE_TXN_MARKERS",
    "ADD_PARTITIONS_TO_TXN",
    "ADD_OFFSETS_TO_TXN",
    "END_TXN",
    "DESCRIBE_TRANSACTIONS",
    "LIST_TRANSACTIONS",
    "ALTER_PARTITION_REASSIGNMENTS",
    "ADD_RAFT_VOTER",
    "REMOVE_RAFT_VOTER",
    "ELECT_LEADERS",
    "LIST_PARTITION_REASSIGNMENTS",
    "API_VERSIONS",
    "CREATE_PARTITIONS",
    "CREATE_TOPICS",
    "DELETE_RECORDS",
    "DELETE_TOPICS",
    "DESCRIBE_CLUSTER",
    "DESCRIBE_CONFIGS",
    "DESCRIBE_LOG_DIRS",
    "DESCRIBE_QUORUM",
    "FETCH",
    "INCREMENTAL_ALTER_CONFIGS",
    "INIT_PRODUCER_ID",
    "LIST_OFFSETS",
    "METADATA",
    "OFFSET_FOR_LEADER_EPOCH",
    "PRODUCE",
]
