"""OAUTHBEARER (RFC 7628) on the server with Kafka's default, *unsecured* token validator
(OAuthBearerUnsecuredValidatorCallbackHandler): for tests and development only, as in Kafka.

The client's initial response is ``n,[a=authzid],`` then ``\\x01``-separated ``key=value`` pairs
ending in ``\\x01\\x01``; ``auth=Bearer <token>`` carries an unsecured JWS (``alg: none``, empty
signature). Its claims are checked as Kafka checks them: the principal claim (JAAS option
``unsecuredValidatorPrincipalClaimName``, default ``sub``) is a string, ``exp`` (seconds) is
present and not past (``unsecuredValidatorAllowableClockSkewMs``, default 0), ``iat`` if present
is not in the future and not after ``exp``, and every scope of
``unsecuredValidatorRequiredScope`` is in the ``scope`` claim (option
``unsecuredValidatorScopeClaimName``). A token that fails is answered with the RFC 7628 error
JSON (``{"status":"invalid_token"}``); the client's ``\\x01`` acknowledgement then fails the
exchange with that JSON as the message. The token's ``exp`` limits the session (KIP-368).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from odradek.security.sasl_server import SaslAuthenticationError, SaslError

MECHANISM = "OAUTHBEARER"
_RESPONSE = re.compile(r"^n,(?:a=(?P<authzid>[^,]*))?,\x01(?P<kvpairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]*\x01)*)\x01$")
_BEARER = re.compile(r"^Bearer +(?P<token>[A-Za-z0-9_.~+/=-]*)$", re.IGNORECASE)


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class TokenError(Exception):
    pass


def validate_unsecured_token(token: str, options: Mapping[str, str], now_ms: int) -> tuple[str, int]:
    """(principal, lifetime in epoch ms) of a valid unsecured JWS; TokenError otherwise."""
    parts = token.split(".")
    if len(parts) != 3 or parts[2]:
        raise TokenError("an unsecured JWS has three parts and an empty signature")
    try:
        header: Any = json.loads(_b64url(parts[0]))
        claims: Any = json.loads(_b64url(parts[1]))
    except (binascii.Error, ValueError) as e:
        raise TokenError(f"the token is not a JWS: {e}") from e
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise TokenError("the JWS header and payload must be JSON objects")
    if header.get("alg") != "none":
        raise TokenError("unsecured JWS must have alg 'none'")
    skew = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0)
    principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub") or "sub"
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise TokenError(f"required claim {principal_claim!r} is missing or not a string")
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        raise TokenError("required claim 'exp' is missing or not a number")
    exp_ms = int(exp * 1000)
    if now_ms > exp_ms + skew:
        raise TokenError("the token has expired")
    iat = claims.get("iat")
    if iat is not None:
        if not isinstance(iat, int | float) or isinstance(iat, bool):
            raise TokenError("claim 'iat' is not a number")
        if int(iat * 1000) > now_ms + skew:
            raise TokenError("the token was issued in the future")
        if int(iat * 1000) > exp_ms:
            raise TokenError("the token expires before it was issued")
    required = [s for s in re.split(r"[\s,]+", options.get("unsecuredValidatorRequiredScope", "")) if s]
    if required:
        scope_claim = options.get("unsecuredValidatorScopeClaimName", "scope") or "scope"
        scope = claims.get(scope_claim)
        have = set(scope.split() if isinstance(scope, str) else scope if isinstance(scope, list) else [])
        missing = [s for s in required if s not in have]
        if missing:
            raise TokenError(f"the token lacks the required scope {missing}")
    return principal, exp_ms


class OAuthBearerSaslServer:
    mechanism = MECHANISM

    def __init__(self, options: Mapping[str, str], clock_ms: Callable[[], int] | None = None) -> None:
        self._options = options
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._complete = False
        self._principal = ""
        self._lifetime_ms: int | None = None
        self._error: str | None = None

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        if not self._complete:
            raise RuntimeError("authentication exchange has not completed")
        return self._principal

    def credential_lifetime_ms(self) -> int | None:
        return self._lifetime_ms

    def evaluate_response(self, response: bytes) -> bytes:
        if self._error is not None:
            if response == b"\x01":
                raise SaslAuthenticationError(self._error)
            raise SaslError("expected the client's acknowledgement of the error")
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SaslError("OAUTHBEARER response is not UTF-8") from e
        m = _RESPONSE.match(text)
        if m is None:
            raise SaslError("invalid OAUTHBEARER client initial response")
        pairs = dict(kv.split("=", 1) for kv in m["kvpairs"].split("\x01") if kv)
        bearer = _BEARER.match(pairs.get("auth", ""))
        if bearer is None:
            raise SaslError("invalid OAUTHBEARER client initial response: no auth=Bearer token")
        try:
            principal, lifetime = validate_unsecured_token(bearer["token"], self._options, self._clock_ms())
        except TokenError as e:
            self._error = json.dumps({"status": "invalid_token"}, separators=(",", ":"))
            self.failure_detail = str(e)
            return self._error.encode("utf-8")
        authzid = m["authzid"] or ""
        if authzid and authzid != principal:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id "
                f"({authzid}) that is different from the token's principal name ({principal})"
            )
        self._principal = principal
        self._lifetime_ms = lifetime
        self._complete = True
        return b""

    failure_detail = ""
