"""ACL model: Kafka's resource types, pattern types, permission types, ACL bindings and filters.

An ACL (Kafka's ``StandardAcl``) says that a principal, connecting from a host, is allowed or
denied one operation on the resources a pattern names: a LITERAL name (``*`` is every name of the
type) or a PREFIXED one. Filters (DescribeAcls, DeleteAcls) match ACLs with Kafka's rules
(``ResourcePatternFilter.matches`` and ``AccessControlEntryFilter.matches``): ANY matches every
value of a field, a MATCH pattern type matches the patterns that would apply to the named
resource (the literal name, the ``*`` wildcard, and every prefix of it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from odradek.server.acl_operations import AclOperation

WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.IntEnum):
    """org.apache.kafka.common.resource.ResourceType codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """org.apache.kafka.common.resource.PatternType codes."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(enum.IntEnum):
    """org.apache.kafka.common.acl.AclPermissionType codes."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _enum(cls: type[enum.IntEnum], code: int) -> int:
    """``code`` as a member of ``cls``; codes Kafka does not define read as UNKNOWN (0)."""
    try:
        return cls(code)
    except ValueError:
        return 0


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL (Kafka's StandardAcl): a resource pattern and an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def of(
        cls, resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
        operation: int, permission_type: int,
    ) -> StandardAcl:
        return cls(
            ResourceType(_enum(ResourceType, resource_type)), resource_name,
            PatternType(_enum(PatternType, pattern_type)), principal, host,
            AclOperation(_enum(AclOperation, operation)),
            AclPermissionType(_enum(AclPermissionType, permission_type)),
        )

    @classmethod
    def from_record(cls, r: dict[str, object]) -> StandardAcl:
        """From an AccessControlEntryRecord's fields."""
        return cls.of(
            int(r["resource_type"]), str(r["resource_name"]), int(r["pattern_type"]),  # type: ignore[call-overload]
            str(r["principal"]), str(r["host"]), int(r["operation"]), int(r["permission_type"]),  # type: ignore[call-overload]
        )

    def to_record(self, acl_id: object) -> dict[str, object]:
        return {
            "id": acl_id, "resource_type": int(self.resource_type), "resource_name": self.resource_name,
            "pattern_type": int(self.pattern_type), "principal": self.principal, "host": self.host,
            "operation": int(self.operation), "permission_type": int(self.permission_type),
        }

    def validation_error(self) -> str | None:
        """Why this ACL cannot be created, or None: Kafka's AclControlManager.validateNewAcl, and
        the checks of its AclApis (the CLUSTER resource's name, a principal ``type:name``)."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return f"Invalid resourceType {self.resource_type.name}"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"Invalid patternType {self.pattern_type.name}"
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            return f"Invalid operation {self.operation.name}"
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return f"Invalid permissionType {self.permission_type.name}"
        if not self.resource_name:
            return "Resource name should not be empty"
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            return (f"Could not parse principal from `{self.principal}` (no colon is present separating "
                    "the principal type from the principal name)")
        return None

    def pattern_str(self) -> str:
        """Kafka's ResourcePattern.toString."""
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.resource_name}, "
            f"patternType={self.pattern_type.name})"
        )

    def entry_str(self) -> str:
        """Kafka's AccessControlEntry as kafka-acls prints it."""
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter (DescribeAcls, DeleteAcls): None or ANY matches any value."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def of(
        cls, resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
        host: str | None, operation: int, permission_type: int,
    ) -> AclBindingFilter:
        return cls(
            ResourceType(_enum(ResourceType, resource_type)), resource_name,
            PatternType(_enum(PatternType, pattern_type)), principal, host,
            AclOperation(_enum(AclOperation, operation)),
            AclPermissionType(_enum(AclPermissionType, permission_type)),
        )

    def unknown_error(self) -> str | None:
        """Kafka's AclControlManager.validateFilter."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN:
            return "Unknown entryFilter."
        return None

    def matches_pattern(self, acl: StandardAcl) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != acl.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if pt == PatternType.ANY or pt == acl.pattern_type:
            return name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD_RESOURCE
        if acl.pattern_type == PatternType.PREFIXED:
            return name.startswith(acl.resource_name)
        return False

    def matches_entry(self, acl: StandardAcl) -> bool:
        """Kafka's AccessControlEntryFilter.matches."""
        return (
            (self.principal is None or self.principal == acl.principal)
            and (self.host is None or self.host == acl.host)
            and (self.operation == AclOperation.ANY or self.operation == acl.operation)
            and (self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type)
        )

    def matches(self, acl: StandardAcl) -> bool:
        return self.matches_pattern(acl) and self.matches_entry(acl)
