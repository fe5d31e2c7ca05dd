"""ConfigurationControlManager: topic config changes validated and turned into ConfigRecords (sans-I/O)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from odradek.controller.replication_control import MetadataRecord
from odradek.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from odradek.protocol.errors import Errors

GROUP_RESOURCE = 32

# IncrementalAlterConfigs operations.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

LIST_CONFIGS = frozenset(
    {"cleanup.policy", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
)


class BrokerConfigPolicy(Protocol):
    """What the node knows of dynamic broker configs (see odradek.server.dynamic_broker_config)."""

    def check_resource(self, name: str) -> str | None:
        """Why BROKER resource ``name`` cannot be altered here, or None."""

    def validate(self, name: str, new_configs: dict[str, str]) -> str | None:
        """Why ``new_configs`` (the resource's whole new set) cannot be applied, or None."""


class GroupConfigPolicy(Protocol):
    """Judges GROUP resources (see odradek.coordinator.group.dynamic_group_config)."""

    def validate(self, name: str, new: dict[str, str | None]) -> tuple[Errors, str] | None:
        """The error for the group's whole new set of configs, or None."""


class ConfigurationControlManager:
    def __init__(
        self,
        image: MetadataImage,
        validate_config: Callable[[str, str], str | None],
        broker_configs: BrokerConfigPolicy | None = None,
        group_configs: GroupConfigPolicy | None = None,
    ) -> None:
        self.image = image
        self.validate_config = validate_config
        self.broker_configs = broker_configs
        self.group_configs = group_configs  # None: GROUP resources are not served (ZooKeeper mode)

    def _check_resource(self, resource_type: int, name: str) -> tuple[Errors, str | None]:
        if resource_type == TOPIC_RESOURCE:
            if name not in self.image.topics_by_name:
                return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            return Errors.NONE, None
        if resource_type == BROKER_RESOURCE:
            if self.broker_configs is None:
                return (
                    Errors.INVALID_REQUEST,
                    "Dynamic broker configs are not supported by this broker; set them in "
                    "server.properties or with --override",
                )
            msg = self.broker_configs.check_resource(name)
            return (Errors.NONE, None) if msg is None else (Errors.INVALID_REQUEST, msg)
        if resource_type == GROUP_RESOURCE and self.group_configs is not None:
            if name == "":
                return Errors.INVALID_REQUEST, "Default group resources are not allowed."
            return Errors.NONE, None
        return Errors.INVALID_REQUEST, f"Unsupported resource type {resource_type}"

    def _old(self, resource_type: int, name: str) -> dict[str, str]:
        return dict(self.image.configs.config(resource_type, name))

    def _finish(
        self, resource_type: int, name: str, old: dict[str, str], new: dict[str, str]
    ) -> tuple[Errors, str | None, list[MetadataRecord]]:
        if resource_type == BROKER_RESOURCE and self.broker_configs is not None:
            # Kafka (ConfigAdminManager) answers every refused broker config with INVALID_REQUEST.
            msg = self.broker_configs.validate(name, new)
            if msg is not None:
                return Errors.INVALID_REQUEST, msg, []
        if resource_type == GROUP_RESOURCE and self.group_configs is not None:
            refused = self.group_configs.validate(name, dict(new))
            if refused is not None:
                return refused[0], refused[1], []
        out: list[MetadataRecord] = []
        for k in sorted(set(old) | set(new)):
            if old.get(k) != new.get(k):
                out.append(
                    (
                        "ConfigRecord",
                        {
                            "resource_type": resource_type,
                            "resource_name": name,
                            "name": k,
                            "value": new.get(k),
                        },
                    )
                )
        return Errors.NONE, None, out

    def alter_configs(
        self, resource_type: int, name: str, configs: list[dict[str, Any]]
    ) -> tuple[Errors, str | None, list[MetadataRecord]]:
        """Legacy AlterConfigs: the given set replaces every override of the resource."""
        code, msg = self._check_resource(resource_type, name)
        if code != Errors.NONE:
            return code, msg, []
        broker = resource_type == BROKER_RESOURCE
        group = resource_type == GROUP_RESOURCE
        if broker:
            nulls = [c["name"] for c in configs if c["value"] is None]
            if nulls:
                return Errors.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls), []
        if group:
            nulls = [c["name"] for c in configs if c["value"] is None]
            if nulls:
                return Errors.INVALID_CONFIG, "Null value not supported for group configs: " + ",".join(nulls), []
        new: dict[str, str] = {}
        for c in configs:
            if c["value"] is None:
                continue
            if not broker and not group:
                err = self.validate_config(c["name"], c["value"])
                if err is not None:
                    return Errors.INVALID_CONFIG, err, []
            new[c["name"]] = c["value"]
        return self._finish(resource_type, name, self._old(resource_type, name), new)

    def incremental_alter_configs(
        self, resource_type: int, name: str, configs: list[dict[str, Any]]
    ) -> tuple[Errors, str | None, list[MetadataRecord]]:
        code, msg = self._check_resource(resource_type, name)
        if code != Errors.NONE:
            return code, msg, []
        broker = resource_type == BROKER_RESOURCE
        group = resource_type == GROUP_RESOURCE
        old = self._old(resource_type, name)
        new = dict(old)
        seen: set[str] = set()
        for c in configs:
            key, op, value = c["name"], c["config_operation"], c["value"]
            if key in seen:
                return Errors.INVALID_REQUEST, f"Duplicate config key {key} in the request", []
            seen.add(key)
            if op == OP_DELETE:
                new.pop(key, None)
                continue
            if op not in (OP_SET, OP_APPEND, OP_SUBTRACT):
                return Errors.INVALID_REQUEST, f"Unknown config operation {op} for {key}", []
            if value is None:
                return Errors.INVALID_REQUEST, f"Null value not supported for {key}", []
            if op in (OP_APPEND, OP_SUBTRACT) and group:
                verb = "append" if op == OP_APPEND else "subtract"
                return Errors.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {key}", []
            if op in (OP_APPEND, OP_SUBTRACT):
                from odradek.server.config_defs import BROKER_CONFIGS, TOPIC_CONFIGS

                table = BROKER_CONFIGS if broker else TOPIC_CONFIGS
                is_list = key in table and table[key].type == "list" if broker else key in LIST_CONFIGS
                if not is_list:
                    if broker and key not in table:
                        return Errors.INVALID_CONFIG, f"Unknown config name: {key}", []
                    if broker:
                        verb = "append" if op == OP_APPEND else "subtract"
                        return (
                            Errors.INVALID_CONFIG,
                            f"Config value {verb} is not allowed for config key: {key}",
                            [],
                        )
                    return (
                        Errors.INVALID_CONFIG,
                        f"Config {key} is not a list config; APPEND/SUBTRACT are only for lists",
                        [],
                    )
                current_raw = new.get(key)
                if current_raw is None:
                    d = table[key].default if key in table else ""
                    current_raw = d or ""
                current = [x.strip() for x in current_raw.split(",") if x.strip()]
                items = [x.strip() for x in value.split(",") if x.strip()]
                if op == OP_APPEND:
                    merged = current + [x for x in items if x not in current]
                else:
                    merged = [x for x in current if x not in items]
                value = ",".join(merged)
            if not broker and not group:
                err = self.validate_config(key, value)
                if err is not None:
                    return Errors.INVALID_CONFIG, err, []
            new[key] = value
        return self._finish(resource_type, name, old, new)
