"""Test doubles for the replica manager's injected seams: a fake purgatory timer (time moves
only when a test says so) and a log worker that runs its jobs when a test says so."""

from __future__ import annotations

from collections.abc import Callable


class FakeTimerTask:
    def __init__(self, deadline_ms: int, task: Callable[[], None]) -> None:
        self.deadline_ms = deadline_ms
        self.task = task
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTimer:
    """A purgatory Timer on a clock that only :meth:`advance` moves (Kafka's MockTimer)."""

    def __init__(self) -> None:
        self.now_ms = 0
        self.tasks: list[FakeTimerTask] = []

    def add(self, delay_ms: int, task: Callable[[], None]) -> FakeTimerTask:
        t = FakeTimerTask(self.now_ms + delay_ms, task)
        self.tasks.append(t)
        return t

    def pending(self) -> int:
        return sum(1 for t in self.tasks if not t.cancelled)

    def advance(self, ms: int) -> int:
        """Move the clock and run the tasks now due, in deadline order; returns how many ran."""
        self.now_ms += ms
        due = sorted((t for t in self.tasks if not t.cancelled and t.deadline_ms <= self.now_ms),
                     key=lambda t: t.deadline_ms)
        for t in due:
            self.tasks.remove(t)
            t.task()
        self.tasks = [t for t in self.tasks if not t.cancelled]
        return len(due)


class ManualLogWorker:
    """A LogWorker whose jobs run, in order, only when :meth:`run_all` is called."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[[], object], Callable[[BaseException | None], None]]] = []

    def submit(self, job: Callable[[], object], done: Callable[[BaseException | None], None]) -> None:
        self.jobs.append((job, done))

    def run_all(self) -> int:
        n = 0
        while self.jobs:
            job, done = self.jobs.pop(0)
            error: BaseException | None = None
            try:
                job()
            except Exception as e:
                error = e
            done(error)
            n += 1
        return n

    def shutdown(self) -> None:
        self.run_all()
