"""AllocateProducerIds on the ZooKeeper controller (Kafka 3.9's ``processAllocateProducerIds`` and
``ZkProducerIdManager.getNewProducerIdBlock``).

Brokers at ``inter.broker.protocol.version`` >= 3.0-IV0 take blocks of 1000 producer ids from the
controller. The last block handed out is ``/latest_producer_id_block``
(``{"version":1,"broker":<id>,"block_start":"<first>","block_end":"<last>"}``, the numbers as
strings); the next one starts after it and is written conditionally on the znode's version (created
for the first block), retried when another writer got there first. As in Kafka the write is not
fenced by the controller epoch. The requesting broker must be live at its registered epoch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from odradek.controller import controller_event_manager as ev
from odradek.controller.controller_context import ControllerContext
from odradek.protocol.errors import Errors

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000
MAX_LONG = (1 << 63) - 1
MAX_ROUNDS = 100


@dataclass(frozen=True)
class ProducerIdsBlock:
    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1


def encode_producer_id_block(block: ProducerIdsBlock) -> bytes:
    return (f'{{"version":1,"broker":{block.assigned_broker_id},"block_start":"{block.first_producer_id}",'
            f'"block_end":"{block.last_producer_id}"}}').encode()


def decode_producer_id_block(data: bytes) -> ProducerIdsBlock:
    try:
        js = json.loads(data)
        start, end = int(js["block_start"]), int(js["block_end"])
        return ProducerIdsBlock(int(js["broker"]), start, end - start + 1)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"Failed to parse the producerId block json {data!r}") from e


class ProducerIdBlockStore(Protocol):
    def get_producer_id_block(self) -> tuple[bytes | None, int]:
        """The znode's data and version (None, -1 when it does not exist)."""
        ...

    def set_producer_id_block(self, data: bytes, expected_version: int) -> bool:
        """Write conditionally on ``expected_version`` (-1: create); False if someone else won."""
        ...


@dataclass
class AllocateProducerIds(ev.ControllerEvent):
    broker_id: int = -1
    broker_epoch: int = -1
    callback: Callable[[dict[str, Any]], None] | None = None
    state: ClassVar[ev.ControllerState] = ev.ControllerState.Idle

    def preempt(self) -> None:
        if self.callback is not None:
            self.callback(response(Errors.NOT_CONTROLLER))


def response(error: Errors, block: ProducerIdsBlock | None = None) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": error,
            "producer_id_start": block.first_producer_id if block else -1,
            "producer_id_len": block.size if block else 0}


def new_producer_id_block(store: ProducerIdBlockStore, broker_id: int) -> ProducerIdsBlock:
    for _ in range(MAX_ROUNDS):
        data, version = store.get_producer_id_block()
        if data is not None:
            cur = decode_producer_id_block(data)
            if cur.last_producer_id > MAX_LONG - PRODUCER_ID_BLOCK_SIZE:
                raise RuntimeError("Have exhausted all producerIds.")
            new = ProducerIdsBlock(broker_id, cur.last_producer_id + 1, PRODUCER_ID_BLOCK_SIZE)
        else:
            new = ProducerIdsBlock(broker_id, 0, PRODUCER_ID_BLOCK_SIZE)
        if store.set_producer_id_block(encode_producer_id_block(new), version):
            log.info("Acquired new producerId block %s by writing to Zk", new)
            return new
    raise RuntimeError("could not write /latest_producer_id_block: too many concurrent writers")


def process_allocate_producer_ids(
    active: bool, ctx: ControllerContext, store: ProducerIdBlockStore, e: AllocateProducerIds
) -> dict[str, Any]:
    if not active:
        return response(Errors.NOT_CONTROLLER)
    epoch = ctx.live_broker_id_and_epochs.get(e.broker_id)
    if epoch is None:
        log.warning("Ignoring AllocateProducerIds due to unknown broker %d", e.broker_id)
        return response(Errors.BROKER_ID_NOT_REGISTERED)
    if epoch != e.broker_epoch:
        log.warning("Ignoring AllocateProducerIds due to stale broker epoch %d for broker %d", e.broker_epoch,
                    e.broker_id)
        return response(Errors.STALE_BROKER_EPOCH)
    try:
        return response(Errors.NONE, new_producer_id_block(store, e.broker_id))
    except Exception as ex:
        log.error("Allocating producer ids for broker %d failed: %r", e.broker_id, ex)
        return response(Errors.UNKNOWN_SERVER_ERROR)
