"""What every server-side SASL mechanism provides (Java's ``SaslServer`` as Kafka uses it).

A mechanism is fed the client's tokens one at a time (:meth:`SaslServer.evaluate_response`)
and answers with the next challenge; once :attr:`~SaslServer.complete`, ``authorization_id`` is the
authenticated user name. Failures are raised as one of two exceptions, as in Kafka:
:class:`SaslAuthenticationError` carries a message meant for the client (it reveals nothing),
:class:`SaslError` a detail only for the broker's log (the client gets Kafka's generic
"Authentication failed during authentication due to invalid credentials with SASL mechanism X").
"""

from __future__ import annotations

from typing import Protocol


class SaslError(Exception):
    """Authentication failed; the message is for the log only."""


class SaslAuthenticationError(SaslError):
    """Authentication failed; the message is sent to the client."""


class SaslServer(Protocol):
    mechanism: str

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str: ...

    def evaluate_response(self, response: bytes) -> bytes:
        """The challenge answering ``response``; raises SaslError on failure."""
        ...

    def credential_lifetime_ms(self) -> int | None:
        """When the credential expires (epoch ms), if it does (OAUTHBEARER tokens)."""
        ...
