"""SCRAM credentials (RFC 5802 / RFC 7677) as Kafka's ScramMechanism, ScramCredential and
ScramFormatter define them.

A credential is what a server stores for a user: the salt, the iteration count, ``StoredKey =
H(ClientKey)`` and ``ServerKey``, where ``SaltedPassword = PBKDF2-HMAC-H(password, salt,
iterations)``, ``ClientKey = HMAC(SaltedPassword, "Client Key")`` and ``ServerKey =
HMAC(SaltedPassword, "Server Key")``. The password itself is never stored. Kafka keeps them in the
metadata log as UserScramCredentialRecords; the mechanism's number there is
:attr:`ScramMechanism.type_id` (1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from enum import Enum

# Kafka's bounds on the iterations of a credential (ScramMechanism.minIterations, and the
# 16384 maximum AlterUserScramCredentials accepts).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramMechanism(Enum):
    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256", 1)
    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512", 2)

    def __init__(self, mechanism_name: str, hash_name: str, type_id: int) -> None:
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name
        self.type_id = type_id

    @property
    def min_iterations(self) -> int:
        return MIN_ITERATIONS

    @classmethod
    def by_name(cls, name: str) -> ScramMechanism | None:
        for m in cls:
            if m.mechanism_name == name:
                return m
        return None

    @classmethod
    def by_type(cls, type_id: int) -> ScramMechanism | None:
        for m in cls:
            if m.type_id == type_id:
                return m
        return None


SCRAM_MECHANISM_NAMES = tuple(m.mechanism_name for m in ScramMechanism)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def hmac_digest(mech: ScramMechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, mech.hash_name).digest()


def hash_digest(mech: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mech.hash_name, data).digest()


def salted_password(mech: ScramMechanism, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(): PBKDF2 with HMAC-H, one block of the hash's length."""
    return hashlib.pbkdf2_hmac(mech.hash_name, password, salt, iterations)


def client_key(mech: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(mech, salted, b"Client Key")


def server_key(mech: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(mech, salted, b"Server Key")


def xor(a: bytes, b: bytes) -> bytes:
    if len(a) != len(b):
        raise ValueError("xor of byte strings of different lengths")
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def generate_credential(
    mech: ScramMechanism, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A new credential for ``password`` (a random salt unless one is given)."""
    if salt is None:
        salt = os.urandom(32)
    salted = salted_password(mech, password.encode("utf-8"), salt, iterations)
    return credential_from_salted(mech, salt, salted, iterations)


def credential_from_salted(
    mech: ScramMechanism, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """A credential from a salted password (AlterUserScramCredentials sends that, not the password)."""
    return ScramCredential(
        salt=salt,
        stored_key=hash_digest(mech, client_key(mech, salted)),
        server_key=server_key(mech, salted),
        iterations=iterations,
    )


def sasl_name_decode(name: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is invalid."""
    out: list[str] = []
    i = 0
    while i < len(name):
        c = name[i]
        if c == "=":
            code = name[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ValueError("invalid escape in a SCRAM user name")
            i += 3
            continue
        if c == ",":
            raise ValueError("unescaped ',' in a SCRAM user name")
        out.append(c)
        i += 1
    return "".join(out)


def sasl_name_encode(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")
