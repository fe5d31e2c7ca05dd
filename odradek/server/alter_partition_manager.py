"""AlterPartitionManager: a leader's ISR changes, proposed to the controller (Kafka's
``AlterPartitionManager``).

A partition leader submits the ISR it wants (with its leader epoch and partition epoch); the
items go to the active controller as AlterPartition requests through the broker's controller
channel, everything submitted so far in one request, one request in flight at a time. Each item's
callback gets the controller's answer for its partition: NONE with the committed leader epoch,
partition epoch and ISR, or the partition's error (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH,
INELIGIBLE_REPLICA, NEW_LEADER_ELECTED, UNKNOWN_TOPIC_OR_PARTITION ...), which the partition
handles by dropping its proposal. A request-level failure (no controller, STALE_BROKER_EPOCH,
a timeout) sends the items again after ``retry_backoff_ms``, as Kafka does.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.server.controller_channel import (
    ControllerChannel,
    ControllerRequest,
    ControllerRequestTimeout,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
AlterCallback = Callable[[Errors, int, int, tuple[int, ...]], None]


@dataclass
class AlterPartitionItem:
    tp: TopicPartition
    topic_id: uuid.UUID
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    isr_broker_epochs: tuple[int, ...]
    callback: AlterCallback


def alter_partition_request(broker_id: int, broker_epoch: int, items: list[AlterPartitionItem]) -> dict[str, Any]:
    """The request data, valid at every version (names for v0-1, ids from v2, epochs from v3)."""
    topics: dict[uuid.UUID, dict[str, Any]] = {}
    for it in items:
        t = topics.setdefault(it.topic_id, {"topic_name": it.tp[0], "topic_id": it.topic_id, "partitions": []})
        t["partitions"].append({
            "partition_index": it.tp[1],
            "leader_epoch": it.leader_epoch,
            "new_isr": list(it.new_isr),
            "new_isr_with_epochs": [
                {"broker_id": b, "broker_epoch": e} for b, e in zip(it.new_isr, it.isr_broker_epochs, strict=True)
            ],
            "leader_recovery_state": 0,
            "partition_epoch": it.partition_epoch,
        })
    return {"broker_id": broker_id, "broker_epoch": broker_epoch, "topics": list(topics.values())}


class AlterPartitionManager:
    def __init__(
        self,
        channel: ControllerChannel,
        broker_id: int,
        broker_epoch: Callable[[], int],
        retry_backoff_ms: int = 50,
    ) -> None:
        self.channel = channel
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.retry_backoff = retry_backoff_ms / 1000.0
        self._unsent: dict[TopicPartition, AlterPartitionItem] = {}
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def submit(self, item: AlterPartitionItem) -> bool:
        """Queue ``item``; False when one is already queued for the partition (the partition
        never has two proposals out)."""
        if self._closed or item.tp in self._unsent:
            return False
        self._unsent[item.tp] = item
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="alter-partition")
        return True

    async def _run(self) -> None:
        while self._unsent and not self._closed:
            items = list(self._unsent.values())
            try:
                resp = await self.channel.send(
                    ControllerRequest(
                        g.ALTER_PARTITION.api_key, g.ALTER_PARTITION.max_version,
                        alter_partition_request(self.broker_id, self.broker_epoch(), items),
                    )
                )
            except ControllerRequestTimeout as e:
                log.info("AlterPartition for %d partition(s) got no answer: %s; retrying", len(items), e)
                await asyncio.sleep(self.retry_backoff)
                continue
            except Exception:
                log.exception("AlterPartition failed; retrying")
                await asyncio.sleep(self.retry_backoff)
                continue
            top = Errors(resp.get("error_code", 0))
            if top != Errors.NONE:
                log.info("AlterPartition for %d partition(s) answered %s; retrying", len(items), top.name)
                await asyncio.sleep(self.retry_backoff)
                continue
            answered: dict[TopicPartition, dict[str, Any]] = {}
            ids = {it.topic_id: it.tp[0] for it in items}
            for t in resp.get("topics", []):
                name = t.get("topic_name") or ids.get(t.get("topic_id"), "")
                for pd in t.get("partitions", []):
                    answered[(name, pd["partition_index"])] = pd
            for it in items:
                if self._unsent.get(it.tp) is it:
                    del self._unsent[it.tp]
                pd = answered.get(it.tp)
                try:
                    if pd is None:
                        log.error("AlterPartition answer has no entry for %s-%d", *it.tp)
                        it.callback(Errors.UNKNOWN_SERVER_ERROR, -1, -1, ())
                    else:
                        it.callback(Errors(pd["error_code"]), pd["leader_epoch"],
                                    pd["partition_epoch"], tuple(pd["isr"]))
                except Exception:
                    log.exception("AlterPartition callback for %s-%d failed", *it.tp)

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        self._unsent.clear()
