"""Request metrics and the request log of ApiDispatcher, the histogram, and the
metrics.prometheus.listener syntax."""

from __future__ import annotations

import logging

import pytest

from odradek.metadata.metadata_cache import FinalizedFeatures
from odradek.metrics.histogram import Histogram
from odradek.metrics.listener import parse_http_listener
from odradek.network.request_channel import ConnectionInfo
from odradek.network.request_metrics import RequestMetrics
from odradek.protocol import messages as m
from odradek.protocol.header import RequestHeader, encode_request_header
from odradek.security.kafka_principal import KafkaPrincipal
from odradek.server.api_dispatcher import ApiDispatcher
from odradek.server.kafka_config import ConfigError, KafkaConfig

CONN = ConnectionInfo("c1", "127.0.0.1:5555", "PLAINTEXT")


class _Apis(ApiDispatcher):
    def __init__(self) -> None:
        self.apis = {m.API_VERSIONS.api_key: m.API_VERSIONS}
        self.handlers = {m.API_VERSIONS.api_key: self.handle_api_versions}

    def finalized_features(self) -> FinalizedFeatures:
        return FinalizedFeatures({}, -1)


def _api_versions_frame(client_id: str = "app\n1") -> bytearray:
    api = m.API_VERSIONS
    header = encode_request_header(RequestHeader(api.api_key, 3, 42, client_id), api.request_header_version(3))
    body = b"".join(bytes(b) for b in api.encode_request(3, {
        "client_software_name": "x", "client_software_version": "1"}))
    return bytearray(header + body)


def _request_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "kafka.request.logger"]


def test_completed_requests_are_counted_when_metrics_are_on() -> None:
    apis = _Apis()
    apis.handle(CONN, _api_versions_frame())
    apis.request_metrics = metrics = RequestMetrics()
    apis.handle(CONN, _api_versions_frame())
    apis.handle(CONN, _api_versions_frame())
    assert metrics.requests == {("ApiVersions", 3): 2}
    total, local, remote = metrics.times_ms["ApiVersions"]
    assert total.count == local.count == remote.count == 2
    assert remote.sum == 0  # answered at once
    assert metrics.errors == {}


def test_request_log_only_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    apis = _Apis()
    with caplog.at_level(logging.INFO, logger="kafka.request.logger"):
        apis.handle(CONN, _api_versions_frame())
    assert _request_lines(caplog) == []
    with caplog.at_level(logging.DEBUG, logger="kafka.request.logger"):
        apis.handle(CONN, _api_versions_frame())
    (rec,) = _request_lines(caplog)
    assert rec.levelno == logging.DEBUG
    text = rec.getMessage()
    assert "from 127.0.0.1:5555 clientId=app\\n1 api=ApiVersions version=3 correlationId=42" in text
    assert "error=NONE" in text and "responseBytes=" in text
    assert text.endswith(" securityProtocol:PLAINTEXT,principal:User:ANONYMOUS,listener:PLAINTEXT")


def test_request_log_names_principal_and_listener(caplog: pytest.LogCaptureFixture) -> None:
    conn = ConnectionInfo("c2", "127.0.0.1:6666", "CLIENT", security_protocol="SASL_PLAINTEXT",
                          principal=KafkaPrincipal("User", "alice"))
    with caplog.at_level(logging.DEBUG, logger="kafka.request.logger"):
        _Apis().handle(conn, _api_versions_frame())
    (rec,) = _request_lines(caplog)
    assert rec.getMessage().endswith(" securityProtocol:SASL_PLAINTEXT,principal:User:alice,listener:CLIENT")


def test_slow_requests_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    apis = _Apis()
    apis.slow_request_ms = 1e-9  # every request is slower than this
    with caplog.at_level(logging.INFO, logger="kafka.request.logger"):
        apis.handle(CONN, _api_versions_frame())
    (rec,) = _request_lines(caplog)
    assert rec.levelno == logging.WARNING and "api=ApiVersions" in rec.getMessage()


def test_a_long_poll_is_judged_on_its_handling_time(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    apis = _Apis()
    apis.slow_request_ms = 50

    async def waits() -> dict[str, object]:
        await asyncio.sleep(0.1)
        return {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}

    async def run() -> None:
        pending = apis.handle(CONN, _api_versions_frame())  # ApiVersions answered after a wait
        assert not isinstance(pending, list) and pending is not None
        await pending  # type: ignore[misc]

    apis.handlers[m.API_VERSIONS.api_key] = lambda ctx, req: waits()
    with caplog.at_level(logging.INFO, logger="kafka.request.logger"):
        asyncio.run(run())
    (rec,) = _request_lines(caplog)  # 100 ms > 50 ms: slow
    assert rec.levelno == logging.WARNING


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram((1, 10))
    for v in (0.5, 1, 5, 50):
        h.observe(v)
    assert h.cumulative() == [("1", 2), ("10", 3), ("+Inf", 4)]
    assert h.sum == 56.5 and h.count == 4


@pytest.mark.parametrize("good,expected", [
    ("http://127.0.0.1:9404", ("127.0.0.1", 9404)),
    ("http://[::1]:0/", ("::1", 0)),
    ("http://0.0.0.0:9404", ("0.0.0.0", 9404)),
])
def test_listener_syntax(good: str, expected: tuple[str, int]) -> None:
    assert parse_http_listener(good) == expected


@pytest.mark.parametrize("bad", ["127.0.0.1:9404", "https://h:1", "http://h", "http://h:1/metrics", "http://h:99999"])
def test_bad_listener_is_refused_by_the_config(bad: str) -> None:
    with pytest.raises(ConfigError, match="metrics.prometheus.listener.*http://HOST:PORT"):
        KafkaConfig({"metrics.prometheus.listener": bad})
