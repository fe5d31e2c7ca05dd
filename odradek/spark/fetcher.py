"""A small blocking Kafka-protocol client for the data source's executors: one partition, one range.

The executors of the ``odradek`` source read with this by default (``odradek.reader=odradek``):
Metadata to find the partition's leader, ListOffsets for its log start and end, then Fetch
requests by topic name that return raw record-batch bytes, decoded to Arrow by
:mod:`odradek.spark.arrow_decode`. No asyncio, no threads: a blocking socket per broker, requests
encoded with Odradek's own codec (:mod:`odradek.protocol`).

There is no ApiVersions round trip: the versions used are fixed (:data:`METADATA_VERSION`,
:data:`LIST_OFFSETS_VERSION`, :data:`FETCH_VERSION`; every Kafka broker since 2.7 and Odradek
answer them). A broker that does not support one closes the connection, which is reported as
:class:`UnsupportedBrokerError` naming the request and the way out (``odradek.reader=librdkafka``).

The next Fetch request is sent as soon as a response has been received and its batch headers
read, before the response is decoded, so the broker prepares the next response while the executor
decodes the previous one (one request in flight at most).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from odradek.network.connection import DEFAULT_MAX_RESPONSE_BYTES, ClientConnection, ProtocolError
from odradek.protocol.errors import Errors, error_name
from odradek.protocol.messages import FETCH, LIST_OFFSETS, METADATA
from odradek.protocol.schema import Api
from odradek.spark.arrow_decode import BatchScan, scan_batches

log = logging.getLogger("odradek.spark")

METADATA_VERSION = 9
LIST_OFFSETS_VERSION = 6
FETCH_VERSION = 12
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

FETCH_MAX_BYTES = 50 * 1024 * 1024
PARTITION_MAX_BYTES = 16 * 1024 * 1024
FETCH_MAX_WAIT_MS = 500
# Consecutive failed attempts (leader changes, broker restarts) before giving up.
MAX_RETRIES = 6
RETRY_BACKOFF_S = 0.1

# The next Fetch is sent before the previous response is decoded: one request in flight at most.
MAX_IN_FLIGHT = 1

# Errors after which the partition's leader is looked up again and the request retried.
RETRIABLE = frozenset(
    {
        Errors.NOT_LEADER_OR_FOLLOWER,
        Errors.LEADER_NOT_AVAILABLE,
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.REPLICA_NOT_AVAILABLE,
        Errors.KAFKA_STORAGE_ERROR,
        Errors.FENCED_LEADER_EPOCH,
        Errors.UNKNOWN_LEADER_EPOCH,
        Errors.REQUEST_TIMED_OUT,
        Errors.OFFSET_NOT_AVAILABLE,
    }
)


class FetchError(RuntimeError):
    """A request failed for good (after retries) or the broker answered nonsense."""


class UnsupportedBrokerError(FetchError):
    """The broker closed the connection on a request: it does not speak that API version."""


class BrokerConnectionError(FetchError, ConnectionError):
    """The connection failed or was closed while a request was in flight."""


class PartitionGoneError(FetchError):
    """The topic or partition does not exist (any more)."""


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``"host:9092,PLAINTEXT://[::1]:9093"`` -> ``[("host", 9092), ("::1", 9093)]``."""
    out: list[tuple[str, int]] = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        host = host.strip("[]")
        try:
            out.append((host, int(port)))
        except ValueError:
            raise ValueError(f"bad bootstrap server {item!r} (expected host:port)") from None
    if not out:
        raise ValueError(f"no bootstrap server in {servers!r}")
    return out


