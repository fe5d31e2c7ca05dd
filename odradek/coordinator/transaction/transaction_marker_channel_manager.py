"""TransactionMarkerChannelManager: sends the COMMIT/ABORT markers of a transaction to the
leaders of its partitions (Kafka's ``TransactionMarkerChannelManager``).

One task per transaction being completed: the partitions still owed a marker are grouped by
their current leader (from the metadata cache, over the inter-broker listener) and sent as
WriteTxnMarkers, this node included. Per-partition answers as Kafka handles them:

* NONE: done; UNSUPPORTED_FOR_MESSAGE_FORMAT / UNSUPPORTED_VERSION: dropped (no marker possible).
* NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, a lost connection, a leader not known yet: sent again,
  to the then-current leader, after ``retry_backoff_ms``.
* INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: another coordinator (or epoch) has
  taken over: this one gives the transaction up.
* A partition whose topic no longer exists is dropped, as Kafka does.

When every partition is done, ``on_complete`` is awaited (the coordinator writes CompleteCommit
or CompleteAbort). Unloading a ``__transaction_state`` partition cancels its transactions' tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.coordinator.transaction.transaction_metadata import TopicPartition, TransactionMetadata
from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1

_RETRY = frozenset({
    Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_ENOUGH_REPLICAS,
    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.REQUEST_TIMED_OUT, Errors.KAFKA_STORAGE_ERROR,
    Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NETWORK_EXCEPTION, Errors.UNKNOWN_SERVER_ERROR,
})
_DROP = frozenset({Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT, Errors.UNSUPPORTED_VERSION})
_FENCED = frozenset({Errors.INVALID_PRODUCER_EPOCH, Errors.TRANSACTION_COORDINATOR_FENCED,
                     Errors.PRODUCER_FENCED})


@dataclass
class PendingCompletion:
    """A transaction whose markers are being written."""

    meta: TransactionMetadata
    txn_partition: int  # its __transaction_state partition
    coordinator_epoch: int
    commit: bool
    producer_id: int
    producer_epoch: int
    remaining: set[TopicPartition] = field(default_factory=set)
    transit: Any = None  # the prepared CompleteCommit/CompleteAbort, written once all are done


ClientFactory = Callable[[str, int], NetworkClient]


def _default_client(host: str, port: int) -> NetworkClient:
    return NetworkClient(host, port, "odradek-txn-marker-sender", sasl_role="broker")


class TransactionMarkerChannelManager:
    def __init__(
        self,
        *,
        metadata_cache: Any,
        listener_name: Callable[[], str],
        on_complete: Callable[[PendingCompletion], Awaitable[None]],
        client_factory: ClientFactory = _default_client,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30000,
    ) -> None:
        self.metadata_cache = metadata_cache
        self.listener_name = listener_name
        self.on_complete = on_complete
        self.client_factory = client_factory
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self._clients: dict[int, NetworkClient] = {}
        self._tasks: dict[str, tuple[asyncio.Task[None], PendingCompletion]] = {}
        self._closed = False

    # ------------------------------------------------------------------------ API

    def add_txn_markers_to_send(self, pc: PendingCompletion) -> None:
        tid = pc.meta.transactional_id
        old = self._tasks.pop(tid, None)
        if old is not None:
            old[0].cancel()
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._run(pc), name=f"txn-markers-{tid}")
        self._tasks[tid] = (task, pc)
        task.add_done_callback(lambda t: self._done(tid, t))

    def _done(self, tid: str, task: asyncio.Task[None]) -> None:
        cur = self._tasks.get(tid)
        if cur is not None and cur[0] is task:
            del self._tasks[tid]
        if not task.cancelled() and task.exception() is not None:
            log.error("Sending the markers of transactional id %s failed", tid, exc_info=task.exception())

    def pending(self, transactional_id: str) -> PendingCompletion | None:
        cur = self._tasks.get(transactional_id)
        return cur[1] if cur is not None else None

    def remove_markers_for_txn_partition(self, txn_partition: int) -> None:
        """The coordinator emigrated from ``txn_partition``: stop completing its transactions
        (the new coordinator sends their markers again after loading)."""
        for tid, (task, pc) in list(self._tasks.items()):
            if pc.txn_partition == txn_partition:
                task.cancel()
                del self._tasks[tid]

    async def shutdown(self) -> None:
        self._closed = True
        tasks = [t for t, _ in self._tasks.values()]
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            await c.close()

    # ------------------------------------------------------------------------ sending

    async def _run(self, pc: PendingCompletion) -> None:
        tid = pc.meta.transactional_id
        attempts = 0
        while pc.remaining:
            attempts += 1
            by_broker: dict[int, list[TopicPartition]] = {}
            waiting = False
            for tp in sorted(pc.remaining):
                if not self.metadata_cache.contains_topic(tp[0]):
                    log.info(
                        "Transactional id %s: topic %s was deleted; no %s marker for partition %d",
                        tid, tp[0], "COMMIT" if pc.commit else "ABORT", tp[1],
                    )
                    pc.remaining.discard(tp)
                    continue
                reg = self.metadata_cache.get_partition_info(*tp)
                if reg is None:
                    log.info("Transactional id %s: partition %s-%d no longer exists; no marker",
                             tid, *tp)
                    pc.remaining.discard(tp)
                    continue
                if reg.leader < 0:
                    waiting = True
                    continue
                by_broker.setdefault(reg.leader, []).append(tp)
            if by_broker:
                results = await asyncio.gather(
                    *(self._send(pc, broker, tps) for broker, tps in by_broker.items())
                )
                if any(r is None for r in results):
                    return  # fenced: another coordinator completes this transaction
            if not pc.remaining:
                break
            if attempts == 1 or attempts % 50 == 0 or waiting:
                log.log(
                    logging.INFO if attempts % 50 == 0 else logging.DEBUG,
                    "Transactional id %s: %d partition(s) still owe a %s marker (attempt %d): %s",
                    tid, len(pc.remaining), "COMMIT" if pc.commit else "ABORT", attempts,
                    ", ".join(f"{t}-{p}" for t, p in sorted(pc.remaining)[:10]),
                )
            await asyncio.sleep(self.retry_backoff_ms / 1000.0)
        await self.on_complete(pc)

    def _client(self, broker: int) -> NetworkClient | None:
        node = self.metadata_cache.get_alive_broker_node(broker, self.listener_name())
        if node is None:
            return None
        c = self._clients.get(broker)
        if c is not None and (c.host, c.port) != (node.host, node.port):
            old = c
            asyncio.get_running_loop().create_task(old.close())
            c = None
        if c is None:
            c = self._clients[broker] = self.client_factory(node.host, node.port)
        return c

    async def _send(self, pc: PendingCompletion, broker: int, tps: list[TopicPartition]) -> bool | None:
        """One WriteTxnMarkers to ``broker``; removes the partitions that are done. None when
        the coordinator was fenced."""
        client = self._client(broker)
        if client is None:
            return False
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        body = {
            "markers": [{
                "producer_id": pc.producer_id,
                "producer_epoch": pc.producer_epoch,
                "transaction_result": pc.commit,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
                "coordinator_epoch": pc.coordinator_epoch,
            }]
        }
        tid = pc.meta.transactional_id
        try:
            resp = await asyncio.wait_for(
                client.send(g.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body),
                self.request_timeout_ms / 1000.0,
            )
        except (ConnectionClosed, OSError, TimeoutError) as e:
            log.debug("WriteTxnMarkers to broker %d for transactional id %s failed: %s", broker, tid, e)
            if isinstance(e, TimeoutError):
                self._clients.pop(broker, None)
                asyncio.get_running_loop().create_task(client.close())
            return False
        for marker in resp.get("markers") or []:
            if marker["producer_id"] != pc.producer_id:
                continue
            for t in marker["topics"]:
                for p in t["partitions"]:
                    tp = (t["name"], p["partition_index"])
                    if tp not in pc.remaining:
                        continue
                    try:
                        err = Errors(p["error_code"])
                    except ValueError:
                        err = Errors.UNKNOWN_SERVER_ERROR
                    if err == Errors.NONE or err in _DROP:
                        if err != Errors.NONE:
                            log.warning("Transactional id %s: partition %s-%d cannot take a marker "
                                        "(%s); dropped", tid, *tp, err.name)
                        pc.remaining.discard(tp)
                    elif err in _FENCED:
                        log.info(
                            "Transactional id %s: WriteTxnMarkers for %s-%d answered %s; this "
                            "coordinator (epoch %d) gives the transaction up",
                            tid, *tp, err.name, pc.coordinator_epoch,
                        )
                        return None
                    elif err not in _RETRY:
                        log.warning("Transactional id %s: WriteTxnMarkers for %s-%d answered %s; "
                                    "retrying", tid, *tp, err.name)
        return True
