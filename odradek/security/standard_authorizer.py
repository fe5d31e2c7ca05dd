"""StandardAuthorizer: Kafka's KRaft authorizer, answering "may this principal do that?".

``authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer`` turns it on.
Its ACLs are the AccessControlEntryRecords of the metadata log: every broker and controller
builds its :class:`~odradek.security.acl_cache.AclCache` from its metadata image
(:meth:`StandardAuthorizer.publish`). The rules are Kafka's (``StandardAuthorizerData``):

- a principal named in ``super.users`` (``User:a;User:b``) may do everything;
- otherwise the ACLs of every pattern that applies to the resource are consulted (the literal
  name, the ``*`` wildcard, every PREFIXED prefix of the name) for the principal and for
  ``User:*``, from the client's host or any (``*``); a matching DENY wins over any ALLOW;
- an ALLOW for READ, WRITE, DELETE or ALTER implies DESCRIBE; one for ALTER_CONFIGS implies
  DESCRIBE_CONFIGS; ALL matches every operation (the implications do not apply to DENY);
- no ACL at all on the resource: allowed only with ``allow.everyone.if.no.acl.found=true``.

Every decision asked for on behalf of a request is written to Kafka's audit logger,
``kafka.authorizer.logger``, in Kafka's words ("Principal = User:alice is Denied operation = READ
from host = 127.0.0.1 on resource = Topic:LITERAL:t for request = Fetch with resourceRefCount = 1
based on rule DefaultDeny"): denials at INFO, grants at DEBUG. A decision that only filters
(regex subscriptions, listings) or computes authorized operations is not logged (Kafka: TRACE).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from odradek.security.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBindingFilter,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from odradek.security.acl_cache import AclCache
from odradek.server.acl_operations import AclOperation, to_bitfield

if TYPE_CHECKING:
    from odradek.metadata.delta import MetadataDelta
    from odradek.metadata.image import AclsImage, MetadataImage
    from odradek.server.kafka_config import KafkaConfig

AUDIT_LOGGER_NAME = "kafka.authorizer.logger"
audit_log = logging.getLogger(AUDIT_LOGGER_NAME)

STANDARD_AUTHORIZER_CLASS = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

_A = AclOperation
_IMPLIES_DESCRIBE = frozenset({_A.DESCRIBE, _A.READ, _A.WRITE, _A.DELETE, _A.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({_A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS})
_ALLOW = AclPermissionType.ALLOW
_DENY = AclPermissionType.DENY


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons."""
    if not value:
        return frozenset()
    return frozenset(p.strip() for p in value.split(";") if p.strip())


def _result(acl: StandardAcl, op: AclOperation, host: str) -> AclPermissionType | None:
    """Kafka's StandardAuthorizerData.findResult for an ACL of a matching principal."""
    if acl.host != WILDCARD_HOST and acl.host != host:
        return None
    acl_op = acl.operation
    if acl_op != _A.ALL:
        if acl.permission_type == _ALLOW:
            if op == _A.DESCRIBE:
                if acl_op not in _IMPLIES_DESCRIBE:
                    return None
            elif op == _A.DESCRIBE_CONFIGS:
                if acl_op not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != acl_op:
                return None
        elif op != acl_op:
            return None
    return acl.permission_type


