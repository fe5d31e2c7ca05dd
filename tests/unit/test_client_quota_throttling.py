"""The broker's quota managers on responses (odradek.server.client_quotas): throttle_time_ms set,
the connection muted for it, a throttled fetch emptied, exempt requests left alone."""

from __future__ import annotations

from typing import Any

from odradek.network.request_channel import ConnectionInfo
from odradek.protocol import messages as m
from odradek.protocol.header import RequestHeader
from odradek.protocol.schema import Api
from odradek.security.client_quota_manager import entity
from odradek.security.kafka_principal import KafkaPrincipal
from odradek.server.api_dispatcher import RequestContext
from odradek.server.client_quotas import ClientQuotaManagers

MB = 1048576


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _ctx(api: Api, client_id: str, muted: list[int], user: str = "ANONYMOUS") -> RequestContext:
    conn = ConnectionInfo("c1", "127.0.0.1:1", "PLAINTEXT", principal=KafkaPrincipal("User", user),
                          mute_for=muted.append)
    return RequestContext(RequestHeader(api.api_key, api.max_version, 7, client_id), conn)


def _encode(api: Api, version: int, correlation_id: int, body: dict[str, Any]) -> list[Any]:
    return [body]


def _quotas(*sets: tuple[Any, str, float]) -> tuple[ClientQuotaManagers, _Clock]:
    clock = _Clock()
    q = ClientQuotaManagers(clock_ms=clock)
    entities: dict[Any, dict[str, float]] = {}
    for ent, key, value in sets:
        entities.setdefault(ent, {})[key] = value
    q.set_quotas(entities)
    return q, clock


def test_no_quota_inactive() -> None:
    q, _ = _quotas()
    assert not q.active


def test_produce_throttled_and_muted() -> None:
    q, _ = _quotas((entity(client_id="p"), "producer_byte_rate", MB))
    muted: list[int] = []
    ctx = _ctx(m.PRODUCE, "p", muted)
    assert q.record_produce(ctx, 10 * MB) == 0
    throttle = q.record_produce(ctx, MB)
    assert throttle == 1000 and muted == [1000]
    body = {"responses": [], "throttle_time_ms": 0}
    [out] = q.throttled_response(ctx, m.PRODUCE, {}, body, throttle, 0.0, _encode)
    assert out["throttle_time_ms"] == 1000
    assert muted == [1000]  # muted once, when the request came in
    # Another client id of the same (anonymous) user is not limited.
    other: list[int] = []
    assert q.record_produce(_ctx(m.PRODUCE, "q", other), 100 * MB) == 0 and other == []


def test_user_quota_applies_to_the_principal_name() -> None:
    q, _ = _quotas((entity(user="alice"), "producer_byte_rate", MB))
    muted: list[int] = []
    assert q.record_produce(_ctx(m.PRODUCE, "x", muted, user="bob"), 20 * MB) == 0
    assert q.record_produce(_ctx(m.PRODUCE, "x", muted, user="alice"), 20 * MB) > 0


def test_throttled_fetch_is_empty_and_its_bytes_taken_back() -> None:
    q, _ = _quotas((entity(client_id="c"), "consumer_byte_rate", 100.0))
    muted: list[int] = []
    ctx = _ctx(m.FETCH, "c", muted)
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 5, "responses": [{"topic": "t"}]}

    def encode(api: Api, version: int, cid: int, b: dict[str, Any]) -> list[Any]:
        return [b"x" * (5000 if b["responses"] else 10), b]

    out = q.throttled_response(ctx, m.FETCH, {"replica_id": -1}, body, 0, 0.0, encode)
    sent = out[1]
    assert sent["responses"] == [] and sent["session_id"] == 5 and sent["throttle_time_ms"] > 0
    assert muted == [sent["throttle_time_ms"]]
    # The 5000 bytes were taken back: a small fetch right after is within the quota.
    small = dict(body, responses=[])
    assert q.throttled_response(ctx, m.FETCH, {"replica_id": -1}, small, 0, 0.0, encode)[1]["throttle_time_ms"] == 0
    assert q.max_fetch_bytes(ctx) == 100.0 * 10
    # A follower's fetch is not a client's.
    follower = q.throttled_response(ctx, m.FETCH, {"replica_id": 2}, body, 0, 0.0, encode)
    assert follower[1]["responses"] == [{"topic": "t"}]


def test_request_percentage_and_exempt_apis() -> None:
    q, clock = _quotas((entity(client_id=None), "request_percentage", 1.0))
    muted: list[int] = []
    ctx = _ctx(m.METADATA, "busy", muted)
    body = {"throttle_time_ms": 0, "brokers": []}
    # 0.5 s of handler time in a 10 s window is 5% of a thread: throttled, at most one window.
    [out] = q.throttled_response(ctx, m.METADATA, {}, body, 0, 0.5, _encode)
    assert out["throttle_time_ms"] == 1000 and muted == [1000]
    # ApiVersions is never throttled.
    api_ctx = _ctx(m.API_VERSIONS, "busy", muted)
    [out] = q.throttled_response(api_ctx, m.API_VERSIONS, {}, {"throttle_time_ms": 0}, 0, 5.0, _encode)
    assert out["throttle_time_ms"] == 0 and muted == [1000]
    # Quotas removed: nothing is recorded any more.
    q.set_quotas({})
    assert not q.active
