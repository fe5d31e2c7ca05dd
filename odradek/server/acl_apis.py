"""CreateAcls, DescribeAcls and DeleteAcls (Kafka's ``AclApis``) on brokers and controllers.

Without an authorizer every one answers SECURITY_DISABLED ("No Authorizer is configured."), as
Kafka. With one, DescribeAcls is answered from the node's own ACLs (its metadata image); CreateAcls
and DeleteAcls are writes: a broker forwards them to the active controller, whose
:class:`~odradek.controller.acl_control_manager.AclControlManager` validates them and writes the
records. The cluster-level DESCRIBE/ALTER checks are in :mod:`odradek.security.api_authorization`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from odradek.controller.acl_control_manager import AclCreateResult, AclDeleteResult
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api
from odradek.security.acl import AclBindingFilter, PatternType, StandardAcl
from odradek.security.standard_authorizer import StandardAuthorizer
from odradek.server.api_dispatcher import Handler, RequestContext
from odradek.server.controller_channel import ControllerRequest, ForwardingManager, RequestClient

NO_AUTHORIZER = "No Authorizer is configured."


def acl_creations(req: dict[str, Any]) -> list[StandardAcl]:
    return [
        StandardAcl.of(c["resource_type"], c["resource_name"], c["resource_pattern_type"], c["principal"],
                       c["host"], c["operation"], c["permission_type"])
        for c in req.get("creations") or []
    ]


def acl_filter(f: dict[str, Any], version: int) -> AclBindingFilter:
    pattern = f["pattern_type_filter"] if version >= 1 else PatternType.LITERAL
    return AclBindingFilter.of(f["resource_type_filter"], f["resource_name_filter"], pattern,
                               f["principal_filter"], f["host_filter"], f["operation"], f["permission_type"])


def create_acls_response(results: list[AclCreateResult]) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "results": [
        {"error_code": r.error, "error_message": r.message} for r in results
    ]}


def _matching(acl: StandardAcl) -> dict[str, Any]:
    return {
        "error_code": Errors.NONE, "error_message": None, "resource_type": acl.resource_type,
        "resource_name": acl.resource_name, "pattern_type": acl.pattern_type, "principal": acl.principal,
        "host": acl.host, "operation": acl.operation, "permission_type": acl.permission_type,
    }


def delete_acls_response(results: list[AclDeleteResult]) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": r.error, "error_message": r.message, "matching_acls": [_matching(a) for a in r.deleted]}
        for r in results
    ]}


def describe_acls_response(authorizer: StandardAuthorizer | None, req: dict[str, Any], version: int) -> dict[str, Any]:
    body: dict[str, Any] = {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None, "resources": []}
    if authorizer is None:
        body.update(error_code=Errors.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
        return body
    flt = acl_filter(req, version)
    problem = flt.unknown_error()
    if problem is not None:
        body.update(error_code=Errors.INVALID_REQUEST, error_message=problem)
        return body
    by_pattern: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for acl in authorizer.acls(flt):
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        by_pattern.setdefault(key, []).append(
            {"principal": acl.principal, "host": acl.host, "operation": acl.operation,
             "permission_type": acl.permission_type}
        )
    body["resources"] = [
        {"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": acls}
        for (rt, name, pt), acls in by_pattern.items()
    ]
    return body


def security_disabled(api_key: int, req: dict[str, Any]) -> dict[str, Any]:
    entry = {"error_code": Errors.SECURITY_DISABLED, "error_message": NO_AUTHORIZER}
    if api_key == g.CREATE_ACLS.api_key:
        return {"throttle_time_ms": 0, "results": [dict(entry) for _ in req.get("creations") or []]}
    return {"throttle_time_ms": 0, "filter_results": [
        {**entry, "matching_acls": []} for _ in req.get("filters") or []
    ]}


class AclApis:
    """The broker's ACL APIs (an ApiExtension of KafkaApis)."""

    def __init__(self, authorizer: StandardAuthorizer | None, forwarding: ForwardingManager) -> None:
        self.authorizer = authorizer
        self.forwarding = forwarding

    def handlers(self) -> dict[Api, Handler]:
        return {
            g.CREATE_ACLS: self._forwarded(g.CREATE_ACLS.api_key),
            g.DELETE_ACLS: self._forwarded(g.DELETE_ACLS.api_key),
            g.DESCRIBE_ACLS: self.handle_describe_acls,
        }

    def _forwarded(self, api_key: int) -> Callable[[RequestContext, dict[str, Any]], Any]:
        def handle(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Awaitable[dict[str, Any]]:
            if self.authorizer is None:
                return security_disabled(api_key, req)
            client = RequestClient(ctx.header.client_id, ctx.conn.peer)
            return self.forwarding.forward(ControllerRequest(api_key, ctx.version, req, client))

        return handle

    def handle_describe_acls(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        return describe_acls_response(self.authorizer, req, ctx.version)
