"""Partition reassignment on the controller (Kafka's KIP-455 in ``ReplicationControlManager``), sans-I/O.

AlterPartitionReassignments with target replicas writes a PartitionChangeRecord whose replicas
are the target followed by the replicas being removed, with ``adding_replicas`` (target minus
current) and ``removing_replicas`` (current minus target), both ascending as Kafka's. The
reassignment completes — the removing replicas leave the assignment and the ISR, adding/removing
are cleared, a leader that is being removed hands over — as soon as every replica of the target is
in the ISR: at once when nothing is added (and the target is in sync), else when the followers
have caught up and the leader's AlterPartition put them in the ISR
(:func:`complete_reassignments` runs after each commit that changed such a partition). With null
replicas it cancels: the adding replicas go, the original assignment comes back
(NO_REASSIGNMENT_IN_PROGRESS when there is none; INVALID_REPLICA_ASSIGNMENT when reverting would
need an unclean election the topic does not allow).

ListPartitionReassignments lists the partitions with a reassignment in progress.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from odradek.controller.broker_partition_changes import active_brokers
from odradek.controller.partition_change_builder import (
    Election,
    PartitionChangeBuilder,
    maybe_complete_reassignment,
    reassignment_replicas,
)
from odradek.controller.replication_control import manual_assignment_error
from odradek.metadata.image import MetadataImage, PartitionRegistration
from odradek.protocol.errors import Errors

log = logging.getLogger(__name__)

MetadataRecord = tuple[str, dict[str, Any]]

NO_REASSIGNMENT_MESSAGE = "No partition reassignment is in progress for this topic or partition."


class ReassignmentError(Exception):
    def __init__(self, error: Errors, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def is_reassignment_in_progress(p: PartitionRegistration) -> bool:
    return bool(p.adding_replicas or p.removing_replicas)


def validate_manual_partition_assignment(image: MetadataImage, replicas: list[int]) -> None:
    """Kafka's validateManualPartitionAssignment (messages included)."""
    msg = manual_assignment_error(image, replicas, None)
    if msg is not None:
        raise ReassignmentError(Errors.INVALID_REPLICA_ASSIGNMENT, msg)


def change_partition_reassignment(
    image: MetadataImage,
    topic: str,
    partition_id: int,
    target: list[int] | None,
    unclean_enabled: Callable[[str], bool],
) -> MetadataRecord | None:
    """The record that starts (or cancels, ``target`` None) one reassignment; raises
    :class:`ReassignmentError`."""
    t = image.topics_by_name.get(topic)
    if t is None:
        raise ReassignmentError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}.")
    p = t.partitions.get(partition_id)
    if p is None:
        raise ReassignmentError(
            Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{partition_id}."
        )
    acceptable = active_brokers(image).__contains__
    builder = PartitionChangeBuilder(p, t.topic_id, partition_id, acceptable)
    if target is None:
        if not is_reassignment_in_progress(p):
            raise ReassignmentError(Errors.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_MESSAGE)
        added = set(p.adding_replicas)
        replicas = [r for r in p.replicas if r not in added]
        isr = [r for r in p.isr if r not in added]
        unclean = not isr
        if unclean:
            # Kafka's PartitionReassignmentRevert: the first original replica becomes the ISR.
            isr = replicas[:1]
        if unclean and not unclean_enabled(topic):
            raise ReassignmentError(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"Unable to revert partition assignment for {topic}:{partition_id} because it "
                "would require an unclean leader election.",
            )
        if unclean_enabled(topic):
            builder.set_election(Election.UNCLEAN)
        builder.set_target_isr(isr).set_target_replicas(replicas).set_target_removing([]).set_target_adding([])
        log.info("Cancelling the reassignment of %s-%d: back to replicas %s", topic, partition_id, replicas)
    else:
        validate_manual_partition_assignment(image, target)
        replicas, removing, adding_list = reassignment_replicas(p.replicas, target)
        builder.set_target_replicas(replicas).set_target_removing(removing).set_target_adding(adding_list)
        log.info(
            "Reassigning %s-%d from %s to %s (adding %s, removing %s)",
            topic, partition_id, list(p.replicas), target, adding_list, removing,
        )
    record = builder.build()
    return None if record is None else ("PartitionChangeRecord", record)


def alter_partition_reassignments(
    image: MetadataImage, request: dict[str, Any], unclean_enabled: Callable[[str], bool]
) -> tuple[dict[str, Any], list[MetadataRecord]]:
    """AlterPartitionReassignments: the response body and the records (all or none, as Kafka's
    ``ControllerResult.atomicOf``: the successful partitions' records are written together)."""
    records: list[MetadataRecord] = []
    responses = []
    ok = total = 0
    for tp in request["topics"]:
        parts = []
        for part in tp["partitions"]:
            pid = part["partition_index"]
            err, msg = Errors.NONE, None
            try:
                rec = change_partition_reassignment(image, tp["name"], pid, part.get("replicas"), unclean_enabled)
                if rec is not None:
                    records.append(rec)
                ok += 1
            except ReassignmentError as e:
                log.info(
                    "Unable to alter partition reassignment for %s:%d because of an error: %s",
                    tp["name"], pid, e.message,
                )
                err, msg = e.error, e.message
            total += 1
            parts.append({"partition_index": pid, "error_code": err, "error_message": msg})
        responses.append({"name": tp["name"], "partitions": parts})
    log.info("Successfully altered %d out of %d partition reassignment(s).", ok, total)
    body = {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None, "responses": responses}
    return body, records


def list_partition_reassignments(image: MetadataImage, request: dict[str, Any]) -> dict[str, Any]:
    wanted = request.get("topics")
    selection: list[tuple[str, list[int] | None]]
    if wanted is None:
        selection = [(name, None) for name in sorted(image.topics_by_name)]
    else:
        selection = [(t["name"], list(t["partition_indexes"])) for t in wanted]
    topics = []
    for name, pids in selection:
        t = image.topics_by_name.get(name)
        if t is None:
            continue
        parts = []
        for pid in sorted(t.partitions) if pids is None else pids:
            p = t.partitions.get(pid)
            if p is None or not is_reassignment_in_progress(p):
                continue
            parts.append({
                "partition_index": pid,
                "replicas": list(p.replicas),
                "adding_replicas": list(p.adding_replicas),
                "removing_replicas": list(p.removing_replicas),
            })
        if parts:
            topics.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None, "topics": topics}


def completable(p: PartitionRegistration) -> bool:
    """A reassignment in progress whose adding replicas are all in the ISR."""
    return maybe_complete_reassignment(p.replicas, p.removing_replicas, p.adding_replicas, p.isr) is not None


def complete_reassignments(image: MetadataImage, partitions: Iterable[tuple[str, int]]) -> list[MetadataRecord]:
    """The records that complete the reassignments of ``partitions`` that may complete now."""
    acceptable = active_brokers(image).__contains__
    records: list[MetadataRecord] = []
    for name, pid in sorted(set(partitions)):
        t = image.topics_by_name.get(name)
        p = None if t is None else t.partitions.get(pid)
        if t is None or p is None or not completable(p):
            continue
        record = PartitionChangeBuilder(p, t.topic_id, pid, acceptable).build()
        if record is not None:
            log.info(
                "Completed the reassignment of %s-%d: replicas %s, ISR %s",
                name, pid, record.get("replicas", list(p.replicas)), record.get("isr", list(p.isr)),
            )
            records.append(("PartitionChangeRecord", record))
    return records
