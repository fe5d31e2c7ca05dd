"""ScramControlManager: AlterUserScramCredentials on the controller, sans I/O (Kafka's
ScramControlManager).

Each upsertion carries a salt and a *salted* password (the client did the PBKDF2 work); the
controller derives StoredKey and ServerKey and writes a UserScramCredentialRecord, a deletion a
RemoveUserScramCredentialRecord. Validation and messages as Kafka: an empty user name is
UNACCEPTABLE_CREDENTIAL, a mechanism other than SCRAM-SHA-256/512 UNSUPPORTED_SASL_MECHANISM,
iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL, deleting a credential that does not exist
RESOURCE_NOT_FOUND, and a user named twice in one request (whatever the mechanisms)
DUPLICATE_RESOURCE. Users are independent: one's error does not stop another's change.
"""

from __future__ import annotations

import logging
from typing import Any

from odradek.controller.replication_control import MetadataRecord
from odradek.metadata.image import MetadataImage
from odradek.protocol.errors import Errors
from odradek.security.scram_credential import (
    MAX_ITERATIONS,
    ScramMechanism,
    credential_from_salted,
)

log = logging.getLogger(__name__)

_DUPLICATE = "A user credential cannot be altered twice in the same request"


def _validate_name_and_mechanism(name: str, mechanism: int) -> tuple[Errors, str] | None:
    if not name:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if ScramMechanism.by_type(mechanism) is None:
        return Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


class ScramControlManager:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    def _validate_deletion(self, d: dict[str, Any]) -> tuple[Errors, str] | None:
        error = _validate_name_and_mechanism(d["name"], d["mechanism"])
        if error is not None:
            return error
        mech = ScramMechanism.by_type(d["mechanism"])
        assert mech is not None
        if self.image.scram.get(mech, d["name"]) is None:
            return Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        return None

    @staticmethod
    def _validate_upsertion(u: dict[str, Any]) -> tuple[Errors, str] | None:
        error = _validate_name_and_mechanism(u["name"], u["mechanism"])
        if error is not None:
            return error
        mech = ScramMechanism.by_type(u["mechanism"])
        assert mech is not None
        if u["iterations"] < mech.min_iterations:
            return Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        if u["iterations"] > MAX_ITERATIONS:
            return Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        return None

    def alter_credentials(self, request: dict[str, Any]) -> tuple[dict[str, Any], list[MetadataRecord]]:
        """The AlterUserScramCredentials response and the records to write."""
        deletions: dict[str, dict[str, Any]] = {}
        upserts: dict[str, dict[str, Any]] = {}
        errors: dict[str, tuple[Errors, str]] = {}
        for d in request.get("deletions") or []:
            name = d["name"]
            if name in errors:
                continue
            if deletions.pop(name, None) is not None:
                errors[name] = (Errors.DUPLICATE_RESOURCE, _DUPLICATE)
                continue
            error = self._validate_deletion(d)
            if error is not None:
                errors[name] = error
            else:
                deletions[name] = d
        for u in request.get("upsertions") or []:
            name = u["name"]
            if name in errors:
                continue
            if deletions.pop(name, None) is not None or upserts.pop(name, None) is not None:
                errors[name] = (Errors.DUPLICATE_RESOURCE, _DUPLICATE)
                continue
            error = self._validate_upsertion(u)
            if error is not None:
                errors[name] = error
            else:
                upserts[name] = u
        results: list[dict[str, Any]] = []
        records: list[MetadataRecord] = []
        for name, d in deletions.items():
            results.append({"user": name, "error_code": Errors.NONE, "error_message": None})
            records.append(("RemoveUserScramCredentialRecord", {"name": name, "mechanism": d["mechanism"]}))
        for name, u in upserts.items():
            mech = ScramMechanism.by_type(u["mechanism"])
            assert mech is not None
            cred = credential_from_salted(mech, bytes(u["salt"]), bytes(u["salted_password"]), u["iterations"])
            results.append({"user": name, "error_code": Errors.NONE, "error_message": None})
            records.append(
                (
                    "UserScramCredentialRecord",
                    {"name": name, "mechanism": mech.type_id, "salt": cred.salt,
                     "stored_key": cred.stored_key, "server_key": cred.server_key,
                     "iterations": cred.iterations},
                )
            )
        for name, (code, message) in errors.items():
            results.append({"user": name, "error_code": code, "error_message": message})
        return {"throttle_time_ms": 0, "results": results}, records


def describe_credentials(image: MetadataImage, request: dict[str, Any]) -> dict[str, Any]:
    """DescribeUserScramCredentials from the image (Kafka's ScramImage.describe)."""
    users = request.get("users")
    unique: dict[str, bool] = {}  # user -> named twice
    if not users:
        for user in image.scram.users():
            unique[user] = False
    else:
        for u in users:
            unique[u["name"]] = u["name"] in unique
    all_users = image.scram.users()
    results: list[dict[str, Any]] = []
    for user, duplicate in unique.items():
        result: dict[str, Any] = {"user": user, "error_code": Errors.NONE, "error_message": None,
                                  "credential_infos": []}
        if duplicate:
            result["error_code"] = Errors.DUPLICATE_RESOURCE
            result["error_message"] = (
                "Cannot describe SCRAM credentials for the same user twice in a single request: " + user
            )
        elif user not in all_users:
            result["error_code"] = Errors.RESOURCE_NOT_FOUND
            result["error_message"] = "Attempt to describe a user credential that does not exist: " + user
        else:
            result["credential_infos"] = [
                {"mechanism": mech.type_id, "iterations": cred.iterations}
                for mech, cred in sorted(all_users[user].items(), key=lambda kv: kv[0].type_id)
            ]
        results.append(result)
    return {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None, "results": results}
