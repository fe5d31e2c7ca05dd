"""The ControllerChannel of a ZooKeeper-mode broker (what KafkaApis, the coordinators and the
auto-creation forward to): CreateTopics, DeleteTopics and CreatePartitions are carried out by this
broker itself through :class:`~odradek.server.zk_admin_manager.ZkAdminManager` (AlterConfigs and
IncrementalAlterConfigs too: ``/config/<type>/<name>`` and a ``/config/changes`` notification) (it writes
ZooKeeper, the controller acts on its watches: Kafka 3.9's ZooKeeper-mode KafkaApis does the
same, nothing is forwarded); every other request goes to the ZooKeeper controller over the network
channel. Responses are the request's response bodies with Kafka's per-topic errors.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.server.controller_channel import ControllerChannel, ControllerRequest
from odradek.server.zk_admin_manager import ZkAdminManager

_ZERO_UUID = uuid.UUID(int=0)


def _uuid(text: str | None) -> uuid.UUID:
    if not text:
        return _ZERO_UUID
    import base64

    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


class ZkAdminChannel(ControllerChannel):
    def __init__(self, manager: ZkAdminManager, network: ControllerChannel,
                 topic_name: Callable[[uuid.UUID], str | None] = lambda _id: None) -> None:
        self.manager = manager
        self.network = network
        self.topic_name = topic_name  # a topic id's name (the metadata cache), for DeleteTopics v6+

    def active_controller_id(self) -> int | None:
        return self.network.active_controller_id()

    async def close(self) -> None:
        await self.network.close()

    async def send(self, request: ControllerRequest) -> dict[str, Any]:
        key, req = request.api_key, request.data
        if key == m.CREATE_TOPICS.api_key:
            return await self._create_topics(req)
        if key == m.DELETE_TOPICS.api_key:
            return await self._delete_topics(request.api_version, req)
        if key == m.CREATE_PARTITIONS.api_key:
            results = await self.manager.create_partitions(
                req["topics"], req.get("timeout_ms", 30000), bool(req.get("validate_only")))
            return {"throttle_time_ms": 0, "results": [
                {"name": r.name, "error_code": r.error_code, "error_message": r.error_message} for r in results]}
        if key in (m.ALTER_CONFIGS.api_key, m.INCREMENTAL_ALTER_CONFIGS.api_key):
            configs = await self.manager.alter_configs(
                req["resources"], bool(req.get("validate_only")), incremental=key != m.ALTER_CONFIGS.api_key)
            return {"throttle_time_ms": 0, "responses": [
                {"error_code": c.error_code, "error_message": c.error_message, "resource_type": c.resource_type,
                 "resource_name": c.resource_name} for c in configs]}
        return await self.network.send(request)

    async def _create_topics(self, req: dict[str, Any]) -> dict[str, Any]:
        results = await self.manager.create_topics(
            req["topics"], req.get("timeout_ms", 30000), bool(req.get("validate_only")))
        return {"throttle_time_ms": 0, "topics": [{
            "name": r.name, "topic_id": _uuid(r.topic_id), "error_code": r.error_code,
            "error_message": r.error_message, "topic_config_error_code": 0,
            "num_partitions": r.num_partitions, "replication_factor": r.replication_factor,
            "configs": [{"name": k, "value": v, "read_only": False, "config_source": 1, "is_sensitive": False}
                        for k, v in r.configs.items()],
        } for r in results]}

    async def _delete_topics(self, version: int, req: dict[str, Any]) -> dict[str, Any]:
        """As Kafka 3.9's ZooKeeper-mode handleDeleteTopicsRequest: with ``delete.topic.enable``
        false every topic is refused (INVALID_REQUEST below v3, TOPIC_DELETION_DISABLED from v3); a
        topic given by name and id both makes the whole request INVALID_REQUEST; an id (v6+) is
        resolved to its name (UNKNOWN_TOPIC_ID, name null, when unknown). Each answer echoes the
        request's topic id."""
        if version >= 6:
            asked = [(t.get("name"), t.get("topic_id") or _ZERO_UUID) for t in req.get("topics") or []]
        else:
            asked = [(n, _ZERO_UUID) for n in req.get("topic_names") or []]

        def answer(rows: list[tuple[str | None, uuid.UUID, int, str | None]]) -> dict[str, Any]:
            return {"throttle_time_ms": 0, "responses": [
                {"name": n, "topic_id": i, "error_code": c, "error_message": msg} for n, i, c, msg in rows]}

        if not self.manager.delete_topic_enable and version < 3:
            return answer([(n, i, Errors.INVALID_REQUEST, None) for n, i in asked])
        if any(n is not None and i != _ZERO_UUID for n, i in asked):
            return answer([(n, i, Errors.INVALID_REQUEST, "Topic name and topic ID can not both be specified.")
                           for n, i in asked])
        rows: list[tuple[str | None, uuid.UUID, int, str | None]] = []
        names: list[str] = []
        for n, i in asked:
            name = n if i == _ZERO_UUID else self.topic_name(i)
            if name is None:
                unknown = i != _ZERO_UUID
                rows.append((None, i, Errors.UNKNOWN_TOPIC_ID if unknown else Errors.INVALID_REQUEST,
                             None if unknown else "Neither a topic name nor a topic ID was given."))
            else:
                rows.append((name, i, Errors.NONE, None))
                names.append(name)
        results = {r.name: r for r in await self.manager.delete_topics(names, req.get("timeout_ms", 30000))} \
            if names else {}
        return answer([(n, i, c, msg) if c != Errors.NONE or n is None else
                       (n, i, results[n].error_code, results[n].error_message) for n, i, c, msg in rows])
