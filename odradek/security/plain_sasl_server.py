"""PLAIN (RFC 4616) on the server, as Kafka's PlainSaslServer with its default callback handler
(PlainServerCallbackHandler): the users are the ``user_<name>="<password>"`` options of the
listener's ``plain.sasl.jaas.config``.

The client's single message is ``authzid NUL authcid NUL passwd``. An unknown user and a wrong
password fail with the same message, compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from odradek.security.sasl_server import SaslAuthenticationError

MECHANISM = "PLAIN"
INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"
_NO_SUCH_USER = b"\x00" * 32  # compared against when the user is unknown (same work either way)


def plain_users(jaas_options: Mapping[str, str]) -> dict[str, str]:
    """user name -> password from the JAAS options ``user_<name>=<password>``."""
    return {k[len("user_"):]: v for k, v in jaas_options.items() if k.startswith("user_")}


class PlainSaslServer:
    mechanism = MECHANISM

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._complete = False
        self._authorization_id = ""

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        if not self._complete:
            raise RuntimeError("authentication exchange has not completed")
        return self._authorization_id

    def credential_lifetime_ms(self) -> int | None:
        return None

    def evaluate_response(self, response: bytes) -> bytes:
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SaslAuthenticationError("Authentication failed: invalid SASL/PLAIN response") from e
        parts = text.split("\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError(
                "Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts))
            )
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        ok = hmac.compare_digest(
            password.encode("utf-8"), _NO_SUCH_USER if expected is None else expected.encode("utf-8")
        )
        if expected is None or not ok:
            raise SaslAuthenticationError(INVALID_CREDENTIALS)
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self._authorization_id = username
        self._complete = True
        return b""
