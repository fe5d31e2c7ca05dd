"""The broker's client quotas (Kafka's ``QuotaFactory.QuotaManagers`` and the throttling parts
of ``KafkaApis`` / ``RequestHandlerHelper``), and the AlterClientQuotas / DescribeClientQuotas
APIs.

The quotas come from the metadata image (ClientQuotaRecords); :meth:`ClientQuotaManagers.apply_image`
is a metadata publisher. While no quota is set nothing is recorded: the request path pays one
attribute test.

Throttling (KIP-219): the response is sent at once with ``throttle_time_ms``, and the connection
is then muted (no request read from it) for the throttle time. Produce records the request's
size against ``producer_byte_rate``; Fetch (from consumers, not followers) records the response's
size against ``consumer_byte_rate``, and a throttled fetch answers with no data (the bytes are
taken back), as Kafka does. Every other request except ApiVersions, the SASL handshake and the
inter-broker APIs records its handling time against ``request_percentage``; the throttle is the
larger of the two.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from odradek.controller.client_quota_control_manager import describe_client_quotas
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import MetadataImage
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.network.request_channel import ResponseBuffers
from odradek.network.request_metrics import response_size
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, KafkaError
from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api
from odradek.security.client_quota_manager import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
    ClientRequestQuotaManager,
    QuotaConfig,
    QuotaEntity,
)
from odradek.server.api_dispatcher import ApiDispatcher, Handler, RequestContext
from odradek.server.controller_channel import ControllerRequest, ForwardingManager, RequestClient
from odradek.server.kafka_config import KafkaConfig

# Not measured against request_percentage (Kafka answers them with sendResponseExemptThrottle
# or exempts them as ClusterAction requests).
REQUEST_QUOTA_EXEMPT: frozenset[int] = frozenset({
    m.API_VERSIONS.api_key, g.SASL_HANDSHAKE.api_key, g.SASL_AUTHENTICATE.api_key,
    g.LEADER_AND_ISR.api_key, g.STOP_REPLICA.api_key, g.UPDATE_METADATA.api_key,
    g.CONTROLLED_SHUTDOWN.api_key, g.WRITE_TXN_MARKERS.api_key, g.ENVELOPE.api_key,
})

Encode = Callable[[Api, int, int, dict[str, Any]], ResponseBuffers]


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class ClientQuotaManagers:
    def __init__(self, config: QuotaConfig | None = None, clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, config)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, config)
        self.request = ClientRequestQuotaManager(config)
        self._by_key = {PRODUCER_BYTE_RATE: self.produce, CONSUMER_BYTE_RATE: self.fetch,
                        REQUEST_PERCENTAGE: self.request}
        self.clock_ms = clock_ms
        self.active = False

    # -- from the metadata image --------------------------------------------------------------

    def set_quotas(self, entities: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        per_key: dict[str, dict[QuotaEntity, float]] = {k: {} for k in self._by_key}
        for entity, quotas in entities.items():
            for key, value in quotas.items():
                if key in per_key:
                    per_key[key][entity] = value
        for key, manager in self._by_key.items():
            manager.set_quotas(per_key[key])
        self.active = any(mgr.enabled for mgr in self._by_key.values())

    def apply_image(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Metadata publisher: the quotas follow the image."""
        if delta.changed_client_quotas:
            self.set_quotas(image.client_quotas.entities)

    # -- throttling ---------------------------------------------------------------------------

    def max_fetch_bytes(self, ctx: RequestContext) -> float:
        return self.fetch.max_value_in_quota_window(ctx.conn.principal.name, ctx.header.client_id or "")

    def throttled_response(
        self, ctx: RequestContext, api: Api, request: dict[str, Any], body: dict[str, Any],
        produce_throttle: int, handler_s: float, encode: Encode,
    ) -> ResponseBuffers:
        """Record the request against the client's quotas; the response (with its throttle time,
        empty for a throttled fetch) encoded; the connection muted when throttled.
        ``produce_throttle``: what :meth:`record_produce` found when the request came in."""
        key = api.api_key
        version, correlation_id = ctx.version, ctx.header.correlation_id
        user, client_id = ctx.conn.principal.name, ctx.header.client_id or ""
        now = self.clock_ms()
        from_follower = key == m.FETCH.api_key and _is_follower_fetch(request)
        request_throttle = 0
        if self.request.enabled and key not in REQUEST_QUOTA_EXEMPT and not from_follower:
            request_throttle = self.request.record_nanos(user, client_id, handler_s * 1e9, now)
        bandwidth = produce_throttle
        out: ResponseBuffers | None = None
        if key == m.FETCH.api_key and not from_follower:
            size = 0
            if self.fetch.enabled:
                out = encode(api, version, correlation_id, body)
                size = response_size(out)
                bandwidth = self.fetch.record_and_get_throttle_time_ms(user, client_id, size, now)
            if max(bandwidth, request_throttle) > 0:
                # A throttled fetch answers with no data; its bytes are taken back (Kafka's
                # unrecordQuotaSensor and getThrottledResponse).
                if size:
                    self.fetch.unrecord(user, client_id, size, now)
                body = {**body, "responses": [], "error_code": Errors.NONE}
                out = None
        throttle = max(bandwidth, request_throttle)
        if throttle <= 0:
            return out if out is not None else encode(api, version, correlation_id, body)
        if "throttle_time_ms" in body:
            body = {**body, "throttle_time_ms": max(throttle, body.get("throttle_time_ms") or 0)}
        mute = ctx.conn.mute_for
        if mute is not None and throttle > produce_throttle:  # (a produce's muted it already)
            mute(throttle)
        return encode(api, version, correlation_id, body)

    def record_produce(self, ctx: RequestContext, request_size: int) -> int:
        """A Produce request's bytes (Kafka's request.sizeInBytes) against producer_byte_rate;
        the connection is muted at once when over (acks=0 too, which gets no response)."""
        throttle = self.produce.record_and_get_throttle_time_ms(
            ctx.conn.principal.name, ctx.header.client_id or "", request_size, self.clock_ms()
        )
        if throttle > 0 and ctx.conn.mute_for is not None:
            ctx.conn.mute_for(throttle)
        return throttle


