"""AlterPartition on the controller (Kafka's ``ReplicationControlManager.alterPartition``), sans-I/O.

A partition leader proposes a new ISR; the controller checks it against its image and answers
each partition with an error, or with the state after the change plus the
``PartitionChangeRecord`` that carries it out:

- the sender's broker epoch must be its registered one (STALE_BROKER_EPOCH, for the whole request);
- unknown topic: UNKNOWN_TOPIC_OR_PARTITION (v0-1, by name) / UNKNOWN_TOPIC_ID (v2+); unknown
  partition: UNKNOWN_TOPIC_OR_PARTITION;
- the sender must be the leader (INVALID_REQUEST), at the current leader epoch
  (FENCED_LEADER_EPOCH) and partition epoch (INVALID_UPDATE_VERSION);
- the new ISR must be non-empty replicas without duplicates and contain the leader
  (INVALID_REQUEST); every member must be registered, unfenced, not in controlled shutdown and
  (v3, when given) at its registered broker epoch (INELIGIBLE_REPLICA; OPERATION_NOT_ATTEMPTED
  before v2) — the leader included: a leader that is fenced or shutting down changes no ISR (its
  leadership is moving; the fencing / controlled-shutdown path elects the next leader).

An ISR equal to the current one writes nothing and answers the current state.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from odradek.metadata.image import MetadataImage, PartitionRegistration
from odradek.protocol.errors import Errors

log = logging.getLogger(__name__)

MetadataRecord = tuple[str, dict[str, Any]]


def _partition_error(index: int, error: Errors) -> dict[str, Any]:
    return {
        "partition_index": index, "error_code": error, "leader_id": -1, "leader_epoch": -1, "isr": [],
        "leader_recovery_state": 0, "partition_epoch": -1,
    }


def _new_isr(data: dict[str, Any], version: int) -> list[tuple[int, int]]:
    """(broker id, broker epoch or -1) of the proposed ISR."""
    with_epochs = data.get("new_isr_with_epochs") or []
    if version >= 3 or with_epochs:
        return [(b["broker_id"], b.get("broker_epoch", -1)) for b in with_epochs]
    return [(b, -1) for b in data.get("new_isr") or []]


def _validate(
    image: MetadataImage, broker_id: int, name: str, pid: int, p: PartitionRegistration,
    data: dict[str, Any], isr: list[tuple[int, int]], version: int,
) -> Errors:
    what = f"AlterPartition from broker {broker_id} for {name}-{pid}"
    if broker_id != p.leader:
        log.info("Rejecting %s: the current leader is %d", what, p.leader)
        return Errors.INVALID_REQUEST
    if data["leader_epoch"] != p.leader_epoch:
        log.debug("Rejecting %s: the current leader epoch is %d, not %d", what, p.leader_epoch, data["leader_epoch"])
        return Errors.FENCED_LEADER_EPOCH
    if data["partition_epoch"] != p.partition_epoch:
        log.info("Rejecting %s: the current partition epoch is %d, not %d", what, p.partition_epoch,
                 data["partition_epoch"])
        return Errors.INVALID_UPDATE_VERSION
    ids = [b for b, _ in isr]
    if not ids or len(set(ids)) != len(ids) or any(b not in p.replicas for b in ids):
        log.error("Rejecting %s: it specified an invalid ISR %s (replicas %s)", what, ids, list(p.replicas))
        return Errors.INVALID_REQUEST
    if p.leader not in ids:
        log.error("Rejecting %s: the new ISR %s does not include the current leader %d", what, ids, p.leader)
        return Errors.INVALID_REQUEST
    if data.get("leader_recovery_state", 0) == 1 and len(ids) > 1:
        return Errors.INVALID_REQUEST  # still RECOVERING: only the leader may be in the ISR
    if p.leader_recovery_state == 0 and data.get("leader_recovery_state", 0) == 1:
        return Errors.INVALID_REQUEST  # RECOVERED never goes back to RECOVERING
    ineligible = []
    for b, epoch in isr:
        reg = image.brokers.get(b)
        if reg is None:
            ineligible.append(f"{b} (not registered)")
        elif reg.in_controlled_shutdown:
            ineligible.append(f"{b} (shutting down)")
        elif reg.fenced:
            ineligible.append(f"{b} (fenced)")
        elif epoch != -1 and reg.epoch != epoch:
            ineligible.append(f"{b} (broker epoch {epoch}, registered {reg.epoch})")
    if ineligible:
        log.info("Rejecting %s: it specified ineligible replicas %s in the new ISR %s", what, ineligible, ids)
        return Errors.INELIGIBLE_REPLICA if version > 1 else Errors.OPERATION_NOT_ATTEMPTED
    return Errors.NONE


def alter_partition(
    image: MetadataImage, request: dict[str, Any], version: int
) -> tuple[dict[str, Any], list[MetadataRecord]]:
    """The AlterPartition response data and the records to commit (the caller has checked the
    sender's broker epoch)."""
    broker_id = request["broker_id"]
    records: list[MetadataRecord] = []
    topics_out: list[dict[str, Any]] = []
    for t in request.get("topics", []):
        topic_id = t.get("topic_id") or uuid.UUID(int=0)
        if version >= 2:
            ti = image.topics.by_id.get(topic_id)
            unknown = Errors.UNKNOWN_TOPIC_ID
        else:
            ti = image.topics.by_name.get(t.get("topic_name") or "")
            unknown = Errors.UNKNOWN_TOPIC_OR_PARTITION
        parts_out: list[dict[str, Any]] = []
        topics_out.append({
            "topic_name": ti.name if ti is not None else t.get("topic_name", ""),
            "topic_id": ti.topic_id if ti is not None else topic_id,
            "partitions": parts_out,
        })
        for data in t.get("partitions", []):
            pid = data["partition_index"]
            if ti is None:
                parts_out.append(_partition_error(pid, unknown))
                continue
            p = ti.partitions.get(pid)
            if p is None:
                parts_out.append(_partition_error(pid, Errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            isr = _new_isr(data, version)
            error = _validate(image, broker_id, ti.name, pid, p, data, isr, version)
            if error != Errors.NONE:
                parts_out.append(_partition_error(pid, error))
                continue
            new_isr = [b for b, _ in isr]
            partition_epoch = p.partition_epoch
            if tuple(new_isr) != tuple(p.isr):
                records.append(("PartitionChangeRecord", {
                    "partition_id": pid, "topic_id": ti.topic_id, "isr": new_isr,
                }))
                partition_epoch += 1
                log.info("ISR of %s-%d changes from %s to %s (leader %d, leader epoch %d)", ti.name, pid,
                         list(p.isr), new_isr, p.leader, p.leader_epoch)
            parts_out.append({
                "partition_index": pid, "error_code": Errors.NONE, "leader_id": p.leader,
                "leader_epoch": p.leader_epoch, "isr": new_isr,
                "leader_recovery_state": data.get("leader_recovery_state", 0),
                "partition_epoch": partition_epoch,
            })
    return {"throttle_time_ms": 0, "error_code": Errors.NONE, "topics": topics_out}, records
