"""ControllerChannelManager (one queue + sender task per broker, retried until answered or removed)
and the controller's asyncio driver (events processed in order on a worker thread)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from odradek.controller import controller_event_manager as ev
from odradek.controller.controller_channel_manager import ControllerChannelManager
from odradek.controller.controller_context import Broker, EndPoint
from odradek.controller.kafka_controller_driver import ControllerEventManager, LoopScheduler
from odradek.protocol.schema import Api


def b(i: int) -> Broker:
    return Broker(i, (EndPoint("127.0.0.1", 9000 + i, "PLAINTEXT"),))


class FlakyConnection:
    """Fails the first ``failures`` sends (across connections of the same broker), then answers."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        state["opened"] += 1

    async def send(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.state["attempts"].append(body["n"])
        if self.state["failures"] > 0:
            self.state["failures"] -= 1
            raise ConnectionError("refused")
        if self.state.get("hang"):
            await asyncio.sleep(3600)
        return {"error_code": 0, "n": body["n"], "api": api.api_key}

    async def close(self) -> None:
        self.state["closed"] += 1


def manager(state: dict[str, Any], loop: asyncio.AbstractEventLoop, **kw: Any) -> ControllerChannelManager:
    return ControllerChannelManager(1, lambda broker: FlakyConnection(state), loop, retry_backoff_ms=1, **kw)


def new_state(failures: int = 0) -> dict[str, Any]:
    return {"failures": failures, "attempts": [], "opened": 0, "closed": 0}


async def wait_for(cond: Any, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met")


def test_requests_retried_until_answered_in_order() -> None:
    async def main() -> None:
        state = new_state(failures=3)
        m = manager(state, asyncio.get_running_loop())
        m.startup([b(2)])
        got: list[dict[str, Any]] = []
        for n in range(3):
            m.send_request(2, 6, 8, {"n": n, "controller_epoch": 4}, got.append)
        await wait_for(lambda: len(got) == 3)
        assert [r["n"] for r in got] == [0, 1, 2]
        assert state["attempts"] == [0, 0, 0, 0, 1, 2]  # the first one retried until it got through
        assert state["opened"] == 4 and state["closed"] == 3  # a new connection after each failure
        m.shutdown()
        await m.wait_stopped()
        assert m.broker_ids == set()

    asyncio.run(main())


def test_unknown_broker_dropped_and_removed_broker_stops_retrying() -> None:
    async def main() -> None:
        state = new_state(failures=10**9)
        m = manager(state, asyncio.get_running_loop())
        got: list[dict[str, Any]] = []
        m.send_request(7, 6, 8, {"n": 0}, got.append)  # never added: dropped
        m.add_broker(b(3))
        m.send_request(3, 4, 7, {"n": 1}, got.append)
        m.send_request(3, 4, 7, {"n": 2}, got.append)
        await wait_for(lambda: len(state["attempts"]) >= 5)
        assert set(state["attempts"]) == {1}
        m.remove_broker(3)
        await m.wait_stopped()
        n = len(state["attempts"])
        await asyncio.sleep(0.05)
        assert len(state["attempts"]) == n and not got
        assert m.queued(3) == 0 and 3 not in m.broker_ids

    asyncio.run(main())


def test_timeout_retries_and_send_from_another_thread() -> None:
    async def main() -> None:
        state = new_state()
        state["hang"] = True
        loop = asyncio.get_running_loop()
        m = manager(state, loop, request_timeout_ms=20)
        m.add_broker(b(1))
        got: list[dict[str, Any]] = []
        t = threading.Thread(target=m.send_request, args=(1, 5, 4, {"n": 9}, got.append))
        t.start()
        t.join()
        await wait_for(lambda: len(state["attempts"]) >= 2)  # timed out, reconnected, sent again
        state["hang"] = False
        await wait_for(lambda: bool(got))
        assert got[0]["n"] == 9 and got[0]["api"] == 5 and state["closed"] >= 1
        m.shutdown()
        await m.wait_stopped()

    asyncio.run(main())


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []
        self.answers: list[Any] = []

    def process(self, event: ev.ControllerEvent) -> None:
        self.seen.append((type(event).__name__, threading.get_ident()))

    def preempt(self, event: ev.ControllerEvent) -> None:
        event.preempt()


def test_driver_processes_in_order_on_a_worker_thread_and_expire_preempts() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        rec = Recorder()
        mgr = ControllerEventManager(1, rec, loop)
        mgr.start()
        mgr.put(ev.Startup())
        threading.Thread(target=mgr.put, args=(ev.BrokerChange(),)).start()
        await wait_for(lambda: len(rec.seen) == 2)
        assert [n for n, _ in rec.seen] == ["Startup", "BrokerChange"]
        assert all(tid != threading.get_ident() for _, tid in rec.seen)
        # a session expiry preempts what is queued (its callback answers) and processes Expire
        answers: list[Any] = []
        mgr.queue.put(ev.ControlledShutdown(broker_id=2, callback=answers.append), 0)  # queued, not woken
        mgr.on_session_expiring()
        await wait_for(lambda: len(rec.seen) == 3)
        assert rec.seen[2][0] == "Expire" and isinstance(answers[0], ev.ControllerMovedError)
        sched = LoopScheduler(loop, mgr.put)
        sched.schedule(0.01, ev.AutoPreferredReplicaLeaderElection())
        sched.schedule(0.5, ev.TopicChange())
        await wait_for(lambda: len(rec.seen) == 4)
        sched.cancel_all()
        await asyncio.sleep(0.6)
        assert [n for n, _ in rec.seen][3:] == ["AutoPreferredReplicaLeaderElection"]
        await mgr.close()

    asyncio.run(main())
