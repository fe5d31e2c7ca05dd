"""One declarative definition per API, written from Kafka's message schemas.

Each module declares one :class:`~odradek.protocol.schema.Api`: its key, the versions Odradek
implements (Kafka 4.0's floor from KIP-896 up to the newest in the reference schemas) and its
request and response fields. :data:`APIS` is what the broker implements and what ApiVersions
advertises; adding an API here without a handler is a bug that a test catches.
"""

from odradek.protocol.messages.alter_configs import ALTER_CONFIGS
from odradek.protocol.messages.api_versions import API_VERSIONS
from odradek.protocol.messages.consumer_group_describe import CONSUMER_GROUP_DESCRIBE
from odradek.protocol.messages.consumer_group_heartbeat import CONSUMER_GROUP_HEARTBEAT
from odradek.protocol.messages.create_partitions import CREATE_PARTITIONS
from odradek.protocol.messages.create_topics import CREATE_TOPICS
from odradek.protocol.messages.delete_groups import DELETE_GROUPS
from odradek.protocol.messages.delete_records import DELETE_RECORDS
from odradek.protocol.messages.delete_topics import DELETE_TOPICS
from odradek.protocol.messages.describe_cluster import DESCRIBE_CLUSTER
from odradek.protocol.messages.describe_configs import DESCRIBE_CONFIGS
from odradek.protocol.messages.describe_groups import DESCRIBE_GROUPS
from odradek.protocol.messages.describe_log_dirs import DESCRIBE_LOG_DIRS
from odradek.protocol.messages.fetch import FETCH
from odradek.protocol.messages.find_coordinator import FIND_COORDINATOR
from odradek.protocol.messages.heartbeat import HEARTBEAT
from odradek.protocol.messages.incremental_alter_configs import INCREMENTAL_ALTER_CONFIGS
from odradek.protocol.messages.init_producer_id import INIT_PRODUCER_ID
from odradek.protocol.messages.join_group import JOIN_GROUP
from odradek.protocol.messages.leave_group import LEAVE_GROUP
from odradek.protocol.messages.list_groups import LIST_GROUPS
from odradek.protocol.messages.list_offsets import LIST_OFFSETS
from odradek.protocol.messages.metadata import METADATA
from odradek.protocol.messages.offset_commit import OFFSET_COMMIT
from odradek.protocol.messages.offset_delete import OFFSET_DELETE
from odradek.protocol.messages.offset_fetch import OFFSET_FETCH
from odradek.protocol.messages.offset_for_leader_epoch import OFFSET_FOR_LEADER_EPOCH
from odradek.protocol.messages.produce import PRODUCE
from odradek.protocol.messages.sync_group import SYNC_GROUP
from odradek.protocol.schema import Api

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
    "ADVERTISED_MIN_VERSIONS",
    "ALL_APIS",
    "APIS",
    "advertised_min_version",
    "ALTER_CONFIGS",
    "API_VERSIONS",
    "CREATE_PARTITIONS",
    "CREATE_TOPICS",
    "DELETE_RECORDS",
    "DELETE_TOPICS",
    "DESCRIBE_CLUSTER",
    "DESCRIBE_CONFIGS",
    "DESCRIBE_LOG_DIRS",
    "FETCH",
    "INCREMENTAL_ALTER_CONFIGS",
    "INIT_PRODUCER_ID",
    "LIST_OFFSETS",
    "METADATA",
    "OFFSET_FOR_LEADER_EPOCH",
    "PRODUCE",
]
