"""Prometheus collectors that read Odradek's state at scrape time.

Names are those the Prometheus JMX exporter's standard Kafka rules give Kafka's MBeans
(``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=t`` →
``kafka_server_brokertopicmetrics_messagesin_total{topic="t"}``; meters become counters,
timers histograms in milliseconds, gauges gauges). Consumer lag is not a broker MBean in Kafka:
it is exported under kafka_exporter's name, ``kafka_consumergroup_lag{consumergroup,topic,
partition}``, which existing dashboards use, by the group's coordinator for every committed
partition (the leaders' high watermarks of partitions not hosted there come from
:mod:`odradek.metrics.leader_offsets`).

The collectors run on the event loop (the ``/metrics`` handler is an asyncio one), so they read
the broker's dicts in a consistent state; the request path only ever bumps counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from odradek.log.log_flush_stats import LOG_FLUSH_STATS
from odradek.network.request_metrics import RequestMetrics

if TYPE_CHECKING:
    from odradek.coordinator.group.group_coordinator import GroupCoordinator
    from odradek.metrics.leader_offsets import LeaderOffsets
    from odradek.network.socket_server import SocketServer
    from odradek.server.broker_topic_stats import BrokerTopicStats
    from odradek.server.client_quotas import ClientQuotaManagers
    from odradek.server.replica_manager import ReplicaManager


def _with_and_without_label(
    name: str, doc: str, total: float, per_label: Iterable[tuple[str, float]], label: str
) -> Metric:
    """A counter with one sample for all (no label) and one per ``label`` value, as the JMX
    exporter writes BrokerTopicMetrics."""
    metric = Metric(name, doc, "counter")
    metric.add_sample(name + "_total", {}, total)
    for value, n in per_label:
        metric.add_sample(name + "_total", {label: value}, n)
    return metric


class RequestCollector(Collector):
    """kafka.network:type=RequestMetrics: requests, errors and total time per API."""

    def __init__(self, metrics: RequestMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests", "Requests completed, per API and version",
            labels=["request", "version"],
        )
        for (api, version), n in sorted(m.requests.items()):
            requests.add_metric([api, str(version)], n)
        yield requests
        errors = CounterMetricFamily(
            "kafka_network_requestmetrics_errors", "Responses with a top-level error, per API and error",
            labels=["request", "error"],
        )
        for (api, error), n in sorted(m.errors.items()):
            errors.add_metric([api, error], n)
        yield errors
        docs = (
            ("totaltimems", "Time from a request's arrival to its response being ready (ms), per API"),
            ("localtimems", "Time spent handling a request (ms), per API"),
            ("remotetimems", "Time a request waited for a delayed operation (ms), per API"),
        )
        times = sorted(m.times_ms.items())
        for i, (name, doc) in enumerate(docs):
            family = HistogramMetricFamily("kafka_network_requestmetrics_" + name, doc, labels=["request"])
            for api, hists in times:
                family.add_metric([api], hists[i].cumulative(), hists[i].sum)
            yield family
        # Kafka's RequestBytes; it has no response size metric, hence Odradek's name for that.
        sizes = sorted(m.sizes.items())
        for i, (name, doc) in enumerate((
            ("kafka_network_requestmetrics_requestbytes", "Request sizes (bytes), per API"),
            ("odradek_network_requestmetrics_responsebytes", "Response sizes (bytes), per API"),
        )):
            family = HistogramMetricFamily(name, doc, labels=["request"])
            for api, pair in sizes:
                family.add_metric([api], pair[i].cumulative(), pair[i].sum)
            yield family


class QuotaCollector(Collector):
    """Kafka's client quota sensors (``kafka.server:type=Produce|Fetch|Request,user=U,client-id=C``
    with ``throttle-time`` and ``byte-rate`` / ``request-time``), for the quota entities with a
    live sensor. ``user`` / ``client_id`` are the sensor's tags: empty where the quota that
    applies is not set on that part (as in Kafka)."""

    def __init__(self, quotas: ClientQuotaManagers) -> None:
        self.quotas = quotas

    def collect(self) -> Iterator[Metric]:
        q = self.quotas
        now = q.clock_ms()
        for kind, manager, rate_name, rate_doc in (
            ("produce", q.produce, "byte_rate", "Bytes produced per second"),
            ("fetch", q.fetch, "byte_rate", "Bytes fetched per second"),
            ("request", q.request, "request_time", "Request handler time, percent of one thread"),
        ):
            prefix = f"kafka_server_{kind}_"
            rate = GaugeMetricFamily(
                prefix + rate_name, f"{rate_doc}, per quota entity (user, client id)", labels=["user", "client_id"]
            )
            throttle = GaugeMetricFamily(
                prefix + "throttle_time",
                "Average throttle time (ms) of the throttled responses of the last minute, per quota entity",
                labels=["user", "client_id"],
            )
            for user, client_id, value, avg in manager.sensor_metrics(now):
                rate.add_metric([user, client_id], value)
                throttle.add_metric([user, client_id], avg)
            yield rate
            yield throttle


class ConnectionCollector(Collector):
    """kafka.server:type=socket-server-metrics,listener=L,name=connection-count."""

    def __init__(self, sockets: Sequence[SocketServer]) -> None:
        self.sockets = sockets

    def collect(self) -> Iterator[Metric]:
        conns = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count", "Open connections per listener",
            labels=["listener"],
        )
        counts: dict[str, int] = {}
        for s in self.sockets:
            counts[s.listener_name] = counts.get(s.listener_name, 0) + s.connection_count
        for listener, n in sorted(counts.items()):
            conns.add_metric([listener], n)
        yield conns


class LogFlushCollector(Collector):
    """kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs (the process's fsyncs)."""

    def collect(self) -> Iterator[Metric]:
        buckets, total = LOG_FLUSH_STATS.snapshot()
        h = HistogramMetricFamily(
            "kafka_log_logflushstats_logflushrateandtimems", "Time of partition log flushes (ms)"
        )
        h.add_metric([], buckets, total)
        yield h


class BrokerCollector(Collector):
    """The broker role: topic traffic, replica manager, purgatories, connections, groups."""

    def __init__(
        self, replica_manager: ReplicaManager, group_coordinator: Callable[[], GroupCoordinator | None],
        leader_offsets: LeaderOffsets | None = None,
    ) -> None:
        self.rm = replica_manager
        self.group_coordinator = group_coordinator
        # The high watermarks of committed partitions without a replica here (None: such
        # partitions have no lag sample, as in ZooKeeper mode).
        self.leader_offsets = leader_offsets

    def collect(self) -> Iterator[Metric]:
        yield from _topic_metrics(self.rm.topic_stats)
        yield from self._replica_manager()
        purgatory = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Delayed operations waiting in the purgatory", labels=["delayedoperation"],
        )
        for p in (self.rm.produce_purgatory, self.rm.fetch_purgatory):
            purgatory.add_metric([p.name], p.watched())
        yield purgatory
        gc = self.group_coordinator()
        if gc is not None:
            yield from self._groups(gc)

    def _replica_manager(self) -> Iterator[Metric]:
        rm = self.rm
        leaders = [p for p in rm.partitions.values() if p.is_leader]
        under = sum(1 for p in leaders if len(p.isr) < len(p.replicas))
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions led here whose ISR is smaller than their replica set", value=under,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_partitioncount", "Partitions hosted here", value=len(rm.partitions)
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_leadercount", "Partitions led here", value=len(leaders)
        )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks", "ISR shrinks committed", value=rm.isr_shrinks
        )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands", "ISR expansions committed", value=rm.isr_expands
        )

    def _groups(self, gc: GroupCoordinator) -> Iterator[Metric]:
        groups = gc.metadata_manager.owned_groups()
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield GaugeMetricFamily(prefix + "numgroups", "Groups coordinated here", value=len(groups))
        states: dict[str, int] = dict.fromkeys(
            ("Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead", "Assigning", "Reconciling"), 0
        )
        offsets = 0
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "Committed offset's distance to the high watermark, per group and partition (the local "
            "one where the coordinator has a replica, else the leader's, refreshed every 10 s)",
            labels=["consumergroup", "topic", "partition"],
        )
        partitions = self.rm.partitions
        remote = self.leader_offsets.high_watermarks if self.leader_offsets is not None else {}
        for g in groups:
            states[g.state_name] = states.get(g.state_name, 0) + 1
            committed: dict[tuple[str, int], Any] = getattr(g, "offsets", {})
            offsets += len(committed)
            for (topic, partition), om in committed.items():
                p = partitions.get((topic, partition))
                hw = p.log.high_watermark if p is not None and p.log is not None else remote.get((topic, partition))
                if hw is None:
                    continue
                lag.add_metric([g.group_id, topic, str(partition)], max(0, hw - om.offset))
        for state, n in states.items():
            yield GaugeMetricFamily(prefix + "numgroups" + state.lower(), f"Groups in state {state}", value=n)
        yield GaugeMetricFamily(prefix + "numoffsets", "Committed offsets of the groups coordinated here", value=offsets)
        yield lag


