"""ZkAdminManager: the admin requests of a ZooKeeper-mode broker (Kafka 3.9's ``ZkAdminManager``).

The broker that receives CreateTopics / DeleteTopics / CreatePartitions / AlterConfigs /
IncrementalAlterConfigs writes ZooKeeper itself through :class:`AdminZkClient`; the controller
picks the change up from its watches. Like Kafka's DelayedCreatePartitions / DelayedDeleteTopics,
the answer waits (up to the request's ``timeout_ms``) until this broker's metadata shows the
result; ``topic_ready(topic, n_partitions)`` and ``topic_known(topic)`` are how it asks the
metadata cache. Results are per topic / resource with Kafka's error codes and messages.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from odradek.controller.configuration_control import BrokerConfigPolicy, ConfigurationControlManager
from odradek.controller.replica_placement import BrokerMetadata
from odradek.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE
from odradek.protocol.errors import Errors
from odradek.server.config_defs import validate_topic_config
from odradek.server.dynamic_broker_config import check_broker_resource
from odradek.zk.admin_zk_client import AdminError, AdminZkClient, TopicAlreadyMarkedForDeletion
from odradek.zk.kafka_zk_client import KafkaZkClient

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often a delayed operation re-asks the metadata cache

TopicReady = Callable[[str, int], bool]  # topic, partition count → every partition has a leader
TopicKnown = Callable[[str], bool]  # topic → the metadata cache has it


@dataclass
class CreateTopicResult:
    name: str
    error_code: int = Errors.NONE
    error_message: str | None = None
    topic_id: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)  # the topic's overrides


@dataclass
class TopicResult:
    """DeleteTopics / CreatePartitions result of one topic."""

    name: str
    error_code: int = Errors.NONE
    error_message: str | None = None


@dataclass
class ConfigResult:
    resource_type: int
    resource_name: str
    error_code: int = Errors.NONE
    error_message: str | None = None


class _ZkConfigOps(ConfigurationControlManager):
    """The KRaft controller's AlterConfigs / IncrementalAlterConfigs rules over ZooKeeper's state."""

    def __init__(self, admin: AdminZkClient, broker_configs: BrokerConfigPolicy | None) -> None:
        self.admin = admin
        self.validate_config = validate_topic_config
        self.broker_configs = broker_configs

    def _check_resource(self, resource_type: int, name: str) -> tuple[Errors, str | None]:
        if resource_type == TOPIC_RESOURCE and not self.admin.topic_exists(name):
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist."
        if resource_type == TOPIC_RESOURCE:
            return Errors.NONE, None
        return super()._check_resource(resource_type, name)

    def _old(self, resource_type: int, name: str) -> dict[str, str]:
        return self.admin.fetch_entity_config("topics" if resource_type == TOPIC_RESOURCE else "brokers", name)


class ZkAdminManager:
    def __init__(
        self,
        zk: KafkaZkClient,
        *,
        topic_ready: TopicReady,
        topic_known: TopicKnown,
        alive_brokers: Callable[[], Sequence[BrokerMetadata]] | None = None,
        default_num_partitions: int = 1,
        default_replication_factor: int = 1,
        delete_topic_enable: bool = True,
        broker_configs: BrokerConfigPolicy | None = None,
        node_id: int | None = None,
    ) -> None:
        self.zk = zk
        self.admin = AdminZkClient(zk)
        self.topic_ready = topic_ready
        self.topic_known = topic_known
        self.alive_brokers = alive_brokers
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        self.delete_topic_enable = delete_topic_enable
        self.node_id = node_id
        self._configs = _ZkConfigOps(self.admin, broker_configs)

    def _run(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        return self.zk.call_async(fn, *args)

    async def _wait(self, done: Callable[[], bool], timeout_ms: int) -> bool:
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while True:
            if done():
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)

    # --- CreateTopics -------------------------------------------------------------------

    async def create_topics(self, topics: Sequence[Mapping[str, Any]], timeout_ms: int,
                            validate_only: bool = False) -> list[CreateTopicResult]:
        """``topics``: CreateTopics request entries (name, num_partitions, replication_factor,
        assignments [{partition_index, broker_ids}], configs [{name, value}])."""
        results: list[CreateTopicResult] = []
        counts: dict[str, int] = {}
        for t in topics:
            counts[t["name"]] = counts.get(t["name"], 0) + 1
        brokers = list(self.alive_brokers()) if self.alive_brokers is not None else await self._run(
            self.admin.get_broker_metadatas)
        for t in topics:
            res = CreateTopicResult(t["name"])
            results.append(res)
            if counts[t["name"]] > 1:
                res.error_code = Errors.INVALID_REQUEST
                res.error_message = f"Create topics request from client contains duplicate topic {t['name']}"
                continue
            try:
                await self._run(self._create_one, t, brokers, validate_only, res)
            except AdminError as e:
                res.error_code, res.error_message = e.error, e.message
            except Exception as e:  # a ZooKeeper failure: this topic fails, the others go on
                log.exception("CreateTopics of %s failed", t["name"])
                res.error_code, res.error_message = Errors.UNKNOWN_SERVER_ERROR, str(e)
        pending = [r for r in results if r.error_code == Errors.NONE]
        if validate_only or timeout_ms <= 0 or not pending:
            return results
        ready = await self._wait(lambda: all(self.topic_ready(r.name, r.num_partitions) for r in pending), timeout_ms)
        if not ready:
            for r in pending:
                if not self.topic_ready(r.name, r.num_partitions):
                    r.error_code, r.error_message = Errors.REQUEST_TIMED_OUT, None
        return results

    def _create_one(self, t: Mapping[str, Any], brokers: Sequence[BrokerMetadata], validate_only: bool,
                    res: CreateTopicResult) -> None:
        name = t["name"]
        n, rf = t.get("num_partitions", -1), t.get("replication_factor", -1)
        manual = t.get("assignments") or []
        configs: dict[str, str] = {}
        for c in t.get("configs") or []:
            if c.get("value") is None:
                raise AdminError(Errors.INVALID_CONFIG, f"Null value not supported for topic configs: {c['name']}")
            configs[c["name"]] = c["value"]
        if manual and (n != -1 or rf != -1):
            raise AdminError(Errors.INVALID_REQUEST, "Both numPartitions or replicationFactor and replicasAssignments "
                                                     "were set. Both cannot be used at the same time.")
        if manual:
            assignment = {int(a["partition_index"]): [int(b) for b in a["broker_ids"]] for a in manual}
        else:
            n = self.default_num_partitions if n == -1 else n
            rf = self.default_replication_factor if rf == -1 else rf
            assignment = self.admin.assign_replicas_to_brokers(brokers, n, rf)
        self.admin.validate_topic_create(name, assignment, configs)
        res.num_partitions = len(assignment)
        res.replication_factor = len(next(iter(assignment.values())))
        res.configs = configs
        if not validate_only:
            res.topic_id = self.admin.create_topic_with_assignment(name, configs, assignment, validate=False)

    # --- DeleteTopics -------------------------------------------------------------------

    async def delete_topics(self, topics: Sequence[str], timeout_ms: int) -> list[TopicResult]:
        results = [TopicResult(t) for t in topics]
        if not self.delete_topic_enable:
            for r in results:
                r.error_code, r.error_message = Errors.TOPIC_DELETION_DISABLED, "Topic deletion is disabled."
            return results
        for r in results:
            if not self.topic_known(r.name):
                r.error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION  # Kafka's ZK path sets codes only
                continue
            try:
                await self._run(self.admin.delete_topic, r.name)
            except TopicAlreadyMarkedForDeletion:
                log.info("Topic %s is already marked for deletion", r.name)  # waited on like a fresh one
            except AdminError as e:
                r.error_code = e.error
        pending = [r for r in results if r.error_code == Errors.NONE]
        if timeout_ms <= 0 or not pending:
            return results
        if not await self._wait(lambda: not any(self.topic_known(r.name) for r in pending), timeout_ms):
            for r in pending:
                if self.topic_known(r.name):
                    r.error_code, r.error_message = Errors.REQUEST_TIMED_OUT, None
        return results

    # --- CreatePartitions ---------------------------------------------------------------

    async def create_partitions(self, topics: Sequence[Mapping[str, Any]], timeout_ms: int,
                                validate_only: bool = False) -> list[TopicResult]:
        """``topics``: CreatePartitions entries (name, count, assignments [{broker_ids}] or None)."""
        results = [TopicResult(t["name"]) for t in topics]
        wanted: dict[str, int] = {}
        all_brokers = await self._run(self.admin.get_broker_metadatas, False)
        for t, r in zip(topics, results, strict=True):
            try:
                await self._run(self._add_partitions, t, all_brokers, validate_only)
                wanted[r.name] = int(t["count"])
            except AdminError as e:
                r.error_code, r.error_message = e.error, e.message
        if validate_only or timeout_ms <= 0 or not wanted:
            return results
        if not await self._wait(lambda: all(self.topic_ready(t, n) for t, n in wanted.items()), timeout_ms):
            for r in results:
                if r.name in wanted and not self.topic_ready(r.name, wanted[r.name]):
                    r.error_code, r.error_message = Errors.REQUEST_TIMED_OUT, None
        return results

    def _add_partitions(self, t: Mapping[str, Any], all_brokers: Sequence[BrokerMetadata], validate_only: bool) -> None:
        name, count = t["name"], int(t["count"])
        existing = self.admin.get_topic_assignment(name)
        if existing is None:
            raise AdminError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        if self.admin.is_topic_marked_for_deletion(name):
            raise AdminError(Errors.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
        old = len(existing.partitions)
        manual: dict[int, list[int]] | None = None
        if t.get("assignments") is not None and count > old:
            given = [list(a["broker_ids"]) for a in t["assignments"]]
            if len(given) != count - old:
                raise AdminError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                 f"Increasing the number of partitions by {count - old} but {len(given)} "
                                 "assignments provided.")
            ids = {b.id for b in all_brokers}
            unknown = sorted({b for a in given for b in a if b not in ids})
            if unknown:
                raise AdminError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                 f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
            manual = {old + i: a for i, a in enumerate(given)}
        new = self.admin.create_new_partitions_assignment(name, existing.partitions, all_brokers, count, manual)
        if not validate_only:
            self.admin.create_partitions_with_assignment(name, existing, new)

    # --- configs ------------------------------------------------------------------------

    def _check_broker(self, name: str) -> str | None:
        return check_broker_resource(name, self.node_id)

    async def alter_configs(self, resources: Sequence[Mapping[str, Any]], validate_only: bool = False,
                            incremental: bool = False) -> list[ConfigResult]:
        """AlterConfigs (``incremental`` False: the given set replaces the resource's overrides) or
        IncrementalAlterConfigs (``config_operation`` per entry) resources, as the request has them."""
        out: list[ConfigResult] = []
        for r in resources:
            res = ConfigResult(r["resource_type"], r["resource_name"])
            out.append(res)
            try:
                await self._run(self._alter_one, r, validate_only, incremental)
            except AdminError as e:
                res.error_code, res.error_message = e.error, e.message
        return out

    def _alter_one(self, r: Mapping[str, Any], validate_only: bool, incremental: bool) -> None:
        rtype, name, configs = r["resource_type"], r["resource_name"], list(r["configs"])
        if rtype == BROKER_RESOURCE:
            msg = self._check_broker(name)
            if msg is not None:
                raise AdminError(Errors.INVALID_REQUEST, msg)
        elif rtype != TOPIC_RESOURCE:
            raise AdminError(Errors.INVALID_REQUEST, f"Unsupported resource type {rtype}")
        ops = self._configs
        code, msg, records = (ops.incremental_alter_configs if incremental else ops.alter_configs)(rtype, name, configs)
        if code != Errors.NONE:
            raise AdminError(code, msg or "")
        new = ops._old(rtype, name)
        for _, rec in records:
            if rec["value"] is None:
                new.pop(rec["name"], None)
            else:
                new[rec["name"]] = rec["value"]
        if validate_only:
            return
        if rtype == TOPIC_RESOURCE:
            self.admin.change_topic_config(name, new)
        else:
            self.admin.change_broker_config(name, new)

    async def describe_overrides(self, resource_type: int, name: str) -> dict[str, str] | None:
        """The overrides ZooKeeper holds for a topic / broker (``""``: the cluster default), or
        None for a topic that does not exist. DescribeConfigs layers them on the defaults."""
        if resource_type == TOPIC_RESOURCE:
            if not await self._run(self.admin.topic_exists, name):
                return None
            return dict(await self._run(self.admin.fetch_entity_config, "topics", name))
        return dict(await self._run(self.admin.fetch_entity_config, "brokers", name))


class ZkAutoTopicCreationManager:
    """Auto-creation in ZooKeeper mode (Kafka's AutoTopicCreationManager.createTopicsInZk): the
    broker writes the topics itself through the admin manager, without waiting, and the Metadata
    answer says LEADER_NOT_AVAILABLE (retriable) until the controller has made the partitions; a
    topic already being created by an earlier request is not written again."""

    def __init__(self, manager: ZkAdminManager) -> None:
        self.manager = manager
        self._inflight: set[str] = set()

    async def create_topics(self, names: list[str], client: object = None) -> dict[str, Errors]:
        """Same contract as AutoTopicCreationManager.create_topics: the Metadata error per topic."""
        fresh = [n for n in dict.fromkeys(names) if n not in self._inflight]
        errors: dict[str, Errors] = {n: Errors.LEADER_NOT_AVAILABLE for n in names}
        if not fresh:
            return errors
        self._inflight.update(fresh)
        try:
            results = await self.manager.create_topics(
                [{"name": n, "num_partitions": -1, "replication_factor": -1} for n in fresh], timeout_ms=0)
        finally:
            self._inflight.difference_update(fresh)
        for r in results:
            if r.error_code == Errors.NONE:
                log.info("Auto-created topic %s", r.name)
            elif r.error_code == Errors.TOPIC_ALREADY_EXISTS:
                pass
            else:
                log.warning("Auto-creation of topic %s failed: %s", r.name, r.error_message or Errors(r.error_code).name)
                if r.error_code == Errors.INVALID_TOPIC_EXCEPTION:
                    errors[r.name] = Errors.INVALID_TOPIC_EXCEPTION
        return errors
