"""The admin APIs whose changes the controller makes: CreateTopics, DeleteTopics,
CreatePartitions, AlterConfigs and IncrementalAlterConfigs (the requests a Kafka broker forwards to
the controller), and DescribeConfigs.

Topic configs and dynamic broker configs (KIP-226) are described from the metadata image and the
static configuration; changes go to the controller, which validates them and writes the records.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from odradek.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from odradek.protocol.errors import Errors
from odradek.server import config_defs
from odradek.server.dynamic_broker_config import describe_broker_config
from odradek.server.kafka_config import KafkaConfig

if TYPE_CHECKING:
    from odradek.controller.quorum_controller import QuorumController
    from odradek.server.api_dispatcher import RequestContext

log = logging.getLogger(__name__)

_ZERO_UUID = uuid.UUID(int=0)


class AdminApis:
    def __init__(
        self, *, node_id: int, config: KafkaConfig, image: MetadataImage, controller: QuorumController
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.image = image
        self.controller = controller

    # -- CreateTopics ---------------------------------------------------------------------------

    def handle_create_topics(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        seen: dict[str, int] = {}
        for t in req["topics"]:
            seen[t["name"]] = seen.get(t["name"], 0) + 1
        dup = {n for n, c in seen.items() if c > 1}
        valid = [t for t in req["topics"] if t["name"] not in dup]

        async def run() -> dict[str, Any]:
            results = await self.controller.create_topics(valid, req["validate_only"]) if valid else []
            out = []
            for r in results:
                entry: dict[str, Any] = {
                    "name": r.name,
                    "topic_id": r.topic_id,
                    "error_code": r.error,
                    "error_message": r.message,
                    "num_partitions": r.num_partitions,
                    "replication_factor": r.replication_factor,
                    "configs": None,
                }
                if r.error == Errors.NONE and ctx.version >= 5:
                    entry["configs"] = [
                        {
                            "name": c.name,
                            "value": c.value,
                            "read_only": c.read_only,
                            "config_source": c.source,
                            "is_sensitive": c.is_sensitive,
                        }
                        for c in config_defs.describe_topic_config(self.config, r.configs)
                    ]
                out.append(entry)
            for n in sorted(dup):
                out.append(
                    {
                        "name": n,
                        "error_code": Errors.INVALID_REQUEST,
                        "error_message": f"Create topics request from client `{ctx.header.client_id}` contains multiple entries for the following topics: {n}",
                        "num_partitions": -1,
                        "replication_factor": -1,
                    }
                )
            return {"throttle_time_ms": 0, "topics": out}

        return run()

    # -- DeleteTopics ---------------------------------------------------------------------------

    def handle_delete_topics(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        names: list[str | None] = []
        ids: list[uuid.UUID | None] = []
        if ctx.version >= 6:
            for t in req["topics"]:
                if t.get("name") is not None:
                    names.append(t["name"])
                    ids.append(None)
                else:
                    names.append(None)
                    ids.append(t.get("topic_id") or _ZERO_UUID)
        else:
            for n in req["topic_names"]:
                names.append(n)
                ids.append(None)

        async def run() -> dict[str, Any]:
            results = await self.controller.delete_topics(names, ids)
            return {
                "throttle_time_ms": 0,
                "responses": [
                    {"name": n, "topic_id": tid, "error_code": code, "error_message": msg}
                    for n, tid, code, msg in results
                ],
            }

        return run()

    # -- CreatePartitions -----------------------------------------------------------------------

    def handle_create_partitions(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        async def run() -> dict[str, Any]:
            results = await self.controller.create_partitions(req["topics"], req["validate_only"])
            return {
                "throttle_time_ms": 0,
                "results": [{"name": n, "error_code": c, "error_message": msg} for n, c, msg in results],
            }

        return run()

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
                if rname not in self.image.topics_by_name:
                    res["error_code"] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                    res["error_message"] = f"Topic '{rname}' does not exist."
                else:
                    entries = config_defs.describe_topic_config(
                        self.config, self.image.topic_config(rname), keys
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
                        "config_type": config_defs.config_type_code(e.name, topic=is_topic),
                        "documentation": config_defs.config_doc(e.name, topic=is_topic) if include_docs else None,
                    }
                )
            results.append(res)
        return {"throttle_time_ms": 0, "results": results}

    def _alter_configs(self, ctx: RequestContext, req: dict[str, Any], incremental: bool) -> Any:
        async def run() -> dict[str, Any]:
            outcomes = await self.controller.alter_configs(req["resources"], req["validate_only"], incremental)
            responses = []
            for r, (code, msg) in zip(req["resources"], outcomes, strict=True):
                if code != Errors.NONE:
                    log.info(
                        "%sAlterConfigs of %s %r refused: %s",
                        "Incremental" if incremental else "",
                        {2: "topic", 4: "broker", 8: "broker logger"}.get(r["resource_type"], r["resource_type"]),
                        r["resource_name"], msg,
                    )
                responses.append(
                    {
                        "error_code": code,
                        "error_message": msg,
                        "resource_type": r["resource_type"],
                        "resource_name": r["resource_name"],
                    }
                )
            return {"throttle_time_ms": 0, "responses": responses}

        return run()

    def handle_alter_configs(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        return self._alter_configs(ctx, req, incremental=False)

    def handle_incremental_alter_configs(self, ctx: RequestContext, req: dict[str, Any]) -> Any:
        return self._alter_configs(ctx, req, incremental=True)
