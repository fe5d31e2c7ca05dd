"""The controller's event queue: Kafka's ``KafkaEventQueue`` (server-common), split in two.

:class:`EventQueueCore` is sans-I/O: no asyncio, no clock (every call that needs the time takes
``now_ms``), no threads. It holds the ordered queue and the deadlines and answers one question,
:meth:`EventQueueCore.poll`: which event runs next, and with which exception (None: run it).
:class:`KafkaEventQueue` is the thin asyncio driver: one task that polls the core, runs the events
one at a time, and sleeps until the next deadline or the next enqueue.

Kafka's semantics, kept:

- ``append`` puts an event at the tail, ``prepend`` at the head.
- ``append_with_deadline``: an appended event that is still queued when its deadline passes is
  taken out and failed with :class:`EventTimeoutError` (Kafka's ``TimeoutException``; a controller
  write failed so answers ``REQUEST_TIMED_OUT``).
- ``schedule_deferred(tag, deadline_fn, event)``: the event runs once its deadline has passed (it
  then goes before everything queued). With a tag, scheduling again under the same tag replaces
  the earlier event (which is dropped without running); ``deadline_fn`` gets the replaced event's
  deadline, so :func:`earliest_deadline` keeps whichever is sooner. ``cancel_deferred(tag)`` drops it.
- ``begin_shutdown``: nothing more is accepted (:class:`RejectedExecutionError`); the events with a
  deadline (deferred ones and appended ones with a timeout) are failed with it; events without a
  deadline still run; then the queue is closed.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import inspect
import itertools
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from odradek.protocol.errors import Errors, KafkaError

log = logging.getLogger(__name__)

T = TypeVar("T")


class EventTimeoutError(KafkaError):
    """An event still queued at its deadline (Kafka's ``TimeoutException``)."""

    def __init__(self, message: str = "The event timed out while waiting in the controller queue.") -> None:
        super().__init__(Errors.REQUEST_TIMED_OUT, message)


class RejectedExecutionError(KafkaError):
    """The queue is shutting down (Kafka's ``RejectedExecutionException``, which the controller
    answers as a timeout: "The controller is shutting down.")."""

    def __init__(self, message: str = "The event queue is shutting down") -> None:
        super().__init__(Errors.REQUEST_TIMED_OUT, message)


class Event(Protocol):
    """Kafka's ``EventQueue.Event``: ``run`` (which may return an awaitable the driver awaits
    before the next event) or, instead, ``handle_exception`` with why it did not run or failed."""

    def run(self) -> Awaitable[None] | None: ...

    def handle_exception(self, exc: BaseException) -> None: ...


E = TypeVar("E", bound=Event)


class EventInsertionType(enum.Enum):
    PREPEND = "prepend"
    APPEND = "append"
    DEFERRED = "deferred"


# Kafka's deadline functions: given the deadline of the event the new one replaces (same tag),
# or None, the new deadline (None: no deadline).
DeadlineFunction = Callable[[int | None], int | None]


def no_deadline(_previous: int | None) -> int | None:
    return None


def deadline(deadline_ms: int) -> DeadlineFunction:
    return lambda _previous: deadline_ms


def earliest_deadline(deadline_ms: int) -> DeadlineFunction:
    """Kafka's ``EarliestDeadlineFunction``: the sooner of the new and the replaced deadline."""
    return lambda previous: deadline_ms if previous is None else min(previous, deadline_ms)


def latest_deadline(deadline_ms: int) -> DeadlineFunction:
    """Kafka's ``LatestDeadlineFunction``: the later of the new and the replaced deadline."""
    return lambda previous: deadline_ms if previous is None else max(previous, deadline_ms)


@dataclass(eq=False)
class _EventContext(Generic[E]):
    event: E
    insertion_type: EventInsertionType
    tag: str | None
    seq: int
    deadline_ms: int | None = None
    queued: bool = False  # in the ordered queue (not deferred)
    live: bool = True  # False once removed: its heap entry is stale


@dataclass
class EventQueueCore(Generic[E]):
    """The queue's state and rules, without time or I/O of its own."""

    _queue: OrderedDict[int, _EventContext[E]] = field(default_factory=OrderedDict)
    _deadlines: list[tuple[int, int, _EventContext[E]]] = field(default_factory=list)
    _tags: dict[str, _EventContext[E]] = field(default_factory=dict)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    shutting_down: bool = False
    size: int = 0

    # -- enqueueing -----------------------------------------------------------------------------

    def enqueue(
        self,
        insertion_type: EventInsertionType,
        tag: str | None,
        deadline_fn: DeadlineFunction,
        event: E,
    ) -> KafkaError | None:
        """Queue ``event``; the exception to deliver to it instead when it is refused."""
        if self.shutting_down:
            return RejectedExecutionError()
        previous_deadline: int | None = None
        if tag is not None:
            replaced = self._tags.get(tag)
            if replaced is not None:
                previous_deadline = replaced.deadline_ms
                self._remove(replaced)
        when = deadline_fn(previous_deadline)
        if insertion_type is EventInsertionType.DEFERRED and when is None:
            return KafkaError(Errors.UNKNOWN_SERVER_ERROR, "You must specify a deadline for deferred events.")
        ctx = _EventContext(event, insertion_type, tag, next(self._seq), when)
        if tag is not None:
            self._tags[tag] = ctx
        if insertion_type is not EventInsertionType.DEFERRED:
            ctx.queued = True
            self._queue[ctx.seq] = ctx
            if insertion_type is EventInsertionType.PREPEND:
                self._queue.move_to_end(ctx.seq, last=False)
        if when is not None:
            heapq.heappush(self._deadlines, (when, ctx.seq, ctx))
        self.size += 1
        return None

    def append(self, event: E) -> KafkaError | None:
        return self.enqueue(EventInsertionType.APPEND, None, no_deadline, event)

    def prepend(self, event: E) -> KafkaError | None:
        return self.enqueue(EventInsertionType.PREPEND, None, no_deadline, event)

    def append_with_deadline(self, deadline_ms: int, event: E) -> KafkaError | None:
        return self.enqueue(EventInsertionType.APPEND, None, deadline(deadline_ms), event)

    def schedule_deferred(self, tag: str | None, deadline_fn: DeadlineFunction, event: E) -> KafkaError | None:
        return self.enqueue(EventInsertionType.DEFERRED, tag, deadline_fn, event)

    def cancel_deferred(self, tag: str) -> E | None:
        """Drop the event scheduled under ``tag`` (it never runs); it is returned, or None."""
        ctx = self._tags.get(tag)
        if ctx is None:
            return None
        self._remove(ctx)
        return ctx.event

    def begin_shutdown(self) -> None:
        self.shutting_down = True

    # -- what runs next -------------------------------------------------------------------------

    def poll(self, now_ms: int) -> tuple[E, KafkaError | None] | None:
        """The next event to run and the exception to deliver to it instead (None: run it), or
        None when nothing is due. The event is out of the queue when it is returned."""
        first = self._first_deadline()
        if first is not None:
            when, ctx = first
            if when <= now_ms:
                self._remove(ctx)
                if ctx.insertion_type is EventInsertionType.DEFERRED:
                    return ctx.event, None
                return ctx.event, EventTimeoutError()
            if self.shutting_down:
                self._remove(ctx)
                return ctx.event, RejectedExecutionError()
        if self._queue:
            ctx = next(iter(self._queue.values()))
            self._remove(ctx)
            return ctx.event, None
        return None

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline (a deferred event to run or a queued one to time out), or None:
        when nothing is ready, :meth:`poll` has something again at that time or on an enqueue."""
        return self._first_deadline_ms()

    @property
    def closed(self) -> bool:
        """Shutting down and nothing left: the driver may stop."""
        return self.shutting_down and self.size == 0

    def first_deferred_if_idling(self) -> E | None:
        """Kafka's ``firstDeferredIfIdling``: the deferred event the queue waits for when it has
        nothing else to run (tests advance a fake clock to it)."""
        if self._queue:
            return None
        first = self._first_deadline()
        if first is None or first[1].insertion_type is not EventInsertionType.DEFERRED:
            return None
        return first[1].event

    # -- internals ------------------------------------------------------------------------------

    def _first_deadline(self) -> tuple[int, _EventContext[E]] | None:
        while self._deadlines:
            when, _seq, ctx = self._deadlines[0]
            if ctx.live and ctx.deadline_ms == when:
                return when, ctx
            heapq.heappop(self._deadlines)
        return None

    def _first_deadline_ms(self) -> int | None:
        first = self._first_deadline()
        return None if first is None else first[0]

    def _remove(self, ctx: _EventContext[E]) -> None:
        if not ctx.live:
            return
        ctx.live = False
        if ctx.queued:
            del self._queue[ctx.seq]
            ctx.queued = False
        if ctx.tag is not None and self._tags.get(ctx.tag) is ctx:
            del self._tags[ctx.tag]
        self.size -= 1


# -- the asyncio driver ---------------------------------------------------------------------------


class FunctionEvent(Generic[T]):
    """An event that runs ``fn`` (sync, or returning an awaitable) and completes a future with its
    result or exception; the future is what callers await."""

    def __init__(self, name: str, fn: Callable[[], T | Awaitable[T]], future: asyncio.Future[T]) -> None:
        self.name = name
        self.fn = fn
        self.future = future

    def run(self) -> Awaitable[None] | None:
        if self.future.done():  # cancelled by the caller: skip
            return None
        try:
            result = self.fn()
        except Exception as e:  # delivered to the caller, the queue goes on
            self.handle_exception(e)
            return None
        if inspect.isawaitable(result):
            return self._complete_later(result)
        self.future.set_result(result)  # type: ignore[arg-type]
        return None

    async def _complete_later(self, awaitable: Awaitable[T]) -> None:
        try:
            value = await awaitable
        except Exception as e:
            self.handle_exception(e)
            return
        if not self.future.done():
            self.future.set_result(value)

    def handle_exception(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)

    def __repr__(self) -> str:
        return f"FunctionEvent({self.name})"


class KafkaEventQueue:
    """One asyncio task running the events of an :class:`EventQueueCore` in order.

    ``clock_ms`` is monotonic milliseconds (injected for tests). Events run on the event loop; an
    event whose ``run`` returns an awaitable holds the queue until it completes.
    """

    def __init__(self, clock_ms: Callable[[], int], name: str = "controller") -> None:
        self.core: EventQueueCore[Any] = EventQueueCore()
        self.clock_ms = clock_ms
        self.name = name
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    # -- enqueueing (each delivers a refusal to the event at once) ------------------------------

    def enqueue(self, insertion_type: EventInsertionType, tag: str | None, deadline_fn: DeadlineFunction, event: Event) -> None:
        error = self.core.enqueue(insertion_type, tag, deadline_fn, event)
        if error is not None:
            _deliver(event, error)
            return
        self._start()
        self.wakeup()

    def append(self, event: Event) -> None:
        self.enqueue(EventInsertionType.APPEND, None, no_deadline, event)

    def prepend(self, event: Event) -> None:
        self.enqueue(EventInsertionType.PREPEND, None, no_deadline, event)

    def append_with_deadline(self, deadline_ms: int, event: Event) -> None:
        self.enqueue(EventInsertionType.APPEND, None, deadline(deadline_ms), event)

    def schedule_deferred(self, tag: str | None, deadline_fn: DeadlineFunction, event: Event) -> None:
        self.enqueue(EventInsertionType.DEFERRED, tag, deadline_fn, event)

    def cancel_deferred(self, tag: str) -> None:
        self.core.cancel_deferred(tag)
        self.wakeup()

    def submit(
        self,
        name: str,
        fn: Callable[[], T],
        deadline_ms: int | None = None,
        *,
        prepend: bool = False,
    ) -> asyncio.Future[T]:
        """Queue ``fn`` as an event; the future completes with its result (or exception)."""
        return self._submit(name, fn, deadline_ms, prepend)

    def submit_async(
        self,
        name: str,
        fn: Callable[[], Awaitable[T]],
        deadline_ms: int | None = None,
        *,
        prepend: bool = False,
    ) -> asyncio.Future[T]:
        """As :meth:`submit` for ``fn`` returning an awaitable, which holds the queue until done."""
        return self._submit(name, fn, deadline_ms, prepend)

    def _submit(
        self, name: str, fn: Callable[[], Any], deadline_ms: int | None, prepend: bool
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        event: FunctionEvent[Any] = FunctionEvent(name, fn, future)
        if prepend:
            self.prepend(event)
        elif deadline_ms is None:
            self.append(event)
        else:
            self.append_with_deadline(deadline_ms, event)
        return future

    # -- running --------------------------------------------------------------------------------

    def wakeup(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _start(self) -> None:
        if self._task is None:
            self._wakeup = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"{self.name}-event-handler")

    async def _run(self) -> None:
        assert self._wakeup is not None
        while not self.core.closed:
            item = self.core.poll(self.clock_ms())
            if item is not None:
                event, error = item
                if error is not None:
                    _deliver(event, error)
                    continue
                try:
                    pending = event.run()
                    if pending is not None:
                        await pending
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.debug("Event %r failed", event, exc_info=True)
                    _deliver(event, e)
                continue
            self._wakeup.clear()
            when = self.core.next_deadline_ms()
            timeout = None if when is None else max(0, when - self.clock_ms()) / 1000.0
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except TimeoutError:
                pass

    def begin_shutdown(self, source: str) -> None:
        if self.core.shutting_down:
            return
        log.info("%s: shutting down the %s event queue", source, self.name)
        self.core.begin_shutdown()
        self.wakeup()

    async def close(self) -> None:
        """Begin the shutdown and wait for the queue to drain."""
        self.begin_shutdown(f"{self.name} event queue close")
        if self._task is not None:
            await self._task
            self._task = None
        log.info("Closed the %s event queue", self.name)

    def size(self) -> int:
        return self.core.size


def _deliver(event: Event, error: BaseException) -> None:
    try:
        event.handle_exception(error)
    except Exception:
        log.exception("Unexpected exception in handle_exception of %r", event)
