"""AlterPartition on the ZooKeeper controller (Kafka 3.9's ``KafkaController.tryProcessAlterPartition``).

Brokers at ``inter.broker.protocol.version`` 3.9 send their ISR changes to the controller. Checks,
in Kafka's order, per partition against the controller's cached state (whose partition epoch is
the state znode's zkVersion):

- the sender must be a live broker at its registered epoch (the czxid of ``/brokers/ids/<id>``),
  else STALE_BROKER_EPOCH for the whole request;
- unknown topic id (v2+) UNKNOWN_TOPIC_ID; unknown partition UNKNOWN_TOPIC_OR_PARTITION;
- a higher partition or leader epoch than the controller knows: NOT_CONTROLLER (this controller is
  probably stale); a lower leader epoch: FENCED_LEADER_EPOCH; the same state (stale partition epoch
  allowed): answered as is; a lower partition epoch: INVALID_UPDATE_VERSION; a RECOVERING leader
  with more than itself in the ISR, or RECOVERED -> RECOVERING: INVALID_REQUEST; a new ISR member
  that is not a live broker (or is shutting down): INELIGIBLE_REPLICA (OPERATION_NOT_ATTEMPTED
  before v2).

The accepted ones are written with zkVersion-conditional updates fenced by the controller epoch
(a BADVERSION answers INVALID_UPDATE_VERSION) and answered with the new zkVersion as partition
epoch; the caller sends UpdateMetadata for them.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from odradek.controller.controller_context import (
    LEADER_RECOVERY_RECOVERED,
    LEADER_RECOVERY_RECOVERING,
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    TopicPartition,
)
from odradek.controller.controller_zk_client import ControllerZkClient
from odradek.protocol.errors import Errors

log = logging.getLogger(__name__)


def _error(index: int, error: Errors) -> dict[str, Any]:
    return {"partition_index": index, "error_code": error, "leader_id": -1, "leader_epoch": -1, "isr": [],
            "leader_recovery_state": 0, "partition_epoch": -1}


def _ok(index: int, lai: LeaderAndIsr) -> dict[str, Any]:
    return {"partition_index": index, "error_code": Errors.NONE, "leader_id": lai.leader,
            "leader_epoch": lai.leader_epoch, "isr": list(lai.isr),
            "leader_recovery_state": lai.leader_recovery_state, "partition_epoch": lai.partition_epoch}


def _same_allow_stale_partition_epoch(a: LeaderAndIsr, b: LeaderAndIsr) -> bool:
    return (a.leader, a.leader_epoch, tuple(a.isr), a.leader_recovery_state) == \
        (b.leader, b.leader_epoch, tuple(b.isr), b.leader_recovery_state)


def process_alter_partition(
    ctx: ControllerContext, zk: ControllerZkClient, request: dict[str, Any], version: int
) -> tuple[dict[str, Any], set[TopicPartition]]:
    """The response body, and the partitions whose new state was written (for UpdateMetadata)."""
    broker_id = request["broker_id"]
    broker_epoch = request.get("broker_epoch", -1)
    cached_epoch = ctx.live_broker_id_and_epochs.get(broker_id)
    if cached_epoch is None or cached_epoch != broker_epoch:
        log.info("Ignoring AlterPartition from broker %d at epoch %s (registered epoch %s)",
                 broker_id, broker_epoch, cached_epoch)
        return {"throttle_time_ms": 0, "error_code": Errors.STALE_BROKER_EPOCH, "topics": []}, set()

    out: dict[TopicPartition, dict[str, Any]] = {}
    topics_out: list[tuple[dict[str, Any], list[TopicPartition | dict[str, Any]]]] = []
    to_alter: dict[TopicPartition, LeaderAndIsr] = {}
    for t in request.get("topics", []):
        if version >= 2:
            topic_id = t.get("topic_id") or uuid.UUID(int=0)
            name = ctx.topic_name(topic_id)
        else:
            topic_id = uuid.UUID(int=0)
            name = t.get("topic_name")
        entries: list[TopicPartition | dict[str, Any]] = []
        topics_out.append(({"topic_name": name or t.get("topic_name", ""), "topic_id": topic_id}, entries))
        for p in t.get("partitions", []):
            pid = p["partition_index"]
            if name is None:
                entries.append(_error(pid, Errors.UNKNOWN_TOPIC_ID))
                continue
            if version >= 3 or p.get("new_isr_with_epochs"):
                isr = [b["broker_id"] for b in p.get("new_isr_with_epochs") or []]
            else:
                isr = list(p.get("new_isr") or [])
            tp = (name, pid)
            entries.append(tp)
            to_alter[tp] = LeaderAndIsr(broker_id, tuple(isr), p["leader_epoch"],
                                        p.get("leader_recovery_state", 0), p["partition_epoch"])

    accepted: dict[TopicPartition, LeaderAndIsr] = {}
    for tp, new in to_alter.items():
        info = ctx.partition_leadership_info(tp)
        if info is None:
            out[tp] = _error(tp[1], Errors.UNKNOWN_TOPIC_OR_PARTITION)
            continue
        cur = info.leader_and_isr
        if new.partition_epoch > cur.partition_epoch or new.leader_epoch > cur.leader_epoch:
            out[tp] = _error(tp[1], Errors.NOT_CONTROLLER)
        elif new.leader_epoch < cur.leader_epoch:
            out[tp] = _error(tp[1], Errors.FENCED_LEADER_EPOCH)
        elif _same_allow_stale_partition_epoch(new, cur):
            out[tp] = _ok(tp[1], cur)
        elif new.partition_epoch < cur.partition_epoch:
            out[tp] = _error(tp[1], Errors.INVALID_UPDATE_VERSION)
        elif new.leader_recovery_state == LEADER_RECOVERY_RECOVERING and len(new.isr) > 1:
            log.info("Rejecting AlterPartition from node %d for %s: leader is recovering and ISR is greater "
                     "than 1: %s", broker_id, tp, new)
            out[tp] = _error(tp[1], Errors.INVALID_REQUEST)
        elif cur.leader_recovery_state == LEADER_RECOVERY_RECOVERED and \
                new.leader_recovery_state == LEADER_RECOVERY_RECOVERING:
            log.info("Rejecting AlterPartition from node %d for %s: RECOVERED cannot become RECOVERING", broker_id, tp)
            out[tp] = _error(tp[1], Errors.INVALID_REQUEST)
        else:
            ineligible = sorted(set(new.isr) - ctx.live_broker_ids)
            if ineligible:
                log.info("Rejecting AlterPartition request from node %d for %s because it specified ineligible "
                         "replicas %s in the new ISR %s.", broker_id, tp, ineligible, list(new.isr))
                out[tp] = _error(tp[1], Errors.INELIGIBLE_REPLICA if version > 1 else Errors.OPERATION_NOT_ATTEMPTED)
            else:
                accepted[tp] = new

    committed: set[TopicPartition] = set()
    if accepted:
        result = zk.update_leader_and_isr(accepted, ctx.epoch, ctx.epoch_zk_version)
        for tp, written in result.finished.items():
            if isinstance(written, LeaderAndIsr):
                log.debug("ISR for partition %s updated to %s.", tp, written)
                ctx.put_partition_leadership_info(tp, LeaderIsrAndControllerEpoch(written, ctx.epoch))
                out[tp] = _ok(tp[1], written)
                committed.add(tp)
            else:
                log.error("Failed to update ISR for partition %s: %r", tp, written)
                out[tp] = _error(tp[1], Errors.UNKNOWN_SERVER_ERROR)
        for tp in result.to_retry:
            log.info("Failed to update ISR to %s for partition %s, bad ZK version.", accepted[tp], tp)
            out[tp] = _error(tp[1], Errors.INVALID_UPDATE_VERSION)

    topics: list[dict[str, Any]] = []
    for head, entries in topics_out:
        parts = [out[e] if isinstance(e, tuple) else e for e in entries]
        topics.append({**head, "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": Errors.NONE, "topics": topics}, committed
