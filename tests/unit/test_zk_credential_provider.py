"""SCRAM credentials of ZooKeeper mode in Kafka's ScramCredentialUtils text (``/config/users``)."""

from __future__ import annotations

import base64

import pytest

from odradek.security.scram_credential import ScramMechanism, generate_credential
from odradek.security.zk_credential_provider import (
    CredentialFormatError,
    ZkCredentialProvider,
    credential_from_string,
    credential_to_string,
)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512


def test_kafka_text_parsed() -> None:
    # the layout Kafka 3.9 writes: salt, stored_key, server_key (standard base64), iterations
    salt, stored, server = b"\x01" * 16, b"\x02" * 32, b"\x03" * 32
    text = (f"salt={base64.b64encode(salt).decode()},stored_key={base64.b64encode(stored).decode()},"
            f"server_key={base64.b64encode(server).decode()},iterations=8192")
    cred = credential_from_string(text)
    assert (cred.salt, cred.stored_key, cred.server_key, cred.iterations) == (salt, stored, server, 8192)
    assert credential_to_string(cred) == text


@pytest.mark.parametrize("text", [
    "", "salt=AAAA,stored_key=AAAA,server_key=AAAA", "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=x",
    "salt=!!!,stored_key=AAAA,server_key=AAAA,iterations=4096", "salt,stored_key=AAAA,server_key=AAAA,iterations=1",
])
def test_bad_text_refused(text: str) -> None:
    with pytest.raises(CredentialFormatError):
        credential_from_string(text)


def test_provider_follows_user_configs() -> None:
    p = ZkCredentialProvider()
    a256 = generate_credential(SHA256, "pw")
    a512 = generate_credential(SHA512, "pw")
    p.process_config_changes("alice", {"SCRAM-SHA-256": credential_to_string(a256),
                                       "SCRAM-SHA-512": credential_to_string(a512),
                                       "producer_byte_rate": "1024"})
    assert p.lookup(SHA256, "alice") == a256 and p.lookup(SHA512, "alice") == a512
    assert p.lookup(SHA256, "bob") is None
    # a change replaces the whole set; a broken value leaves the user without that credential
    p.process_config_changes("alice", {"SCRAM-SHA-512": "salt=nope"})
    assert p.lookup(SHA256, "alice") is None and p.lookup(SHA512, "alice") is None
    # sanitized (URL-encoded) znode names; quota entities <user>/clients/<id> ignored
    p.process_config_changes("carol%40example.com", {"SCRAM-SHA-256": credential_to_string(a256)})
    assert p.lookup(SHA256, "carol@example.com") == a256
    p.process_config_changes("carol%40example.com/clients/c1", {"SCRAM-SHA-256": "salt=broken"})
    assert p.lookup(SHA256, "carol@example.com") == a256
