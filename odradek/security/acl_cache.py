"""AclCache: the ACLs of a node, indexed for lookup by resource (Kafka's ``AclCache``).

Kafka keeps ACLs in a TreeMap sorted by resource type and reversed name so that an authorization
visits only the ACLs that can match the resource. This index reaches the same set without a scan:
per resource type, an exact map ``name -> principal -> ACLs`` for LITERAL patterns (the ``*``
wildcard is one more key), a map ``prefix -> principal -> ACLs`` for PREFIXED ones, and the sorted
set of prefix lengths that occur, so that a lookup tries only the prefixes of the resource's name
that some ACL has. The cost of a lookup depends on the name's length and on how many distinct
prefix lengths exist (at most the longest resource name), never on the number of ACLs.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterator, Mapping

from odradek.security.acl import (
    WILDCARD_RESOURCE,
    AclBindingFilter,
    PatternType,
    ResourceType,
    StandardAcl,
)

# principal -> the ACLs of one resource pattern that name it
Bucket = dict[str, list[StandardAcl]]


class _TypeIndex:
    __slots__ = ("literal", "prefixed", "prefix_lengths", "_length_counts")

    def __init__(self) -> None:
        self.literal: dict[str, Bucket] = {}
        self.prefixed: dict[str, Bucket] = {}
        self.prefix_lengths: list[int] = []  # sorted, distinct
        self._length_counts: dict[int, int] = {}

    def add(self, acl: StandardAcl) -> None:
        table = self.prefixed if acl.pattern_type == PatternType.PREFIXED else self.literal
        bucket = table.get(acl.resource_name)
        if bucket is None:
            bucket = table[acl.resource_name] = {}
            if table is self.prefixed:
                n = len(acl.resource_name)
                count = self._length_counts.get(n, 0)
                if count == 0:
                    bisect.insort(self.prefix_lengths, n)
                self._length_counts[n] = count + 1
        bucket.setdefault(acl.principal, []).append(acl)

    def remove(self, acl: StandardAcl) -> None:
        table = self.prefixed if acl.pattern_type == PatternType.PREFIXED else self.literal
        bucket = table.get(acl.resource_name)
        if bucket is None:
            return
        acls = bucket.get(acl.principal)
        if acls is None or acl not in acls:
            return
        acls.remove(acl)
        if not acls:
            del bucket[acl.principal]
        if not bucket:
            del table[acl.resource_name]
            if table is self.prefixed:
                n = len(acl.resource_name)
                self._length_counts[n] -= 1
                if self._length_counts[n] == 0:
                    del self._length_counts[n]
                    self.prefix_lengths.remove(n)

    def buckets(self, name: str) -> Iterator[Bucket]:
        """The buckets of every pattern that applies to resource ``name``."""
        literal = self.literal
        if (b := literal.get(name)) is not None:
            yield b
        if name != WILDCARD_RESOURCE and (b := literal.get(WILDCARD_RESOURCE)) is not None:
            yield b
        prefixed = self.prefixed
        if prefixed:
            n = len(name)
            for length in self.prefix_lengths:
                if length > n:
                    break
                if (b := prefixed.get(name[:length])) is not None:
                    yield b

    def is_empty(self) -> bool:
        return not self.literal and not self.prefixed


class AclCache:
    """Every ACL by id, and the index :meth:`buckets` reads."""

    def __init__(self) -> None:
        self.by_id: dict[uuid.UUID, StandardAcl] = {}
        self._types: dict[ResourceType, _TypeIndex] = {}

    def __len__(self) -> int:
        return len(self.by_id)

    def add(self, acl_id: uuid.UUID, acl: StandardAcl) -> None:
        old = self.by_id.get(acl_id)
        if old is not None:
            self.remove(acl_id)
        self.by_id[acl_id] = acl
        index = self._types.get(acl.resource_type)
        if index is None:
            index = self._types[acl.resource_type] = _TypeIndex()
        index.add(acl)

    def remove(self, acl_id: uuid.UUID) -> None:
        acl = self.by_id.pop(acl_id, None)
        if acl is None:
            return
        index = self._types.get(acl.resource_type)
        if index is not None:
            index.remove(acl)

    def replace_all(self, acls: Mapping[uuid.UUID, StandardAcl]) -> None:
        self.by_id = {}
        self._types = {}
        for acl_id, acl in acls.items():
            self.add(acl_id, acl)

    def buckets(self, resource_type: ResourceType, name: str) -> Iterator[Bucket]:
        index = self._types.get(resource_type)
        if index is None:
            return iter(())
        return index.buckets(name)

    def of_type(self, resource_type: ResourceType) -> Iterator[StandardAcl]:
        index = self._types.get(resource_type)
        if index is None:
            return
        for table in (index.literal, index.prefixed):
            for bucket in table.values():
                for acls in bucket.values():
                    yield from acls

    def acls(self, flt: AclBindingFilter) -> list[StandardAcl]:
        """Every ACL ``flt`` matches (DescribeAcls), in a stable order."""
        return [acl for acl in self.by_id.values() if flt.matches(acl)]
