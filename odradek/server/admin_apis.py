"""The admin APIs whose changes the controller makes: CreateTopics, DeleteTopics,
CreatePartitions, AlterConfigs and IncrementalAlterConfigs (but for BROKER_LOGGER resources,
this node's log levels, changed here), ElectLeaders, Alter/List
PartitionReassignments, DescribeQuorum and Add/RemoveRaftVoter (KIP-853), forwarded to the controller as a
Kafka broker forwards them (the controller's ControllerApis validates them, writes the records and
answers; a forward that finds no controller in time is answered REQUEST_TIMED_OUT); and
DescribeConfigs, answered here.

Topic configs and dynamic broker configs (KIP-226) are described from the metadata image and the
static configuration.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from odradek.coordinator.group.dynamic_group_config import GROUP_RESOURCE, describe_group_config
from odradek.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.protocol.errors import Errors
from odradek.server import config_defs
from odradek.server.controller_channel import ControllerRequest, ForwardingManager, RequestClient
from odradek.server.dynamic_broker_config import check_broker_resource, describe_broker_config
from odradek.server.kafka_config import KafkaConfig
from odradek.server.runtime_logger_manager import BROKER_LOGGER_RESOURCE, RuntimeLoggerManager

if TYPE_CHECKING:
    from odradek.server.api_dispatcher import RequestContext


class AdminApis:
    def __init__(
        self, *, node_id: int, config: KafkaConfig, metadata_cache: KRaftMetadataCache, forwarding: ForwardingManager
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.metadata_cache = metadata_cache
        self.forwarding = forwarding
        # GROUP resources (KIP-848 group configs) live in the KRaft metadata log only.
        self.serves_group_configs = True
        self.loggers = RuntimeLoggerManager(node_id)

    # -- Forwarded to the controller -------------------------------------------------------------

    def _forward(self, ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        client = RequestClient(ctx.header.client_id, ctx.conn.peer)
        return self.forwarding.forward(ControllerRequest(ctx.header.api_key, ctx.version, req, client))

    def forward(self, ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        """ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments, AddRaftVoter,
        RemoveRaftVoter: forwarded."""
        return self._forward(ctx, req)

    def handle_create_topics(self, ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        return self._forward(ctx, req)

    def handle_delete_topics(self, ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        return self._forward(ctx, req)

    def handle_create_partitions(self, ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        return self._forward(ctx, req)

    def handle_alter_configs(self, ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        return self._forward_configs(ctx, req, incremental=False)

    def handle_incremental_alter_configs(self, ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        return self._forward_configs(ctx, req, incremental=True)

    def _answer_here(self, r: dict[str, Any], incremental: bool, validate_only: bool) -> tuple[int, str | None] | None:
        """As Kafka's ConfigAdminManager.preprocess: a BROKER resource must name this broker (or
        be the cluster default); BROKER_LOGGER resources are this node's log levels, changed
        here (legacy AlterConfigs does not know them). None: forward to the controller."""
        if r["resource_type"] == BROKER_RESOURCE:
            msg = check_broker_resource(r["resource_name"], self.node_id)
            return None if msg is None else (Errors.INVALID_REQUEST, msg)
        if r["resource_type"] == BROKER_LOGGER_RESOURCE:
            if not incremental:
                return Errors.INVALID_REQUEST, f"Unknown resource type {BROKER_LOGGER_RESOURCE}"
            return self.loggers.apply(r, validate_only)
        return None

    async def _forward_configs(self, ctx: RequestContext, req: dict[str, Any], incremental: bool) -> dict[str, Any]:
        local: dict[int, tuple[int, str | None]] = {}
        for i, r in enumerate(req["resources"]):
            answer = self._answer_here(r, incremental, bool(req.get("validate_only")))
            if answer is not None:
                local[i] = answer
        if not local:
            return await self._forward(ctx, req)
        rest = [r for i, r in enumerate(req["resources"]) if i not in local]
        answered: list[dict[str, Any]] = []
        if rest:
            answered = list((await self._forward(ctx, {**req, "resources": rest}))["responses"])
        responses = []
        for i, r in enumerate(req["resources"]):
            if i in local:
                responses.append({
                    "error_code": local[i][0], "error_message": local[i][1],
                    "resource_type": r["resource_type"], "resource_name": r["resource_name"],
                })
            else:
                responses.append(answered.pop(0))
        return {"throttle_time_ms": 0, "responses": responses}

    def handle_describe_quorum(self, ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        return self._forward(ctx, req)

    # -- Configs --------------------------------------------------------------------------------

    def handle_describe_configs(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        include_synonyms = req.get("include_synonyms", False)
        include_docs = req.get("include_documentation", False)
        results = []
        for r in req["resources"]:
            rtype, rname, keys = r["resource_type"], r["resource_name"], r["configuration_keys"]
            res: dict[str, Any] = {
                "error_code": Errors.NONE,
                "error_message": None,
                "resource_type": rtype,
                "resource_name": rname,
                "configs": [],
            }
            entries: list[config_defs.ConfigEntry] = []
            is_topic = rtype == TOPIC_RESOURCE
            if is_topic:
                if not self.metadata_cache.contains_topic(rname):
                    res["error_code"] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                    res["error_message"] = f"Topic '{rname}' does not exist."
                else:
                    entries = config_defs.describe_topic_config(
                        self.config, self.metadata_cache.topic_config(rname), keys
                    )
            elif rtype == BROKER_RESOURCE:
                if rname != "" and not rname.lstrip("-").isdigit():
                    res["error_code"] = Errors.INVALID_REQUEST
                    res["error_message"] = f"Broker id must be an integer, but it is: {rname}"
                elif rname != "" and int(rname) != self.node_id:
                    res["error_code"] = Errors.INVALID_REQUEST
                    res["error_message"] = f"Unexpected broker id, expected {self.node_id} or empty string, but received {rname}"
                else:
                    entries = describe_broker_config(self.config, rname, keys)
            elif rtype == BROKER_LOGGER_RESOURCE:
                msg = self.loggers.check_name(rname, describe=True)
                if msg is not None:
                    res["error_code"], res["error_message"] = Errors.INVALID_REQUEST, msg
                else:
                    entries = self.loggers.describe(keys)
            elif rtype == GROUP_RESOURCE and self.serves_group_configs:
                if not rname:
                    res["error_code"] = Errors.INVALID_REQUEST
                    res["error_message"] = "Group name must not be empty"
                else:
                    entries = describe_group_config(self.config, self.metadata_cache.group_config(rname), keys)
            else:
                res["error_code"] = Errors.INVALID_REQUEST
                res["error_message"] = f"Unsupported resource type {rtype}"
            for e in entries:
                res["configs"].append(
                    {
                        "name": e.name,
                        "value": e.value,
                        "read_only": e.read_only,
                        "config_source": e.source,
                        "is_sensitive": e.is_sensitive,
                        "synonyms": [
                            {"name": s.name, "value": s.value, "source": s.source} for s in e.synonyms
                        ]
                        if include_synonyms
                        else [],
                        "config_type": 3 if rtype == GROUP_RESOURCE else 2 if rtype == BROKER_LOGGER_RESOURCE else config_defs.config_type_code(e.name, topic=is_topic),
                        "documentation": None if not include_docs or rtype in (GROUP_RESOURCE, BROKER_LOGGER_RESOURCE)
                        else config_defs.config_doc(e.name, topic=is_topic),
                    }
                )
            results.append(res)
        return {"throttle_time_ms": 0, "results": results}
