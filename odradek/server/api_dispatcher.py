"""ApiDispatcher: decode a request, dispatch it by API key, encode the response, and answer
ApiVersions with exactly the APIs served (Kafka's ``ApiVersionManager``).

Both listeners' request handlers build on it: the broker's :class:`~odradek.server.kafka_apis.KafkaApis`
and the controller listener's handlers of a :class:`~odradek.server.controller_server.ControllerServer`.
``handle`` is called by the socket server in arrival order for each frame of a connection. It
returns the response buffers at once, None (acks=0 produce), or an awaitable when the request
waits (delayed produce/fetch, a controller write). Handlers take and return plain dicts shaped by
the declarative definitions in :mod:`odradek.protocol.messages`.
"""

from __future__ import annotations

import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from odradek.controller.feature_control_manager import SUPPORTED_FEATURES
from odradek.metadata.metadata_cache import FinalizedFeatures
from odradek.network.request_channel import CloseConnection, ConnectionInfo, ResponseBuffers
from odradek.network.request_metrics import (
    RequestMetrics,
    log_request,
    request_logger,
    response_size,
    top_level_error,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.header import (
    RequestHeader,
    decode_request_header,
    encode_response_header,
    peek_request_header,
)
from odradek.protocol.schema import Api, SchemaError

if TYPE_CHECKING:
    from odradek.server.client_quotas import ClientQuotaManagers

log = logging.getLogger(__name__)

_SOFTWARE_RE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")

Handler = Callable[["RequestContext", dict[str, Any]], Any]

# APIs whose requests wait by design (long polls): judged slow on their handling time alone.
_WAIT_BY_DESIGN = frozenset({m.FETCH.api_key, m.JOIN_GROUP.api_key, m.SYNC_GROUP.api_key})


class ApiExtension(Protocol):
    """A set of APIs served by another component (e.g. the group coordinator's GroupApis).

    Each handler takes the request context and the decoded request dict and returns the
    response dict, an awaitable of it, or None for no response.
    """

    def handlers(self) -> dict[Api, Handler]: ...


@dataclass
class RequestContext:
    header: RequestHeader
    conn: ConnectionInfo

    @property
    def version(self) -> int:
        return self.header.api_version


class ApiDispatcher(ABC):
    """Subclasses set ``apis`` (what ApiVersions advertises) and ``handlers`` (one per API key),
    and say which finalized features ApiVersions reports (:meth:`finalized_features`)."""

    apis: dict[int, Api]
    handlers: dict[int, Handler]
    # Set by the server (odradek.network.request_metrics): what completed requests count into
    # (None: nothing counted) and the slow-request warning threshold (0: none).
    request_metrics: RequestMetrics | None = None
    slow_request_ms: float = 0.0
    # Client quotas (odradek.server.client_quotas; None: never throttled, e.g. the controller).
    client_quotas: ClientQuotaManagers | None = None

    @abstractmethod
    def finalized_features(self) -> FinalizedFeatures:
        """The KIP-584 finalized features of the metadata this listener's role follows."""

    def add_extensions(self, extensions: Iterable[ApiExtension]) -> None:
        """Serve the extensions' APIs too; every advertised API must have a handler."""
        for ext in extensions:
            for api, handler in ext.handlers().items():
                self.apis[api.api_key] = api
                self.handlers[api.api_key] = handler
        missing = set(self.apis) - set(self.handlers)
        if missing:  # ApiVersions must never advertise an API without a handler
            raise RuntimeError(f"APIs declared without a handler: {sorted(missing)}")

    # -- entry point ----------------------------------------------------------------------------

    def handle(
        self, conn: ConnectionInfo, frame: bytearray
    ) -> ResponseBuffers | Awaitable[ResponseBuffers | None] | None:
        start = time.monotonic()
        try:
            api_key, version, correlation_id = peek_request_header(frame)
        except SchemaError as e:
            raise CloseConnection(f"malformed request header from {conn.peer}: {e}") from e
        api = self.apis.get(api_key)
        if api is None:
            raise CloseConnection(
                f"unknown or unsupported API key {api_key} (version {version}, correlation id "
                f"{correlation_id}) from {conn.peer}"
            )
        if not api.supports(version):
            if api_key == m.API_VERSIONS.api_key:
                # Kafka answers an ApiVersions request it does not understand with a v0
                # response carrying UNSUPPORTED_VERSION and the versions it does support, so
                # the client can retry with one of them.
                log.info(
                    "ApiVersions v%d from %s is not supported; answering with v0", version, conn.peer
                )
                body = self._api_versions_body(Errors.UNSUPPORTED_VERSION)
                return self._encode(api, 0, correlation_id, body)
            raise CloseConnection(
                f"{api.name} v{version} from {conn.peer} is not supported (this broker supports "
                f"v{api.min_version}-v{api.max_version}; UNSUPPORTED_VERSION)"
            )
        try:
            header, pos = decode_request_header(frame, api.request_header_version(version))
            request, _ = api.decode_request(version, frame, pos)
        except SchemaError as e:
            raise CloseConnection(
                f"malformed {api.name} v{version} request from {conn.peer}: {e}"
            ) from e
        ctx = RequestContext(header, conn)
        result = self.handlers[api_key](ctx, request)
        quotas = self.client_quotas
        produce_throttle = 0
        if quotas is not None and quotas.active and api_key == m.PRODUCE.api_key:
            # Recorded (and the connection muted) now, not when a delayed produce completes:
            # requests pipelined behind it must not be handled meanwhile.
            produce_throttle = quotas.record_produce(ctx, len(frame))
        if result is None:
            self._completed(ctx, api, start, None, None)
            return None
        if isinstance(result, dict):
            if quotas is not None and quotas.active:
                out = quotas.throttled_response(
                    ctx, api, request, result, produce_throttle, time.monotonic() - start, self._encode
                )
            else:
                out = self._encode(api, version, correlation_id, result)
            self._completed(ctx, api, start, out, result)
            return out
        return self._await_and_encode(ctx, api, start, time.monotonic(), result, request, produce_throttle)

    async def _await_and_encode(
        self, ctx: RequestContext, api: Api, start: float, local_end: float,
        pending: Awaitable[dict[str, Any] | None], request: dict[str, Any], produce_throttle: int,
    ) -> ResponseBuffers | None:
        body = await pending
        if body is None:
            self._completed(ctx, api, start, None, None, local_end)
            return None
        quotas = self.client_quotas
        if quotas is not None and quotas.active:
            # The handler's own time: a delayed operation's wait is not the client's cost.
            out = quotas.throttled_response(
                ctx, api, request, body, produce_throttle, local_end - start, self._encode
            )
        else:
            out = self._encode(api, ctx.version, ctx.header.correlation_id, body)
        self._completed(ctx, api, start, out, body, local_end)
        return out

    def _completed(
        self, ctx: RequestContext, api: Api, start: float, out: ResponseBuffers | None,
        body: dict[str, Any] | None, local_end: float = 0.0,
    ) -> None:
        """``local_end``: when the handler returned the awaitable of a delayed response (0: the
        response was ready at once); the time after it is Kafka's RemoteTimeMs."""
        metrics = self.request_metrics
        debug = request_logger.isEnabledFor(logging.DEBUG)
        slow_ms = self.slow_request_ms
        if metrics is None and not debug and slow_ms <= 0:
            return
        total_ms = (time.monotonic() - start) * 1000.0
        local_ms = (local_end - start) * 1000.0 if local_end else total_ms
        # A long poll (a fetch's max.wait.ms, a JoinGroup/SyncGroup waiting for the rebalance)
        # is not slow: for those only the time spent handling the request counts.
        slow = 0 < slow_ms <= (local_ms if api.api_key in _WAIT_BY_DESIGN else total_ms)
        if metrics is None and not debug and not slow:
            return
        error = top_level_error(body)
        if metrics is not None:
            metrics.record(api.name, ctx.version, total_ms, local_ms, error)
        if slow or debug:
            size = response_size(out)
            log_request(
                logging.WARNING if slow else logging.DEBUG, ctx.conn.peer, ctx.header.client_id,
                api.name, ctx.version, ctx.header.correlation_id, total_ms, size, error,
                ctx.conn.security_protocol, ctx.conn.principal, ctx.conn.listener_name,
            )

    def _encode(self, api: Api, version: int, correlation_id: int, body: dict[str, Any]) -> ResponseBuffers:
        header = encode_response_header(correlation_id, api.response_header_version(version))
        parts = api.encode_response(version, body)
        return [header, *parts]

    # -- ApiVersions ----------------------------------------------------------------------------

    def _api_versions_body(self, error: Errors) -> dict[str, Any]:
        features = self.finalized_features()
        return {
            "error_code": error,
            "api_keys": [
                {"api_key": a.api_key, "min_version": m.advertised_min_version(a), "max_version": a.max_version}
                for a in sorted(self.apis.values(), key=lambda a: a.api_key)
            ],
            "throttle_time_ms": 0,
            # KIP-584 features (v3+): what this broker can run, and what the cluster has finalized
            # in the metadata log (the epoch is the image's offset, as Kafka's broker reports it).
            "supported_features": [
                {"name": name, "min_version": lo, "max_version": hi}
                for name, (lo, hi) in sorted(SUPPORTED_FEATURES.items())
            ],
            "finalized_features_epoch": features.epoch,
            "finalized_features": [
                {"name": name, "max_version_level": level, "min_version_level": level}
                for name, level in sorted(features.levels.items())
            ],
        }

    def handle_api_versions(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        if ctx.version >= 3:
            name, ver = req["client_software_name"], req["client_software_version"]
            if not _SOFTWARE_RE.match(name or "") or not _SOFTWARE_RE.match(ver or ""):
                log.warning(
                    "ApiVersions from %s has an invalid client software name/version %r/%r",
                    ctx.conn.peer, name, ver,
                )
                return self._api_versions_body(Errors.INVALID_REQUEST)
        return self._api_versions_body(Errors.NONE)