class BrokerConnection:
    """One blocking connection to a broker: a socket around
    :class:`~odradek.network.connection.ClientConnection` (framing, correlation ids)."""

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        timeout_s: float,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        # Responses are read into the core's buffers, reused: a response (and the memoryviews
        # into it that decoding returns) is valid until the next receive(). Fresh 16 MB buffers
        # per response cost page faults on every fetch.
        self._core = ClientConnection(
            client_id,
            max_in_flight=MAX_IN_FLIGHT,
            max_response_bytes=max_response_bytes,
            reuse_buffer=True,
        )
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: {e}") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        except OSError:  # pragma: no cover - a kernel limit; the default works too
            pass

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def in_flight(self) -> int:
        return self._core.in_flight

    def close(self) -> None:
        self._core.connection_lost()
        try:
            self._sock.close()
        except OSError:  # pragma: no cover
            pass

    def send(self, api: Api, version: int, body: dict[str, Any]) -> int:
        """Write a request; returns its correlation id. :meth:`receive` reads the answer."""
        cid, parts = self._core.send_request(api, version, body)
        try:
            self._sock.sendall(b"".join(parts))
        except OSError as e:
            self._core.connection_lost()
            raise BrokerConnectionError(
                f"sending {api.name} v{version} to {self.address} failed: {e}"
            ) from e
        return cid

    def receive(self) -> dict[str, Any]:
        """The response to the oldest request in flight."""
        core = self._core
        request = core.oldest_in_flight
        assert request is not None and request.api is not None, "receive() with nothing in flight"
        api, version = request.api, request.version
        recv_into = self._sock.recv_into
        try:
            response = core.next_response()
            while response is None:
                n = recv_into(core.get_buffer())
                if n == 0:
                    raise EOFError
                core.buffer_updated(n)
                response = core.next_response()
        except EOFError:
            core.connection_lost()
            raise UnsupportedBrokerError(
                f"the broker at {self.address} closed the connection in answer to "
                f"{api.name} v{version}: it probably does not support that version (the "
                f"odradek reader uses Metadata v{METADATA_VERSION}, ListOffsets "
                f"v{LIST_OFFSETS_VERSION} and Fetch v{FETCH_VERSION}, answered by Kafka 2.7 "
                "and later); set the source option odradek.reader=librdkafka to read through "
                "librdkafka instead"
            ) from None
        except OSError as e:
            core.connection_lost()
            raise BrokerConnectionError(
                f"reading the {api.name} response from {self.address} failed: {e}"
            ) from e
        except ProtocolError as e:
            core.connection_lost()
            raise FetchError(f"{self.address}: {e}") from e
        assert response.body is not None
        return response.body

    def request(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if self._core.in_flight:
            raise AssertionError("request() with a request in flight")
        self.send(api, version, body)
        return self.receive()


@dataclass
class FetchedRecords:
    """One Fetch response's records for ``[start, until)``; ``scan`` has their batch headers.

    ``records`` points into the connection's receive buffer: it is valid until the next chunk
    is asked for (decode it, or copy it, before).
    """

    records: memoryview
    scan: BatchScan
    start: int
    until: int


DataLossReporter = Callable[[str], None]


class PartitionFetcher:
    """Reads one topic-partition from its leader."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        partition: int,
        *,
        client_id: str = "odradek-spark",
        request_timeout_s: float = 30.0,
        max_bytes: int = FETCH_MAX_BYTES,
        partition_max_bytes: int = PARTITION_MAX_BYTES,
        max_wait_ms: int = FETCH_MAX_WAIT_MS,
        retries: int = MAX_RETRIES,
        retry_backoff_s: float = RETRY_BACKOFF_S,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.topic = topic
        self.partition = partition
        self.name = f"{topic}-{partition}"
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.max_wait_ms = max_wait_ms
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leader: BrokerConnection | None = None
        self._inflight_offset: int | None = None

    # ---- connections -------------------------------------------------------------------

    def close(self) -> None:
        self._drop_leader()

    def __enter__(self) -> PartitionFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drop_leader(self) -> None:
        if self._leader is not None:
            self._leader.close()
        self._leader = None
        self._inflight_offset = None

    def _connect(self, host: str, port: int) -> BrokerConnection:
        # A Fetch response may exceed max_bytes by one batch; the limit only guards against a
        # size that is no Fetch response at all.
        limit = max(DEFAULT_MAX_RESPONSE_BYTES, 2 * (self.max_bytes + self.partition_max_bytes))
        return BrokerConnection(host, port, self.client_id, self.request_timeout_s, limit)

    def _metadata(self) -> dict[str, Any]:
        """Metadata for our topic from the first bootstrap (or known) broker that answers."""
        candidates = list(dict.fromkeys([*self.bootstrap, *self._brokers.values()]))
        errors: list[str] = []
        for host, port in candidates:
            try:
                conn = self._connect(host, port)
            except BrokerConnectionError as e:
                errors.append(str(e))
                continue
            try:
                return conn.request(
                    METADATA,
                    METADATA_VERSION,
                    {
                        "topics": [{"name": self.topic}],
                        "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False,
                    },
                )
            except UnsupportedBrokerError:
                raise
            except FetchError as e:
                errors.append(str(e))
            finally:
                conn.close()
        raise BrokerConnectionError(f"no broker answered Metadata: {'; '.join(errors)}")

    def leader(self) -> BrokerConnection:
        """The connection to the partition's leader (looked up when there is none)."""
        if self._leader is not None:
            return self._leader
        meta = self._metadata()
        self._brokers = {b["node_id"]: (b["host"], b["port"]) for b in meta["brokers"]}
        topic = next((t for t in meta["topics"] if t["name"] == self.topic), None)
        if topic is None or topic["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            raise PartitionGoneError(f"topic {self.topic!r} does not exist")
        if topic["error_code"] not in (Errors.NONE, Errors.LEADER_NOT_AVAILABLE):
            raise FetchError(
                f"Metadata for {self.topic!r}: {error_name(topic['error_code'])}"
            )
        part = next((p for p in topic["partitions"] if p["partition_index"] == self.partition), None)
        if part is None:
            raise PartitionGoneError(f"partition {self.name} does not exist")
        leader_id = part["leader_id"]
        if part["error_code"] == Errors.LEADER_NOT_AVAILABLE or leader_id < 0:
            raise _Retriable(Errors.LEADER_NOT_AVAILABLE)
        if leader_id not in self._brokers:
            raise _Retriable(Errors.LEADER_NOT_AVAILABLE)
        host, port = self._brokers[leader_id]
        self._leader = self._connect(host, port)
        return self._leader

    def _with_retries(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()`` with the leader looked up again after retriable errors."""
        attempt = 0
        while True:
            try:
                return call()
            except UnsupportedBrokerError:
                self._drop_leader()
                raise
            except (_Retriable, BrokerConnectionError, PartitionGoneError) as e:
                self._drop_leader()
                attempt += 1
                if attempt > self.retries:
                    if isinstance(e, PartitionGoneError):
                        raise
                    if isinstance(e, _Retriable) and e.code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                        raise PartitionGoneError(f"{self.name} does not exist") from None
                    raise FetchError(
                        f"{what} of {self.name} failed {attempt} times; last: {e}"
                    ) from e
                log.info("odradek: %s of %s: %s; retrying", what, self.name, e)
                time.sleep(self.retry_backoff_s * min(2 ** (attempt - 1), 20))

    # ---- requests ----------------------------------------------------------------------

    def list_offset(self, timestamp: int) -> int:
        """The earliest (-2) or latest (-1) offset, or the first at/after a timestamp."""

        def call() -> int:
            resp = self.leader().request(
                LIST_OFFSETS,
                LIST_OFFSETS_VERSION,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": self.topic,
                            "partitions": [
                                {
                                    "partition_index": self.partition,
                                    "current_leader_epoch": -1,
                                    "timestamp": timestamp,
                                }
                            ],
                        }
                    ],
                },
            )
            part = resp["topics"][0]["partitions"][0]
            code = part["error_code"]
            if code in RETRIABLE:
                raise _Retriable(code)
            if code != Errors.NONE:
                raise FetchError(f"ListOffsets for {self.name}: {error_name(code)}")
            return int(part["offset"])

        result: int = self._with_retries("ListOffsets", call)
        return result

    def watermarks(self) -> tuple[int, int]:
        """(log start offset, high watermark)."""
        return self.list_offset(EARLIEST_TIMESTAMP), self.list_offset(LATEST_TIMESTAMP)

    def _send_fetch(self, offset: int) -> None:
        conn = self.leader()
        conn.send(
            FETCH,
            FETCH_VERSION,
            {
                "replica_id": -1,
                "max_wait_ms": self.max_wait_ms,
                "min_bytes": 1,
                "max_bytes": self.max_bytes,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": self.topic,
                        "partitions": [
                            {
                                "partition": self.partition,
                                "current_leader_epoch": -1,
                                "fetch_offset": offset,
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": self.partition_max_bytes,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        self._inflight_offset = offset

    def fetch(self, offset: int) -> dict[str, Any]:
        """One Fetch at ``offset`` (using the request already in flight if it is for it).

        Returns the partition's response; raises :class:`_Retriable` for retriable errors.
        """
        conn = self.leader()
        if self._inflight_offset is not None and self._inflight_offset != offset:
            conn.receive()  # a prefetch we no longer want
            self._inflight_offset = None
        if self._inflight_offset is None:
            self._send_fetch(offset)
        self._inflight_offset = None
        resp = conn.receive()
        if resp["error_code"] != Errors.NONE:
            code = resp["error_code"]
            if code in RETRIABLE:
                raise _Retriable(code)
            raise FetchError(f"Fetch for {self.name}: {error_name(code)}")
        for t in resp["responses"]:
            for p in t["partitions"]:
                if p["partition_index"] == self.partition:
                    code = p["error_code"]
                    if code in RETRIABLE:
                        raise _Retriable(code)
                    return p  # type: ignore[no-any-return]
        raise FetchError(f"the Fetch response has no data for {self.name}")

    def prefetch(self, offset: int) -> None:
        """Send the Fetch for ``offset`` now; :meth:`fetch` picks its response up."""
        if self._leader is not None and self._inflight_offset is None:
            try:
                self._send_fetch(offset)
            except BrokerConnectionError:
                self._drop_leader()

    # ---- a range -----------------------------------------------------------------------

    def read_range(
        self,
        start: int,
        until: int,
        report_data_loss: DataLossReporter,
        *,
        timeout_s: float,
    ) -> Iterator[FetchedRecords]:
        """Raw records of ``[start, until)``, one Fetch response at a time.

        ``report_data_loss(message)`` is called where records of the range are gone (it raises
        when the query fails on data loss, else the lost records are skipped). No record is
        returned twice; records before ``start`` or from ``until`` on may be part of the bytes
        (the decoder drops them).
        """
        name = self.name
        try:
            try:
                low, high = self.watermarks()
            except PartitionGoneError as e:
                report_data_loss(f"{name} no longer exists ({e}): the topic was deleted.")
                return
            if start < low:
                report_data_loss(
                    f"Records {start} to {min(low, until) - 1} of {name} are no longer "
                    f"available (the log now starts at {low}): they were deleted by retention "
                    "or DeleteRecords, or the topic was recreated."
                )
                start = low
            if high < until:
                report_data_loss(
                    f"{name} ends at offset {high} but the query expected records up to "
                    f"{until - 1}: the topic may have been deleted and recreated."
                )
                until = high
            last_progress = time.monotonic()
            failures = 0
            while start < until:
                try:
                    part = self.fetch(start)
                except (_Retriable, BrokerConnectionError) as e:
                    self._drop_leader()
                    failures += 1
                    if failures > self.retries:
                        if isinstance(e, _Retriable) and e.code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                            report_data_loss(f"{name} no longer exists: the topic was deleted.")
                            return
                        raise FetchError(f"Fetch of {name} failed {failures} times; last: {e}") from e
                    log.info("odradek: Fetch of %s at %d: %s; retrying", name, start, e)
                    time.sleep(self.retry_backoff_s * min(2 ** (failures - 1), 20))
                    continue
                code = part["error_code"]
                if code != Errors.OFFSET_OUT_OF_RANGE:
                    failures = 0
                if code == Errors.OFFSET_OUT_OF_RANGE:
                    low, high = self.watermarks()
                    if start < low:
                        report_data_loss(
                            f"Records of {name} from offset {start} are no longer available "
                            f"(the log now starts at {low})."
                        )
                        start = low
                    elif start > high:
                        report_data_loss(
                            f"{name} now ends at offset {high} but the query expected records "
                            f"up to {until - 1}: the topic may have been deleted and recreated."
                        )
                        until = min(until, high)
                    else:  # in range after all (a leader change?): retry, a few times
                        failures += 1
                        if failures > self.retries:
                            raise FetchError(
                                f"Fetch of {name} at offset {start} keeps failing with "
                                f"OFFSET_OUT_OF_RANGE though the log holds {low} to {high}"
                            )
                        self._drop_leader()
                        time.sleep(self.retry_backoff_s)
                    continue
                if code != Errors.NONE:
                    raise FetchError(f"Fetch of {name} at offset {start}: {error_name(code)}")
                records = part["records"]
                records = memoryview(records) if records is not None else memoryview(b"")
                scan = scan_batches(records)
                if scan.next_offset is None:
                    if len(records) and scan.incomplete_size > self.partition_max_bytes:
                        # A batch larger than what we asked for: ask for all of it.
                        self.partition_max_bytes = scan.incomplete_size
                        self.max_bytes = max(self.max_bytes, scan.incomplete_size)
                        continue
                    hw = int(part["high_watermark"])
                    if 0 <= hw <= start and hw < until:
                        report_data_loss(
                            f"{name} now ends at offset {hw} but the query expected records "
                            f"up to {until - 1}."
                        )
                        until = hw
                        continue
                    if time.monotonic() - last_progress > timeout_s:
                        raise TimeoutError(
                            f"odradek data source: no record of {name} at offset {start} within "
                            f"kafkaConsumer.pollTimeoutMs={int(timeout_s * 1000)}"
                        )
                    continue
                last_progress = time.monotonic()
                begin, start = start, max(start, scan.next_offset)
                if start < until:
                    self.prefetch(start)
                yield FetchedRecords(records, scan, begin, until)
        finally:
            self._drop_leader()


class _Retriable(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(error_name(code))
        self.code = code
