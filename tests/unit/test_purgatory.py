"""DelayedOperationPurgatory with an injected fake timer (no event loop, no clock), and the
delayed produce / fetch operations it holds."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from purgatory_support import FakeTimer

from odradek.cluster.partition import LogReadResult, Partition, PartitionState
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.protocol.errors import Errors
from odradek.records.builder import build_batch
from odradek.server.delayed_fetch import DelayedFetch, FetchPartitionRequest, FetchPartitionResult
from odradek.server.delayed_produce import DelayedProduce, ProducePartitionStatus
from odradek.server.purgatory import DelayedOperation, DelayedOperationPurgatory


class Flag(DelayedOperation):
    """Completes once ``ready`` is set; the result says how it ended."""

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.ready = False
        self.expired = False
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        return self.force_complete() if self.ready else False

    def on_expiration(self) -> None:
        self.expired = True

    def on_complete(self) -> str:
        return "expired" if self.expired else "done"


def test_completes_at_once_without_watching_or_timing() -> None:
    timer = FakeTimer()
    purgatory = DelayedOperationPurgatory("p", timer)
    op = Flag(100)
    op.ready = True
    assert purgatory.try_complete_else_watch(op, ["a"]) is True
    assert (op.completed, op.result, purgatory.watched(), timer.pending()) == (True, "done", 0, 0)


def test_check_and_complete_on_a_watched_key_cancels_the_timer() -> None:
    timer = FakeTimer()
    purgatory = DelayedOperationPurgatory("p", timer)
    op = Flag(100)
    got: list[Any] = []
    op.add_done_callback(lambda o: got.append(o.result))
    assert purgatory.try_complete_else_watch(op, ["a", "b"]) is False
    assert (purgatory.watched(), timer.pending()) == (1, 1)
    assert purgatory.check_and_complete("a") == 0  # condition not met yet
    assert purgatory.check_and_complete("other") == 0
    op.ready = True
    assert purgatory.check_and_complete("b") == 1
    assert got == ["done"]
    assert (purgatory.watched(), timer.pending()) == (0, 0)  # timer cancelled
    assert purgatory.check_and_complete("a") == 0  # completed ops are not tried again
    assert timer.advance(1000) == 0
    assert got == ["done"]


def test_expires_when_the_timer_fires() -> None:
    timer = FakeTimer()
    purgatory = DelayedOperationPurgatory("p", timer)
    op = Flag(100)
    got: list[Any] = []
    op.add_done_callback(lambda o: got.append(o.result))
    purgatory.try_complete_else_watch(op, ["a"])
    assert timer.advance(99) == 0 and not op.completed
    assert timer.advance(1) == 1
    assert (op.completed, op.expired, got) == (True, True, ["expired"])
    op.ready = True
    assert purgatory.check_and_complete("a") == 0  # nothing left to complete
    assert purgatory.watched() == 0


def test_watch_keys_only_wake_their_operations_and_purge_drops_completed() -> None:
    timer = FakeTimer()
    purgatory = DelayedOperationPurgatory("p", timer, purge_interval=2)
    a, b = Flag(100), Flag(100)
    purgatory.try_complete_else_watch(a, ["x", "shared"])
    purgatory.try_complete_else_watch(b, ["y", "shared"])  # second watch: purge runs
    a.ready = b.ready = True
    assert purgatory.check_and_complete("x") == 1
    assert not b.completed  # "x" is not one of b's keys
    assert purgatory.watched() == 1
    assert purgatory.check_and_complete("shared") == 1
    assert b.completed and purgatory.watched() == 0
    purgatory.purge_completed()
    assert purgatory._watchers == {}


def test_failure_is_delivered_and_shutdown_completes_what_waits() -> None:
    class Boom(Flag):
        def on_complete(self) -> str:
            raise ValueError("broken")

    timer = FakeTimer()
    purgatory = DelayedOperationPurgatory("p", timer)
    bad, waiting = Boom(100), Flag(100)
    purgatory.try_complete_else_watch(bad, ["a"])
    purgatory.try_complete_else_watch(waiting, ["b"])
    bad.ready = True
    purgatory.check_and_complete("a")
    assert isinstance(bad.error, ValueError) and bad.result is None
    purgatory.shutdown()
    assert waiting.completed and waiting.result == "done" and not waiting.expired
    assert timer.pending() == 0


def test_operation_never_completes_twice() -> None:
    op = Flag(0)
    calls: list[str] = []
    op.add_done_callback(lambda o: calls.append("first"))
    assert op.force_complete() is True
    assert op.force_complete() is False
    op.expire()
    op.add_done_callback(lambda o: calls.append("late"))  # called at once
    assert calls == ["first", "late"]


# -- DelayedProduce / DelayedFetch ------------------------------------------------------------

TOPIC_ID = uuid.UUID(int=7)


def leader(tmp_path: Path, isr: tuple[int, ...] = (1,), replicas: tuple[int, ...] = (1,)) -> Partition:
    lg = Log.load(str(tmp_path / "t-0"), LogConfig(), now_ms=0, clean_shutdown=False)
    p = Partition("t", 0, TOPIC_ID, 1)
    state = PartitionState("t", 0, TOPIC_ID, leader=1, leader_epoch=0, isr=isr, replicas=replicas, partition_epoch=0)
    assert p.make_leader(state, lg)
    return p


def append(p: Partition, n: int = 1) -> int:
    info = p.append_records_to_leader(bytearray(build_batch([(b"k", b"v", [], 1)] * n)), -1, 0)
    return info.last_offset + 1


def test_delayed_produce_waits_for_the_followers_then_completes(tmp_path: Path) -> None:
    p = leader(tmp_path, isr=(1, 2), replicas=(1, 2))
    required = append(p, 3)
    assert p.log is not None and p.log.high_watermark == 0  # follower 2 has not fetched yet
    timer = FakeTimer()
    purgatory = DelayedOperationPurgatory("Produce", timer)
    statuses = {("t", 0): ProducePartitionStatus(required_offset=required)}
    partitions = {("t", 0): p}
    op = DelayedProduce(1000, statuses, partitions.get)
    assert purgatory.try_complete_else_watch(op, [("t", 0)]) is False
    assert p.update_follower_fetch_state(2, required, 0, 0)  # the follower reached the end
    assert purgatory.check_and_complete(("t", 0)) == 1
    assert op.result[("t", 0)].error == Errors.NONE


def test_delayed_produce_times_out_or_loses_the_leader(tmp_path: Path) -> None:
    p = leader(tmp_path, isr=(1, 2), replicas=(1, 2))
    timer = FakeTimer()
    purgatory = DelayedOperationPurgatory("Produce", timer)
    partitions = {("t", 0): p}
    slow = DelayedProduce(500, {("t", 0): ProducePartitionStatus(required_offset=append(p))}, partitions.get)
    purgatory.try_complete_else_watch(slow, [("t", 0)])
    timer.advance(500)
    assert slow.result[("t", 0)].error == Errors.REQUEST_TIMED_OUT

    gone = DelayedProduce(500, {("t", 0): ProducePartitionStatus(required_offset=append(p))}, partitions.get)
    purgatory.try_complete_else_watch(gone, [("t", 0)])
    del partitions[("t", 0)]  # the replica was stopped
    purgatory.check_and_complete(("t", 0))
    assert gone.result[("t", 0)].error == Errors.NOT_LEADER_OR_FOLLOWER


def test_delayed_fetch_completes_on_min_bytes_error_or_timeout() -> None:
    req = FetchPartitionRequest("t", 0, 0, 1 << 20)
    available = [0]
    error = [Errors.NONE]

    def read() -> tuple[int, list[FetchPartitionResult]]:
        data = b"x" * available[0]
        return available[0], [FetchPartitionResult(req, LogReadResult(error[0], data, 0, 0, 0, 0))]

    timer = FakeTimer()
    purgatory = DelayedOperationPurgatory("Fetch", timer)
    op = DelayedFetch(500, 10, read, read()[1])
    assert purgatory.try_complete_else_watch(op, [("t", 0)]) is False
    available[0] = 9
    assert purgatory.check_and_complete(("t", 0)) == 0
    available[0] = 10
    assert purgatory.check_and_complete(("t", 0)) == 1
    assert op.result[0].result.records == b"x" * 10

    failing = DelayedFetch(500, 10, read, read()[1])
    available[0] = 0
    purgatory.try_complete_else_watch(failing, [("t", 0)])
    error[0] = Errors.NOT_LEADER_OR_FOLLOWER
    assert purgatory.check_and_complete(("t", 0)) == 1
    assert failing.result[0].result.error == Errors.NOT_LEADER_OR_FOLLOWER

    error[0] = Errors.NONE
    late = DelayedFetch(500, 10, read, read()[1])
    purgatory.try_complete_else_watch(late, [("t", 0)])
    available[0] = 3
    timer.advance(500)
    assert late.completed and late.result[0].result.records == b"xxx"  # read again at expiry


@pytest.mark.parametrize("delay", [-5, 0])
def test_negative_or_zero_delay_times_out_at_the_next_tick(delay: int) -> None:
    timer = FakeTimer()
    purgatory = DelayedOperationPurgatory("p", timer)
    op = Flag(delay)
    purgatory.try_complete_else_watch(op, ["a"])
    assert op.delay_ms == 0
    timer.advance(0)
    assert op.expired


def test_shutdown_never_acknowledges_a_produce_the_isr_does_not_hold(tmp_path: Path) -> None:
    """A broker stopping with acks=-1 produces waiting: the one whose records the HW covers is
    answered NONE, the one still waiting for a follower NOT_LEADER_OR_FOLLOWER (retried by the
    producer on the next leader); before, both were answered NONE."""
    p = leader(tmp_path, isr=(1, 2), replicas=(1, 2))
    timer = FakeTimer()
    purgatory = DelayedOperationPurgatory("Produce", timer)
    partitions = {("t", 0): p}
    covered_at = append(p, 2)
    covered = DelayedProduce(5000, {("t", 0): ProducePartitionStatus(required_offset=covered_at)}, partitions.get)
    purgatory.try_complete_else_watch(covered, [("t", 0)])
    waiting = DelayedProduce(5000, {("t", 0): ProducePartitionStatus(required_offset=append(p, 2))}, partitions.get)
    purgatory.try_complete_else_watch(waiting, [("t", 0)])
    # The follower fetched the first records only; nothing checks the purgatory before shutdown.
    p.update_follower_fetch_state(2, covered_at, 0, 0)
    purgatory.shutdown()
    assert covered.result[("t", 0)].error == Errors.NONE
    assert waiting.result[("t", 0)].error == Errors.NOT_LEADER_OR_FOLLOWER
