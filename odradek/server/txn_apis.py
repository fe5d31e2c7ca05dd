"""TxnApis: the transaction coordinator's APIs, served through KafkaApis as an ApiExtension.

InitProducerId (with a transactional id; without one the idempotent path of KafkaApis answers),
AddPartitionsToTxn (v0-v3 from clients, v4+ batches from brokers incl. KIP-890 ``verify_only``),
AddOffsetsToTxn, EndTxn (v5 with ``transaction.version`` 2 finalized: transactions version 2,
see the coordinator; else version 1), DescribeTransactions and
ListTransactions. FindCoordinator with key type TRANSACTION is answered through
:meth:`coordinator_for` (GroupApis serves FindCoordinator and asks here for that key type).
Handlers translate between request/response dicts and
:class:`~odradek.coordinator.transaction.transaction_coordinator.TransactionCoordinator`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from odradek.controller.feature_control_manager import TRANSACTION_VERSION_FEATURE
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from odradek.coordinator.internal_topic import InternalTopic
from odradek.coordinator.transaction.transaction_coordinator import (
    ProducerIdGenerator,
    TransactionConfig,
    TransactionCoordinator,
)
from odradek.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from odradek.coordinator.transaction.transaction_marker_channel_manager import (
    PendingCompletion,
    TransactionMarkerChannelManager,
)
from odradek.coordinator.transaction.transaction_metadata import TopicPartition
from odradek.coordinator.transaction.transaction_state_manager import TransactionStateManager
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.schema import Api
from odradek.security.ssl_factory import inter_node_ssl_context
from odradek.server.api_dispatcher import Handler, RequestContext
from odradek.server.controller_channel import ControllerChannel
from odradek.server.kafka_config import KafkaConfig
from odradek.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# Kafka's Topic.isInternal: topics a client may not add to a transaction.
CLIENT_INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, "__share_group_state"})

def _fenced(error: Errors, version: int, first_version_with_fenced: int) -> Errors:
    """KIP-588: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for requests older than it."""
    if error == Errors.PRODUCER_FENCED and version < first_version_with_fenced:
        return Errors.INVALID_PRODUCER_EPOCH
    return error


class TxnApis:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        topics: InternalTopic,
        *,
        offsets_partition_for: Callable[[str], int],
        topic_exists: Callable[[str, int], bool],
        transaction_version: Callable[[], int] = lambda: 0,
    ) -> None:
        self.coordinator = coordinator
        # The finalized transaction.version (KIP-890 part 2 needs level 2).
        self.transaction_version = transaction_version
        self.topics = topics
        self.offsets_partition_for = offsets_partition_for
        self.topic_exists = topic_exists
        # InitProducerId without a transactional id (set by the broker to KafkaApis' handler).
        self.idempotent_init_producer_id: Handler | None = None

    def handlers(self) -> dict[Api, Handler]:
        return {
            m.INIT_PRODUCER_ID: self.handle_init_producer_id,
            m.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            m.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            m.END_TXN: self.handle_end_txn,
            m.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            m.LIST_TRANSACTIONS: self.handle_list_transactions,
        }

    def coordinator_for(self, transactional_id: str, listener: str) -> tuple[Errors, int, str, int]:
        """FindCoordinator key type TRANSACTION: (error, node id, host, port)."""
        if not transactional_id:
            return Errors.INVALID_REQUEST, -1, "", -1
        return self.topics.coordinator_for(transactional_id, listener)

    # ------------------------------------------------------------------------ InitProducerId

    def handle_init_producer_id(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        tid = req["transactional_id"]
        pid, epoch = req.get("producer_id", -1), req.get("producer_epoch", -1)
        if (pid == -1) != (epoch == -1):
            # As KafkaApis: a producer id without an epoch (or an epoch without an id) is no
            # KIP-360 request; refused before the coordinator (or the idempotent path) is asked.
            log.info("InitProducerId (transactional id %r) from %s with producer id %d and epoch %d: "
                     "INVALID_REQUEST", tid, ctx.conn.peer, pid, epoch)
            return {"throttle_time_ms": 0, "error_code": Errors.INVALID_REQUEST,
                    "producer_id": -1, "producer_epoch": -1}
        if tid is None:
            if self.idempotent_init_producer_id is None:
                return {"throttle_time_ms": 0, "error_code": Errors.COORDINATOR_NOT_AVAILABLE,
                        "producer_id": -1, "producer_epoch": -1}
            return self.idempotent_init_producer_id(ctx, req)

        async def run() -> dict[str, Any]:
            r = await self.coordinator.handle_init_producer_id(
                tid, req["transaction_timeout_ms"], pid, epoch
            )
            if r.error != Errors.NONE:
                log.debug("InitProducerId for transactional id %s from %s: %s", tid, ctx.conn.peer, r.error.name)
            return {
                "throttle_time_ms": 0,
                "error_code": _fenced(r.error, ctx.version, 4),
                "producer_id": r.producer_id,
                "producer_epoch": r.producer_epoch,
            }

        return run()

    # ------------------------------------------------------------------------ AddPartitionsToTxn

    async def _add_one(
        self,
        version: int,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        topics: list[dict[str, Any]],
        verify_only: bool,
    ) -> list[dict[str, Any]]:
        # A partition named twice is one partition with one answer (Kafka's results are a map).
        order: list[TopicPartition] = list(dict.fromkeys((t["name"], p) for t in topics for p in t["partitions"]))
        results: dict[TopicPartition, Errors]
        refused: dict[TopicPartition, Errors] = {}
        for tp in order:
            if version < 4 and tp[0] in CLIENT_INTERNAL_TOPICS:
                # Kafka leaves internal topics out of those a client (v0-v3) may write, with or
                # without an authorizer.
                refused[tp] = Errors.TOPIC_AUTHORIZATION_FAILED
            elif not self.topic_exists(*tp):
                refused[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
        if refused:
            # As Kafka (verify_only as well): the refused partitions fail, the others are not
            # attempted.
            # Unknown partitions are routine (metadata catching up): debug; internal topics from
            # a client are not.
            level = logging.INFO if Errors.TOPIC_AUTHORIZATION_FAILED in refused.values() else logging.DEBUG
            log.log(level, "AddPartitionsToTxn for transactional id %s: %d of %d partitions refused (%s)",
                    tid, len(refused), len(order), ", ".join(sorted({e.name for e in refused.values()})))
            results = {tp: refused.get(tp, Errors.OPERATION_NOT_ATTEMPTED) for tp in order}
        elif verify_only:
            results = self.coordinator.handle_verify_partitions(
                tid, producer_id, producer_epoch, order, abortable=version >= 5
            )
        else:
            # A broker's (v4+) add on a producer's first produce: transactions version 2.
            tv = 2 if version >= 4 and self.transaction_version() >= 2 else 0
            err = await self.coordinator.handle_add_partitions(tid, producer_id, producer_epoch, set(order), tv)
            results = dict.fromkeys(order, _fenced(err, version, 2))
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in order:
            by_topic.setdefault(tp[0], []).append(
                {"partition_index": tp[1], "partition_error_code": results.get(tp, Errors.UNKNOWN_SERVER_ERROR)}
            )
        return [{"name": n, "results_by_partition": ps} for n, ps in by_topic.items()]

    async def handle_add_partitions_to_txn(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        v = ctx.version
        if v < 4:
            topic_results = await self._add_one(
                v, req["v3_and_below_transactional_id"], req["v3_and_below_producer_id"],
                req["v3_and_below_producer_epoch"], req["v3_and_below_topics"], False,
            )
            return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": topic_results}
        txns = req["transactions"]
        answers = await asyncio.gather(*(
            self._add_one(v, t["transactional_id"], t["producer_id"], t["producer_epoch"], t["topics"],
                          bool(t.get("verify_only")))
            for t in txns
        ))
        return {
            "throttle_time_ms": 0,
            "error_code": Errors.NONE,
            "results_by_transaction": [
                {"transactional_id": t["transactional_id"], "topic_results": a}
                for t, a in zip(txns, answers, strict=True)
            ],
        }

    # ------------------------------------------------------------------------ AddOffsetsToTxn/EndTxn

    async def handle_add_offsets_to_txn(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        tp = (OFFSETS_TOPIC, self.offsets_partition_for(req["group_id"]))
        err = await self.coordinator.handle_add_partitions(
            req["transactional_id"], req["producer_id"], req["producer_epoch"], {tp}
        )
        return {"throttle_time_ms": 0, "error_code": _fenced(err, ctx.version, 2)}

    async def handle_end_txn(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        # As Kafka: EndTxn v5 is a transactions-version-2 client's (here only while level 2 is
        # finalized; an older level keeps version 1 semantics).
        tv = 2 if ctx.version >= 5 and self.transaction_version() >= 2 else 0
        r = await self.coordinator.handle_end_txn(
            req["transactional_id"], req["producer_id"], req["producer_epoch"], bool(req["committed"]), tv
        )
        if r.error != Errors.NONE:
            log.debug("EndTxn of transactional id %s from %s: %s", req["transactional_id"], ctx.conn.peer,
                      r.error.name)
        return {
            "throttle_time_ms": 0,
            "error_code": _fenced(r.error, ctx.version, 2),
            "producer_id": r.producer_id,
            "producer_epoch": r.producer_epoch,
        }

    # ------------------------------------------------------------------------ admin

    def handle_describe_transactions(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        return {
            "throttle_time_ms": 0,
            "transaction_states": [self.coordinator.describe(tid) for tid in req["transactional_ids"]],
        }

    def handle_list_transactions(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        err, unknown, txns = self.coordinator.list_transactions(
            list(req["state_filters"] or []), list(req["producer_id_filters"] or []),
            req.get("duration_filter", -1) if ctx.version >= 1 else -1,
        )
        return {
            "throttle_time_ms": 0,
            "error_code": err,
            "unknown_state_filters": unknown,
            "transaction_states": [
                {"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                 "transaction_state": t.state.state_name}
                for t in txns
            ],
        }

    # ------------------------------------------------------------------------ lifecycle

    def startup(self) -> None:
        """Follow the leadership of ``__transaction_state`` partitions (taking up those this
        node leads already) and start the timeout and expiry tasks."""
        self.topics.exists()  # takes up the partition count of an existing topic
        sm = self.coordinator.state
        rm = self.topics.replica_manager
        rm.leadership_listeners.append(sm.on_leadership_change)
        for (topic, p), part in list(rm.partitions.items()):
            if topic == TRANSACTION_STATE_TOPIC and part.is_leader:
                sm.schedule_load(p, part.leader_epoch)
        self.coordinator.startup()

    async def shutdown(self) -> None:
        sm = self.coordinator.state
        try:
            self.topics.replica_manager.leadership_listeners.remove(sm.on_leadership_change)
        except ValueError:
            pass
        await self.coordinator.shutdown()


def build_txn_apis(
    *,
    node_id: int,
    config: KafkaConfig,
    replica_manager: ReplicaManager,
    metadata_cache: KRaftMetadataCache,
    controller_channel: ControllerChannel | None,
    producer_ids: ProducerIdGenerator,
    offsets_partition_for: Callable[[str], int],
) -> TxnApis:
    """The transaction coordinator of a broker, with its state manager, marker sender and
    ``__transaction_state`` :class:`~odradek.coordinator.internal_topic.InternalTopic`."""
    tc = TransactionConfig.from_config(config)

    def transaction_version() -> int:
        return int(metadata_cache.features().levels.get(TRANSACTION_VERSION_FEATURE, 0))

    sm = TransactionStateManager(
        replica_manager=replica_manager,
        num_partitions=tc.num_partitions,
        clock_ms=replica_manager.clock_ms,
        append_timeout_ms=tc.request_timeout_ms,
        load_buffer_size=tc.load_buffer_size,
        transaction_version=transaction_version,
    )

    def markers(on_complete: Callable[[PendingCompletion], Awaitable[None]]) -> TransactionMarkerChannelManager:
        return TransactionMarkerChannelManager(
            metadata_cache=metadata_cache,
            listener_name=lambda: config.inter_broker_listener_name,
            on_complete=on_complete,
            client_factory=lambda host, port: NetworkClient(
                host, port, "odradek-txn-marker-sender", sasl_role="broker",
                ssl_context=inter_node_ssl_context(config, config.inter_broker_listener_name),
            ),
            retry_backoff_ms=tc.retry_backoff_ms,
            request_timeout_ms=tc.request_timeout_ms,
        )

    coordinator = TransactionCoordinator(
        config=tc, state_manager=sm, producer_ids=producer_ids, markers=markers,
        clock_ms=replica_manager.clock_ms,
    )
    topics = InternalTopic(
        name=TRANSACTION_STATE_TOPIC, config_prefix="transaction.state.log", keys="transactional ids",
        num_partitions=tc.num_partitions, replication_factor=tc.replication_factor,
        topic_configs=lambda rf: {
            "cleanup.policy": "compact",
            "min.insync.replicas": str(min(tc.min_isr, rf)),
            "segment.bytes": str(tc.segment_bytes),
            "unclean.leader.election.enable": "false",
            "compression.type": "uncompressed",
        },
        state=sm, node_id=node_id, config=config, metadata_cache=metadata_cache,
        replica_manager=replica_manager, controller_channel=controller_channel,
    )
    return TxnApis(
        coordinator, topics, offsets_partition_for=offsets_partition_for,
        topic_exists=metadata_cache.contains_partition, transaction_version=transaction_version,
    )
