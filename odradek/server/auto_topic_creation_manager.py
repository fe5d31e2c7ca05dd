"""AutoTopicCreationManager: the topics a client's Metadata request names that do not exist,
created through the controller channel on the client's behalf (Kafka's
``AutoTopicCreationManager``), with the cluster's default partitions and replication factor."""

from __future__ import annotations

import logging

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.server.controller_channel import (
    ControllerChannel,
    ControllerRequest,
    ControllerRequestTimeout,
    RequestClient,
)

log = logging.getLogger(__name__)


class AutoTopicCreationManager:
    def __init__(self, channel: ControllerChannel, request_timeout_ms: int) -> None:
        self.channel = channel
        self.request_timeout_ms = request_timeout_ms

    async def create_topics(self, names: list[str], client: RequestClient) -> dict[str, Errors]:
        """The Metadata error of each topic that was not created: INVALID_TOPIC_EXCEPTION for a
        name the controller refuses as invalid, LEADER_NOT_AVAILABLE (retriable) otherwise. A
        created topic, or one created meanwhile by someone else, has none."""
        data = {
            "topics": [
                {"name": n, "num_partitions": -1, "replication_factor": -1, "assignments": [], "configs": []}
                for n in names
            ],
            "timeout_ms": self.request_timeout_ms,
            "validate_only": False,
        }
        try:
            results = (await self.channel.send(ControllerRequest(m.CREATE_TOPICS.api_key, 7, data, client)))["topics"]
        except ControllerRequestTimeout as e:
            results = [{"name": n, "error_code": Errors.REQUEST_TIMED_OUT, "error_message": str(e)} for n in names]
        errors: dict[str, Errors] = {}
        for r in results:
            error = Errors(r["error_code"])
            if error == Errors.TOPIC_ALREADY_EXISTS:
                continue
            if error != Errors.NONE:
                log.warning("Auto-creation of topic %s failed: %s", r["name"], r["error_message"] or error.name)
                errors[r["name"]] = (
                    Errors.INVALID_TOPIC_EXCEPTION if error == Errors.INVALID_TOPIC_EXCEPTION else Errors.LEADER_NOT_AVAILABLE
                )
            else:
                log.info("Auto-created topic %s for %s", r["name"], client.host)
        return errors
