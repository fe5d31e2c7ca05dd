"""SCRAM-SHA-256 / SCRAM-SHA-512 on the server (RFC 5802, RFC 7677), as Kafka's ScramSaslServer.

Three messages::

    client-first  n,[a=authzid],n=<user>,r=<client nonce>[,extensions]
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 gs2 header>,r=<nonce>[,extensions],p=<base64 proof>
    server-final  v=<base64 server signature>

The credentials come from ``lookup(mechanism, user)`` (the metadata image's
UserScramCredentialRecords). Unlike Kafka, an unknown user is not refused at the first message:
the exchange goes on with a salt derived from the name and a secret of this process and fails at
the proof, exactly as a wrong password does, so the exchange reveals nothing about which users
exist (RFC 5802 section 5.1). Delegation tokens (the ``tokenauth`` extension) are not supported.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import re
import secrets
from collections.abc import Callable

from odradek.security.sasl_server import SaslAuthenticationError, SaslError
from odradek.security.scram_credential import (
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    hash_digest,
    hmac_digest,
    sasl_name_decode,
    xor,
)

CredentialLookup = Callable[[ScramMechanism, str], ScramCredential | None]

_FAKE_SECRET = os.urandom(32)
_CLIENT_FIRST = re.compile(
    r"^(?P<gs2>n,(?:a=(?P<authzid>[^,]*))?,)n=(?P<user>[^,]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?P<ext>(?:,[a-zA-Z][a-zA-Z0-9]*=[^,]*)*)$"
)
_CLIENT_FINAL = re.compile(
    r"^(?P<bare>c=(?P<cb>[A-Za-z0-9+/=]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[a-zA-Z][a-zA-Z0-9]*=[^,]*)*),p=(?P<proof>[A-Za-z0-9+/=]+)$"
)

_FIRST, _FINAL, _COMPLETE, _FAILED = range(4)


def _random_nonce() -> str:
    return secrets.token_urlsafe(24).replace("-", "a").replace("_", "b")


class ScramSaslServer:
    def __init__(
        self, mechanism: ScramMechanism, lookup: CredentialLookup,
        server_nonce: Callable[[], str] | None = None,
    ) -> None:
        self.mechanism = mechanism.mechanism_name
        self._server_nonce = server_nonce or _random_nonce
        self._mech = mechanism
        self._lookup = lookup
        self._state = _FIRST
        self._user = ""
        self._credential: ScramCredential | None = None
        self._known_user = False
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self._state == _COMPLETE

    @property
    def authorization_id(self) -> str:
        if self._state != _COMPLETE:
            raise RuntimeError("authentication exchange has not completed")
        return self._user

    def credential_lifetime_ms(self) -> int | None:
        return None

    def _fake_credential(self, user: str) -> ScramCredential:
        digest = hmac_digest(self._mech, _FAKE_SECRET, user.encode("utf-8"))
        return ScramCredential(salt=digest, stored_key=digest, server_key=digest, iterations=MIN_ITERATIONS)

    def evaluate_response(self, response: bytes) -> bytes:
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError as e:
            self._state = _FAILED
            raise SaslError("SCRAM message is not UTF-8") from e
        if self._state == _FIRST:
            return self._client_first(text)
        if self._state == _FINAL:
            return self._client_final(text)
        self._state = _FAILED
        raise SaslError(f"unexpected SCRAM message in state {self._state}")

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.match(text)
        if m is None:
            self._state = _FAILED
            raise SaslError("invalid SCRAM client first message")
        try:
            user = sasl_name_decode(m["user"])
            authzid = sasl_name_decode(m["authzid"] or "")
        except ValueError as e:
            self._state = _FAILED
            raise SaslError(str(e)) from e
        extensions = dict(kv[1:].split("=", 1) for kv in re.findall(r",[^,]*", m["ext"]))
        if extensions.get("tokenauth", "").lower() == "true":
            self._state = _FAILED
            raise SaslError("delegation token authentication is not supported")
        if authzid and authzid != user:
            self._state = _FAILED
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        cred = self._lookup(self._mech, user)
        self._known_user = cred is not None
        if cred is not None and cred.iterations < self._mech.min_iterations:
            self._state = _FAILED
            raise SaslError(
                f"Iterations {cred.iterations} is less than the minimum {self._mech.min_iterations} "
                f"for {self.mechanism}"
            )
        self._credential = cred if cred is not None else self._fake_credential(user)
        self._user = user
        self._gs2_header = m["gs2"]
        self._client_first_bare = text[len(m["gs2"]):]
        self._nonce = m["nonce"] + self._server_nonce()
        salt = base64.b64encode(self._credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        self._state = _FINAL
        return self._server_first.encode("utf-8")

    def _client_final(self, text: str) -> bytes:
        self._state = _FAILED
        m = _CLIENT_FINAL.match(text)
        if m is None:
            raise SaslError("Authentication failed: Invalid client final message")
        # endsWith, as Kafka checks it: some librdkafka releases (kcat's) send the client
        # nonce once more in front of the combined nonce.
        if not m["nonce"].endswith(self._nonce):
            raise SaslError("Invalid client nonce in the final client message.")
        try:
            channel_binding = base64.b64decode(m["cb"], validate=True)
            proof = base64.b64decode(m["proof"], validate=True)
        except (binascii.Error, ValueError) as e:
            raise SaslError("Authentication failed: Invalid client final message") from e
        if channel_binding != self._gs2_header.encode("utf-8"):
            raise SaslError("Authentication failed: invalid channel binding")
        cred = self._credential
        assert cred is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{m['bare']}".encode()
        signature = hmac_digest(self._mech, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslError("Invalid client credentials")
        computed_stored = hash_digest(self._mech, xor(proof, signature))
        if not hmac.compare_digest(computed_stored, cred.stored_key) or not self._known_user:
            raise SaslError("Invalid client credentials")
        server_signature = hmac_digest(self._mech, cred.server_key, auth_message)
        self._state = _COMPLETE
        return b"v=" + base64.b64encode(server_signature)
