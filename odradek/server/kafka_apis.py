"""KafkaApis: the broker's request handlers (an :class:`~odradek.server.api_dispatcher.ApiDispatcher`).

Handlers take and return plain dicts shaped by the declarative definitions in
:mod:`odradek.protocol.messages`.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import shutil
import uuid
from collections.abc import Sequence
from typing import Any

from odradek.controller.replication_control import (
    INTERNAL_TOPICS,
    RESERVED_TOPICS,
    topic_name_error,
)
from odradek.log.log_manager import LogManager
from odradek.metadata.metadata_cache import FinalizedFeatures, KRaftMetadataCache
from odradek.network.request_channel import CloseConnection
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, KafkaError
from odradek.protocol.schema import Api
from odradek.records.batch import COMPRESSION_ZSTD, iter_batches
from odradek.records.errors import RecordError
from odradek.server.acl_operations import (
    AUTHORIZED_OPS_OMITTED,
    CLUSTER_AUTHORIZED_OPERATIONS,
    TOPIC_AUTHORIZED_OPERATIONS,
)
from odradek.server.admin_apis import AdminApis
from odradek.server.api_dispatcher import ApiDispatcher, ApiExtension, Handler, RequestContext
from odradek.server.auto_topic_creation_manager import AutoTopicCreationManager
from odradek.server.controller_channel import ControllerChannel, ForwardingManager, RequestClient
from odradek.server.delayed_fetch import FetchPartitionRequest, FetchPartitionResult
from odradek.server.delayed_produce import ProducePartitionStatus
from odradek.server.fetch_session import (
    CachedPartition,
    FetchManager,
    FetchSessionCache,
    parse_fetch_request,
)
from odradek.server.kafka_config import KafkaConfig
from odradek.server.producer_id_manager import ProducerIdManager
from odradek.server.replica_manager import ReplicaManager
from odradek.server.txn_partition_apis import TxnPartitionApis

log = logging.getLogger(__name__)

# ListOffsets: the first request version that defines each special timestamp (latest, earliest,
# max timestamp KIP-734, earliest local KIP-405, latest tiered KIP-1005).
_LIST_OFFSETS_MIN_VERSION = {-1: 0, -2: 0, -3: 7, -4: 8, -5: 9}
_ZERO_UUID = uuid.UUID(int=0)
# Topics only the broker itself writes (Kafka's Topic.isInternal, plus the metadata log): a
# client's Produce or DeleteRecords on them is refused with INVALID_TOPIC_EXCEPTION.
CLIENT_READ_ONLY_TOPICS = INTERNAL_TOPICS | RESERVED_TOPICS | {"__share_group_state"}

class KafkaApis(ApiDispatcher):
    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        config: KafkaConfig,
        metadata_cache: KRaftMetadataCache,
        replica_manager: ReplicaManager,
        controller_channel: ControllerChannel,
        log_manager: LogManager,
        producer_id_manager: ProducerIdManager | None = None,
        enabled_apis: list[Api] | None = None,
        extensions: Sequence[ApiExtension] = (),
        txn_apis: TxnPartitionApis | None = None,
    ) -> None:
        self.producer_id_manager = producer_id_manager
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.config = config
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        self.controller_channel = controller_channel
        self.log_manager = log_manager
        self.fetch_manager = FetchManager(
            FetchSessionCache(config.max_incremental_fetch_session_cache_slots),
            replica_manager.clock_ms,
        )
        self.auto_topic_creation = AutoTopicCreationManager(controller_channel, config.request_timeout_ms)
        self.admin_apis = AdminApis(
            node_id=node_id, config=config, metadata_cache=metadata_cache, forwarding=ForwardingManager(controller_channel)
        )
        apis = enabled_apis if enabled_apis is not None else m.ALL_APIS
        self.apis: dict[int, Api] = {a.api_key: a for a in apis}
        self.handlers: dict[int, Handler] = {
            m.API_VERSIONS.api_key: self.handle_api_versions,
            m.METADATA.api_key: self.handle_metadata,
            m.PRODUCE.api_key: self.handle_produce,
            m.FETCH.api_key: self.handle_fetch,
            m.LIST_OFFSETS.api_key: self.handle_list_offsets,
            m.OFFSET_FOR_LEADER_EPOCH.api_key: self.handle_offset_for_leader_epoch,
            m.CREATE_TOPICS.api_key: self.admin_apis.handle_create_topics,
            m.DELETE_TOPICS.api_key: self.admin_apis.handle_delete_topics,
            m.CREATE_PARTITIONS.api_key: self.admin_apis.handle_create_partitions,
            m.DELETE_RECORDS.api_key: self.handle_delete_records,
            m.DESCRIBE_CONFIGS.api_key: self.admin_apis.handle_describe_configs,
            m.ALTER_CONFIGS.api_key: self.admin_apis.handle_alter_configs,
            m.INCREMENTAL_ALTER_CONFIGS.api_key: self.admin_apis.handle_incremental_alter_configs,
            m.DESCRIBE_QUORUM.api_key: self.admin_apis.handle_describe_quorum,
            m.ADD_RAFT_VOTER.api_key: self.admin_apis.forward,
            m.REMOVE_RAFT_VOTER.api_key: self.admin_apis.forward,
            m.ELECT_LEADERS.api_key: self.admin_apis.forward,
            m.ALTER_PARTITION_REASSIGNMENTS.api_key: self.admin_apis.forward,
            m.LIST_PARTITION_REASSIGNMENTS.api_key: self.admin_apis.forward,
            m.DESCRIBE_CLUSTER.api_key: self.handle_describe_cluster,
            m.DESCRIBE_LOG_DIRS.api_key: self.handle_describe_log_dirs,
            m.INIT_PRODUCER_ID.api_key: self.handle_init_producer_id,
        }
        # The transactional part of Produce, WriteTxnMarkers and DescribeProducers.
        self.txn_apis = txn_apis or TxnPartitionApis(replica_manager, lambda: config.request_timeout_ms)
        self.add_extensions([self.txn_apis, *extensions])

    def finalized_features(self) -> FinalizedFeatures:
        return self.metadata_cache.features()

    # -- Metadata -------------------------------------------------------------------------------

    def _controller_id_for_clients(self) -> int:
        """The controller id of Metadata and DescribeCluster responses. Clients cannot reach a
        KRaft controller (KIP-590): they send controller-bound requests to the node named here,
        so it must be a live broker. The active controller when it is one (a combined node);
        otherwise, as Kafka's KRaftMetadataCache, a random live broker; -1 when none is live."""
        live = sorted(self.metadata_cache.get_alive_broker_ids())
        active = self.controller_channel.active_controller_id()
        if active is not None and active in live:
            return active
        return random.choice(live) if live else -1


    def _brokers_for(self, listener: str) -> list[dict[str, Any]]:
        return [
            {"node_id": n.id, "host": n.host, "port": n.port, "rack": n.rack}
            for n in self.metadata_cache.get_alive_broker_nodes(listener)
        ]

    def _topic_metadata(self, name: str, live: set[int], error: Errors = Errors.NONE) -> dict[str, Any]:
        cache = self.metadata_cache
        topic_id = cache.get_topic_id(name)
        if topic_id is None:
            return {
                "error_code": error or Errors.UNKNOWN_TOPIC_OR_PARTITION,
                "name": name,
                "topic_id": _ZERO_UUID,
                "is_internal": name in INTERNAL_TOPICS,
                "partitions": [],
                "topic_authorized_operations": AUTHORIZED_OPS_OMITTED,
            }
        parts = cache.get_topic_partitions(name)
        partitions = []
        for pid in sorted(parts):
            p = parts[pid]
            offline = [r for r in p.replicas if r not in live]
            perr = Errors.NONE
            if p.leader < 0 or p.leader not in live:
                perr = Errors.LEADER_NOT_AVAILABLE
            partitions.append(
                {
                    "error_code": perr,
                    "partition_index": pid,
                    "leader_id": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "replica_nodes": list(p.replicas),
                    "isr_nodes": list(p.isr),
                    "offline_replicas": offline,
                }
            )
        return {
            "error_code": Errors.NONE,
            "name": name,
            "topic_id": topic_id,
            "is_internal": name in INTERNAL_TOPICS,
            "partitions": partitions,
            "topic_authorized_operations": AUTHORIZED_OPS_OMITTED,
        }

    def handle_metadata(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        version = ctx.version
        topics = req["topics"]
        allow_auto = req["allow_auto_topic_creation"] if version >= 4 else True
        names: list[str]
        unknown_ids: list[uuid.UUID] = []
        if topics is None or (version == 0 and not topics):
            names = sorted(self.metadata_cache.get_all_topics())
            allow_auto = False
        else:
            # As Kafka: any non-zero topic id means the request is by id (v12+), whatever the
            # names say — the Java client leaves them "" (not null) when it asks by id.
            topic_ids = list(dict.fromkeys(
                t["topic_id"] for t in topics if version >= 10 and t.get("topic_id") not in (None, _ZERO_UUID)
            ))
            names = []
            if topic_ids:
                for tid in topic_ids:
                    topic_name = self.metadata_cache.get_topic_name(tid)
                    if topic_name is None:
                        unknown_ids.append(tid)
                    else:
                        names.append(topic_name)
            else:
                names = [t["name"] for t in topics if t.get("name") is not None]

        # As Kafka without an authorizer: every operation the resource supports (v8+ asks).
        topic_ops = req.get("include_topic_authorized_operations", False)
        cluster_ops = version <= 10 and req.get("include_cluster_authorized_operations", False)

        def body(errors: dict[str, Errors]) -> dict[str, Any]:
            live = self.metadata_cache.get_alive_broker_ids()
            out_topics = [
                self._topic_metadata(n, live, errors.get(n, Errors.NONE)) for n in names if n is not None
            ]
            if topic_ops:
                for t in out_topics:
                    t["topic_authorized_operations"] = TOPIC_AUTHORIZED_OPERATIONS
            for tid in unknown_ids:
                out_topics.append(
                    {
                        "error_code": Errors.UNKNOWN_TOPIC_ID,
                        "name": None,
                        "topic_id": tid,
                        "is_internal": False,
                        "partitions": [],
                        "topic_authorized_operations": AUTHORIZED_OPS_OMITTED,
                    }
                )
            return {
                "throttle_time_ms": 0,
                "brokers": self._brokers_for(ctx.conn.listener_name),
                "cluster_id": self.cluster_id,
                "controller_id": self._controller_id_for_clients(),
                "topics": out_topics,
                "cluster_authorized_operations": (
                    CLUSTER_AUTHORIZED_OPERATIONS if cluster_ops else AUTHORIZED_OPS_OMITTED
                ),
            }

        errors: dict[str, Errors] = {}
        to_create: list[str] = []
        for n in names:
            if n is None or self.metadata_cache.contains_topic(n):
                continue
            if topic_name_error(n) is not None:
                errors[n] = Errors.INVALID_TOPIC_EXCEPTION
            elif allow_auto and self.config.auto_create_topics_enable and n not in CLIENT_READ_ONLY_TOPICS:
                to_create.append(n)
            else:
                errors[n] = Errors.UNKNOWN_TOPIC_OR_PARTITION
        if not to_create:
            return body(errors)

        async def create_then_answer() -> dict[str, Any]:
            client = RequestClient(ctx.header.client_id, ctx.conn.peer)
            errors.update(await self.auto_topic_creation.create_topics(to_create, client))
            return body(errors)

        return create_then_answer()

    # -- Produce --------------------------------------------------------------------------------

    def handle_produce(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        acks = req["acks"]
        error: Errors | None = None
        message: str | None = None
        if acks not in (-1, 0, 1):
            error, message = Errors.INVALID_REQUIRED_ACKS, f"Invalid required acks {acks}"
        entries: dict[tuple[str, int], Any] = {}
        statuses: dict[tuple[str, int], ProducePartitionStatus] = {}
        order: list[tuple[str, int]] = []
        for t in req["topic_data"]:
            name = t["name"]
            for p in t["partition_data"]:
                tp = (name, p["index"])
                order.append(tp)
                if error is not None:
                    statuses[tp] = ProducePartitionStatus(error=error, message=message)
                elif tp in entries or tp in statuses:
                    statuses[tp] = ProducePartitionStatus(
                        error=Errors.INVALID_REQUEST, message="Duplicate partition in produce request"
                    )
                    entries.pop(tp, None)
                elif topic_name_error(name) is not None:
                    statuses[tp] = ProducePartitionStatus(error=Errors.INVALID_TOPIC_EXCEPTION)
                elif name in CLIENT_READ_ONLY_TOPICS:
                    # Kafka's ReplicaManager refuses appends to internal topics from clients
                    # (only the coordinators write them).
                    log.info("Produce to internal topic %s from %s refused", name, ctx.conn.peer)
                    statuses[tp] = ProducePartitionStatus(
                        error=Errors.INVALID_TOPIC_EXCEPTION,
                        message=f"Cannot append to internal topic {name}",
                    )
                elif ctx.version < 7 and _uses_zstd(p["records"]):
                    statuses[tp] = ProducePartitionStatus(
                        error=Errors.UNSUPPORTED_COMPRESSION_TYPE,
                        message=f"Produce requests with version {ctx.version} are not allowed "
                        "to use ZStandard compression",
                    )
                else:
                    entries[tp] = p["records"]
        # KIP-890 part 2: a v12+ produce while transaction.version 2 is finalized adds its
        # partitions to the producer's transaction (the client sent no AddPartitionsToTxn).
        tv2 = ctx.version >= 12 and self.finalized_features().levels.get("transaction.version", 0) >= 2
        result = self._append_produce(req, acks, entries, statuses, order, ctx.version, tv2)

        def body(appended: dict[tuple[str, int], ProducePartitionStatus]) -> dict[str, Any] | None:
            all_status = {**appended, **statuses}
            if acks == 0:
                bad = [(tp, s) for tp, s in all_status.items() if s.error != Errors.NONE]
                if bad:
                    # With acks=0 there is no response to carry the error; Kafka closes the
                    # connection so the producer notices and refreshes its metadata.
                    tp, s = bad[0]
                    raise CloseConnection(
                        f"acks=0 produce to {tp[0]}-{tp[1]} from {ctx.conn.peer} failed with "
                        f"{s.error.name}: {s.message or ''}"
                    )
                return None
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp in order:
                s = all_status[tp]
                by_topic.setdefault(tp[0], []).append(
                    {
                        "index": tp[1],
                        "error_code": s.error,
                        "base_offset": s.base_offset,
                        "log_append_time_ms": s.log_append_time,
                        "log_start_offset": s.log_start_offset,
                        "record_errors": [
                            {"batch_index": i, "batch_index_error_message": m}
                            for i, m in s.record_errors
                        ],
                        "error_message": s.message if s.error != Errors.NONE else None,
                    }
                )
            return {
                "responses": [{"name": n, "partition_responses": ps} for n, ps in by_topic.items()],
                "throttle_time_ms": 0,
            }

        if isinstance(result, dict):
            return body(result)
        pending = result

        async def wait() -> dict[str, Any] | None:
            return body(await pending)

        return wait()

    def _append_produce(
        self,
        req: dict[str, Any],
        acks: int,
        entries: dict[tuple[str, int], Any],
        statuses: dict[tuple[str, int], ProducePartitionStatus],
        order: list[tuple[str, int]],
        version: int = 0,
        add_partitions: bool = False,
    ) -> Any:
        """Append a Produce's ``entries`` after its transactional checks (the statuses, or an
        awaitable of them); partitions refused by the checks get their status in ``statuses``."""
        if not entries:
            return {}
        check = self.txn_apis.check_produce(req["transactional_id"], entries, add_partitions, version)
        if isinstance(check, Errors):
            # As Kafka: the whole request fails (transactional records without a transactional
            # id, or of more than one producer).
            for tp in order:
                statuses[tp] = ProducePartitionStatus(error=check)
            return {}
        if check is None:
            return self.replica_manager.append_records(req["timeout_ms"], acks, entries)
        verification = check

        async def verified_then_append() -> dict[tuple[str, int], ProducePartitionStatus]:
            for tp, (err, msg) in (await verification).items():
                statuses[tp] = ProducePartitionStatus(error=err, message=msg)
                entries.pop(tp, None)
            appended = self.replica_manager.append_records(req["timeout_ms"], acks, entries) if entries else {}
            return appended if isinstance(appended, dict) else await appended

        return verified_then_append()

    # -- Fetch ----------------------------------------------------------------------------------

    def _zstd_topic(self, topic: str, partition: int) -> bool:
        p = self.replica_manager.partitions.get((topic, partition))
        return p is not None and p.log is not None and p.log.config.compression_type == "zstd"

    def handle_fetch(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        version = ctx.version
        resolve = self.metadata_cache.get_topic_name

        fetch_data, to_forget = parse_fetch_request(req, version, resolve)
        replica_id = req.get("replica_id", -1)
        replica_epoch = -1
        if version >= 15:
            state = req.get("replica_state") or {}
            replica_id, replica_epoch = state.get("replica_id", -1), state.get("replica_epoch", -1)
        context = self.fetch_manager.new_context(
            version, req["session_id"], req["session_epoch"], replica_id >= 0, fetch_data, to_forget,
            resolve,
        )
        requests: list[FetchPartitionRequest] = []
        read_parts: list[CachedPartition] = []
        errors: list[tuple[CachedPartition, Errors]] = []
        for part in context.partitions():
            if part.topic is None:
                errors.append((part, Errors.UNKNOWN_TOPIC_ID))
            elif part.max_bytes < 0 or part.fetch_offset < 0:
                errors.append(
                    (part, Errors.OFFSET_OUT_OF_RANGE if part.fetch_offset < 0 else Errors.INVALID_REQUEST)
                )
            else:
                read_parts.append(part)
                requests.append(
                    FetchPartitionRequest(
                        part.topic, part.partition, part.fetch_offset, part.max_bytes,
                        part.current_leader_epoch, part.last_fetched_epoch, part.fetcher_log_start_offset,
                    )
                )
        max_bytes = req["max_bytes"] if version >= 3 else 2**31 - 1
        quotas = self.client_quotas
        if quotas is not None and quotas.active and replica_id < 0:
            # No more than the consumer's quota allows over the quota window (Kafka's
            # getMaxValueInQuotaWindow): a larger response would only be throttled away.
            max_bytes = int(min(max_bytes, max(1.0, quotas.max_fetch_bytes(ctx))))
        isolation = req["isolation_level"] if version >= 4 else 0
        # KIP-392: a consumer's Fetch v11+ may be served by a follower, or sent to one.
        client_rack = (req.get("rack_id") or "") if version >= 11 and replica_id < 0 else None
        result = self.replica_manager.fetch_messages(
            req["max_wait_ms"], req["min_bytes"], max_bytes, isolation, requests, replica_id, replica_epoch,
            client_rack,
        )

        topic_stats = self.replica_manager.topic_stats

        def body(results: list[FetchPartitionResult]) -> dict[str, Any]:
            updates: list[tuple[CachedPartition, dict[str, Any]]] = []
            for part, r in zip(read_parts, results, strict=True):
                res = r.result
                if res.records:
                    topic_stats.record_bytes_out(r.request.topic, len(res.records), replica_id >= 0)
                if version < 10 and self._zstd_topic(r.request.topic, r.request.partition):
                    # As Kafka: consumers older than Fetch v10 cannot read zstd, so a topic
                    # whose compression.type is zstd answers them UNSUPPORTED_COMPRESSION_TYPE.
                    updates.append((part, _fetch_error(part.partition, Errors.UNSUPPORTED_COMPRESSION_TYPE)))
                    continue
                pentry: dict[str, Any] = {
                    "partition_index": part.partition,
                    "error_code": res.error,
                    "high_watermark": res.high_watermark,
                    "last_stable_offset": res.last_stable_offset,
                    "log_start_offset": res.log_start_offset,
                    "aborted_transactions": None if res.aborted_transactions is None else [
                        {"producer_id": pid, "first_offset": first} for pid, first in res.aborted_transactions
                    ],
                    "preferred_read_replica": res.preferred_read_replica,
                    "records": res.records if res.records is not None else b"",
                }
                if res.diverging_epoch is not None:
                    pentry["diverging_epoch"] = {"epoch": res.diverging_epoch[0], "end_offset": res.diverging_epoch[1]}
                updates.append((part, pentry))
            for part, err in errors:
                updates.append((part, _fetch_error(part.partition, err)))
            error, session_id, send = context.update_and_generate_response(updates)
            by_topic: dict[Any, dict[str, Any]] = {}
            for part, resp in send:
                entry = by_topic.get(part.key[0])
                if entry is None:
                    entry = by_topic[part.key[0]] = {
                        "topic": part.topic or "",
                        "topic_id": part.topic_id,
                        "partitions": [],
                    }
                entry["partitions"].append(resp)
            return {
                "throttle_time_ms": 0,
                "error_code": error,
                "session_id": session_id,
                "responses": list(by_topic.values()),
            }

        if isinstance(result, list):
            return body(result)
        pending = result

        async def wait() -> dict[str, Any]:
            return body(await pending)

        return wait()

    # -- ListOffsets ----------------------------------------------------------------------------

    def _after_log_work(
        self, tps: list[tuple[str, int]], handler: Handler, ctx: RequestContext, req: dict[str, Any]
    ) -> Any:
        """A request on partitions whose log the replica manager is still creating or truncating
        is handled once that is done (Kafka's requests wait on the partition's leadership
        change); None when no partition of ``tps`` is."""
        if not any(self.replica_manager.is_loading(tp) for tp in tps):
            return None

        async def later() -> Any:
            await self.replica_manager.wait_for_log_work(tps)
            result = handler(ctx, req)
            return await result if inspect.isawaitable(result) else result

        return later()

    def handle_list_offsets(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        tps = [(t["name"], p["partition_index"]) for t in req["topics"] for p in t["partitions"]]
        if (waiting := self._after_log_work(tps, self.handle_list_offsets, ctx, req)) is not None:
            return waiting
        isolation = req.get("isolation_level", 0)
        topics_out = []
        for t in req["topics"]:
            parts = []
            for p in t["partitions"]:
                entry = {
                    "partition_index": p["partition_index"],
                    "error_code": Errors.NONE,
                    "timestamp": -1,
                    "offset": -1,
                    "leader_epoch": -1,
                }
                if p["timestamp"] < 0 and ctx.version < _LIST_OFFSETS_MIN_VERSION.get(p["timestamp"], 1 << 15):
                    # A special timestamp this version does not define (or none at all): Kafka
                    # answers the partition with UNSUPPORTED_VERSION.
                    entry["error_code"] = Errors.UNSUPPORTED_VERSION
                    parts.append(entry)
                    continue
                try:
                    part = self.replica_manager.get_partition_or_error((t["name"], p["partition_index"]))
                    ts, off, epoch = part.fetch_offset_for_timestamp(
                        p["timestamp"], isolation, p.get("current_leader_epoch", -1)
                    )
                    entry.update(timestamp=ts, offset=off, leader_epoch=epoch)
                except KafkaError as e:
                    entry["error_code"] = e.code
                parts.append(entry)
            topics_out.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics_out}

    # -- OffsetForLeaderEpoch -------------------------------------------------------------------

    def handle_offset_for_leader_epoch(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        tps = [(t["topic"], p["partition"]) for t in req["topics"] for p in t["partitions"]]
        if (waiting := self._after_log_work(tps, self.handle_offset_for_leader_epoch, ctx, req)) is not None:
            return waiting
        topics_out = []
        for t in req["topics"]:
            parts = []
            for p in t["partitions"]:
                entry = {
                    "error_code": Errors.NONE,
                    "partition": p["partition"],
                    "leader_epoch": -1,
                    "end_offset": -1,
                }
                try:
                    part = self.replica_manager.get_partition_or_error((t["topic"], p["partition"]))
                    epoch, end = part.last_offset_for_leader_epoch(
                        p["current_leader_epoch"], p["leader_epoch"]
                    )
                    entry.update(leader_epoch=epoch, end_offset=end)
                except KafkaError as e:
                    entry["error_code"] = e.code
                parts.append(entry)
            topics_out.append({"topic": t["topic"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics_out}

    # -- DeleteRecords --------------------------------------------------------------------------

    def handle_delete_records(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        tps = [(t["name"], p["partition_index"]) for t in req["topics"] for p in t["partitions"]]
        if (waiting := self._after_log_work(tps, self.handle_delete_records, ctx, req)) is not None:
            return waiting
        topics_out = []
        for t in req["topics"]:
            parts = []
            for p in t["partitions"]:
                entry = {"partition_index": p["partition_index"], "low_watermark": -1, "error_code": Errors.NONE}
                if t["name"] in CLIENT_READ_ONLY_TOPICS:
                    # As Kafka: "Cannot delete records of internal topic ..."
                    log.info("DeleteRecords on internal topic %s from %s refused", t["name"], ctx.conn.peer)
                    entry["error_code"] = Errors.INVALID_TOPIC_EXCEPTION
                    parts.append(entry)
                    continue
                try:
                    part = self.replica_manager.get_partition_or_error((t["name"], p["partition_index"]))
                    entry["low_watermark"] = part.delete_records_on_leader(p["offset"])
                    log.info(
                        "DeleteRecords: %s-%d log start offset is now %d",
                        t["name"], p["partition_index"], entry["low_watermark"],
                    )
                except KafkaError as e:
                    entry["error_code"] = e.code
                parts.append(entry)
            topics_out.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics_out}

    # -- DescribeCluster ------------------------------------------------------------------------

    def handle_describe_cluster(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        endpoint_type = req.get("endpoint_type", 1)
        body: dict[str, Any] = {
            "throttle_time_ms": 0,
            "error_code": Errors.NONE,
            "error_message": None,
            "endpoint_type": 1,
            "cluster_id": self.cluster_id,
            "controller_id": -1,
            "brokers": [],
            "cluster_authorized_operations": CLUSTER_AUTHORIZED_OPERATIONS
            if req["include_cluster_authorized_operations"]
            else AUTHORIZED_OPS_OMITTED,
        }
        if endpoint_type != 1:
            body["error_code"] = Errors.MISMATCHED_ENDPOINT_TYPE
            body["error_message"] = "The request was sent to a broker endpoint, but asked for controllers"
            return body
        cache = self.metadata_cache
        listener = ctx.conn.listener_name
        nodes = (
            cache.get_broker_nodes(listener)
            if req.get("include_fenced_brokers", False)
            else cache.get_alive_broker_nodes(listener)
        )
        for n in nodes:
            body["brokers"].append(
                {"broker_id": n.id, "host": n.host, "port": n.port, "rack": n.rack, "is_fenced": cache.is_broker_fenced(n.id)}
            )
        # As Kafka: a controller id that is not among the listed brokers would confuse clients.
        controller_id = self._controller_id_for_clients()
        if any(b["broker_id"] == controller_id for b in body["brokers"]):
            body["controller_id"] = controller_id
        return body

    # -- InitProducerId -------------------------------------------------------------------------

    def handle_init_producer_id(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        if req["transactional_id"] is not None:
            # The transaction coordinator's (server/txn_apis.py) when the broker has one.
            error = Errors.COORDINATOR_NOT_AVAILABLE
            return {"throttle_time_ms": 0, "error_code": error, "producer_id": -1, "producer_epoch": -1}
        manager = self.producer_id_manager
        if manager is None:
            return {"throttle_time_ms": 0, "error_code": Errors.COORDINATOR_NOT_AVAILABLE, "producer_id": -1, "producer_epoch": -1}

        async def run() -> dict[str, Any]:
            # An idempotent producer gets a fresh id with epoch 0, also when it asks to bump
            # the epoch of its old one (KIP-360), as Kafka does without a transactional id.
            try:
                pid = await manager.generate_producer_id()
            except KafkaError as e:
                return {"throttle_time_ms": 0, "error_code": e.code, "producer_id": -1, "producer_epoch": -1}
            return {"throttle_time_ms": 0, "error_code": Errors.NONE, "producer_id": pid, "producer_epoch": 0}

        return run()

    # -- DescribeLogDirs ------------------------------------------------------------------------

    def handle_describe_log_dirs(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        wanted: set[tuple[str, int]] | None = None
        if req["topics"] is not None:
            wanted = {(t["topic"], p) for t in req["topics"] for p in t["partitions"]}
        logs = self.log_manager.all_logs()
        results = []
        for d in self.log_manager.log_dirs:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (topic, part), lg in sorted(logs.items()):
                if wanted is not None and (topic, part) not in wanted:
                    continue
                if os.path.dirname(os.path.abspath(lg.dir)) != d:
                    continue
                by_topic.setdefault(topic, []).append(
                    {"partition_index": part, "partition_size": lg.size, "offset_lag": 0, "is_future_key": False}
                )
            try:
                usage = shutil.disk_usage(d)
                total, usable = usage.total, usage.free
            except OSError:
                total, usable = -1, -1
            results.append(
                {
                    "error_code": Errors.NONE,
                    "log_dir": d,
                    "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
                    "total_bytes": total,
                    "usable_bytes": usable,
                }
            )
        return {"throttle_time_ms": 0, "error_code": Errors.NONE, "results": results}


def _fetch_error(partition: int, error: Errors) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "error_code": error,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _uses_zstd(records: Any) -> bool:
    """Whether any batch of a produce request's records is zstd-compressed (Produce v7+ only).

    Reads batch headers only; malformed bytes are left to the log's validation."""
    if not records:
        return False
    try:
        return any(h.compression == COMPRESSION_ZSTD for h in iter_batches(records))
    except RecordError:
        return False
