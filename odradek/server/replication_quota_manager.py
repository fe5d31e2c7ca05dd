"""Replication throttles (Kafka's ``ReplicationQuotaManager`` and the throttle decisions of
``ReplicaManager.shouldLeaderThrottle`` / ``ReplicaFetcherThread.shouldFollowerThrottle``).

Sans-I/O: time comes in as an argument (milliseconds).

A broker has two quota managers: the leader's (``leader.replication.throttled.rate``, bytes/s of
throttled partitions sent to followers) and the follower's (``follower.replication.throttled.rate``,
bytes/s of throttled partitions fetched). Both rates are dynamic broker configs, default
``Long.MAX_VALUE`` (no throttle). Only the partitions the topic configs
``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas`` list for
*this* broker (``partition:broker,...``, or ``*`` for all) are throttled, and their bytes are the
only ones recorded (Kafka's ``sizeOfThrottledPartitions`` / ``processPartitionData``).

The rate is Kafka's ``SimpleRate`` over ``replication.quota.window.num`` (11) samples of
``replication.quota.window.size.seconds`` (1) each: the bytes recorded in the live samples over
the time since the oldest began (at least one sample's length). The quota is exceeded while that
rate is above the configured bytes/s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

# A throttled partition is logged at most this often per quota manager (the count goes on).
THROTTLE_LOG_INTERVAL_MS = 5000

LONG_MAX = (1 << 63) - 1
TopicPartition = tuple[str, int]

# A topic throttled on every partition (Kafka's ReplicationQuotaManager.AllReplicas).
ALL_REPLICAS = "*"


def parse_throttled_partitions(value: str, broker_id: int) -> set[int] | str:
    """The partitions a ``*.replication.throttled.replicas`` value throttles on ``broker_id``
    (Kafka's ``TopicConfigHandler.parseThrottledPartitions``): ``ALL_REPLICAS`` for ``*``, else
    the partitions of the ``partition:broker`` pairs naming this broker. Malformed pairs (the
    validator refuses them on the way in) are skipped."""
    value = value.strip()
    if value == ALL_REPLICAS:
        return ALL_REPLICAS
    out: set[int] = set()
    for item in value.split(","):
        part, sep, broker = item.strip().partition(":")
        if not sep:
            continue
        try:
            if int(broker) == broker_id:
                out.add(int(part))
        except ValueError:
            continue
    return out


@dataclass
class _Sample:
    start_ms: int
    value: float = 0.0


class SimpleRate:
    """Kafka's ``SimpleRate``: a windowed rate (per second) whose window is the time since the
    oldest live sample began, never shorter than one sample."""

    def __init__(self, num_samples: int, sample_ms: int) -> None:
        self.num_samples = max(1, num_samples)
        self.sample_ms = max(1, sample_ms)
        self._samples: list[_Sample] = []

    def _purge(self, now_ms: int) -> None:
        horizon = now_ms - self.num_samples * self.sample_ms
        self._samples = [s for s in self._samples if s.start_ms > horizon]

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if not self._samples or now_ms >= self._samples[-1].start_ms + self.sample_ms:
            self._samples.append(_Sample(now_ms))
            if len(self._samples) > self.num_samples:
                self._samples.pop(0)
        self._samples[-1].value += value

    def measure(self, now_ms: int) -> float:
        """Units per second."""
        self._purge(now_ms)
        if not self._samples:
            return 0.0
        total = sum(s.value for s in self._samples)
        elapsed = max(now_ms - self._samples[0].start_ms, self.sample_ms)
        return total * 1000.0 / elapsed


class ReplicationQuotaManager:
    """One side's replication throttle (Kafka's ``ReplicationQuotaManager``)."""

    def __init__(self, name: str, num_samples: int = 11, sample_seconds: int = 1, rate: int = LONG_MAX) -> None:
        self.name = name  # "Leader" or "Follower"
        self.rate = SimpleRate(num_samples, sample_seconds * 1000)
        self.quota_bytes_per_second = rate
        self._throttled: dict[str, set[int] | str] = {}
        # Counters (Kafka's metrics): throttled bytes recorded; fetches held back by the quota.
        self.recorded_bytes = 0
        self.throttled_count = 0
        self._last_logged_ms: int | None = None

    # -- configuration --------------------------------------------------------------------------

    def update_quota(self, bytes_per_second: int) -> None:
        self.quota_bytes_per_second = bytes_per_second

    def mark_throttled(self, topic: str, partitions: set[int] | str) -> None:
        """Throttle ``partitions`` of ``topic`` (``ALL_REPLICAS``: all of them; empty: none)."""
        if partitions == ALL_REPLICAS or partitions:
            self._throttled[topic] = partitions
        else:
            self._throttled.pop(topic, None)

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    # -- queries --------------------------------------------------------------------------------

    def is_throttled(self, tp: TopicPartition) -> bool:
        parts = self._throttled.get(tp[0])
        if parts is None:
            return False
        return parts == ALL_REPLICAS or tp[1] in parts

    def is_quota_exceeded(self, now_ms: int) -> bool:
        if self.quota_bytes_per_second >= LONG_MAX:
            return False
        return self.rate.measure(now_ms) > self.quota_bytes_per_second

    def record(self, nbytes: int, now_ms: int) -> None:
        self.recorded_bytes += nbytes
        self.rate.record(nbytes, now_ms)

    def measured_rate(self, now_ms: int) -> float:
        return self.rate.measure(now_ms)

    def note_throttled(self, tp: TopicPartition, now_ms: int) -> None:
        """A fetch was held back for ``tp``: counted, and logged at most every
        :data:`THROTTLE_LOG_INTERVAL_MS`."""
        self.throttled_count += 1
        if self._last_logged_ms is None or now_ms - self._last_logged_ms >= THROTTLE_LOG_INTERVAL_MS:
            self._last_logged_ms = now_ms
            log.info(
                "%s replication throttle: holding back %s-%d (%.0f B/s over the quota of %d B/s; "
                "%d fetches throttled so far)", self.name, tp[0], tp[1], self.rate.measure(now_ms),
                self.quota_bytes_per_second, self.throttled_count,
            )


def should_leader_throttle(
    quota: ReplicationQuotaManager | None, tp: TopicPartition, replica_in_isr: bool, now_ms: int
) -> bool:
    """A follower's fetch gets no records of ``tp`` (Kafka's ReplicaManager.shouldLeaderThrottle):
    the follower is not in the ISR, the partition is throttled here and the leader quota is
    exceeded. In-sync followers are never throttled, so ``acks=all`` is not slowed down."""
    return quota is not None and not replica_in_isr and quota.is_throttled(tp) and quota.is_quota_exceeded(now_ms)


class _FetchResult(Protocol):
    """A FetchPartitionResult, as far as the leader's accounting reads it."""

    @property
    def request(self) -> Any: ...

    @property
    def result(self) -> Any: ...


