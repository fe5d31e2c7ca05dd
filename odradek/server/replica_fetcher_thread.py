"""ReplicaFetcherThread: a follower's fetch loop against one leader broker (Kafka's
``ReplicaFetcherThread`` / ``AbstractFetcherThread``), as an asyncio task.

Each round sends one Fetch carrying this broker's replica id (``replica_id`` up to v14, the
``ReplicaState`` with its broker epoch from v15), every partition's fetch offset (its log end
offset), current leader epoch and last fetched epoch (the latest epoch of its leader epoch cache),
with the ``replica.fetch.*`` settings. Per partition of the answer:

- records are appended with the leader's offsets and epochs (``append_as_follower``), and the
  leader's high watermark (never beyond this log's end) and log start offset are taken;
- a diverging epoch (KIP-320) truncates the log to where it agrees with the leader
  (:func:`truncation_offset`, Kafka's getOffsetTruncationState) — never blindly to the HW — and
  fetching goes on from there with the new last fetched epoch;
- OFFSET_OUT_OF_RANGE asks the leader for its log end (OffsetForLeaderEpoch at its current epoch)
  and start (ListOffsets): a log beyond the leader's end is truncated to it, a log wholly below
  the leader's start restarts empty there (Kafka's handleOutOfRangeError);
- other errors (not the leader yet, epochs that disagree, a broken connection) back off for
  ``replica.fetch.backoff.ms`` and retry; the metadata moves partitions to another fetcher.

An answer is applied only if the partition is still fetched at the same offset and leader epoch
as when the request left (a leadership change meanwhile discards it).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from odradek.cluster.partition import Partition
from odradek.log.errors import LogError
from odradek.log.leader_epoch import UNDEFINED_EPOCH
from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, KafkaError
from odradek.protocol.messages import generated as g
from odradek.records.errors import RecordError
from odradek.server.replication_quota_manager import (
    ReplicationQuotaManager,
    should_follower_throttle,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# The Fetch versions a follower can use: diverging epochs need v12; up to v17 (ReplicaState v15).
MIN_FOLLOWER_FETCH_VERSION = 12
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True)
class FetcherConfig:
    """The ``replica.*`` settings a fetcher uses (Kafka's names and defaults)."""

    node_id: int
    fetch_max_bytes: int = 1048576  # replica.fetch.max.bytes (per partition)
    fetch_response_max_bytes: int = 10485760  # replica.fetch.response.max.bytes
    fetch_wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    fetch_min_bytes: int = 1  # replica.fetch.min.bytes
    fetch_backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30000  # replica.socket.timeout.ms


@dataclass(frozen=True)
class SourceBroker:
    broker_id: int
    host: str
    port: int


@dataclass
class PartitionFetchState:
    """Where a partition is fetched from (Kafka's PartitionFetchState)."""

    topic_id: uuid.UUID
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int = UNDEFINED_EPOCH
    delayed_until: float = 0.0  # monotonic seconds: backing off after an error
    lag: int | None = None  # the leader's HW minus the fetch offset after the last fetch

    @property
    def is_replica_in_sync(self) -> bool:
        """Caught up with the leader's high watermark (Kafka's isReplicaInSync)."""
        return self.lag is not None and self.lag <= 0


def truncation_offset(
    diverging_epoch: int, diverging_end_offset: int, local_end_for_epoch: tuple[int, int], log_end_offset: int
) -> tuple[int, bool]:
    """Where a follower truncates when the leader answers its fetch with a diverging epoch
    (Kafka's getOffsetTruncationState). ``local_end_for_epoch``: the follower's own
    ``end_offset_for_epoch(diverging_epoch)``. Returns (offset, complete): not complete when the
    follower does not know that epoch — it truncates to the end of its largest epoch below it and
    fetches again, so the leader can compare once more."""
    epoch, end = local_end_for_epoch
    if epoch == UNDEFINED_EPOCH or end < 0:
        # This log tracks no epoch at or below the leader's: the leader's end offset is safe.
        return min(diverging_end_offset, log_end_offset), True
    if epoch != diverging_epoch:
        return min(end, log_end_offset), False
    return min(end, diverging_end_offset, log_end_offset), True


class FetcherTarget(Protocol):
    """What the fetcher needs from the replica manager."""

    def follower_partition(self, tp: TopicPartition) -> Partition | None:
        """The partition when it follows, its log ready (no log work queued); else None."""

    def broker_epoch(self) -> int: ...

    def clock_ms(self) -> int: ...

    def follower_appended(self, tp: TopicPartition) -> None:
        """Records or a new HW arrived (consumers reading from this follower may complete)."""


ClientFactory = Callable[[SourceBroker, str], NetworkClient]


def _default_client(source: SourceBroker, client_id: str) -> NetworkClient:
    return NetworkClient(source.host, source.port, client_id, max_in_flight=1, sasl_role="broker")


class ReplicaFetcherThread:
    def __init__(
        self,
        fetcher_id: int,
        source: SourceBroker,
        target: FetcherTarget,
        config: FetcherConfig,
        client_factory: ClientFactory = _default_client,
        quota: ReplicationQuotaManager | None = None,
    ) -> None:
        self.fetcher_id = fetcher_id
        self.quota = quota  # the follower replication throttle (None: never throttled)
        self.source = source
        self.target = target
        self.config = config
        self.name = f"ReplicaFetcherThread-{fetcher_id}-{source.broker_id}"
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._client_factory = client_factory
        self._client: NetworkClient | None = None
        self._fetch_version = -1
        self._versions: dict[int, tuple[int, int]] = {}
        self._task: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()
        self._stopped = False

    # -- partitions -----------------------------------------------------------------------------

    def add_partitions(self, states: dict[TopicPartition, PartitionFetchState]) -> None:
        for tp, st in states.items():
            old = self.partitions.get(tp)
            if old is not None and old.current_leader_epoch == st.current_leader_epoch:
                continue  # already fetching at this epoch: keep its position
            self.partitions[tp] = st
        self._wakeup.set()

    def remove_partitions(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def shutdown(self) -> None:
        self._stopped = True
        self._wakeup.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _run(self) -> None:
        backoff = self.config.fetch_backoff_ms / 1000.0
        while not self._stopped:
            if not self.partitions:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                fetched = await self._do_work()
            except asyncio.CancelledError:
                raise
            except (ConnectionClosed, OSError, TimeoutError) as e:
                log.info("%s: fetch from broker %d at %s:%d failed: %s; retrying in %d ms", self.name,
                         self.source.broker_id, self.source.host, self.source.port, e, self.config.fetch_backoff_ms)
                await self._drop_client()
                await self._sleep(backoff)
                continue
            except Exception:
                log.exception("%s: unexpected error; retrying in %d ms", self.name, self.config.fetch_backoff_ms)
                await self._drop_client()
                await self._sleep(backoff)
                continue
            if not fetched:
                await self._sleep(min(backoff, 0.1))

    async def _sleep(self, seconds: float) -> None:
        self._wakeup.clear()
        try:
            await asyncio.wait_for(self._wakeup.wait(), seconds)
        except TimeoutError:
            pass

    async def _drop_client(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    # -- the network ----------------------------------------------------------------------------

    async def _send(self, api: Any, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send at the highest version both sides have (asked with ApiVersions on connecting)."""
        if self._client is None:
            self._client = self._client_factory(self.source, f"broker-{self.config.node_id}-fetcher-{self.fetcher_id}")
            resp = await asyncio.wait_for(
                self._client.send(g.API_VERSIONS, 3, {"client_software_name": "odradek", "client_software_version": "1"}),
                timeout_s,
            )
            self._versions = {a["api_key"]: (a["min_version"], a["max_version"]) for a in resp["api_keys"]}
            lo, hi = self._versions.get(m.FETCH.api_key, (0, -1))
            self._fetch_version = min(hi, m.FETCH.max_version)
            if self._fetch_version < MIN_FOLLOWER_FETCH_VERSION or lo > self._fetch_version:
                raise ConnectionClosed(f"broker {self.source.broker_id} serves Fetch only up to v{hi}")
        if api is m.FETCH:
            version = self._fetch_version
        else:
            lo, hi = self._versions.get(api.api_key, (0, -1))
            version = min(hi, api.max_version)
            if version < max(lo, api.min_version):
                raise ConnectionClosed(f"broker {self.source.broker_id} does not serve API {api.api_key}")
        return await asyncio.wait_for(self._client.send(api, version, body), timeout_s)

    # -- one round ------------------------------------------------------------------------------

    def _fetch_request(self, now: float) -> tuple[dict[str, Any], dict[TopicPartition, PartitionFetchState]]:
        topics: dict[str, dict[str, Any]] = {}
        sent: dict[TopicPartition, PartitionFetchState] = {}
        now_ms = self.target.clock_ms()
        for tp, st in self.partitions.items():
            if st.delayed_until > now or self.target.follower_partition(tp) is None:
                continue
            if should_follower_throttle(self.quota, tp, st.is_replica_in_sync, now_ms):
                assert self.quota is not None
                self.quota.note_throttled(tp, now_ms)
                continue  # over the follower quota: left out of this fetch
            sent[tp] = PartitionFetchState(st.topic_id, st.fetch_offset, st.current_leader_epoch, st.last_fetched_epoch)
            p = self.target.follower_partition(tp)
            assert p is not None and p.log is not None
            entry = topics.setdefault(tp[0], {"topic": tp[0], "topic_id": st.topic_id, "partitions": []})
            entry["partitions"].append({
                "partition": tp[1],
                "current_leader_epoch": st.current_leader_epoch,
                "fetch_offset": st.fetch_offset,
                "last_fetched_epoch": st.last_fetched_epoch,
                "log_start_offset": p.log.log_start_offset,
                "partition_max_bytes": self.config.fetch_max_bytes,
            })
        cfg = self.config
        body = {
            "replica_id": cfg.node_id,
            "replica_state": {"replica_id": cfg.node_id, "replica_epoch": self.target.broker_epoch()},
            "max_wait_ms": cfg.fetch_wait_max_ms,
            "min_bytes": cfg.fetch_min_bytes,
            "max_bytes": cfg.fetch_response_max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,  # no fetch session: every request is a full one
            "topics": list(topics.values()),
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        return body, sent

    async def _do_work(self) -> bool:
        """One fetch round; False when there was nothing to fetch."""
        body, sent = self._fetch_request(time.monotonic())
        if not sent:
            return False
        timeout = (self.config.socket_timeout_ms + self.config.fetch_wait_max_ms) / 1000.0
        resp = await self._send(m.FETCH, body, timeout)
        if resp.get("error_code", 0) != Errors.NONE:
            log.info("%s: Fetch answered %s", self.name, Errors(resp["error_code"]).name)
            self._back_off(list(sent))
            return True
        for t in resp["responses"]:
            name = t.get("topic") or self._topic_name(t.get("topic_id"))
            for pd in t["partitions"]:
                tp = (name, pd["partition_index"])
                req = sent.get(tp)
                if req is None:
                    continue
                await self._process_partition(tp, req, pd)
        return True

    def _topic_name(self, topic_id: Any) -> str:
        for (topic, _), st in self.partitions.items():
            if st.topic_id == topic_id:
                return topic
        return ""

    def _back_off(self, tps: list[TopicPartition]) -> None:
        until = time.monotonic() + self.config.fetch_backoff_ms / 1000.0
        for tp in tps:
            st = self.partitions.get(tp)
            if st is not None:
                st.delayed_until = until

    async def _process_partition(self, tp: TopicPartition, req: PartitionFetchState, pd: dict[str, Any]) -> None:
        st = self.partitions.get(tp)
        p = self.target.follower_partition(tp)
        if (
            st is None or p is None or p.log is None
            or st.fetch_offset != req.fetch_offset or st.current_leader_epoch != req.current_leader_epoch
        ):
            return  # the partition moved on while the request was out: its answer is stale
        error = Errors(pd["error_code"])
        if error == Errors.NONE:
            div = pd.get("diverging_epoch") or {}
            if div.get("epoch", -1) >= 0 and div.get("end_offset", -1) >= 0:
                self._truncate_on_divergence(tp, st, p, div["epoch"], div["end_offset"])
                return
            try:
                p.append_records_as_follower(
                    pd.get("records") or b"", pd["high_watermark"], pd.get("log_start_offset", -1),
                    self.target.clock_ms(),
                )
            except (RecordError, LogError, KafkaError) as e:
                log.error("%s: could not append the records of %s-%d fetched at %d: %s", self.name,
                          tp[0], tp[1], req.fetch_offset, e)
                self._back_off([tp])
                return
            st.fetch_offset = p.log.log_end_offset
            st.last_fetched_epoch = p.log.latest_epoch
            st.lag = max(0, pd["high_watermark"] - st.fetch_offset)
            if self.quota is not None and self.quota.is_throttled(tp):
                self.quota.record(len(pd.get("records") or b""), self.target.clock_ms())
            self.target.follower_appended(tp)
            return
        if error == Errors.OFFSET_OUT_OF_RANGE:
            try:
                await self._handle_out_of_range(tp, st, p)
            except (ConnectionClosed, OSError, TimeoutError, KafkaError) as e:
                log.info("%s: resetting %s-%d after OFFSET_OUT_OF_RANGE failed: %s", self.name, tp[0], tp[1], e)
                self._back_off([tp])
            return
        # NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH (the leader's metadata is behind),
        # FENCED_LEADER_EPOCH (ours is: the metadata will move the partition), storage errors...
        log.debug("%s: %s-%d answered %s; backing off", self.name, tp[0], tp[1], error.name)
        self._back_off([tp])

    def _truncate_on_divergence(
        self, tp: TopicPartition, st: PartitionFetchState, p: Partition, epoch: int, end_offset: int
    ) -> None:
        lg = p.log
        assert lg is not None
        leo = lg.log_end_offset
        offset, complete = truncation_offset(epoch, end_offset, lg.end_offset_for_epoch(epoch), leo)
        log.info(
            "%s: %s-%d diverges from the leader at epoch %d (leader's end offset %d): truncating "
            "from %d to %d%s", self.name, tp[0], tp[1], epoch, end_offset, leo, offset,
            "" if complete else " (and asking again)",
        )
        lg.truncate_to(offset)
        st.fetch_offset = lg.log_end_offset
        st.last_fetched_epoch = lg.latest_epoch

    async def _handle_out_of_range(self, tp: TopicPartition, st: PartitionFetchState, p: Partition) -> None:
        timeout = self.config.socket_timeout_ms / 1000.0
        epoch_req = {
            "replica_id": self.config.node_id,
            "topics": [{"topic": tp[0], "partitions": [{
                "partition": tp[1], "current_leader_epoch": st.current_leader_epoch,
                "leader_epoch": st.current_leader_epoch,
            }]}],
        }
        resp = await self._send(m.OFFSET_FOR_LEADER_EPOCH, epoch_req, timeout)
        part = resp["topics"][0]["partitions"][0]
        if part["error_code"] != Errors.NONE:
            raise KafkaError(Errors(part["error_code"]), "OffsetForLeaderEpoch for the leader's end offset")
        leader_end = part["end_offset"]
        lg = p.log
        assert lg is not None
        if self.partitions.get(tp) is not st or p.log is not lg:
            return
        if 0 <= leader_end < lg.log_end_offset:
            log.warning(
                "%s: %s-%d: the leader's log ends at %d, below this replica's %d (an unclean "
                "election?): truncating to it", self.name, tp[0], tp[1], leader_end, lg.log_end_offset,
            )
            lg.truncate_to(leader_end)
        else:
            list_req = {
                "replica_id": self.config.node_id, "isolation_level": 0,
                "topics": [{"name": tp[0], "partitions": [{
                    "partition_index": tp[1], "current_leader_epoch": st.current_leader_epoch,
                    "timestamp": EARLIEST_TIMESTAMP,
                }]}],
            }
            lresp = await self._send(m.LIST_OFFSETS, list_req, timeout)
            lpart = lresp["topics"][0]["partitions"][0]
            if lpart["error_code"] != Errors.NONE:
                raise KafkaError(Errors(lpart["error_code"]), "ListOffsets for the leader's log start")
            leader_start = lpart["offset"]
            if self.partitions.get(tp) is not st or p.log is not lg:
                return
            if leader_start > lg.log_end_offset:
                log.info("%s: %s-%d restarts empty at the leader's log start offset %d", self.name,
                         tp[0], tp[1], leader_start)
                lg.truncate_fully_and_start_at(leader_start)
        st.fetch_offset = lg.log_end_offset
        st.last_fetched_epoch = lg.latest_epoch
