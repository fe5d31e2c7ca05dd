"""AuthHelper: what a request handler asks the authorizer, and the wrapping that asks it.

Kafka's ``AuthHelper`` (authorize, filterByAuthorized, authorizedOperations) over a
:class:`~odradek.security.standard_authorizer.StandardAuthorizer`, with the request's principal
(``ConnectionInfo.principal``) and host (the client's IP address).

:func:`install` puts the checks of :mod:`odradek.security.api_authorization` in front of a
dispatcher's handlers, once, at start-up, and only when an authorizer is configured: a broker
without one runs exactly the handlers it had (nothing on the hot path). A check either lets the
request through, answers it with an error response, or passes a narrowed request (the resources
the principal may act on) to the handler and adds the refused resources' errors to its response.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.protocol.schema import read_uvarint
from odradek.security.acl import CLUSTER_NAME, ResourceType
from odradek.security.kafka_principal import KafkaPrincipal
from odradek.security.standard_authorizer import StandardAuthorizer
from odradek.server.acl_operations import AclOperation

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import uuid

    from odradek.server.api_dispatcher import ApiDispatcher, Handler, RequestContext


def client_host(peer: str) -> str:
    """The IP address of ``host:port`` (``[v6]:port`` for IPv6), as ACL hosts name it."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


Merge = Callable[[Any], Any]


@dataclass
class Narrowed:
    """The request the handler gets instead, and how its response is completed."""

    request: dict[str, Any]
    merge: Merge


# A check: None (go ahead), a response (refused), or a Narrowed request.
Check = Callable[["AuthHelper", "RequestContext", dict[str, Any]], "dict[str, Any] | Narrowed | None"]


class AuthHelper:
    def __init__(
        self,
        authorizer: StandardAuthorizer,
        topic_name: Callable[[uuid.UUID], str | None] | None = None,
        topic_exists: Callable[[str], bool] | None = None,
    ) -> None:
        self.authorizer = authorizer
        # Resolve topic ids (Fetch v13+, Metadata, DeleteTopics v6+) for their ACLs, and say
        # whether a topic exists (Metadata's auto-creation needs CREATE).
        self.topic_name = topic_name or (lambda _tid: None)
        self.topic_exists = topic_exists or (lambda _name: True)
        # API key -> name, for the audit log's "for request = Fetch" (set by :func:`install`).
        self.api_names: dict[int, str] = {}

    def authorize(
        self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str, log_if_denied: bool = True,
        ref_count: int = 1,
    ) -> bool:
        return self.authorizer.authorize(
            str(ctx.conn.principal), client_host(ctx.conn.peer), op, rtype, name, log_if_denied,
            self.api_names.get(ctx.header.api_key, ""), ref_count,
        )

    def cluster(self, ctx: RequestContext, op: AclOperation, log_if_denied: bool = True) -> bool:
        return self.authorize(ctx, op, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied)

    def by_resource_type(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType) -> bool:
        return self.authorizer.authorize_by_resource_type(
            str(ctx.conn.principal), client_host(ctx.conn.peer), op, rtype
        )

    def allowed(
        self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, names: Iterable[str],
        log_if_denied: bool = True,
    ) -> set[str]:
        """Kafka's filterByAuthorized: the names of ``names`` the principal may ``op`` (each asked
        once, with the number of times it appears as its reference count)."""
        counts: dict[str, int] = {}
        for n in names:
            counts[n] = counts.get(n, 0) + 1
        return {n for n, c in counts.items() if self.authorize(ctx, op, rtype, n, log_if_denied, c)}

    def operations(
        self, ctx: RequestContext, rtype: ResourceType, name: str, ops: Iterable[AclOperation]
    ) -> int:
        return self.authorizer.authorized_operations(
            str(ctx.conn.principal), client_host(ctx.conn.peer), rtype, name, ops
        )


def describable_topics(helper: AuthHelper) -> Callable[[RequestContext, frozenset[str]], set[str]]:
    """The topics of a set the request's principal may DESCRIBE, asked as a filter (a denial is
    not logged: Kafka's regex resolution asks with logIfDenied=false)."""

    def describable(ctx: RequestContext, names: frozenset[str]) -> set[str]:
        return helper.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names, log_if_denied=False)

    return describable


