"""ProducerIdManager: hands out producer ids from blocks the controller allocates durably.

Blocks come from the controller (a ProducerIdsRecord moves the cluster's next free id), so an id
is never given twice, across restarts too. InitProducerId for idempotent producers takes the next
id here; when the block runs out the broker asks the controller for another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class ProducerIdManager:
    def __init__(self, allocate_block: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        self._allocate_block = allocate_block
        self._next = 0
        self._end = 0
        self._lock: asyncio.Lock | None = None

    async def generate_producer_id(self) -> int:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._next >= self._end:
                first, count = await self._allocate_block()
                self._next, self._end = first, first + count
            pid = self._next
            self._next += 1
            return pid