def _topic_metrics(stats: BrokerTopicStats) -> Iterator[Metric]:
    prefix = "kafka_server_brokertopicmetrics_"
    topics = sorted(stats.topics.items())
    a = stats.all_topics
    yield _with_and_without_label(
        prefix + "messagesin", "Messages appended", a.messages_in,
        ((t, s.messages_in) for t, s in topics), "topic",
    )
    yield _with_and_without_label(
        prefix + "bytesin", "Bytes appended by producers", a.bytes_in,
        ((t, s.bytes_in) for t, s in topics), "topic",
    )
    yield _with_and_without_label(
        prefix + "bytesout", "Bytes fetched by consumers", a.bytes_out,
        ((t, s.bytes_out) for t, s in topics), "topic",
    )
    yield CounterMetricFamily(
        prefix + "replicationbytesout", "Bytes fetched by follower replicas", value=a.replication_bytes_out
    )


def _controller_metrics(active: bool, partitions: int, offline: int, topics: int) -> Iterator[Metric]:
    prefix = "kafka_controller_kafkacontroller_"
    yield GaugeMetricFamily(prefix + "activecontrollercount", "1 on the active controller", value=int(active))
    # Reported by the active controller only (0 elsewhere), so that a sum over nodes is the
    # cluster's count, as with Kafka's ZooKeeper controller.
    yield GaugeMetricFamily(
        prefix + "globalpartitioncount", "Partitions in the cluster", value=partitions if active else 0
    )
    yield GaugeMetricFamily(prefix + "globaltopiccount", "Topics in the cluster", value=topics if active else 0)
    yield GaugeMetricFamily(
        prefix + "offlinepartitionscount", "Partitions without a leader", value=offline if active else 0
    )


class QuorumControllerCollector(Collector):
    """kafka.controller:type=KafkaController gauges of a KRaft controller."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller  # a QuorumController

    def collect(self) -> Iterator[Metric]:
        c = self.controller
        by_name = c.image.topics.by_name
        parts = [r for t in by_name.values() for r in t.partitions.values()]
        offline = sum(1 for r in parts if r.leader < 0)
        yield from _controller_metrics(c.is_active, len(parts), offline, len(by_name))


class ZkControllerCollector(Collector):
    """kafka.controller:type=KafkaController gauges of a ZooKeeper-mode controller."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller  # a KafkaController (its context is the event thread's)

    def collect(self) -> Iterator[Metric]:
        c = self.controller
        ctx = c.context
        assignments = list(ctx.partition_assignments.values())
        partitions = sum(len(parts) for parts in assignments)
        yield from _controller_metrics(c.is_active, partitions, ctx.offline_partition_count, len(assignments))