class StandardAuthorizer:
    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.cache = AclCache()
        self._image_acls: AclsImage | None = None

    @classmethod
    def from_config(cls, config: KafkaConfig) -> StandardAuthorizer | None:
        """The authorizer ``config`` asks for, or None (``authorizer.class.name`` empty)."""
        name = str(config.get("authorizer.class.name") or "").strip()
        if not name:
            return None
        return cls(
            parse_super_users(config.get("super.users")),
            bool(config.get("allow.everyone.if.no.acl.found")),
        )

    # -- the ACLs, from the metadata image ------------------------------------------------------

    def load(self, acls: AclsImage) -> None:
        self.cache.replace_all(acls.acls)
        self._image_acls = acls

    def publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """A metadata loader publisher: follow the image's ACLs."""
        acls = image.acls
        if acls is self._image_acls:
            return
        if delta.image.acls is self._image_acls:
            for acl_id, acl in delta.acl_changes.items():
                if acl is None:
                    self.cache.remove(acl_id)
                else:
                    self.cache.add(acl_id, acl)
            self._image_acls = acls
        else:
            self.load(acls)

    def acls(self, flt: AclBindingFilter) -> list[StandardAcl]:
        return self.cache.acls(flt)

    # -- authorization --------------------------------------------------------------------------

    def authorize(
        self, principal: str, host: str, op: AclOperation, resource_type: ResourceType, name: str,
        log_if_denied: bool = True, request: str = "", ref_count: int = 1, log_if_allowed: bool = True,
    ) -> bool:
        """May ``principal`` from ``host`` do ``op`` on the resource? Kafka's logIfDenied (the
        request asked for this resource, not a filter) and logIfAllowed (access is granted, not
        just computed): the decision goes to the audit log, naming ``request`` (the API) and
        ``ref_count`` (how many times the request names the resource)."""
        if principal in self.super_users:
            if log_if_allowed and audit_log.isEnabledFor(logging.DEBUG):
                _audit(logging.DEBUG, principal, True, op, host, resource_type, name, request, ref_count, "SuperUser")
            return True
        found_allow: StandardAcl | None = None
        has_acls = False
        for bucket in self.cache.buckets(resource_type, name):
            has_acls = True
            for p in (principal, WILDCARD_PRINCIPAL):
                acls = bucket.get(p)
                if not acls:
                    continue
                for acl in acls:
                    r = _result(acl, op, host)
                    if r is _DENY:
                        if log_if_denied:
                            _audit(logging.INFO, principal, False, op, host, resource_type, name, request,
                                   ref_count, _matching(acl))
                        return False
                    if r is _ALLOW and found_allow is None:
                        found_allow = acl
        if found_allow is not None:
            if log_if_allowed and audit_log.isEnabledFor(logging.DEBUG):
                _audit(logging.DEBUG, principal, True, op, host, resource_type, name, request, ref_count,
                       _matching(found_allow))
            return True
        if not has_acls and self.allow_everyone_if_no_acl_found:
            if log_if_allowed and audit_log.isEnabledFor(logging.DEBUG):
                _audit(logging.DEBUG, principal, True, op, host, resource_type, name, request, ref_count,
                       "DefaultAllow")
            return True
        if log_if_denied:
            _audit(logging.INFO, principal, False, op, host, resource_type, name, request, ref_count, "DefaultDeny")
        return False

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str, ops: Iterable[AclOperation]
    ) -> int:
        """The bitfield of ``ops`` allowed on the resource (Kafka's authorizedOperations)."""
        return to_bitfield(
            op for op in ops if self.authorize(principal, host, op, resource_type, name, False, log_if_allowed=False)
        )

    def authorize_by_resource_type(
        self, principal: str, host: str, op: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: may the principal do ``op`` on at least
        one resource of the type (an ALLOW not cancelled by a DENY that covers it)?"""
        if self.authorize(principal, host, op, resource_type, "hardcode", False, log_if_allowed=False):
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        deny_literals: set[str] = set()
        deny_prefixes: list[str] = []
        allows: list[StandardAcl] = []
        for acl in self.cache.of_type(resource_type):
            if acl.principal not in principals or (acl.host != WILDCARD_HOST and acl.host != host):
                continue
            if acl.operation != op and acl.operation != _A.ALL:
                continue
            if acl.permission_type == _DENY:
                if acl.pattern_type == PatternType.LITERAL:
                    deny_literals.add(acl.resource_name)
                else:
                    deny_prefixes.append(acl.resource_name)
            else:
                allows.append(acl)
        if WILDCARD_RESOURCE in deny_literals:
            return False
        for acl in allows:
            name = acl.resource_name
            if any(name.startswith(d) for d in deny_prefixes):
                continue
            if acl.pattern_type == PatternType.LITERAL and name != WILDCARD_RESOURCE and name in deny_literals:
                continue
            return True
        return False


def _pascal(name: str) -> str:
    """Kafka's SecurityUtils.resourceTypeName: TRANSACTIONAL_ID -> TransactionalId."""
    return "".join(part.capitalize() for part in name.split("_"))


def _matching(acl: StandardAcl) -> str:
    """Kafka's MatchingAclRule.toString (StandardAcl.toString inside)."""
    return (
        f"MatchingAcl(acl=StandardAcl(resourceType={acl.resource_type.name}, resourceName={acl.resource_name}, "
        f"patternType={acl.pattern_type.name}, principal={acl.principal}, host={acl.host}, "
        f"operation={acl.operation.name}, permissionType={acl.permission_type.name}))"
    )


def _audit(
    level: int, principal: str, allowed: bool, op: AclOperation, host: str, rtype: ResourceType, name: str,
    request: str, ref_count: int, rule: str,
) -> None:
    """One line on ``kafka.authorizer.logger``, as Kafka's StandardAuthorizerData.buildAuditMessage."""
    if audit_log.isEnabledFor(level):
        audit_log.log(
            level,
            "Principal = %s is %s operation = %s from host = %s on resource = %s:LITERAL:%s for request = %s "
            "with resourceRefCount = %d based on rule %s",
            principal, "Allowed" if allowed else "Denied", op.name, host, _pascal(rtype.name), name,
            request or "unknown", ref_count, rule,
        )
