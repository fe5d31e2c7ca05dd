"""The controller's event queue (Kafka's KafkaEventQueue): the sans-I/O core with a fake clock —
order, prepend, deferred events and their deadlines, a tag replacing the earlier event, the
per-event timeout, shutdown — and the asyncio driver running it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest
from fake_clock import FakeClock

from odradek.controller.event_queue import (
    EventQueueCore,
    EventTimeoutError,
    KafkaEventQueue,
    RejectedExecutionError,
    deadline,
    earliest_deadline,
    latest_deadline,
)
from odradek.protocol.errors import Errors, KafkaError


class Recorded:
    def __init__(self, name: str, out: list[str]) -> None:
        self.name = name
        self.out = out
        self.error: BaseException | None = None

    def run(self) -> Awaitable[None] | None:
        self.out.append(self.name)
        return None

    def handle_exception(self, exc: BaseException) -> None:
        self.error = exc
        self.out.append(f"{self.name}!{type(exc).__name__}")

    def __repr__(self) -> str:
        return self.name


def drain(core: EventQueueCore[Recorded], now_ms: int) -> list[str]:
    """Run what the core hands out at ``now_ms`` (as the driver does); the names, in order."""
    out: list[str] = []
    for _ in range(1000):
        item = core.poll(now_ms)
        if item is None:
            break
        event, error = item
        if error is None:
            event.run()
            out.append(event.name)
        else:
            event.handle_exception(error)
            out.append(f"{event.name}!{type(error).__name__}")
    return out


def ev(name: str) -> Recorded:
    return Recorded(name, [])


def test_append_runs_in_order_and_prepend_goes_first() -> None:
    core: EventQueueCore[Recorded] = EventQueueCore()
    for name in ("a", "b", "c"):
        assert core.append(ev(name)) is None
    core.prepend(ev("p1"))
    core.prepend(ev("p2"))
    assert core.size == 5
    assert drain(core, 0) == ["p2", "p1", "a", "b", "c"]
    assert core.size == 0 and core.poll(0) is None


def test_deferred_event_waits_for_its_deadline_then_goes_first() -> None:
    clock = FakeClock(1000)
    core: EventQueueCore[Recorded] = EventQueueCore()
    core.schedule_deferred(None, deadline(1500), ev("later"))
    assert core.poll(clock()) is None
    assert core.next_deadline_ms() == 1500
    assert core.first_deferred_if_idling() is not None
    clock.advance(499)
    assert core.poll(clock()) is None
    core.append(ev("x"))
    assert core.first_deferred_if_idling() is None  # not idling: x can run
    clock.advance(1)
    core.append(ev("y"))
    # Due now: it runs before the events queued meanwhile.
    assert drain(core, clock()) == ["later", "x", "y"]


def test_deferred_without_deadline_is_refused() -> None:
    core: EventQueueCore[Recorded] = EventQueueCore()
    error = core.schedule_deferred("t", lambda _prev: None, ev("x"))
    assert isinstance(error, KafkaError) and core.size == 0


def test_tagged_deferred_event_replaces_the_earlier_one() -> None:
    core: EventQueueCore[Recorded] = EventQueueCore()
    first, second = ev("first"), ev("second")
    core.schedule_deferred("fence", deadline(100), first)
    core.schedule_deferred("fence", deadline(300), second)
    assert core.size == 1
    assert drain(core, 200) == []  # the first one's deadline is gone with it
    assert drain(core, 300) == ["second"]
    assert first.error is None and first.out == []  # replaced: dropped without running
    # Another tag is independent; cancel_deferred drops the tagged event.
    core.schedule_deferred("a", deadline(10), ev("a"))
    core.schedule_deferred("b", deadline(10), ev("b"))
    assert core.cancel_deferred("a") is not None and core.cancel_deferred("a") is None
    assert drain(core, 10) == ["b"]


def test_earliest_and_latest_deadline_functions_see_the_replaced_deadline() -> None:
    core: EventQueueCore[Recorded] = EventQueueCore()
    core.schedule_deferred("t", earliest_deadline(500), ev("one"))
    core.schedule_deferred("t", earliest_deadline(900), ev("two"))  # keeps 500
    assert core.next_deadline_ms() == 500
    assert drain(core, 500) == ["two"]
    core.schedule_deferred("u", latest_deadline(500), ev("three"))
    core.schedule_deferred("u", latest_deadline(200), ev("four"))  # keeps 500
    assert drain(core, 499) == [] and drain(core, 500) == ["four"]


def test_queued_event_past_its_deadline_fails_with_a_timeout() -> None:
    core: EventQueueCore[Recorded] = EventQueueCore()
    slow = ev("slow")
    core.append(ev("first"))
    core.append_with_deadline(100, slow)
    core.append_with_deadline(1000, ev("in-time"))
    item = core.poll(50)
    assert item is not None and item[0].name == "first"
    # The controller was busy until 150: "slow" is still queued past its deadline.
    assert drain(core, 150) == ["slow!EventTimeoutError", "in-time"]
    assert isinstance(slow.error, EventTimeoutError)
    assert slow.error.code == Errors.REQUEST_TIMED_OUT


def test_deadlines_with_equal_times_keep_their_order() -> None:
    core: EventQueueCore[Recorded] = EventQueueCore()
    for name in ("d1", "d2", "d3"):
        core.schedule_deferred(None, deadline(7), ev(name))
    assert drain(core, 7) == ["d1", "d2", "d3"]


def test_begin_shutdown_fails_deadline_events_runs_the_rest_and_refuses_new_ones() -> None:
    core: EventQueueCore[Recorded] = EventQueueCore()
    core.schedule_deferred("fence", deadline(10_000), ev("deferred"))
    core.append_with_deadline(10_000, ev("write"))
    core.append(ev("plain"))
    core.begin_shutdown()
    assert not core.closed
    late = ev("late")
    refused = core.append(late)
    assert isinstance(refused, RejectedExecutionError)
    assert drain(core, 0) == ["deferred!RejectedExecutionError", "write!RejectedExecutionError", "plain"]
    assert core.closed


# -- the asyncio driver ---------------------------------------------------------------------------


def test_driver_runs_events_in_order_and_awaits_each_one() -> None:
    async def go() -> None:
        clock = FakeClock(0)
        q = KafkaEventQueue(clock, "test")
        order: list[str] = []

        async def slow() -> str:
            order.append("slow-start")
            await asyncio.sleep(0.01)
            order.append("slow-end")
            return "slow"

        def quick() -> str:
            order.append("quick")
            return "quick"

        def fail() -> str:
            raise KafkaError(Errors.POLICY_VIOLATION, "no")

        futures = [q.submit_async("slow", slow), q.submit("quick", quick), q.submit("fail", fail)]
        def first_fn() -> str:
            order.append("first")
            return "first"

        first = q.submit("first", first_fn, prepend=True)
        assert await asyncio.wait_for(first, 5) == "first"
        assert await asyncio.wait_for(futures[0], 5) == "slow"
        assert await asyncio.wait_for(futures[1], 5) == "quick"
        with pytest.raises(KafkaError) as e:
            await asyncio.wait_for(futures[2], 5)
        assert e.value.code == Errors.POLICY_VIOLATION
        # The awaitable of "slow" held the queue: "quick" ran after it finished.
        assert order == ["first", "slow-start", "slow-end", "quick"]
        await q.close()

    asyncio.run(go())


def test_driver_times_out_a_write_stuck_behind_a_slow_one_and_runs_deferred_events() -> None:
    async def go() -> None:
        clock = FakeClock(0)
        q = KafkaEventQueue(clock, "test")
        release = asyncio.Event()

        async def blocker() -> None:
            await release.wait()

        blocked = q.submit_async("blocker", blocker)
        stuck = q.submit("stuck", lambda: "never", deadline_ms=100)
        ran: list[int] = []
        q.schedule_deferred("tick", deadline(50), Recorded("tick", []))
        await asyncio.sleep(0)
        clock.advance(200)  # the blocker held the queue past both deadlines
        release.set()
        await asyncio.wait_for(blocked, 5)
        with pytest.raises(EventTimeoutError) as e:
            await asyncio.wait_for(stuck, 5)
        assert e.value.code == Errors.REQUEST_TIMED_OUT
        done = asyncio.get_running_loop().create_future()

        class Tick(Recorded):
            def run(self) -> None:
                ran.append(clock())
                done.set_result(None)

        q.schedule_deferred("tick", deadline(clock() + 10), Tick("tick2", []))
        await asyncio.sleep(0.01)
        assert ran == []  # the fake clock has not reached it
        clock.advance(10)
        q.wakeup()
        await asyncio.wait_for(done, 5)
        assert ran == [210]
        await q.close()
        late = q.submit("late", lambda: 1)
        with pytest.raises(RejectedExecutionError):
            await late

    asyncio.run(go())
