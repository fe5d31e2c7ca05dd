"""DescribeUserScramCredentials (answered from the metadata image, as Kafka's broker does) and
AlterUserScramCredentials (forwarded to the controller, whose ScramControlManager validates it
and writes the credential records) on a broker listener."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from odradek.controller.scram_control_manager import describe_credentials
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.protocol import messages as m
from odradek.protocol.schema import Api
from odradek.server.controller_channel import ControllerRequest, ForwardingManager, RequestClient

if TYPE_CHECKING:
    from odradek.server.api_dispatcher import Handler, RequestContext


class UserScramApis:
    def __init__(self, metadata_cache: KRaftMetadataCache, forwarding: ForwardingManager) -> None:
        self.metadata_cache = metadata_cache
        self.forwarding = forwarding

    def handlers(self) -> dict[Api, Handler]:
        return {
            m.DESCRIBE_USER_SCRAM_CREDENTIALS: self.handle_describe,
            m.ALTER_USER_SCRAM_CREDENTIALS: self.handle_alter,
        }

    def handle_describe(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        return describe_credentials(self.metadata_cache.image, req)

    def handle_alter(self, ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        client = RequestClient(ctx.header.client_id, ctx.conn.peer)
        return self.forwarding.forward(ControllerRequest(ctx.header.api_key, ctx.version, req, client))
