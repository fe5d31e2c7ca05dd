"""SaslHandshake and SaslAuthenticate as the broker's (and controller's) request handlers see
them: only when no authenticator took them first, i.e. on a listener without SASL or on a
connection that already authenticated without asking to re-authenticate. Kafka's KafkaApis
answers them with ILLEGAL_SASL_STATE there; both are advertised by ApiVersions on every listener,
as Kafka does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.schema import Api

if TYPE_CHECKING:
    from odradek.server.api_dispatcher import Handler, RequestContext


class SaslApis:
    def handlers(self) -> dict[Api, Handler]:
        return {
            m.SASL_HANDSHAKE: self.handle_sasl_handshake,
            m.SASL_AUTHENTICATE: self.handle_sasl_authenticate,
        }

    def handle_sasl_handshake(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        return {"error_code": Errors.ILLEGAL_SASL_STATE, "mechanisms": []}

    def handle_sasl_authenticate(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        return {
            "error_code": Errors.ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"",
            "session_lifetime_ms": 0,
        }
