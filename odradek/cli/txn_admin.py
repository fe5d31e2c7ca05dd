"""The Admin calls ``odradek transactions`` makes, as Kafka's Admin client makes them.

Kafka's ``kafka-transactions.sh`` goes through ``Admin.listTransactions``, ``describeTransactions``,
``describeProducers``, ``abortTransaction``, ``listTopics`` and ``describeTopics``; this module
does the same over :class:`~odradek.network.client.NetworkClient`, with the routing and retry
rules of Kafka's ``AdminApiDriver`` handlers:

* ListTransactions goes to every broker of the Metadata response (``AllBrokersStrategy``);
  COORDINATOR_LOAD_IN_PROGRESS is retried, any other error fails the listing.
* DescribeTransactions goes to the coordinator FindCoordinator (key type TRANSACTION) names
  (``CoordinatorStrategy``); NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE look it up again.
* DescribeProducers and the abort's WriteTxnMarkers go to the partition leader from Metadata
  (``PartitionLeaderStrategy``, unknown topics tolerated: retried), or to a given broker.

Every call has one deadline, ``default.api.timeout.ms`` (60 s unless ``--command-config`` says
otherwise); what is still unresolved then fails with Kafka's ``Timed out waiting for a node
assignment. Call: NAME`` (``NAME(api=METADATA)`` / ``(api=FIND_COORDINATOR)`` while the lookup
was still going on). Failures carry the message Kafka's exception would (``getMessage()``), which
is what the tool prints. Connections are secured as the properties' security keys say
(:mod:`odradek.security.client_security`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from odradek.cli.admin import parse_bootstrap
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, error_name
from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api
from odradek.security.client_security import ClientSecurityError, client_security, connect_failure

DEFAULT_API_TIMEOUT_MS = 60_000
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_RETRY_BACKOFF_MS = 100
COORDINATOR_TYPE_TRANSACTION = 1

TopicPartition = tuple[str, int]

# Kafka's default exception messages (Errors.exception() without a message) for the errors the
# tool can print.
_DEFAULT_MESSAGES = {
    Errors.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    Errors.INVALID_TOPIC_EXCEPTION: "The request attempted to perform an operation on an invalid topic.",
    Errors.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    Errors.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    Errors.LEADER_NOT_AVAILABLE: "There is no leader for this topic-partition as we are in the middle "
    "of a leadership election.",
}


def tp_str(tp: TopicPartition) -> str:
    """Kafka's ``TopicPartition.toString``."""
    return f"{tp[0]}-{tp[1]}"


def default_message(code: int) -> str:
    try:
        return _DEFAULT_MESSAGES.get(Errors(code)) or error_name(code)
    except ValueError:
        return f"Unknown error code {code}"


