"""The purgatory's timer and results on asyncio (Kafka's ``SystemTimer`` runs on a reaper thread;
ours is the event loop): :class:`AsyncioTimer` implements :class:`~odradek.server.purgatory.Timer`
with ``loop.call_later``, and :func:`completion_future` turns a delayed operation's completion
into a future the request layer awaits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from odradek.server.purgatory import DelayedOperation, TimerTaskHandle


class AsyncioTimer:
    """A :class:`~odradek.server.purgatory.Timer` on the running event loop."""

    def add(self, delay_ms: int, task: Callable[[], None]) -> TimerTaskHandle:
        return asyncio.get_running_loop().call_later(max(0, delay_ms) / 1000.0, task)


def completion_future(op: DelayedOperation) -> asyncio.Future[Any]:
    """A future resolved with the operation's result (or its error) when it completes."""
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def done(o: DelayedOperation) -> None:
        if fut.done():  # the waiter went away (cancelled)
            return
        if o.error is not None:
            fut.set_exception(o.error)
        else:
            fut.set_result(o.result)

    op.add_done_callback(done)
    return fut