def _is_follower_fetch(req: dict[str, Any]) -> bool:
    if req.get("replica_id", -1) >= 0:
        return True
    state = req.get("replica_state")
    return state is not None and state.get("replica_id", -1) >= 0


class ClientQuotaApis:
    """AlterClientQuotas (forwarded to the controller, which validates and writes
    ClientQuotaRecords) and DescribeClientQuotas (answered from this broker's image)."""

    def __init__(self, metadata_cache: KRaftMetadataCache, forwarding: ForwardingManager) -> None:
        self.metadata_cache = metadata_cache
        self.forwarding = forwarding

    def handlers(self) -> dict[Api, Handler]:
        return {g.ALTER_CLIENT_QUOTAS: self.handle_alter_client_quotas,
                g.DESCRIBE_CLIENT_QUOTAS: self.handle_describe_client_quotas}

    def handle_alter_client_quotas(self, ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        client = RequestClient(ctx.header.client_id, ctx.conn.peer)
        return self.forwarding.forward(ControllerRequest(ctx.header.api_key, ctx.version, req, client))

    def handle_describe_client_quotas(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        entities = self.metadata_cache.image.client_quotas.entities
        try:
            matched = describe_client_quotas(entities, req["components"], req["strict"])
        except KafkaError as e:
            return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "entries": None}
        return {
            "throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None,
            "entries": [
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                    "values": [{"key": k, "value": v} for k, v in sorted(quotas.items())],
                }
                for entity, quotas in matched
            ],
        }


def install_client_quotas(
    apis: ApiDispatcher, config: KafkaConfig, metadata_cache: KRaftMetadataCache,
    loader: MetadataLoader, forwarding: ForwardingManager,
) -> ClientQuotaManagers:
    """Give a broker's KafkaApis its quota managers (following the metadata image) and the
    client quota APIs."""
    quotas = ClientQuotaManagers(
        QuotaConfig(config._int("quota.window.num"), config._int("quota.window.size.seconds"))
    )
    quotas.set_quotas(metadata_cache.image.client_quotas.entities)
    loader.publishers.append(quotas.apply_image)
    apis.client_quotas = quotas
    apis.add_extensions([ClientQuotaApis(metadata_cache, forwarding)])
    return quotas
