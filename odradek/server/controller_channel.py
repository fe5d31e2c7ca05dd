"""The broker's only way to the active controller (Kafka's NodeToControllerChannelManager and
ForwardingManager).

A broker never holds the controller object: it sends a :class:`ControllerRequest` — an API key, a
version and the request data shaped by that API's declarative definition — and gets the
response data back. The network channel encodes exactly these with the protocol definitions;
:class:`InMemoryControllerChannel` hands them to the controller's ``ControllerApis`` in this
process.

As in Kafka:

- requests go out in the order they were sent, one in flight at a time;
- a request the channel sends on its own behalf (AllocateProducerIds, BrokerRegistration,
  BrokerHeartbeat, auto-created topics) that meets ``NOT_CONTROLLER``, or finds no active
  controller, waits and is sent again (first in line) until its retry timeout, then fails with
  :class:`ControllerRequestTimeout`;
- a client request forwarded for a client (Kafka wraps it in an Envelope) is not retried: the
  controller's answer goes back to the client as it is, ``NOT_CONTROLLER`` included (clients
  retry it after a metadata refresh), and a forward that times out is answered with
  ``REQUEST_TIMED_OUT`` in every entry (:class:`ForwardingManager`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g

log = logging.getLogger(__name__)

# Kafka's BrokerServer gives its controller channels a 60 s retry timeout.
DEFAULT_RETRY_TIMEOUT_MS = 60_000
# Kafka's NodeToControllerRequestThread polls for a new controller every 100 ms.
DEFAULT_RETRY_BACKOFF_MS = 100

_ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True)
class RequestClient:
    """The client a forwarded request came from (what Kafka's Envelope carries)."""

    client_id: str | None
    host: str


@dataclass(frozen=True)
class ControllerRequest:
    """One request to the controller. ``client`` is set when the request is a client's,
    forwarded (or sent to the controller listener directly); None when the broker itself asks."""

    api_key: int
    api_version: int
    data: dict[str, Any]
    client: RequestClient | None = None


class ControllerRequestTimeout(Exception):
    """No active controller answered within the retry timeout (REQUEST_TIMED_OUT)."""

    code = Errors.REQUEST_TIMED_OUT


class ControllerRequestHandler(Protocol):
    """What a channel delivers to: the controller's ControllerApis."""

    def handle(self, request: ControllerRequest) -> Awaitable[dict[str, Any]]: ...


class ControllerChannel(ABC):
    """The interface every broker → controller path implements (in memory here, the network
    channel for a controller in another process)."""

    @abstractmethod
    async def send(self, request: ControllerRequest) -> dict[str, Any]:
        """The controller's response data; ControllerRequestTimeout when none answered in time."""

    @abstractmethod
    def active_controller_id(self) -> int | None:
        """The active controller as this broker knows it (the Raft leader), None if unknown."""

    @abstractmethod
    async def close(self) -> None:
        """Fail what is queued with ControllerRequestTimeout and stop."""


def error_codes(data: Any) -> set[int]:
    """Every ``error_code`` in response data (Kafka's ``errorCounts``)."""
    out: set[int] = set()
    stack = [data]
    while stack:
        d = stack.pop()
        if isinstance(d, dict):
            code = d.get("error_code")
            if code is not None:
                out.add(int(code))
            stack.extend(v for v in d.values() if isinstance(v, (dict, list)))
        elif isinstance(d, list):
            stack.extend(v for v in d if isinstance(v, (dict, list)))
    return out


@dataclass
class PendingRequest:
    request: ControllerRequest
    future: asyncio.Future[dict[str, Any]]
    deadline: float
    last_error: str = ""


class RetryRequest(Exception):
    """This attempt failed in a way the channel retries: no controller known yet, the
    controller unreachable, a disconnect or a timeout. The message says why."""


class QueuedControllerChannel(ControllerChannel):
    """What both channels share (Kafka's NodeToControllerRequestThread): requests are sent one
    at a time in send order; a broker's own request answered NOT_CONTROLLER, and any attempt
    that raises :class:`RetryRequest`, goes back to the head of the queue after the backoff,
    until its retry timeout (then ControllerRequestTimeout). Subclasses deliver one attempt."""

    def __init__(self, retry_timeout_ms: int, retry_backoff_ms: int, name: str) -> None:
        self._retry_timeout = retry_timeout_ms / 1000.0
        self._backoff = retry_backoff_ms / 1000.0
        self._name = name
        self._queue: collections.deque[PendingRequest] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._closed = False

    async def send(self, request: ControllerRequest) -> dict[str, Any]:
        if self._closed:
            raise ControllerRequestTimeout(f"the {self._name} channel to the controller is closed")
        loop = asyncio.get_running_loop()
        pending = PendingRequest(request, loop.create_future(), loop.time() + self._retry_timeout)
        self._queue.append(pending)
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        self._wakeup.set()
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run(), name=f"controller-channel-{self._name}")
        return await pending.future

    async def _retry_backoff(self) -> None:
        """The wait before a request is sent again (``retry.backoff.ms``)."""
        await asyncio.sleep(self._backoff)

    @abstractmethod
    async def _deliver(self, item: PendingRequest, remaining: float) -> tuple[int, dict[str, Any]]:
        """One attempt: (the controller's node id, its response). Raises RetryRequest, or what
        the controller raised (handed to the sender)."""

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wakeup is not None
        while not self._closed:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            item = self._queue.popleft()
            if item.future.done():  # the sender gave up (cancelled)
                continue
            now = loop.time()
            if now >= item.deadline:
                reason = f" (last: {item.last_error})" if item.last_error else ""
                item.future.set_exception(
                    ControllerRequestTimeout(
                        f"no active controller answered API {item.request.api_key} within "
                        f"{int(self._retry_timeout * 1000)} ms{reason}"
                    )
                )
                continue
            try:
                node, response = await self._deliver(item, item.deadline - now)
            except RetryRequest as e:
                item.last_error = str(e)
                self._queue.appendleft(item)
                await self._retry_backoff()
                continue
            except Exception as e:  # the caller sees what the controller raised
                if not item.future.done():
                    item.future.set_exception(e)
                continue
            if item.request.client is None and Errors.NOT_CONTROLLER in error_codes(response):
                log.debug(
                    "%s channel: API %d to node %d: NOT_CONTROLLER; waiting for the new controller",
                    self._name, item.request.api_key, node,
                )
                item.last_error = f"node {node} answered NOT_CONTROLLER"
                self._queue.appendleft(item)
                await self._retry_backoff()
                continue
            if not item.future.done():
                item.future.set_result(response)


