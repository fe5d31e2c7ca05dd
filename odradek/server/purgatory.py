"""Delayed-operation purgatory: requests that wait for something (HW to move, bytes to arrive).

An operation is tried once when it is created; if it cannot complete it is watched under keys
(topic-partitions) and tried again whenever someone calls :meth:`check_and_complete` for one of
them (an append, a high-watermark move), or completed by force when its timeout expires. Its
result is delivered through an asyncio future so the request layer can await it.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import Any


class DelayedOperation(ABC):
    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = max(0, delay_ms)
        self.completed = False
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._timer: asyncio.TimerHandle | None = None

    # -- to implement --------------------------------------------------------------------------

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; call :meth:`force_complete` and return True when it holds."""

    @abstractmethod
    def on_complete(self) -> Any:
        """Build the result (called exactly once, on success or expiry)."""

    def on_expiration(self) -> None:  # noqa: B027 - optional hook
        """Called before on_complete when the operation timed out."""

    # -- machinery ------------------------------------------------------------------------------

    def force_complete(self) -> bool:
        if self.completed:
            return False
        self.completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            result = self.on_complete()
        except Exception as e:  # deliver the failure to whoever awaits the result
            if not self.future.done():
                self.future.set_exception(e)
            return True
        if not self.future.done():
            self.future.set_result(result)
        return True

    def _expire(self) -> None:
        self._timer = None
        if not self.completed:
            self.on_expiration()
            self.force_complete()

    def start_timer(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.delay_ms / 1000.0, self._expire)


class DelayedOperationPurgatory:
    def __init__(self, name: str, purge_interval: int = 1000) -> None:
        self.name = name
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._purge_interval = purge_interval
        self._since_purge = 0

    def try_complete_else_watch(self, op: DelayedOperation, keys: list[Hashable]) -> bool:
        """True when the operation completed at once; otherwise it is watched and timed."""
        if op.try_complete():
            return True
        for k in keys:
            self._watchers.setdefault(k, []).append(op)
        op.start_timer()
        self._since_purge += 1
        if self._since_purge >= self._purge_interval:
            self.purge_completed()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        ops = self._watchers.get(key)
        if not ops:
            return 0
        done = 0
        remaining: list[DelayedOperation] = []
        for op in ops:
            if op.completed:
                continue
            if op.try_complete():
                done += 1
            else:
                remaining.append(op)
        if remaining:
            self._watchers[key] = remaining
        else:
            del self._watchers[key]
        return done

    def purge_completed(self) -> None:
        self._since_purge = 0
        for k in list(self._watchers):
            live = [op for op in self._watchers[k] if not op.completed]
            if live:
                self._watchers[k] = live
            else:
                del self._watchers[k]

    def watched(self) -> int:
        return sum(1 for ops in self._watchers.values() for op in ops if not op.completed)

    def shutdown(self) -> None:
        for ops in self._watchers.values():
            for op in ops:
                op.force_complete()
        self._watchers.clear()
