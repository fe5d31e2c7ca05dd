"""LeaderOffsets: the leaders' high watermarks of committed partitions without a replica here,
asked with ListOffsets (latest) per leader, and a cache bounded by the committed partitions."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from odradek.metrics.leader_offsets import LeaderOffsets
from odradek.network.client import ConnectionClosed
from odradek.protocol import messages as m
from odradek.server.replica_fetcher_manager import SourceBroker

TP = tuple[str, int]


class _Cache:
    def __init__(self, leaders: dict[TP, int], alive: set[int]) -> None:
        self.leaders, self.alive = leaders, alive
        ep = SimpleNamespace(host="127.0.0.1", port=9)
        self.image = SimpleNamespace(brokers={b: SimpleNamespace(endpoints={"PLAINTEXT": ep}) for b in (1, 2, 3)})

    def get_alive_broker_ids(self) -> set[int]:
        return self.alive

    def get_topic_partitions(self, topic: str) -> dict[int, Any]:
        return {p: SimpleNamespace(leader=b) for (t, p), b in self.leaders.items() if t == topic}


class _Client:
    def __init__(self, source: SourceBroker, hws: dict[TP, int], sent: list[tuple[int, Any]], down: set[int]) -> None:
        self.source, self.hws, self.sent, self.down = source, hws, sent, down
        self.closed = False

    async def send(self, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert api is m.LIST_OFFSETS
        self.sent.append((self.source.broker_id, body))
        if self.source.broker_id in self.down:
            raise ConnectionClosed("down")
        return {"topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": 0, "timestamp": -1,
                 "offset": self.hws[(t["name"], p["partition_index"])]}
                for p in t["partitions"]
            ]} for t in body["topics"]
        ]}

    async def close(self) -> None:
        self.closed = True


def test_leaders_are_asked_for_the_committed_partitions_not_hosted_here() -> None:
    leaders = {("t", 0): 1, ("t", 1): 2, ("t", 2): 3, ("u", 0): 2}
    hws = {("t", 0): 10, ("t", 1): 20, ("t", 2): 30, ("u", 0): 40}
    committed: set[TP] = {("t", 0), ("t", 1), ("t", 2), ("u", 0)}
    sent: list[tuple[int, Any]] = []
    down: set[int] = set()
    clients: list[_Client] = []

    def factory(source: SourceBroker) -> _Client:
        clients.append(_Client(source, hws, sent, down))
        return clients[-1]

    lo = LeaderOffsets(
        _Cache(leaders, {1, 2, 3}), 1, "PLAINTEXT", 1000, lambda: set(committed),  # type: ignore[arg-type]
        lambda tp: tp == ("t", 0), factory,  # type: ignore[arg-type]
    )

    async def run() -> None:
        await lo.refresh()
        # t-0 is local (and led by this node): not asked; one request per other leader.
        assert lo.high_watermarks == {("t", 1): 20, ("t", 2): 30, ("u", 0): 40}
        assert sorted(b for b, _ in sent) == [2, 3]
        body2 = next(body for b, body in sent if b == 2)
        assert body2["replica_id"] == -1 and body2["isolation_level"] == 0
        assert {p["timestamp"] for t in body2["topics"] for p in t["partitions"]} == {-1}
        # No longer committed, or the leader is down: dropped, not kept stale.
        committed.discard(("u", 0))
        down.add(3)
        await lo.refresh()
        assert lo.high_watermarks == {("t", 1): 20}
        # Nothing left to ask broker 3 about: its connection is closed.
        committed.discard(("t", 2))
        await lo.refresh()
        assert [c.closed for c in clients if c.source.broker_id == 3] == [True]
        await lo.stop()
        assert lo.high_watermarks == {} and all(c.closed for c in clients)

    asyncio.run(run())
