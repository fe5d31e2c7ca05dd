"""KIP-890 part 1: a partition leader verifies with the transaction coordinator that a
transactional producer added the partition to its transaction before its first append there
(Kafka's AddPartitionsToTxnManager and ReplicaManager's transaction verification).

:class:`AddPartitionsToTxnManager` sends AddPartitionsToTxn v4 requests with ``verify_only``
to the coordinator of each transactional id (the leader of its ``__transaction_state``
partition), one request in flight per coordinator, the verifications that arrive meanwhile
batched into the next one. :class:`TransactionVerifier` is the partition-side state: which
producers already have a verified transaction open on a partition led here (no verification
again until its marker), and a guard per verification in flight that a marker written meanwhile
voids (the append is then refused: the transaction it was verified for has ended).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from odradek.coordinator.transaction.transaction_state_manager import partition_for
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.server.replica_fetcher_manager import SourceBroker, source_broker

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
TRANSACTION_STATE_TOPIC = "__transaction_state"
VERIFY_VERSION = 4  # the first AddPartitionsToTxn version with the broker's verify_only form
ADD_VERSION = 5  # what a request carrying a KIP-890 part 2 add (verify_only false) is sent as

# Coordinator answers a client would not retry correctly: answered NOT_ENOUGH_REPLICAS, which
# every producer retries without refreshing its metadata (Kafka's postVerificationCallback).
_RETRIABLE = frozenset(
    {
        Errors.CONCURRENT_TRANSACTIONS,
        Errors.NETWORK_EXCEPTION,
        Errors.COORDINATOR_LOAD_IN_PROGRESS,
        Errors.COORDINATOR_NOT_AVAILABLE,
        Errors.NOT_COORDINATOR,
    }
)

ClientFactory = Callable[[SourceBroker], NetworkClient]


def _default_client(source: SourceBroker) -> NetworkClient:
    return NetworkClient(source.host, source.port, "odradek-add-partitions-to-txn", sasl_role="broker")


def produce_error(error: Errors) -> tuple[Errors, str | None]:
    """The produce error (and message) for a failed verification (Kafka's translation)."""
    if error == Errors.INVALID_TXN_STATE:
        return error, "Partition was not added to the transaction"
    if error in _RETRIABLE:
        return (
            Errors.NOT_ENOUGH_REPLICAS,
            f"Unable to verify the partition has been added to the transaction. Underlying error: {error.name}",
        )
    return error, None


@dataclass
class _Pending:
    """The verifications of one transactional id waiting for the next request."""

    producer_id: int
    producer_epoch: int
    partitions: set[TopicPartition]
    futures: list[asyncio.Future[dict[TopicPartition, Errors]]] = field(default_factory=list)
    # KIP-890 part 2: add the partitions (a transactions-version-2 producer's first produce).
    add: bool = False


class AddPartitionsToTxnManager:
    def __init__(
        self,
        metadata_cache: KRaftMetadataCache,
        listener: str,
        request_timeout_ms: int,
        default_partition_count: int,
        client_factory: ClientFactory = _default_client,
    ) -> None:
        self.metadata_cache = metadata_cache
        self.listener = listener
        self.request_timeout_ms = request_timeout_ms
        self.default_partition_count = default_partition_count
        self.client_factory = client_factory
        self._pending: dict[int, dict[str, _Pending]] = {}  # coordinator node -> txn id -> ...
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._in_flight: dict[int, dict[str, _Pending]] = {}  # the batch sent to each node
        self._clients: dict[SourceBroker, NetworkClient] = {}
        self._closed = False

    def coordinator_for(self, transactional_id: str) -> SourceBroker | None:
        """The leader of the ``__transaction_state`` partition of ``transactional_id``."""
        parts = self.metadata_cache.get_topic_partitions(TRANSACTION_STATE_TOPIC)
        count = len(parts) if parts else self.default_partition_count
        reg = parts.get(partition_for(transactional_id, count)) if parts else None
        if reg is None or reg.leader < 0:
            return None
        if reg.leader not in self.metadata_cache.get_alive_broker_ids():
            return None
        return source_broker(self.metadata_cache.image, reg.leader, self.listener)

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        add: bool = False,
    ) -> dict[TopicPartition, Errors]:
        """The partitions the coordinator did not confirm, with the reason (already mapped as
        Kafka's manager does: PRODUCER_FENCED → INVALID_PRODUCER_EPOCH ...); {} when all are in
        the transaction. ``add``: have the coordinator add them (verify_only false, KIP-890
        part 2) rather than only check them."""
        node = self.coordinator_for(transactional_id)
        if node is None or self._closed:
            return dict.fromkeys(partitions, Errors.COORDINATOR_NOT_AVAILABLE)
        fut: asyncio.Future[dict[TopicPartition, Errors]] = asyncio.get_running_loop().create_future()
        by_txn = self._pending.setdefault(node.broker_id, {})
        existing = by_txn.get(transactional_id)
        if (
            existing is not None and existing.producer_epoch == producer_epoch
            and existing.producer_id == producer_id and existing.add == add
        ):
            # The same producer verifying more partitions: one verification covers both.
            existing.partitions.update(partitions)
            existing.futures.append(fut)
        else:
            if existing is not None:
                if existing.producer_epoch > producer_epoch:
                    # Kafka: the lower epoch is fenced and not sent.
                    return dict.fromkeys(partitions, Errors.INVALID_PRODUCER_EPOCH)
                if existing.producer_epoch == producer_epoch and existing.producer_id == producer_id:
                    # The same producer once adding, once verifying (the produce versions
                    # differ): answered retriable, the next attempt goes alone.
                    return dict.fromkeys(partitions, Errors.CONCURRENT_TRANSACTIONS)
                # A newer epoch (or another producer id) fences the one waiting.
                self._answer(existing, Errors.INVALID_PRODUCER_EPOCH)
            by_txn[transactional_id] = _Pending(producer_id, producer_epoch, set(partitions), [fut], add)
        if node.broker_id not in self._senders:
            task = asyncio.get_running_loop().create_task(self._send_loop(node))
            self._senders[node.broker_id] = task
        return await fut

    @staticmethod
    def _answer(pending: _Pending, error: Errors | None, errors: dict[TopicPartition, Errors] | None = None) -> None:
        result = dict.fromkeys(pending.partitions, error) if error is not None else (errors or {})
        for f in pending.futures:
            if not f.done():
                f.set_result({tp: e for tp, e in result.items() if e is not None})

    async def _send_loop(self, node: SourceBroker) -> None:
        try:
            while not self._closed and self._pending.get(node.broker_id):
                batch = self._in_flight[node.broker_id] = self._pending.pop(node.broker_id)
                await self._send(node, batch)
        finally:
            self._senders.pop(node.broker_id, None)
            self._in_flight.pop(node.broker_id, None)

    async def _send(self, node: SourceBroker, batch: dict[str, _Pending]) -> None:
        transactions = []
        for txn_id, p in batch.items():
            topics: dict[str, list[int]] = {}
            for t, i in sorted(p.partitions):
                topics.setdefault(t, []).append(i)
            transactions.append(
                {
                    "transactional_id": txn_id,
                    "producer_id": p.producer_id,
                    "producer_epoch": p.producer_epoch,
                    "verify_only": not p.add,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                }
            )
        client = self._clients.get(node)
        if client is None:
            client = self._clients[node] = self.client_factory(node)
        try:
            resp = await asyncio.wait_for(
                client.send(
                    g.ADD_PARTITIONS_TO_TXN,
                    ADD_VERSION if any(p.add for p in batch.values()) else VERIFY_VERSION,
                    {"transactions": transactions},
                ),
                self.request_timeout_ms / 1000,
            )
        except (TimeoutError, ConnectionClosed, OSError) as e:
            log.warning("AddPartitionsToTxn verification to broker %d failed: %s", node.broker_id, e)
            for p in batch.values():
                self._answer(p, Errors.NETWORK_EXCEPTION)
            return
        top = Errors(resp.get("error_code", 0))
        if top != Errors.NONE:
            log.error("AddPartitionsToTxn verification to broker %d returned %s", node.broker_id, top.name)
            if top == Errors.UNSUPPORTED_VERSION:
                # Kafka: a coordinator that cannot verify; the produce goes ahead unverified.
                for p in batch.values():
                    self._answer(p, None, {})
                return
            final = Errors.INVALID_TXN_STATE if top == Errors.CLUSTER_AUTHORIZATION_FAILED else top
            for p in batch.values():
                self._answer(p, final)
            return
        answered: set[str] = set()
        for result in resp.get("results_by_transaction") or []:
            txn_id = result["transactional_id"]
            pending = batch.get(txn_id)
            if pending is None:
                continue
            answered.add(txn_id)
            unverified: dict[TopicPartition, Errors] = {}
            mentioned: set[TopicPartition] = set()
            for tr in result["topic_results"]:
                for pr in tr["results_by_partition"]:
                    tp = (tr["name"], pr["partition_index"])
                    mentioned.add(tp)
                    err = Errors(pr["partition_error_code"])
                    if err == Errors.NONE:
                        continue
                    if err == Errors.PRODUCER_FENCED:
                        err = Errors.INVALID_PRODUCER_EPOCH  # what producers expect here
                    elif err == Errors.TRANSACTION_ABORTABLE:
                        err = Errors.INVALID_TXN_STATE
                    unverified[tp] = err
            for tp in pending.partitions - mentioned:  # not confirmed: not verified
                unverified[tp] = Errors.INVALID_TXN_STATE
            self._answer(pending, None, unverified)
        for txn_id, pending in batch.items():
            if txn_id not in answered:
                self._answer(pending, Errors.INVALID_TXN_STATE)

    async def close(self) -> None:
        self._closed = True
        for by_txn in [*self._pending.values(), *self._in_flight.values()]:
            for p in by_txn.values():
                self._answer(p, Errors.COORDINATOR_NOT_AVAILABLE)
        self._pending.clear()
        for task in list(self._senders.values()):
            task.cancel()
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


