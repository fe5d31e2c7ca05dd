"""The Prometheus endpoint: ``GET /metrics`` on ``metrics.prometheus.listener``.

One :class:`PrometheusEndpoint` per process (KRaft broker, controller or both; ZooKeeper-mode
broker) with its own registry, so that several embedded brokers in one interpreter do not mix
their numbers. It is served by a small asyncio handler on the process's event loop: the
collectors (:mod:`odradek.metrics.collectors`) read the broker's state there, and the exposition
text comes from prometheus_client's ``generate_latest``. Each answer closes its connection; a
request head larger than 16 KiB or slower than 10 s is dropped.

It also measures the event loop's lag (``odradek_eventloop_lag_seconds``): how late a 0.5 s
sleep wakes up, i.e. how long the loop was busy with something else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from odradek.metrics.collectors import ConnectionCollector, LogFlushCollector, RequestCollector
from odradek.metrics.listener import parse_http_listener
from odradek.network.request_metrics import RequestMetrics
from odradek.network.socket_server import SocketServer
from odradek.server.api_dispatcher import ApiDispatcher
from odradek.server.dir_lock import StartupError
from odradek.server.kafka_config import KafkaConfig

log = logging.getLogger(__name__)

LAG_INTERVAL_S = 0.5
_MAX_HEAD_BYTES = 16 * 1024
_READ_TIMEOUT_S = 10.0


class _LagCollector(Collector):
    def __init__(self, endpoint: PrometheusEndpoint) -> None:
        self.endpoint = endpoint

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "odradek_eventloop_lag_seconds",
            f"How late the event loop last woke from a {LAG_INTERVAL_S} s sleep",
            value=self.endpoint.event_loop_lag_s,
        )


class PrometheusEndpoint:
    def __init__(self, listener: str) -> None:
        self.host, self._requested_port = parse_http_listener(listener)
        self.port = self._requested_port
        self.registry = CollectorRegistry(auto_describe=False)
        self.request_metrics = RequestMetrics()
        self.event_loop_lag_s = 0.0
        self.sockets: list[SocketServer] = []  # every listener of the process
        for c in (
            RequestCollector(self.request_metrics), ConnectionCollector(self.sockets), LogFlushCollector(),
            _LagCollector(self),
        ):
            self.registry.register(c)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._server: asyncio.Server | None = None
        self._lag_task: asyncio.Task[None] | None = None

    def add(self, collector: Collector) -> None:
        self.registry.register(collector)

    def observe(self, apis: ApiDispatcher, sockets: list[SocketServer]) -> None:
        """Count ``apis``' completed requests into this endpoint's request metrics, and the
        connections of the listeners it serves."""
        apis.request_metrics = self.request_metrics
        self.sockets.extend(sockets)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    async def start(self) -> None:
        """Listen (a port that cannot be bound raises StartupError) and start measuring the
        event loop's lag."""
        try:
            self._server = await asyncio.start_server(
                self._serve, self.host, self._requested_port, limit=_MAX_HEAD_BYTES
            )
        except OSError as e:
            reason = os.strerror(e.errno) if e.errno else str(e)
            raise StartupError(
                f"cannot listen on {self.host}:{self._requested_port} (metrics.prometheus.listener): "
                f"{reason[:1].lower()}{reason[1:]}"
            ) from e
        self.port = self._server.sockets[0].getsockname()[1]
        self._lag_task = asyncio.get_running_loop().create_task(self._measure_lag(), name="event-loop-lag")
        log.info("Prometheus metrics on %s", self.url)

    async def stop(self) -> None:
        if self._lag_task is not None:
            self._lag_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lag_task
            self._lag_task = None
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _measure_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(LAG_INTERVAL_S)
            self.event_loop_lag_s = max(0.0, loop.time() - t - LAG_INTERVAL_S)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            method, path = (line[0], line[1].split("?", 1)[0]) if len(line) >= 2 else ("", "")
            if method not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET /metrics\n"
            elif path != "/metrics":
                status, ctype, body = "404 Not Found", "text/plain", b"metrics are on /metrics\n"
            else:
                try:
                    status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
                except Exception:
                    log.exception("Collecting the Prometheus metrics failed")
                    status, ctype, body = "500 Internal Server Error", "text/plain", b"collection failed\n"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode("latin-1")
            )
            if method != "HEAD":
                writer.write(body)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            writer.close()


def prometheus_endpoint(cfg: KafkaConfig) -> PrometheusEndpoint | None:
    """The endpoint ``metrics.prometheus.listener`` asks for, or None when it is not set."""
    listener = cfg.get("metrics.prometheus.listener")
    return PrometheusEndpoint(listener) if listener else None


def observe_requests(
    apis: ApiDispatcher, sockets: list[SocketServer], cfg: KafkaConfig, endpoint: PrometheusEndpoint | None
) -> None:
    """Give the request handler of the listeners ``sockets`` the slow-request threshold and,
    when metrics are served, the request metrics to count into."""
    apis.slow_request_ms = float(cfg.get("request.slow.threshold.ms"))
    if endpoint is not None:
        endpoint.observe(apis, sockets)
