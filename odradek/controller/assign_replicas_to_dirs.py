"""AssignReplicasToDirs on the controller (KIP-858; Kafka's
``ReplicationControlManager.handleAssignReplicasToDirs``), sans-I/O.

A broker with several log directories (or one that moved a replica between them) tells the
controller which directory holds each of its replicas; Apache Kafka brokers send it whenever a
partition's directory in the metadata is not theirs (UNASSIGNED, MIGRATING, another id). Each
partition the broker is a replica of gets a ``PartitionChangeRecord`` carrying the new
directory list (nothing when it is already there). Errors, per partition as Kafka's:
UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (not a replica). The
caller checks the broker epoch (STALE_BROKER_EPOCH) first.

Not done as Kafka does: a directory the broker did not register as online is recorded as given,
but its partitions' leadership is not moved off the broker (Kafka elects new leaders for them,
"offline-dir-assignment"); Odradek brokers register their directories but never report one
offline.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from odradek.metadata.image import MetadataImage
from odradek.protocol.errors import Errors, KafkaError

log = logging.getLogger(__name__)

MetadataRecord = tuple[str, dict[str, Any]]

# metadata.version 3.7-IV2: directory assignment (Kafka's isDirectoryAssignmentSupported).
DIRECTORY_ASSIGNMENT_METADATA_VERSION = 17


def assign_replicas_to_dirs(
    image: MetadataImage, request: dict[str, Any], metadata_version: int
) -> tuple[dict[str, Any], list[MetadataRecord]]:
    if metadata_version < DIRECTORY_ASSIGNMENT_METADATA_VERSION:
        raise KafkaError(Errors.UNSUPPORTED_VERSION, "Directory assignment is not supported yet.")
    broker_id = request["broker_id"]
    broker = image.brokers.get(broker_id)
    if broker is None:
        raise KafkaError(Errors.BROKER_ID_NOT_REGISTERED, f"Broker ID {broker_id} is not currently registered")
    records: list[MetadataRecord] = []
    # Several entries for one partition: the last one wins, as in Kafka (each builds on the
    # image; here on what this request already changed).
    pending: dict[tuple[uuid.UUID, int], list[uuid.UUID]] = {}
    dirs_out = []
    for d in request.get("directories") or []:
        dir_id = d["id"]
        if dir_id not in broker.log_dirs:
            log.warning("AssignReplicasToDirs from broker %d names directory %s, which it did not register "
                        "as online", broker_id, dir_id)
        topics_out = []
        for t in d.get("topics") or []:
            topic_id = t["topic_id"]
            ti = image.topics_by_id.get(topic_id)
            parts_out = []
            for pd in t.get("partitions") or []:
                pid = pd["partition_index"]
                error = Errors.NONE
                p = ti.partitions.get(pid) if ti is not None else None
                if ti is None:
                    log.warning("AssignReplicasToDirs from broker %d references unknown topic ID %s",
                                broker_id, topic_id)
                    error = Errors.UNKNOWN_TOPIC_ID
                elif p is None:
                    log.warning("AssignReplicasToDirs from broker %d references unknown partition %s-%d",
                                broker_id, ti.name, pid)
                    error = Errors.UNKNOWN_TOPIC_OR_PARTITION
                elif broker_id not in p.replicas:
                    log.warning("AssignReplicasToDirs from broker %d references non assigned partition %s-%d",
                                broker_id, ti.name, pid)
                    error = Errors.NOT_LEADER_OR_FOLLOWER
                else:
                    key = (topic_id, pid)
                    current = pending.get(key) or list(p.directories) or [uuid.UUID(int=0)] * len(p.replicas)
                    new = list(current)
                    new[list(p.replicas).index(broker_id)] = dir_id
                    if new != current:
                        pending[key] = new
                parts_out.append({"partition_index": pid, "error_code": error})
            topics_out.append({"topic_id": topic_id, "partitions": parts_out})
        dirs_out.append({"id": dir_id, "topics": topics_out})
    for (topic_id, pid), dirs in pending.items():
        records.append(("PartitionChangeRecord", {"partition_id": pid, "topic_id": topic_id, "directories": dirs}))
    return {"throttle_time_ms": 0, "error_code": Errors.NONE, "directories": dirs_out}, records