class TransactionVerifier:
    """Which transactional producers need verifying before they append to a partition led
    here. A producer verified for a partition stays verified (at that epoch) until a marker for
    it is written there or the partition's leadership changes. At most ``limit`` entries are
    remembered (forgetting one only costs another verification)."""

    def __init__(self, manager: AddPartitionsToTxnManager | None, enabled: Callable[[], bool], limit: int = 100_000) -> None:
        self.manager = manager
        self.enabled = enabled
        self.limit = limit
        self._ongoing: dict[TopicPartition, dict[int, int]] = {}  # tp -> producer id -> epoch
        self._size = 0
        # The verifications in flight per (partition, producer id); a marker drops them all.
        self._guards: dict[tuple[TopicPartition, int], set[object]] = {}

    def needs_verification(self, tp: TopicPartition, producer_id: int, producer_epoch: int) -> bool:
        return self._ongoing.get(tp, {}).get(producer_id) != producer_epoch

    def _remember(self, tp: TopicPartition, producer_id: int, producer_epoch: int) -> None:
        if self._size >= self.limit and self._ongoing:
            dropped = self._ongoing.pop(next(iter(self._ongoing)))
            self._size -= len(dropped)
        by_pid = self._ongoing.setdefault(tp, {})
        if producer_id not in by_pid:
            self._size += 1
        by_pid[producer_id] = producer_epoch

    def on_marker(self, tp: TopicPartition, producer_id: int) -> None:
        """A transaction marker for ``producer_id`` is being written to ``tp``: its transaction
        there ends, and a verification in flight is void."""
        by_pid = self._ongoing.get(tp)
        if by_pid is not None and by_pid.pop(producer_id, None) is not None:
            self._size -= 1
            if not by_pid:
                del self._ongoing[tp]
        self._guards.pop((tp, producer_id), None)

    def on_leadership_change(self, topic: str, partition: int, _is_leader: bool, _epoch: int) -> None:
        dropped = self._ongoing.pop((topic, partition), None)
        if dropped:
            self._size -= len(dropped)

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        add: bool = False,
        transaction_abortable: bool = False,
    ) -> dict[TopicPartition, tuple[Errors, str | None]]:
        """Verify ``partitions`` (those that need it) for this producer, or with ``add`` (a
        transactions-version-2 producer) have the coordinator add them, which
        ``transaction.partition.verification.enable`` does not turn off (Kafka's addPartition
        operation); the produce errors of those that failed. ``transaction_abortable``: the
        request knows TRANSACTION_ABORTABLE (Produce v11+, Kafka's ``genericError``), which a
        partition not in the transaction then gets instead of INVALID_TXN_STATE."""
        todo = [tp for tp in partitions if self.needs_verification(tp, producer_id, producer_epoch)]
        if not todo or self.manager is None or not (add or self.enabled()):
            return {}
        token = object()
        for tp in todo:
            self._guards.setdefault((tp, producer_id), set()).add(token)
        try:
            failed = await self.manager.verify(transactional_id, producer_id, producer_epoch, todo, add)
        finally:
            void: set[TopicPartition] = set()
            for tp in todo:
                tokens = self._guards.get((tp, producer_id))
                if tokens is None or token not in tokens:
                    void.add(tp)
                    continue
                tokens.discard(token)
                if not tokens:
                    del self._guards[(tp, producer_id)]
        out: dict[TopicPartition, tuple[Errors, str | None]] = {}
        for tp in todo:
            if tp in failed:
                if transaction_abortable and failed[tp] == Errors.INVALID_TXN_STATE:
                    out[tp] = (Errors.TRANSACTION_ABORTABLE, None)
                else:
                    out[tp] = produce_error(failed[tp])
                log.info(
                    "Transactional produce of %r (producer id %d, epoch %d) to %s-%d refused: %s",
                    transactional_id, producer_id, producer_epoch, tp[0], tp[1], failed[tp].name,
                )
            elif tp in void:
                # A marker ended the transaction while it was being verified (Kafka's
                # verification guard no longer matches).
                out[tp] = (Errors.INVALID_TXN_STATE, "The transaction ended while the partition was being verified")
            else:
                self._remember(tp, producer_id, producer_epoch)
        return out