class AdminFailure(Exception):
    """A failed Admin call; ``str()`` is the message of the exception Kafka's Admin would raise."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class _Retry(Exception):
    """A request that should be tried again after the backoff (lost connection, unknown node)."""


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None  # None: unknown (-1 on the wire)
    current_txn_start_offset: int | None  # None: no open transaction


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None
    topic_partitions: list[TopicPartition]  # in the response's order


@dataclass(frozen=True)
class AbortSpec:
    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int

    def __str__(self) -> str:  # Kafka's AbortTransactionSpec.toString
        return (
            f"AbortTransactionSpec(topicPartition={tp_str(self.topic_partition)}, producerId={self.producer_id}, "
            f"producerEpoch={self.producer_epoch}, coordinatorEpoch={self.coordinator_epoch})"
        )


# What a handler makes of one response: completed keys, failed keys, keys to look up again.
Outcome = tuple[dict[Any, Any], dict[Any, AdminFailure], list[Any]]


def _api_const(name: str) -> str:
    """``DescribeProducers`` → ``DESCRIBE_PRODUCERS`` (Kafka's ApiKeys name)."""
    return "".join("_" + c if c.isupper() and i else c for i, c in enumerate(name)).upper()


def _int_prop(props: dict[str, str], name: str, default: int) -> int:
    text = props.get(name)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise AdminFailure(f"Invalid value {text} for configuration {name}: Not a number of type "
                           f"{'LONG' if name == 'retry.backoff.ms' else 'INT'}") from None
    if value < 0:
        raise AdminFailure(f"Invalid value {value} for configuration {name}: Value must be at least 0")
    return value


class TxnAdmin:
    """One connection per node; ``props`` are the ``--command-config`` properties."""

    def __init__(self, bootstrap: str, props: dict[str, str] | None = None) -> None:
        props = props or {}
        self.bootstrap = parse_bootstrap(bootstrap)
        api_timeout = _int_prop(props, "default.api.timeout.ms", DEFAULT_API_TIMEOUT_MS)
        request_timeout = _int_prop(props, "request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS)
        if api_timeout < request_timeout:
            if "default.api.timeout.ms" in props:  # KafkaAdminClient refuses it
                raise AdminFailure(
                    "The specified value of default.api.timeout.ms must be no smaller than the value of "
                    "request.timeout.ms."
                )
            api_timeout = request_timeout  # as KafkaAdminClient: a warning, the request timeout
        self.api_timeout_s = api_timeout / 1000
        self.request_timeout_s = request_timeout / 1000
        self.retry_backoff_s = _int_prop(props, "retry.backoff.ms", DEFAULT_RETRY_BACKOFF_MS) / 1000
        self.client_id = props.get("client.id", "odradek-transactions")
        try:
            self.security = client_security(props)  # TLS / SASL
        except ClientSecurityError as e:
            raise AdminFailure(str(e)) from e
        self.clients: dict[tuple[str, int], NetworkClient] = {}
        self.versions: dict[tuple[str, int], dict[int, int]] = {}
        self.brokers: dict[int, tuple[str, int]] = {}

    async def close(self) -> None:
        clients, self.clients = self.clients, {}
        for client in clients.values():
            await client.close()

    async def __aenter__(self) -> TxnAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _deadline(self) -> float:
        return time.monotonic() + self.api_timeout_s

    # ---- one request ---------------------------------------------------------------------------

    async def _client(self, addr: tuple[str, int]) -> NetworkClient:
        client = self.clients.get(addr)
        if client is not None and client.connected:
            return client
        if client is not None:
            await client.close()
            del self.clients[addr]
        try:
            client = await NetworkClient(
                addr[0], addr[1], client_id=self.client_id, **self.security.client_kwargs()).connect()
        except (OSError, TimeoutError) as e:
            refused = connect_failure(e)
            if refused is not None:  # a login or certificate the node refuses: no retry helps
                raise AdminFailure(refused) from e
            raise
        try:
            r = await asyncio.wait_for(client.send(m.API_VERSIONS, 3, {
                "client_software_name": "odradek-transactions", "client_software_version": "1",
            }), self.request_timeout_s)
            if r["error_code"] != Errors.NONE:
                r = await asyncio.wait_for(client.send(m.API_VERSIONS, 0, {}), self.request_timeout_s)
        except BaseException:
            await client.close()
            raise
        self.versions[addr] = {a["api_key"]: a["max_version"] for a in r["api_keys"]}
        self.clients[addr] = client
        return client

    async def _send(self, addr: tuple[str, int], api: Api, body: dict[str, Any], min_version: int = 0,
                    too_old: str | None = None) -> dict[str, Any]:
        """One request at the highest version both sides know; a lost connection is a _Retry, an
        API the node does not serve (or not from ``min_version``) an AdminFailure."""
        try:
            client = await self._client(addr)
            server_max = self.versions[addr].get(api.api_key, -1)
            if server_max < 0:
                raise AdminFailure(f"The node does not support {_api_const(api.name)}", Errors.UNSUPPORTED_VERSION)
            version = min(api.max_version, server_max)
            if version < min_version:
                raise AdminFailure(too_old or f"The node does not support {_api_const(api.name)}",
                                   Errors.UNSUPPORTED_VERSION)
            return await asyncio.wait_for(client.send(api, version, body), self.request_timeout_s)
        except (OSError, TimeoutError) as e:
            failed = self.clients.pop(addr, None)
            if failed is not None:
                await failed.close()
            raise _Retry(str(e)) from e

    async def _any_node(self) -> tuple[str, int]:
        """Kafka's least loaded node: here the first bootstrap or known broker that answers."""
        last: Exception | None = None
        for addr in [*self.bootstrap, *(a for a in self.brokers.values() if a not in self.bootstrap)]:
            try:
                await self._client(addr)
                return addr
            except (OSError, TimeoutError) as e:
                last = e
        raise _Retry(f"no node reachable: {last}")

    async def _node(self, node_id: int) -> tuple[str, int]:
        """The address of broker ``node_id`` (one Metadata request if it is not known yet)."""
        if node_id not in self.brokers:
            await self._metadata_once([])
        addr = self.brokers.get(node_id)
        if addr is None:
            raise _Retry(f"unknown node {node_id}")
        return addr

    async def _with_retries(self, call: str, deadline: float, attempt: Callable[[], Awaitable[Any]]) -> Any:
        """``attempt()`` until it returns or the deadline passes (_Retry means try again)."""
        while True:
            try:
                return await attempt()
            except _Retry:
                if time.monotonic() + self.retry_backoff_s >= deadline:
                    raise AdminFailure(f"Timed out waiting for a node assignment. Call: {call}",
                                       Errors.REQUEST_TIMED_OUT) from None
                await asyncio.sleep(self.retry_backoff_s)

    async def _backoff(self, deadline: float) -> bool:
        """Sleep the retry backoff; False if the deadline comes first."""
        if time.monotonic() + self.retry_backoff_s >= deadline:
            return False
        await asyncio.sleep(self.retry_backoff_s)
        return True

    # ---- Metadata: topics and brokers ----------------------------------------------------------

    async def _metadata_once(self, topics: list[str] | None) -> dict[str, Any]:
        body = {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        r = await self._send(await self._any_node(), m.METADATA, body)
        for b in r["brokers"]:
            self.brokers[b["node_id"]] = (b["host"], b["port"])
        return r

    async def metadata(self, topics: list[str] | None, call: str = "metadata",
                       deadline: float | None = None) -> dict[str, Any]:
        """Metadata from any node, retried until ``deadline`` (AdminFailure: timed out)."""
        r: dict[str, Any] = await self._with_retries(
            call, deadline or self._deadline(), lambda: self._metadata_once(topics))
        return r

    async def list_topics(self) -> list[str]:
        """Every topic name, internal ones too (``listTopics`` with ``listInternal(true)``)."""
        r = await self.metadata(None, "listTopics")
        return [t["name"] for t in r["topics"] if t["error_code"] == Errors.NONE]

    async def describe_topics(self, topics: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The partitions of each topic (Metadata ``partitions``); the first topic that fails
        fails the call, as ``describeTopics(...).allTopicNames()``."""
        r = await self.metadata(topics, "describeTopics")
        found = {t["name"]: t for t in r["topics"]}
        out: dict[str, list[dict[str, Any]]] = {}
        for name in topics:
            t = found.get(name)
            if t is not None and t["error_code"] != Errors.NONE:
                raise AdminFailure(default_message(t["error_code"]), t["error_code"])
            if t is None:
                raise AdminFailure(f"Topic {name} not found.", Errors.UNKNOWN_TOPIC_OR_PARTITION)
            out[name] = sorted(t["partitions"], key=lambda p: p["partition_index"])
        return out

    # ---- partition leaders (PartitionLeaderStrategy) -------------------------------------------

    def _leaders_outcome(self, r: dict[str, Any], wanted: set[TopicPartition]) -> tuple[dict[TopicPartition, int], dict[TopicPartition, AdminFailure]]:
        mapped: dict[TopicPartition, int] = {}
        failed: dict[TopicPartition, AdminFailure] = {}
        for t in r["topics"]:
            name = t["name"]
            code = t["error_code"]
            if code != Errors.NONE:
                if code in (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.LEADER_NOT_AVAILABLE, Errors.BROKER_NOT_AVAILABLE):
                    continue  # tolerated: retried until the deadline
                for tp in (tp for tp in wanted if tp[0] == name):
                    if code == Errors.TOPIC_AUTHORIZATION_FAILED:
                        msg = f"Failed to fetch metadata for partition {tp_str(tp)} due to topic authorization failure"
                    elif code == Errors.INVALID_TOPIC_EXCEPTION:
                        msg = f"Failed to fetch metadata for partition {tp_str(tp)} due to invalid topic `{name}`"
                    else:
                        msg = (f"Failed to fetch metadata for partition {tp_str(tp)} due to unexpected error "
                               f"for topic `{name}`")
                    failed[tp] = AdminFailure(msg, code)
                continue
            for p in t["partitions"]:
                tp = (name, p["partition_index"])
                if tp not in wanted:
                    continue
                pcode = p["error_code"]
                if pcode not in (Errors.NONE, Errors.NOT_LEADER_OR_FOLLOWER, Errors.REPLICA_NOT_AVAILABLE,
                                 Errors.LEADER_NOT_AVAILABLE, Errors.BROKER_NOT_AVAILABLE,
                                 Errors.KAFKA_STORAGE_ERROR, Errors.UNKNOWN_TOPIC_OR_PARTITION):
                    failed[tp] = AdminFailure(f"Unexpected error during metadata lookup for {tp_str(tp)}", pcode)
                elif pcode == Errors.NONE and p["leader_id"] >= 0:
                    mapped[tp] = p["leader_id"]
        return mapped, failed

    async def _by_partition_leader(
        self,
        call: str,
        keys: list[TopicPartition],
        broker_id: int | None,
        request: Callable[[list[TopicPartition]], tuple[Api, dict[str, Any]]],
        handle: Callable[[dict[str, Any], list[TopicPartition]], Outcome],
    ) -> dict[TopicPartition, Any]:
        """Kafka's AdminApiDriver over a PartitionLeaderStrategy (or a StaticBrokerStrategy when
        ``broker_id`` is given): results and AdminFailures by partition."""
        deadline = self._deadline()
        pending = list(dict.fromkeys(keys))
        results: dict[TopicPartition, Any] = {}
        mapping: dict[TopicPartition, int] = {tp: broker_id for tp in pending} if broker_id is not None else {}
        while True:
            unmapped = [tp for tp in pending if tp not in mapping]
            if unmapped:
                try:
                    r = await self.metadata(sorted({t for t, _ in unmapped}), f"{call}(api=METADATA)", deadline)
                except AdminFailure:
                    r = {"topics": []}
                mapped, failed = self._leaders_outcome(r, set(unmapped))
                mapping.update(mapped)
                results.update(failed)
            pending = [tp for tp in pending if tp not in results]
            by_node: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                if tp in mapping:
                    by_node.setdefault(mapping[tp], []).append(tp)
            for node, tps in by_node.items():
                api, body = request(tps)
                try:
                    resp = await self._send(await self._node(node), api, body)
                except _Retry:
                    continue
                except AdminFailure as e:
                    results.update({tp: e for tp in tps})
                    continue
                completed, failed, again = handle(resp, tps)
                results.update(completed)
                results.update(failed)
                for tp in again:
                    if broker_id is None:
                        mapping.pop(tp, None)
            pending = [tp for tp in pending if tp not in results]
            if not pending:
                return results
            if not await self._backoff(deadline):
                for tp in pending:
                    name = call if tp in mapping else f"{call}(api=METADATA)"
                    results[tp] = AdminFailure(f"Timed out waiting for a node assignment. Call: {name}",
                                               Errors.REQUEST_TIMED_OUT)
                return results

    async def describe_producers(self, tps: list[TopicPartition], broker_id: int | None = None) -> dict[TopicPartition, Any]:
        """``describeProducers``: a list of ProducerState, or an AdminFailure, per partition."""

        def request(batch: list[TopicPartition]) -> tuple[Api, dict[str, Any]]:
            topics: dict[str, list[int]] = {}
            for t, p in batch:
                topics.setdefault(t, []).append(p)
            return g.DESCRIBE_PRODUCERS, {"topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}

        def handle(resp: dict[str, Any], batch: list[TopicPartition]) -> Outcome:
            completed: dict[Any, Any] = {}
            failed: dict[Any, AdminFailure] = {}
            again: list[Any] = []
            for t in resp["topics"]:
                for p in t["partitions"]:
                    tp = (t["name"], p["partition_index"])
                    code = p["error_code"]
                    if code == Errors.NONE:
                        completed[tp] = [
                            ProducerState(
                                s["producer_id"], s["producer_epoch"], s["last_sequence"], s["last_timestamp"],
                                None if s["coordinator_epoch"] < 0 else s["coordinator_epoch"],
                                None if s["current_txn_start_offset"] < 0 else s["current_txn_start_offset"],
                            )
                            for s in p["active_producers"]
                        ]
                    elif code == Errors.NOT_LEADER_OR_FOLLOWER:
                        if broker_id is not None:
                            failed[tp] = AdminFailure(
                                f"Failed to describe active producers for partition {tp_str(tp)} on brokerId {broker_id}",
                                code)
                        else:
                            again.append(tp)
                    elif code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                        pass  # retried
                    elif code == Errors.INVALID_TOPIC_EXCEPTION:
                        failed[tp] = AdminFailure(
                            f"Failed to fetch metadata for partition {tp_str(tp)} due to invalid topic error: "
                            f"{p.get('error_message') or default_message(code)}", code)
                    elif code == Errors.TOPIC_AUTHORIZATION_FAILED:
                        failed[tp] = AdminFailure(
                            f"Failed to describe active producers for partition {tp_str(tp)} due to authorization "
                            f"failure on topic `{tp[0]}`", code)
                    else:
                        failed[tp] = AdminFailure(
                            f"Failed to describe active producers for partition {tp_str(tp)} due to unexpected error",
                            code)
            return completed, failed, again

        return await self._by_partition_leader("describeProducers", tps, broker_id, request, handle)

    async def abort_transaction(self, spec: AbortSpec) -> None:
        """``abortTransaction``: WriteTxnMarkers (ABORT) for one partition, to its leader."""
        tp = spec.topic_partition

        def request(batch: list[TopicPartition]) -> tuple[Api, dict[str, Any]]:
            return g.WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": spec.producer_id, "producer_epoch": spec.producer_epoch,
                "transaction_result": False, "coordinator_epoch": spec.coordinator_epoch,
                "topics": [{"name": tp[0], "partition_indexes": [tp[1]]}],
            }]}

        def handle(resp: dict[str, Any], batch: list[TopicPartition]) -> Outcome:
            markers = resp["markers"]
            if len(markers) != 1 or markers[0]["producer_id"] != spec.producer_id:
                return {}, {tp: AdminFailure(
                    f"WriteTxnMarkers response included unexpected marker entries: {markers}(expected to find "
                    f"exactly one entry with producerId {spec.producer_id})")}, []
            topics = markers[0]["topics"]
            if len(topics) != 1 or topics[0]["name"] != tp[0]:
                return {}, {tp: AdminFailure(
                    f"WriteTxnMarkers response included unexpected topic entries: {markers}(expected to find "
                    f"exactly one entry with topic partition {tp_str(tp)})")}, []
            parts = topics[0]["partitions"]
            if len(parts) != 1 or parts[0]["partition_index"] != tp[1]:
                return {}, {tp: AdminFailure(
                    f"WriteTxnMarkers response included unexpected partition entries for topic {tp[0]}: "
                    f"{markers}(expected to find exactly one entry with partition {tp[1]})")}, []
            code = parts[0]["error_code"]
            if code == Errors.NONE:
                return {tp: None}, {}, []
            if code in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.REPLICA_NOT_AVAILABLE, Errors.BROKER_NOT_AVAILABLE,
                        Errors.UNKNOWN_TOPIC_OR_PARTITION):
                return {}, {}, [tp]
            if code == Errors.CLUSTER_AUTHORIZATION_FAILED:
                msg = f"WriteTxnMarkers request with {spec} failed due to cluster authorization error"
            elif code == Errors.INVALID_PRODUCER_EPOCH:
                msg = f"WriteTxnMarkers request with {spec} failed due an invalid producer epoch"
            elif code == Errors.TRANSACTION_COORDINATOR_FENCED:
                msg = (f"WriteTxnMarkers request with {spec} failed since the provided coordinator epoch "
                       f"{spec.coordinator_epoch} has been fenced by the active coordinator")
            else:
                msg = f"WriteTxnMarkers request with {spec} failed due to unexpected error: {default_message(code)}"
            return {}, {tp: AdminFailure(msg, code)}, []

        result = (await self._by_partition_leader("abortTransaction", [tp], None, request, handle))[tp]
        if isinstance(result, AdminFailure):
            raise result

    # ---- every broker: ListTransactions (AllBrokersStrategy) -----------------------------------

    async def list_transactions(
        self, states: list[str] | None = None, producer_ids: list[int] | None = None, duration_ms: int = -1,
    ) -> dict[int, list[TransactionListing]]:
        """``listTransactions().allByBrokerId()``: the listings of every broker, in the order of
        the Metadata response's brokers."""
        deadline = self._deadline()
        brokers: list[int] = []
        while not brokers:
            r = await self.metadata([], "listTransactions(api=METADATA)", deadline)
            brokers = [b["node_id"] for b in r["brokers"]]
            if not brokers and not await self._backoff(deadline):
                raise AdminFailure("Timed out waiting for a node assignment. Call: listTransactions(api=METADATA)",
                                   Errors.REQUEST_TIMED_OUT)
        body = {"state_filters": states or [], "producer_id_filters": producer_ids or [], "duration_filter": duration_ms}
        too_old = ("Duration filter can be set only when using API version 1 or higher. If client is connected "
                   "to an older broker, do not specify duration filter or set duration filter to -1.")
        out: dict[int, list[TransactionListing]] = {}
        pending = list(brokers)
        while True:
            for node in list(pending):
                try:
                    resp = await self._send(await self._node(node), g.LIST_TRANSACTIONS, body,
                                            min_version=1 if duration_ms >= 0 else 0, too_old=too_old)
                except _Retry:
                    continue
                code = resp["error_code"]
                if code == Errors.COORDINATOR_LOAD_IN_PROGRESS:
                    continue
                if code == Errors.COORDINATOR_NOT_AVAILABLE:
                    raise AdminFailure(f"ListTransactions request sent to broker {node} failed because the "
                                       "coordinator is shutting down", code)
                if code != Errors.NONE:
                    raise AdminFailure(f"ListTransactions request sent to broker {node} failed with an "
                                       "unexpected exception", code)
                out[node] = [TransactionListing(s["transactional_id"], s["producer_id"], s["transaction_state"])
                             for s in resp["transaction_states"]]
                pending.remove(node)
            if not pending:
                return {node: out[node] for node in brokers}
            if not await self._backoff(deadline):
                raise AdminFailure("Timed out waiting for a node assignment. Call: listTransactions",
                                   Errors.REQUEST_TIMED_OUT)

    # ---- the coordinator: DescribeTransactions (CoordinatorStrategy) ---------------------------

    async def _find_coordinators(self, ids: list[str], deadline: float) -> tuple[dict[str, int], dict[str, AdminFailure]]:
        """FindCoordinator (TRANSACTION) for ``ids``: node ids, failures; ids missing from both
        are to be looked up again."""
        addr = await self._any_node()
        if self.versions[addr].get(m.FIND_COORDINATOR.api_key, -1) >= 4:
            r = await self._send(addr, m.FIND_COORDINATOR,
                                 {"key_type": COORDINATOR_TYPE_TRANSACTION, "coordinator_keys": ids})
            answers = r["coordinators"]
        else:
            answers = []
            for tid in ids:
                r = await self._send(addr, m.FIND_COORDINATOR, {"key": tid, "key_type": COORDINATOR_TYPE_TRANSACTION})
                answers.append({**r, "key": tid})
        mapped: dict[str, int] = {}
        failed: dict[str, AdminFailure] = {}
        for c in answers:
            tid, code = c["key"], c["error_code"]
            if tid not in ids:
                continue
            key = f"CoordinatorKey(idValue='{tid}', type=TRANSACTION)"
            if code == Errors.NONE:
                mapped[tid] = c["node_id"]
                self.brokers[c["node_id"]] = (c["host"], c["port"])
            elif code in (Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS):
                pass
            elif code == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                failed[tid] = AdminFailure(f"FindCoordinator request for transactionalId `{key}` failed due to "
                                           "authorization failure", code)
            else:
                failed[tid] = AdminFailure(f"FindCoordinator request for key `{key}` failed due to an unexpected "
                                           "error", code)
        return mapped, failed

    async def describe_transactions(self, ids: list[str]) -> dict[str, Any]:
        """``describeTransactions``: a TransactionDescription, or an AdminFailure, per id."""
        deadline = self._deadline()
        pending = list(dict.fromkeys(ids))
        results: dict[str, Any] = {}
        mapping: dict[str, int] = {}
        while True:
            unmapped = [tid for tid in pending if tid not in mapping]
            if unmapped:
                try:
                    mapped, failed = await self._find_coordinators(unmapped, deadline)
                    mapping.update(mapped)
                    results.update(failed)
                except _Retry:
                    pass
                except AdminFailure as e:
                    results.update({tid: e for tid in unmapped})
            pending = [tid for tid in pending if tid not in results]
            by_node: dict[int, list[str]] = {}
            for tid in pending:
                if tid in mapping:
                    by_node.setdefault(mapping[tid], []).append(tid)
            for node, batch in by_node.items():
                try:
                    resp = await self._send(await self._node(node), g.DESCRIBE_TRANSACTIONS, {"transactional_ids": batch})
                except _Retry:
                    continue
                except AdminFailure as e:
                    results.update({tid: e for tid in batch})
                    continue
                for s in resp["transaction_states"]:
                    tid, code = s["transactional_id"], s["error_code"]
                    if tid not in batch:
                        continue
                    prefix = f"DescribeTransactions request for transactionalId `{tid}`"
                    if code == Errors.NONE:
                        results[tid] = TransactionDescription(
                            node, s["transaction_state"], s["producer_id"], s["producer_epoch"],
                            s["transaction_timeout_ms"],
                            None if s["transaction_start_time_ms"] < 0 else s["transaction_start_time_ms"],
                            [(t["topic"], p) for t in s["topics"] for p in t["partitions"]],
                        )
                    elif code == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                        results[tid] = AdminFailure(f"{prefix} failed due to authorization failure", code)
                    elif code == Errors.TRANSACTIONAL_ID_NOT_FOUND:
                        results[tid] = AdminFailure(f"{prefix} failed because the ID could not be found", code)
                    elif code == Errors.COORDINATOR_LOAD_IN_PROGRESS:
                        pass
                    elif code in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
                        mapping.pop(tid, None)
                    else:
                        results[tid] = AdminFailure(f"{prefix} failed due to unexpected error", code)
            pending = [tid for tid in pending if tid not in results]
            if not pending:
                return {tid: results[tid] for tid in dict.fromkeys(ids)}
            if not await self._backoff(deadline):
                for tid in pending:
                    name = "describeTransactions" if tid in mapping else "describeTransactions(api=FIND_COORDINATOR)"
                    results[tid] = AdminFailure(f"Timed out waiting for a node assignment. Call: {name}",
                                                Errors.REQUEST_TIMED_OUT)
                return {tid: results[tid] for tid in dict.fromkeys(ids)}