class InMemoryControllerChannel(QueuedControllerChannel):
    """The channel to a controller in this process: ``controllers`` maps node ids to the
    ControllerApis running here; ``controller_id`` says which node is the active controller
    (Kafka's ControllerNodeProvider: the Raft leader)."""

    def __init__(
        self,
        controllers: Mapping[int, ControllerRequestHandler],
        controller_id: Callable[[], int | None],
        *,
        retry_timeout_ms: int = DEFAULT_RETRY_TIMEOUT_MS,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        name: str = "forwarding",
    ) -> None:
        super().__init__(retry_timeout_ms, retry_backoff_ms, name)
        self._controllers = controllers
        self._controller_id = controller_id

    def active_controller_id(self) -> int | None:
        return self._controller_id()

    async def _deliver(self, item: PendingRequest, remaining: float) -> tuple[int, dict[str, Any]]:
        target = self._controller_id()
        handler = self._controllers.get(target) if target is not None else None
        if target is None or handler is None:
            log.debug("No active controller known to the %s channel; retrying", self._name)
            raise RetryRequest("no active controller known")
        return target, await handler.handle(item.request)

    async def close(self) -> None:
        """Stop: the request in flight is answered (a controller write is never cut short),
        the queued ones fail with ControllerRequestTimeout."""
        self._closed = True
        if self._wakeup is not None:
            self._wakeup.set()
        if self._worker is not None:
            await self._worker
            self._worker = None
        while self._queue:
            item = self._queue.popleft()
            if not item.future.done():
                item.future.set_exception(ControllerRequestTimeout("the broker is shutting down"))


class ForwardingManager:
    """Forwards a client's request to the controller and maps a failure of the channel to the
    error response Kafka's ForwardingManager gives the client."""

    def __init__(self, channel: ControllerChannel) -> None:
        self.channel = channel

    async def forward(self, request: ControllerRequest) -> dict[str, Any]:
        try:
            return await self.channel.send(request)
        except ControllerRequestTimeout as e:
            log.info("Forwarding API %d to the controller timed out: %s", request.api_key, e)
            return error_response(request, Errors.REQUEST_TIMED_OUT, str(e))


