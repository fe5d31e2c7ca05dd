"""The partition side of transactions, served through KafkaApis as an ApiExtension.

WriteTxnMarkers (the transaction coordinator → the partition leaders): for each marker and
partition, a control batch (COMMIT or ABORT) appended with origin COORDINATOR and acks=-1, as
Kafka's handleWriteTxnMarkersRequest; once acknowledged, ``ReplicaManager.txn_marker_listeners``
hear of it (the group coordinator materialises transactional offsets). DescribeProducers: the
active producers of a partition's log. :meth:`TxnPartitionApis.check_produce` is the
transactional part of Produce: a transactional batch needs the request's transactional id, and
its partition is verified with the coordinator first (KIP-890, ``transaction.partition.
verification.enable``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from odradek.controller.replication_control import topic_name_error
from odradek.log.append_origin import AppendOrigin
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.schema import Api
from odradek.records.batch import RECORD_BATCH_OVERHEAD, parse_header
from odradek.records.control_batch import build_end_txn_marker
from odradek.server.add_partitions_to_txn_manager import TransactionVerifier
from odradek.server.api_dispatcher import Handler, RequestContext
from odradek.server.delayed_produce import ProducePartitionStatus
from odradek.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
ProduceErrors = dict[TopicPartition, tuple[Errors, str | None]]


class TxnPartitionApis:
    def __init__(
        self,
        replica_manager: ReplicaManager,
        request_timeout_ms: Callable[[], int],
        verifier: TransactionVerifier | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        self.request_timeout_ms = request_timeout_ms
        self.verifier = verifier
        if verifier is not None:
            replica_manager.leadership_listeners.append(verifier.on_leadership_change)

    def handlers(self) -> dict[Api, Handler]:
        return {
            m.WRITE_TXN_MARKERS: self.handle_write_txn_markers,
            m.DESCRIBE_PRODUCERS: self.handle_describe_producers,
        }

    # -- WriteTxnMarkers --------------------------------------------------------------------------

    def handle_write_txn_markers(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        rm = self.replica_manager
        now = rm.clock_ms()
        timeout = self.request_timeout_ms()
        pending: list[tuple[dict[str, Any], dict[TopicPartition, Errors], list[TopicPartition], Any]] = []
        for marker in req["markers"]:
            pid = marker["producer_id"]
            commit = bool(marker["transaction_result"])
            errors: dict[TopicPartition, Errors] = {}
            entries: dict[TopicPartition, bytearray | None] = {}
            order: list[TopicPartition] = []
            for t in marker["topics"]:
                for index in t["partition_indexes"]:
                    tp = (t["name"], index)
                    if tp in errors or tp in entries:
                        continue  # named twice: one marker, one answer
                    order.append(tp)
                    p = rm.partitions.get(tp)
                    if p is None:
                        # Kafka: a partition this broker does not host (getMagic is empty).
                        errors[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                        continue
                    if self.verifier is not None:
                        self.verifier.on_marker(tp, pid)
                    entries[tp] = build_end_txn_marker(
                        pid, marker["producer_epoch"], marker["coordinator_epoch"], commit, now
                    )
            # Every marker's append is started before any is awaited: appends to one partition
            # keep the order of the request.
            result = rm.append_records(timeout, -1, entries, AppendOrigin.COORDINATOR) if entries else {}
            pending.append((marker, errors, order, result))

        async def answer() -> dict[str, Any]:
            out = []
            for marker, errors, order, result in pending:
                statuses: dict[TopicPartition, ProducePartitionStatus] = (
                    result if isinstance(result, dict) else await result
                )
                pid, commit = marker["producer_id"], bool(marker["transaction_result"])
                for tp, st in statuses.items():
                    errors[tp] = st.error
                    if st.error == Errors.NONE:
                        self._marker_acknowledged(tp, pid, commit)
                    else:
                        log.info(
                            "%s marker of producer %d on %s-%d failed: %s %s",
                            "COMMIT" if commit else "ABORT", pid, tp[0], tp[1], st.error.name, st.message or "",
                        )
                by_topic: dict[str, list[dict[str, Any]]] = {}
                for topic, index in order:  # as the request named them
                    by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": errors[(topic, index)]})
                out.append(
                    {
                        "producer_id": marker["producer_id"],
                        "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
                    }
                )
            return {"markers": out}

        return answer()

    def _marker_acknowledged(self, tp: TopicPartition, producer_id: int, commit: bool) -> None:
        for listener in self.replica_manager.txn_marker_listeners:
            try:
                listener(tp[0], tp[1], producer_id, commit)
            except Exception:
                log.exception("Transaction marker listener failed for %s-%d", *tp)

    # -- DescribeProducers ----------------------------------------------------------------------

    def handle_describe_producers(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        rm = self.replica_manager
        topics = []
        for t in req["topics"]:
            name = t["name"]
            topic_error: Errors | None = None
            if topic_name_error(name) is not None:
                topic_error = Errors.INVALID_TOPIC_EXCEPTION
            elif rm.metadata_cache.get_topic_id(name) is None:
                topic_error = Errors.UNKNOWN_TOPIC_OR_PARTITION
            parts = []
            for index in t["partition_indexes"]:
                entry: dict[str, Any] = {
                    "partition_index": index,
                    "error_code": Errors.NONE,
                    "error_message": None,
                    "active_producers": [],
                }
                p = rm.partitions.get((name, index))
                if topic_error is not None:
                    entry["error_code"] = topic_error
                elif p is None:
                    entry["error_code"] = rm._unknown_or_not_leader((name, index))
                elif p.log is None:
                    entry["error_code"] = Errors.NOT_LEADER_OR_FOLLOWER
                else:
                    entry["active_producers"] = [
                        {
                            "producer_id": s.producer_id,
                            "producer_epoch": s.producer_epoch,
                            "last_sequence": s.last_sequence,
                            "last_timestamp": s.last_timestamp,
                            "coordinator_epoch": s.coordinator_epoch,
                            "current_txn_start_offset": s.current_txn_start_offset,
                        }
                        for s in p.log.active_producers()
                    ]
                parts.append(entry)
            topics.append({"name": name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    # -- Produce (the transactional part) -------------------------------------------------------

    def check_produce(
        self,
        transactional_id: str | None,
        entries: dict[TopicPartition, Any],
        add: bool = False,
        produce_version: int = 0,
    ) -> Errors | Awaitable[ProduceErrors] | None:
        """Before a Produce appends ``entries``: an error for the whole request (a transactional
        batch without a transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED; batches of more
        than one transactional producer: INVALID_PRODUCER_ID_MAPPING, as Kafka), or an awaitable
        of the per-partition errors of the KIP-890 verification, or None (nothing to check).
        ``add``: a transactions-version-2 produce (v12+ with transaction.version 2 finalized),
        whose partitions the coordinator adds to the transaction (KIP-890 part 2). From Produce
        v11 a partition not in the transaction is TRANSACTION_ABORTABLE (Kafka: apiVersion > 10
        is ``genericError``), INVALID_TXN_STATE before."""
        producers: set[tuple[int, int]] = set()
        to_verify: list[TopicPartition] = []
        for tp, records in entries.items():
            if records is None or len(records) < RECORD_BATCH_OVERHEAD:
                continue
            try:
                h = parse_header(records, 0)
            except Exception:  # malformed: the log's validation answers it
                continue
            if h.is_transactional and h.producer_id >= 0:
                producers.add((h.producer_id, h.producer_epoch))
                to_verify.append(tp)
        if not producers:
            return None
        if transactional_id is None:
            return Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if len(producers) > 1:
            return Errors.INVALID_PRODUCER_ID_MAPPING
        if self.verifier is None:
            return None
        rm = self.replica_manager
        # Only partitions led here (maybe still loading): the others fail at the append.
        mine = [tp for tp in to_verify if (p := rm.partitions.get(tp)) is not None and p.leader_id == rm.node_id]
        (pid, epoch), = producers
        if not mine or not any(self.verifier.needs_verification(tp, pid, epoch) for tp in mine):
            return None
        return asyncio.ensure_future(
            self.verifier.verify(
                transactional_id, pid, epoch, mine, add, transaction_abortable=produce_version >= 11
            )
        )
