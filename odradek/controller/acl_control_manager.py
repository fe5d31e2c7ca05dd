"""AclControlManager: CreateAcls and DeleteAcls on the controller, sans-I/O (Kafka's
``AclControlManager``).

Creating an ACL validates it as Kafka does (no UNKNOWN/ANY resource type, operation or
permission, a LITERAL or PREFIXED pattern, a non-empty name: INVALID_REQUEST otherwise) and writes
an AccessControlEntryRecord with a fresh id, unless the same ACL exists already (then it
succeeds and writes nothing). Deleting takes filters (UNKNOWN fields: INVALID_REQUEST) and writes
a RemoveAccessControlEntryRecord for each ACL a filter matches; at most
``MAX_RECORDS_PER_USER_OP`` records per request, as Kafka's bound.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from odradek.controller.replication_control import MetadataRecord
from odradek.metadata.image import MetadataImage
from odradek.protocol.errors import Errors
from odradek.security.acl import AclBindingFilter, StandardAcl

MAX_RECORDS_PER_USER_OP = 10000  # Kafka's QuorumController.MAX_RECORDS_PER_USER_OP


@dataclass(frozen=True)
class AclCreateResult:
    error: Errors = Errors.NONE
    message: str | None = None


@dataclass(frozen=True)
class AclDeleteResult:
    error: Errors = Errors.NONE
    message: str | None = None
    deleted: tuple[StandardAcl, ...] = ()


class AclControlManager:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    def create_acls(self, acls: list[StandardAcl]) -> tuple[list[AclCreateResult], list[MetadataRecord]]:
        results: list[AclCreateResult] = []
        records: list[MetadataRecord] = []
        existing = self.image.acls.acls
        known = set(existing.values())
        for acl in acls:
            problem = acl.validation_error()
            if problem is not None:
                results.append(AclCreateResult(Errors.INVALID_REQUEST, problem))
                continue
            if acl not in known:
                known.add(acl)
                acl_id = uuid.uuid4()
                while acl_id in existing:
                    acl_id = uuid.uuid4()
                records.append(("AccessControlEntryRecord", acl.to_record(acl_id)))
            results.append(AclCreateResult())
        return results, records

    def delete_acls(
        self, filters: list[AclBindingFilter]
    ) -> tuple[list[AclDeleteResult], list[MetadataRecord]]:
        results: list[AclDeleteResult] = []
        removed: dict[uuid.UUID, None] = {}
        items = list(self.image.acls.acls.items())
        for flt in filters:
            problem = flt.unknown_error()
            if problem is not None:
                results.append(AclDeleteResult(Errors.INVALID_REQUEST, problem))
                continue
            deleted = []
            ids = []
            for acl_id, acl in items:
                if flt.matches(acl):
                    deleted.append(acl)
                    ids.append(acl_id)
            if len(removed.keys() | set(ids)) > MAX_RECORDS_PER_USER_OP:
                results.append(AclDeleteResult(
                    Errors.UNKNOWN_SERVER_ERROR,
                    f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls in a single delete operation.",
                ))
                continue
            removed.update(dict.fromkeys(ids))
            results.append(AclDeleteResult(deleted=tuple(deleted)))
        return results, [("RemoveAccessControlEntryRecord", {"id": acl_id}) for acl_id in removed]
