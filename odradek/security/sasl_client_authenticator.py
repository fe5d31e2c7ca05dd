"""The client side of SASL for the connections Odradek nodes make to each other (Kafka's
SaslClientAuthenticator): SaslHandshake v1, then the mechanism's tokens in SaslAuthenticate v1.

Mechanisms: PLAIN, SCRAM-SHA-256/512 (RFC 5802 client, the server signature verified) and
OAUTHBEARER with an unsecured token built from the JAAS option ``unsecuredLoginStringClaim_sub``
(Kafka's OAuthBearerUnsecuredLoginCallbackHandler). The login of a node for each kind of peer is
registered per event loop (:func:`register_client_logins`, done by the server at start-up):
brokers and controllers of one process share a loop, and embedded nodes each run their own.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import secrets
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.schema import Api
from odradek.security.sasl_config import SaslClientConfig
from odradek.security.scram_credential import (
    ScramMechanism,
    client_key,
    hash_digest,
    hmac_digest,
    salted_password,
    sasl_name_encode,
    server_key,
    xor,
)

Send = Callable[[Api, int, dict[str, Any]], Awaitable[dict[str, Any]]]

# role ("broker" / "controller") -> login, per event loop.
_LOGINS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, SaslClientConfig]] = (
    weakref.WeakKeyDictionary()
)


class SaslClientError(Exception):
    """The peer refused our login (or broke the exchange)."""


def register_client_logins(loop: asyncio.AbstractEventLoop, logins: dict[str, SaslClientConfig]) -> None:
    _LOGINS[loop] = dict(logins)


def client_login(role: str | None) -> SaslClientConfig | None:
    """The login for connections to a peer of ``role`` made on the running loop, if any."""
    if role is None:
        return None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return _LOGINS.get(loop, {}).get(role)


class ScramSaslClient:
    def __init__(self, mechanism: ScramMechanism, username: str, password: str) -> None:
        self._mech = mechanism
        self._username = username
        self._password = password
        self._nonce = secrets.token_urlsafe(24).replace("-", "a").replace("_", "b")
        self._client_first_bare = f"n={sasl_name_encode(username)},r={self._nonce}"
        self._server_signature = b""

    def first_message(self) -> bytes:
        return ("n,," + self._client_first_bare).encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8")
        attrs = dict(kv.split("=", 1) for kv in text.split(",") if "=" in kv)
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or not salt or not iterations.isdigit():
            raise SaslClientError("invalid SCRAM server first message")
        salted = salted_password(self._mech, self._password.encode(), base64.b64decode(salt), int(iterations))
        final_bare = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{final_bare}".encode()
        ckey = client_key(self._mech, salted)
        signature = hmac_digest(self._mech, hash_digest(self._mech, ckey), auth_message)
        proof = base64.b64encode(xor(ckey, signature)).decode()
        self._server_signature = hmac_digest(self._mech, server_key(self._mech, salted), auth_message)
        return f"{final_bare},p={proof}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8")
        if not text.startswith("v=") or not hmac.compare_digest(
            base64.b64decode(text[2:]), self._server_signature
        ):
            raise SaslClientError("the server's SCRAM signature does not verify")


def unsecured_token(options: dict[str, str], now_s: float | None = None) -> str:
    """An unsecured JWS as Kafka's unsecured login module builds it."""
    now = int(now_s if now_s is not None else time.time())
    lifetime = int(options.get("unsecuredLoginLifetimeSeconds", "3600"))
    claims = {"sub": options.get("unsecuredLoginStringClaim_sub", ""), "iat": now, "exp": now + lifetime}

    def enc(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{enc({'alg': 'none'})}.{enc(claims)}."


async def authenticate(send: Send, login: SaslClientConfig) -> int:
    """Run the SASL exchange over ``send``; the session lifetime the server gave (ms, 0 none)."""
    hs = await send(m.SASL_HANDSHAKE, 1, {"mechanism": login.mechanism})
    if hs["error_code"] != Errors.NONE:
        raise SaslClientError(
            f"SaslHandshake for {login.mechanism} refused ({Errors(hs['error_code']).name}); the "
            f"server enables {hs['mechanisms']}"
        )

    async def step(token: bytes) -> tuple[bytes, int]:
        r = await send(m.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        if r["error_code"] != Errors.NONE:
            raise SaslClientError(r["error_message"] or Errors(r["error_code"]).name)
        return bytes(r["auth_bytes"]), int(r.get("session_lifetime_ms", 0))

    scram = ScramMechanism.by_name(login.mechanism)
    if scram is not None:
        client = ScramSaslClient(scram, login.username, login.password)
        server_first, _ = await step(client.first_message())
        server_final, lifetime = await step(client.final_message(server_first))
        client.verify_server_final(server_final)
        return lifetime
    if login.mechanism == "PLAIN":
        _, lifetime = await step(f"\x00{login.username}\x00{login.password}".encode())
        return lifetime
    if login.mechanism == "OAUTHBEARER":
        token = unsecured_token(login.options)
        challenge, lifetime = await step(f"n,,\x01auth=Bearer {token}\x01\x01".encode())
        if challenge:
            await step(b"\x01")  # acknowledge the error; the server then fails the exchange
            raise SaslClientError(challenge.decode("utf-8", "replace"))
        return lifetime
    raise SaslClientError(f"SASL mechanism {login.mechanism} is not supported")
