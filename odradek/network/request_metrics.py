"""What a listener counts and logs per completed request (Kafka's ``RequestMetrics`` and its
``kafka.request.logger``).

:class:`RequestMetrics` keeps plain counters (requests per API and version, top-level errors per
API) and latency histograms per API (total, local, remote: Kafka's TotalTimeMs, LocalTimeMs,
RemoteTimeMs); the Prometheus endpoint reads them at scrape time.
Nothing here locks or formats on the request path: a completed request costs a few dict and list
updates.

:func:`log_request` writes one line per completed request on the logger named
``kafka.request.logger`` (as Kafka's) at DEBUG — off unless that logger is enabled at DEBUG
(``odradek server --log-level kafka.request.logger=DEBUG``) — and a WARNING line, with the same
fields, for every request slower than ``request.slow.threshold.ms`` (0: never; for the long
polls Fetch, JoinGroup and SyncGroup only the time spent handling them counts, not the wait).
When neither applies, a request costs one ``isEnabledFor`` check and a comparison.
"""

from __future__ import annotations

import bisect
import logging
from typing import Any

from odradek.logs import safe
from odradek.metrics.histogram import LATENCY_BUCKETS_MS, Histogram
from odradek.protocol.errors import Errors

REQUEST_LOGGER_NAME = "kafka.request.logger"
request_logger = logging.getLogger(REQUEST_LOGGER_NAME)

class RequestMetrics:
    """Requests, errors and latencies of the listeners sharing it (one per process)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], int] = {}  # (API name, version) -> completed
        self.errors: dict[tuple[str, str], int] = {}  # (API name, error name) -> count
        # API name -> (total, local, remote) time: from arrival to the response being ready,
        # the part spent handling it, and the part waiting (purgatory, a controller write).
        self.times_ms: dict[str, tuple[Histogram, Histogram, Histogram]] = {}

    def record(self, api: str, version: int, total_ms: float, local_ms: float, error: str | None) -> None:
        key = (api, version)
        self.requests[key] = self.requests.get(key, 0) + 1
        hists = self.times_ms.get(api)
        if hists is None:
            hists = self.times_ms[api] = (Histogram(), Histogram(), Histogram())
        total, local, remote = hists
        if local_ms == total_ms:  # answered at once: one bucket lookup for both, no wait
            i = bisect.bisect_left(LATENCY_BUCKETS_MS, total_ms)
            total.counts[i] += 1
            total.sum += total_ms
            local.counts[i] += 1
            local.sum += total_ms
            remote.counts[0] += 1
        else:
            total.observe(total_ms)
            local.observe(local_ms)
            remote.observe(total_ms - local_ms)
        if error is not None:
            ekey = (api, error)
            self.errors[ekey] = self.errors.get(ekey, 0) + 1


def response_size(buffers: Any) -> int:
    """Bytes of a response's buffers (and file regions), without the 4-byte size prefix."""
    if not buffers:
        return 0
    total = 0
    for b in buffers:
        total += b.nbytes if isinstance(b, memoryview) else len(b)
    return total


def top_level_error(body: dict[str, Any] | None) -> str | None:
    """The name of a response's top-level error code, or None when it has none (or NONE)."""
    if not body:
        return None
    code = body.get("error_code")
    if not code:
        return None
    try:
        return Errors(code).name
    except ValueError:
        return str(code)


def log_request(
    level: int, peer: str, client_id: str | None, api: str, version: int, correlation_id: int,
    total_ms: float, size: int, error: str | None,
    security_protocol: str = "PLAINTEXT", principal: object = "User:ANONYMOUS", listener: str = "",
) -> None:
    """One line on ``kafka.request.logger`` for a completed request; it ends, as Kafka's, with
    who sent it and where: ``securityProtocol:SASL_PLAINTEXT,principal:User:alice,listener:SASL_PLAINTEXT``."""
    request_logger.log(
        level,
        "Completed request from %s clientId=%s api=%s version=%d correlationId=%d "
        "totalTimeMs=%.3f responseBytes=%d error=%s securityProtocol:%s,principal:%s,listener:%s",
        peer, safe(client_id) if client_id is not None else "null", api, version, correlation_id,
        total_ms, size, error or "NONE", security_protocol, safe(str(principal)), listener,
    )
