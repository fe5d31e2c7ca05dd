"""ProducerIdManager: hands out producer ids from blocks the controller allocates durably
(Kafka's RPCProducerIdManager).

Blocks come from the controller through the controller channel (AllocateProducerIds; a
ProducerIdsRecord moves the cluster's next free id), so an id is never given twice, across
restarts too. InitProducerId for idempotent producers takes the next id here; when the block
runs out the broker asks the controller for another. When the controller cannot give one, the
request fails with COORDINATOR_LOAD_IN_PROGRESS, which producers retry (as Kafka's does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from odradek.protocol.errors import Errors, KafkaError
from odradek.protocol.messages import generated as g
from odradek.server.controller_channel import (
    ControllerChannel,
    ControllerRequest,
    ControllerRequestTimeout,
)

log = logging.getLogger(__name__)


class ProducerIdManager:
    def __init__(self, broker_id: int, broker_epoch: Callable[[], int], channel: ControllerChannel) -> None:
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._channel = channel
        self._next = 0
        self._end = 0
        self._lock: asyncio.Lock | None = None

    async def _allocate_block(self) -> tuple[int, int]:
        data = {"broker_id": self._broker_id, "broker_epoch": self._broker_epoch()}
        try:
            resp = await self._channel.send(ControllerRequest(g.ALLOCATE_PRODUCER_IDS.api_key, 0, data))
        except ControllerRequestTimeout as e:
            log.warning("No producer id block from the controller: %s", e)
            raise KafkaError(Errors.COORDINATOR_LOAD_IN_PROGRESS) from e
        code = Errors(resp["error_code"])
        if code != Errors.NONE:
            log.warning("The controller refused a producer id block: %s %s", code.name, resp.get("error_message") or "")
            raise KafkaError(Errors.COORDINATOR_LOAD_IN_PROGRESS)
        first, count = resp["producer_id_start"], resp["producer_id_len"]
        if first < 0 or count <= 0:
            log.error("The controller sent an invalid producer id block (start %d, length %d)", first, count)
            raise KafkaError(Errors.COORDINATOR_LOAD_IN_PROGRESS)
        return first, count

    async def generate_producer_id(self) -> int:
        """The next producer id; KafkaError(COORDINATOR_LOAD_IN_PROGRESS) when no block could
        be had."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._next >= self._end:
                self._next, count = await self._allocate_block()
                self._end = self._next + count
            pid = self._next
            self._next += 1
            return pid