def error_response(request: ControllerRequest, error: Errors, message: str | None = None) -> dict[str, Any]:
    """The response to ``request`` with ``error`` in every entry (Kafka's
    ``AbstractRequest.getErrorResponse``)."""
    data, v = request.data, request.api_version
    key = request.api_key
    if key == m.CREATE_TOPICS.api_key:
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t["name"], "topic_id": _ZERO_UUID, "error_code": error, "error_message": message,
                    "num_partitions": -1, "replication_factor": -1, "configs": None,
                }
                for t in data["topics"]
            ],
        }
    if key == m.DELETE_TOPICS.api_key:
        if v >= 6:
            entries = [(t.get("name"), t.get("topic_id") or _ZERO_UUID) for t in data["topics"]]
        else:
            entries = [(n, _ZERO_UUID) for n in data["topic_names"]]
        return {
            "throttle_time_ms": 0,
            "responses": [
                {"name": n, "topic_id": tid, "error_code": error, "error_message": message} for n, tid in entries
            ],
        }
    if key == m.CREATE_PARTITIONS.api_key:
        return {
            "throttle_time_ms": 0,
            "results": [{"name": t["name"], "error_code": error, "error_message": message} for t in data["topics"]],
        }
    if key in (m.ALTER_CONFIGS.api_key, m.INCREMENTAL_ALTER_CONFIGS.api_key):
        return {
            "throttle_time_ms": 0,
            "responses": [
                {
                    "error_code": error, "error_message": message,
                    "resource_type": r["resource_type"], "resource_name": r["resource_name"],
                }
                for r in data["resources"]
            ],
        }
    if key == m.DESCRIBE_CLUSTER.api_key:
        return {
            "throttle_time_ms": 0, "error_code": error, "error_message": message,
            "endpoint_type": data.get("endpoint_type", 1), "cluster_id": "", "controller_id": -1, "brokers": [],
        }
    if key == g.ALLOCATE_PRODUCER_IDS.api_key:
        return {"throttle_time_ms": 0, "error_code": error, "producer_id_start": -1, "producer_id_len": 0}
    if key == g.BROKER_REGISTRATION.api_key:
        return {"throttle_time_ms": 0, "error_code": error, "broker_epoch": -1}
    if key == g.BROKER_HEARTBEAT.api_key:
        return {
            "throttle_time_ms": 0, "error_code": error,
            "is_caught_up": False, "is_fenced": True, "should_shut_down": False,
        }
    if key == g.ALTER_PARTITION.api_key:  # a top-level error (AlterPartitionRequest.getErrorResponse)
        return {"throttle_time_ms": 0, "error_code": error, "topics": []}
    if key == g.ASSIGN_REPLICAS_TO_DIRS.api_key:  # a top-level error, as Kafka's getErrorResponse
        return {"throttle_time_ms": 0, "error_code": error, "directories": []}
    if key == g.DESCRIBE_QUORUM.api_key:  # a top-level error (DescribeQuorumRequest.getErrorResponse)
        return {"error_code": error, "error_message": message, "topics": [], "nodes": []}
    if key in (g.ADD_RAFT_VOTER.api_key, g.REMOVE_RAFT_VOTER.api_key):
        return {"throttle_time_ms": 0, "error_code": error, "error_message": message}
    if key == m.ELECT_LEADERS.api_key:
        return {
            "throttle_time_ms": 0, "error_code": error,
            "replica_election_results": [
                {
                    "topic": tp["topic"],
                    "partition_result": [
                        {"partition_id": p, "error_code": error, "error_message": message} for p in tp["partitions"]
                    ],
                }
                for tp in data.get("topic_partitions") or []
            ],
        }
    if key == m.ALTER_PARTITION_REASSIGNMENTS.api_key:
        return {
            "throttle_time_ms": 0, "error_code": error, "error_message": message,
            "responses": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "error_code": error, "error_message": message}
                        for p in t["partitions"]
                    ],
                }
                for t in data["topics"]
            ],
        }
    if key == m.LIST_PARTITION_REASSIGNMENTS.api_key:
        return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "topics": []}
    if key == g.CREATE_ACLS.api_key:
        return {"throttle_time_ms": 0, "results": [
            {"error_code": error, "error_message": message} for _ in data.get("creations") or []
        ]}
    if key == g.DELETE_ACLS.api_key:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": error, "error_message": message, "matching_acls": []} for _ in data.get("filters") or []
        ]}
    if key == m.ALTER_USER_SCRAM_CREDENTIALS.api_key:  # one result per user named
        users = dict.fromkeys(x["name"] for x in [*data["deletions"], *data["upsertions"]])
        return {
            "throttle_time_ms": 0,
            "results": [{"user": u, "error_code": error, "error_message": message} for u in users],
        }
    if key == g.ALTER_CLIENT_QUOTAS.api_key:
        return {
            "throttle_time_ms": 0,
            "entries": [{"error_code": error, "error_message": message, "entity": e["entity"]} for e in data["entries"]],
        }
    raise ValueError(f"no error response for API {key}")
