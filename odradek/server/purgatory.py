"""Delayed-operation purgatory (Kafka's DelayedOperation / DelayedOperationPurgatory).

Requests that must wait for something — the high watermark to cover a produce (acks=-1), bytes
to arrive for a fetch — become a :class:`DelayedOperation`. It is tried once when it is created;
if it cannot complete it is watched under keys (topic-partitions) and tried again whenever
someone calls :meth:`DelayedOperationPurgatory.check_and_complete` for one of them (an append,
a high-watermark move, a leadership change), or completed by force when its timeout expires.

This module is a sans-I/O core: no clock, no event loop. Timeouts go through an injected
:class:`Timer` (Kafka's ``Timer``: ``add`` a task to run after a delay), and a completed
operation hands its result to the callbacks registered with
:meth:`DelayedOperation.add_done_callback`. :mod:`odradek.server.system_timer` adapts both to
asyncio for the broker.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from typing import Any, Protocol

log = logging.getLogger(__name__)


class TimerTaskHandle(Protocol):
    def cancel(self) -> None: ...


class Timer(Protocol):
    """Runs ``task`` once, ``delay_ms`` from now, unless the returned handle is cancelled."""

    def add(self, delay_ms: int, task: Callable[[], None]) -> TimerTaskHandle: ...


class DelayedOperation(ABC):
    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = max(0, delay_ms)
        self.completed = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.timer_task: TimerTaskHandle | None = None
        self._callbacks: list[Callable[[DelayedOperation], None]] = []

    # -- to implement --------------------------------------------------------------------------

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; call :meth:`force_complete` and return True when it holds."""

    @abstractmethod
    def on_complete(self) -> Any:
        """Build the result (called exactly once, on success or expiry)."""

    def on_expiration(self) -> None:  # noqa: B027 - optional hook
        """Called before on_complete when the operation timed out."""

    def on_shutdown(self) -> None:  # noqa: B027 - optional hook
        """Called before on_complete when the purgatory shuts down with the operation waiting:
        set the result of what did not happen (a produce must not look acknowledged)."""

    # -- machinery ------------------------------------------------------------------------------

    def add_done_callback(self, callback: Callable[[DelayedOperation], None]) -> None:
        """Call ``callback(self)`` once the operation has completed (at once if it has)."""
        if self.completed:
            callback(self)
        else:
            self._callbacks.append(callback)

    def force_complete(self) -> bool:
        """Complete now (False if it already was): build the result and tell the callbacks."""
        if self.completed:
            return False
        self.completed = True
        if self.timer_task is not None:
            self.timer_task.cancel()
            self.timer_task = None
        try:
            self.result = self.on_complete()
        except Exception as e:  # delivered to whoever waits for the result
            self.error = e
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            try:
                cb(self)
            except Exception:
                log.exception("Completion callback of %r failed", self)
        return True

    def expire(self) -> None:
        """The timer fired: complete with whatever holds now."""
        self.timer_task = None
        if not self.completed:
            self.on_expiration()
            self.force_complete()


class DelayedOperationPurgatory:
    def __init__(self, name: str, timer: Timer, purge_interval: int = 1000) -> None:
        self.name = name
        self.timer = timer
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._purge_interval = purge_interval
        self._since_purge = 0

    def try_complete_else_watch(self, op: DelayedOperation, keys: list[Hashable]) -> bool:
        """True when the operation completed at once; otherwise it is watched and timed."""
        if op.try_complete():
            return True
        for k in keys:
            self._watchers.setdefault(k, []).append(op)
        op.timer_task = self.timer.add(op.delay_ms, op.expire)
        self._since_purge += 1
        if self._since_purge >= self._purge_interval:
            self.purge_completed()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try the operations watched under ``key``; returns how many completed."""
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
        """Drop completed operations still listed under other keys."""
        self._since_purge = 0
        for k in list(self._watchers):
            live = [op for op in self._watchers[k] if not op.completed]
            if live:
                self._watchers[k] = live
            else:
                del self._watchers[k]

    def watched(self) -> int:
        """Operations waiting (each counted once, whatever its number of keys)."""
        return len({id(op) for ops in self._watchers.values() for op in ops if not op.completed})

    def shutdown(self) -> None:
        """Complete every waiting operation now."""
        for ops in self._watchers.values():
            for op in ops:
                if not op.completed:
                    op.on_shutdown()
                op.force_complete()
        self._watchers.clear()