def record_leader_throttled(quota: ReplicationQuotaManager, results: Sequence[_FetchResult], now_ms: int) -> None:
    """Count the bytes of throttled partitions sent to a follower against the leader quota
    (Kafka's KafkaApis.sizeOfThrottledPartitions, recorded once per response)."""
    size = sum(
        len(r.result.records) for r in results
        if r.result.records and quota.is_throttled((r.request.topic, r.request.partition))
    )
    if size:
        quota.record(size, now_ms)


def should_follower_throttle(
    quota: ReplicationQuotaManager | None, tp: TopicPartition, replica_in_sync: bool, now_ms: int
) -> bool:
    """The fetcher leaves ``tp`` out of its next Fetch (Kafka's shouldFollowerThrottle): this
    replica is not caught up with the leader's high watermark, the partition is throttled here
    and the follower quota is exceeded."""
    return quota is not None and not replica_in_sync and quota.is_throttled(tp) and quota.is_quota_exceeded(now_ms)


class ReplicationQuotas:
    """A broker's two replication throttles, kept in step with its configs (Kafka's
    ``QuotaFactory`` leader/follower quotas, the ``TopicConfigHandler`` and
    ``DynamicReplicationQuotaCallback``)."""

    def __init__(self, broker_id: int, num_samples: int = 11, sample_seconds: int = 1) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuotaManager("Leader", num_samples, sample_seconds)
        self.follower = ReplicationQuotaManager("Follower", num_samples, sample_seconds)

    def update_rates(self, leader_rate: int, follower_rate: int) -> None:
        """The dynamic broker configs ``leader.replication.throttled.rate`` /
        ``follower.replication.throttled.rate``."""
        self.leader.update_quota(leader_rate)
        self.follower.update_quota(follower_rate)

    def update_topic(self, topic: str, config: Mapping[str, str] | None) -> None:
        """A topic's configs changed (None: the topic is gone)."""
        if config is None:
            self.leader.remove_throttle(topic)
            self.follower.remove_throttle(topic)
            return
        for quota, key in (
            (self.leader, "leader.replication.throttled.replicas"),
            (self.follower, "follower.replication.throttled.replicas"),
        ):
            quota.mark_throttled(topic, parse_throttled_partitions(str(config.get(key, "")), self.broker_id))