def deserialize_principal(data: bytes) -> KafkaPrincipal:
    """Kafka's DefaultKafkaPrincipalBuilder.deserialize: a version (int16, 0) and a
    DefaultPrincipalData v0 (flexible: compact type and name strings, tokenAuthenticated, tags)."""
    view = memoryview(data)
    if len(view) < 2 or int.from_bytes(view[:2], "big") != 0:
        raise ValueError("unsupported principal data version")
    pos = 2
    fields: list[str] = []
    for _ in range(2):
        length, pos = read_uvarint(view, pos)
        if length == 0 or pos + length - 1 > len(view):
            raise ValueError("truncated principal data")
        fields.append(bytes(view[pos:pos + length - 1]).decode("utf-8"))
        pos += length - 1
    return KafkaPrincipal(fields[0], fields[1])


def forwarded_check(helper: AuthHelper, checks: dict[int, Check]) -> Callable[[Any, bytes | None, RequestContext], Any]:
    """The controller's check of a request a Kafka broker forwarded in an Envelope: the inner
    request's own check, for the principal and client address the envelope carries."""
    from odradek.network.request_channel import ConnectionInfo
    from odradek.protocol.errors import Errors
    from odradek.protocol.header import RequestHeader
    from odradek.server.api_dispatcher import RequestContext

    def check(inner: Any, principal_data: bytes | None, outer: RequestContext) -> Any:
        try:
            principal = deserialize_principal(bytes(principal_data or b""))
        except (ValueError, UnicodeDecodeError):
            return {"response_data": None, "error_code": Errors.PRINCIPAL_DESERIALIZATION_FAILURE}
        host = inner.client_host or client_host(outer.conn.peer)
        peer = f"[{host}]:0" if ":" in host else f"{host}:0"
        conn = ConnectionInfo("envelope", peer, outer.conn.listener_name, principal=principal)
        ctx = RequestContext(RequestHeader(inner.api.api_key, inner.version, inner.correlation_id, inner.client_id), conn)
        verdict = checks[inner.api.api_key](helper, ctx, inner.data)
        return (verdict,) if isinstance(verdict, dict) else verdict

    return check


def _then(result: Any, merge: Merge) -> Any:
    if not inspect.isawaitable(result):
        return merge(result)
    pending = result

    async def wait() -> Any:
        return merge(await pending)

    return wait()


def guarded(helper: AuthHelper, check: Check, handler: Handler) -> Handler:
    def handle(ctx: RequestContext, req: dict[str, Any]) -> Any:
        verdict = check(helper, ctx, req)
        if verdict is None:
            return handler(ctx, req)
        if isinstance(verdict, Narrowed):
            return _then(handler(ctx, verdict.request), verdict.merge)
        return verdict

    return handle


def install(dispatcher: ApiDispatcher, helper: AuthHelper, checks: dict[int, Check]) -> None:
    """Put ``checks`` in front of ``dispatcher``'s handlers. An API served without a check of
    its own (ApiVersions excepted) is not left open: it needs ALTER on the cluster (super users
    have it), and start-up logs a warning naming it."""
    from odradek.protocol import messages as m
    from odradek.protocol.errors import Errors

    def fallback(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
        if h.cluster(ctx, AclOperation.ALTER):
            return None
        return {"throttle_time_ms": 0, "error_code": Errors.CLUSTER_AUTHORIZATION_FAILED}

    unchecked = sorted(
        dispatcher.apis[k].name for k in dispatcher.handlers
        if k not in checks and k != m.API_VERSIONS.api_key and k in dispatcher.apis
    )
    if unchecked:
        log.warning("No authorization rule for %s: only principals with ALTER on the cluster may send them",
                    ", ".join(unchecked))
    helper.api_names.update((k, api.name) for k, api in dispatcher.apis.items())
    for key, handler in list(dispatcher.handlers.items()):
        if key == m.API_VERSIONS.api_key:
            continue
        dispatcher.handlers[key] = guarded(helper, checks.get(key, fallback), handler)
