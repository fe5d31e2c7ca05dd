"""SaslServerAuthenticator: the SASL state of one connection on a SASL listener, sans I/O, as
Kafka's SaslServerAuthenticator and KafkaChannel's re-authentication (KIP-368).

Before authentication only ApiVersions and SaslHandshake are accepted; any other request closes
the connection ("Unexpected Kafka request of type X during SASL handshake"). SaslHandshake v1
names the mechanism and the tokens then travel in SaslAuthenticate requests; after a v0
handshake they travel as bare size-prefixed frames (Kafka still serves v0, deprecated). Once the
mechanism completes, the connection's principal is ``User:<name>`` and every request passes
through to the broker's handler.

Failures: an unknown mechanism (UNSUPPORTED_SASL_MECHANISM with the enabled list), a second
handshake or another request during authentication (ILLEGAL_SASL_STATE), bad credentials
(SASL_AUTHENTICATION_FAILED). The error response is sent after
``connection.failed.authentication.delay.ms`` and the connection then closed.

Re-authentication: a session lasts ``connections.max.reauth.ms`` (or until an OAUTHBEARER token
expires, whichever is first), reported to SaslAuthenticate v1+ clients as
``session_lifetime_ms``. A client that supports it sends SaslHandshake and SaslAuthenticate again
on the same connection (same mechanism, same principal); a request other than SaslHandshake
after the session expired closes the connection.

:class:`SaslAuthenticator.receive` takes one frame and the time and returns a :class:`Step`:
pass the frame on, answer it, fail (answer after the delay, then close) or close.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.header import (
    decode_request_header,
    encode_response_header,
    peek_request_header,
)
from odradek.protocol.messages.generated import DEFINITIONS
from odradek.protocol.schema import Api, SchemaError
from odradek.security.kafka_principal import USER_TYPE, KafkaPrincipal
from odradek.security.oauthbearer_sasl_server import OAuthBearerSaslServer
from odradek.security.plain_sasl_server import PlainSaslServer, plain_users
from odradek.security.sasl_config import SaslListenerConfig
from odradek.security.sasl_server import SaslAuthenticationError, SaslError, SaslServer
from odradek.security.scram_credential import ScramMechanism
from odradek.security.scram_sasl_server import CredentialLookup, ScramSaslServer

log = logging.getLogger(__name__)


class SaslState(Enum):
    HANDSHAKE_OR_VERSIONS_REQUEST = "HANDSHAKE_OR_VERSIONS_REQUEST"
    HANDSHAKE_REQUEST = "HANDSHAKE_REQUEST"
    AUTHENTICATE = "AUTHENTICATE"
    REAUTH_BAD_MECHANISM = "REAUTH_BAD_MECHANISM"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class StepKind(Enum):
    PASS = "pass"  # hand the frame to the broker's handler
    RESPOND = "respond"  # send ``response``
    FAIL = "fail"  # after the failure delay send ``response`` (if any), then close
    CLOSE = "close"  # close now (after earlier responses)


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    response: list[bytes] | None = None
    reason: str = ""


_PASS = Step(StepKind.PASS)


def _api_name(api_key: int) -> str:
    api = DEFINITIONS.get(api_key)
    return api.name if api is not None else f"unknown API key {api_key}"


def _encode(api: Api, version: int, correlation_id: int, body: dict[str, Any]) -> list[bytes]:
    header = encode_response_header(correlation_id, api.response_header_version(version))
    return [header, *(bytes(p) for p in api.encode_response(version, body))]


class SaslAuthenticator:
    def __init__(
        self,
        config: SaslListenerConfig,
        scram_lookup: CredentialLookup,
        *,
        connection_id: str,
        peer: str,
        wall_clock_ms: Callable[[], int],
    ) -> None:
        self.config = config
        self._scram_lookup = scram_lookup
        self._connection_id = connection_id
        self._peer = peer
        self._wall_clock_ms = wall_clock_ms
        self.state = SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self._server: SaslServer | None = None
        self._raw_tokens = False  # after a v0 handshake
        self._reauthenticating = False
        self._bad_mechanism_message = ""
        self.client_supports_reauth = False
        self.session_expiry_ms: float | None = None  # monotonic ms; None: never
        self.authenticated_now = False  # set by the step that completes (re-)authentication
        self.reauthenticated = False  # ... and whether that was a re-authentication

    # -- helpers --

    def _create_server(self, mechanism: str) -> SaslServer:
        scram = ScramMechanism.by_name(mechanism)
        if scram is not None:
            return ScramSaslServer(scram, self._scram_lookup)
        entry = self.config.jaas.get(mechanism)
        options = entry.options if entry is not None else {}
        if mechanism == "PLAIN":
            return PlainSaslServer(plain_users(options))
        if mechanism == "OAUTHBEARER":
            return OAuthBearerSaslServer(options, self._wall_clock_ms)
        raise AssertionError(f"mechanism {mechanism} enabled but not served")

    def _fail(self, reason: str, response: list[bytes] | None = None) -> Step:
        self.state = SaslState.FAILED
        return Step(StepKind.FAIL, response, reason)

    def _close(self, reason: str) -> Step:
        self.state = SaslState.FAILED
        return Step(StepKind.CLOSE, None, reason)

    @property
    def _what(self) -> str:
        return "re-authentication" if self._reauthenticating else "authentication"

    # -- the entry point --

    def receive(self, frame: bytes | bytearray | memoryview, now_ms: float) -> Step:
        """One frame from the client; ``now_ms`` is monotonic milliseconds."""
        self.authenticated_now = False
        state = self.state
        if state == SaslState.FAILED:
            return Step(StepKind.CLOSE, None, "authentication already failed")
        if state == SaslState.AUTHENTICATE and self._raw_tokens:
            return self._raw_token(bytes(frame), now_ms)
        if len(frame) > self.config.max_receive_size and state != SaslState.COMPLETE:
            return self._close(
                f"SASL request of {len(frame)} bytes exceeds sasl.server.max.receive.size="
                f"{self.config.max_receive_size}"
            )
        try:
            api_key, version, correlation_id = peek_request_header(frame)
        except SchemaError:
            return self._close(f"malformed request during SASL {self._what}")
        if state == SaslState.COMPLETE:
            return self._authenticated(frame, api_key, version, correlation_id, now_ms)
        if state in (SaslState.HANDSHAKE_OR_VERSIONS_REQUEST, SaslState.HANDSHAKE_REQUEST):
            if api_key == m.API_VERSIONS.api_key and not self._reauthenticating:
                self.state = SaslState.HANDSHAKE_REQUEST
                return _PASS
            if api_key == m.SASL_HANDSHAKE.api_key:
                return self._handshake(frame, version, correlation_id)
            return self._close(f"Unexpected Kafka request of type {_api_name(api_key)} during SASL handshake.")
        # AUTHENTICATE / REAUTH_BAD_MECHANISM with Kafka request headers
        if api_key == m.SASL_HANDSHAKE.api_key and m.SASL_HANDSHAKE.supports(version):
            body = {"error_code": Errors.ILLEGAL_SASL_STATE, "mechanisms": []}
            return self._fail(
                "Unexpected Kafka request of type SaslHandshake during SASL authentication.",
                _encode(m.SASL_HANDSHAKE, version, correlation_id, body),
            )
        if api_key != m.SASL_AUTHENTICATE.api_key:
            return self._close(
                f"Unexpected Kafka request of type {_api_name(api_key)} during SASL authentication."
            )
        if not m.SASL_AUTHENTICATE.supports(version):
            return self._close(f"Version {version} is not supported for apiKey SASL_AUTHENTICATE")
        return self._authenticate(frame, version, correlation_id, now_ms)

    # -- the steps --

    def _handshake(self, frame: bytes | bytearray | memoryview, version: int, correlation_id: int) -> Step:
        api = m.SASL_HANDSHAKE
        if not api.supports(version):
            return self._close(f"SaslHandshake v{version} is not supported")
        try:
            _, pos = decode_request_header(frame, api.request_header_version(version))
            req, _ = api.decode_request(version, frame, pos)
        except SchemaError as e:
            return self._close(f"malformed SaslHandshake request: {e}")
        mechanism = req["mechanism"]
        enabled = list(self.config.enabled_mechanisms)
        if mechanism not in enabled:
            body = {"error_code": Errors.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}
            return self._fail(
                f"Unsupported SASL mechanism {mechanism} (enabled: {', '.join(enabled)})",
                _encode(api, version, correlation_id, body),
            )
        response = _encode(api, version, correlation_id, {"error_code": Errors.NONE, "mechanisms": enabled})
        self._raw_tokens = version == 0
        if self._reauthenticating and mechanism != self.mechanism:
            self._bad_mechanism_message = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self.mechanism}'"
            )
            self.state = SaslState.REAUTH_BAD_MECHANISM
            return Step(StepKind.RESPOND, response)
        self.mechanism = mechanism
        self._server = self._create_server(mechanism)
        self.state = SaslState.AUTHENTICATE
        return Step(StepKind.RESPOND, response)

    def _evaluate(self, token: bytes) -> tuple[bytes | None, str | None, str]:
        """(challenge, None, "") or (None, message for the client, detail for the log)."""
        server = self._server
        assert server is not None
        try:
            return server.evaluate_response(token), None, ""
        except SaslAuthenticationError as e:
            return None, str(e), str(e)
        except SaslError as e:
            return None, (
                f"Authentication failed during {self._what} due to invalid credentials with SASL "
                f"mechanism {self.mechanism}"
            ), str(e)

    def _complete(self, now_ms: float) -> str | None:
        """The exchange completed: the principal, and the session's lifetime. An error message
        if a re-authentication changed the principal."""
        server = self._server
        assert server is not None
        principal = KafkaPrincipal(USER_TYPE, server.authorization_id)
        if self._reauthenticating and principal != self.principal:
            old = self.principal
            assert old is not None
            return (
                f"Cannot change principals during re-authentication from {old.principal_type}."
                f"{old.name}: {principal.principal_type}.{principal.name}"
            )
        self.principal = principal
        lifetime = self._session_lifetime_ms()
        self.session_expiry_ms = None if lifetime is None else now_ms + lifetime
        self.state = SaslState.COMPLETE
        self.reauthenticated = self._reauthenticating
        self._reauthenticating = False
        self.authenticated_now = True
        return None

    def _session_lifetime_ms(self) -> int | None:
        server = self._server
        assert server is not None and self.mechanism is not None
        reauth = self.config.reauth_ms.get(self.mechanism, 0)
        credential_expiry = server.credential_lifetime_ms()
        if credential_expiry is None and reauth <= 0:
            return None
        if credential_expiry is None:
            return reauth
        remaining = max(0, credential_expiry - self._wall_clock_ms())
        return remaining if reauth <= 0 else min(remaining, reauth)

    def _authenticate(
        self, frame: bytes | bytearray | memoryview, version: int, correlation_id: int, now_ms: float
    ) -> Step:
        api = m.SASL_AUTHENTICATE
        try:
            _, pos = decode_request_header(frame, api.request_header_version(version))
            req, _ = api.decode_request(version, frame, pos)
        except SchemaError as e:
            return self._close(f"malformed SaslAuthenticate request: {e}")
        if not self.client_supports_reauth:
            self.client_supports_reauth = version > 0

        def failure(message: str) -> list[bytes]:
            body = {"error_code": Errors.SASL_AUTHENTICATION_FAILED, "error_message": message,
                    "auth_bytes": b"", "session_lifetime_ms": 0}
            return _encode(api, version, correlation_id, body)

        if self.state == SaslState.REAUTH_BAD_MECHANISM:
            return self._fail(self._bad_mechanism_message, failure(self._bad_mechanism_message))
        challenge, message, detail = self._evaluate(bytes(req["auth_bytes"]))
        if message is not None:
            return self._fail(f"{message} ({detail})" if detail != message else message, failure(message))
        assert challenge is not None and self._server is not None
        lifetime = 0
        if self._server.complete:
            error = self._complete(now_ms)
            if error is not None:
                return self._fail(error, failure(error))
            if self.session_expiry_ms is not None:
                lifetime = max(0, int(self.session_expiry_ms - now_ms))
        body = {"error_code": Errors.NONE, "error_message": None, "auth_bytes": challenge,
                "session_lifetime_ms": lifetime}
        return Step(StepKind.RESPOND, _encode(api, version, correlation_id, body))

    def _raw_token(self, token: bytes, now_ms: float) -> Step:
        """A v0 handshake's bare SASL token; the answer goes back bare too (a failure closes)."""
        if len(token) > self.config.max_receive_size:
            return self._close(
                f"SASL token of {len(token)} bytes exceeds sasl.server.max.receive.size="
                f"{self.config.max_receive_size}"
            )
        challenge, message, detail = self._evaluate(token)
        if message is not None:
            return self._fail(f"{message} ({detail})" if detail != message else message)
        assert challenge is not None and self._server is not None
        if self._server.complete:
            error = self._complete(now_ms)
            if error is not None:
                return self._fail(error)
        return Step(StepKind.RESPOND, [challenge])

    def _authenticated(
        self, frame: bytes | bytearray | memoryview, api_key: int, version: int, correlation_id: int,
        now_ms: float,
    ) -> Step:
        expiry = self.session_expiry_ms
        is_handshake = api_key == m.SASL_HANDSHAKE.api_key
        if is_handshake and self.client_supports_reauth and version >= 1:
            self._reauthenticating = True
            self.state = SaslState.HANDSHAKE_REQUEST
            return self._handshake(frame, version, correlation_id)
        if expiry is not None and now_ms >= expiry:
            return self._close(
                f"session of {self.principal} expired (connections.max.reauth.ms) and the client "
                "did not re-authenticate"
            )
        return _PASS
