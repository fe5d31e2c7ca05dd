"""ConfigurationControlManager: topic config changes validated and turned into ConfigRecords (sans-I/O)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from odradek.controller.replication_control import MetadataRecord
from odradek.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from odradek.protocol.errors import Errors

# IncrementalAlterConfigs operations.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

LIST_CONFIGS = frozenset(
    {"cleanup.policy", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
)


class ConfigurationControlManager:
    def __init__(self, image: MetadataImage, validate_config: Callable[[str, str], str | None]) -> None:
        self.image = image
        self.validate_config = validate_config

    def _check_resource(self, resource_type: int, name: str) -> tuple[Errors, str | None]:
        if resource_type == TOPIC_RESOURCE:
            if name not in self.image.topics_by_name:
                return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            return Errors.NONE, None
        if resource_type == BROKER_RESOURCE:
            return (
                Errors.INVALID_REQUEST,
                "Dynamic broker configs are not supported by this broker; set them in "
                "server.properties or with --override",
            )
        return Errors.INVALID_REQUEST, f"Unsupported resource type {resource_type}"

    def _records(self, name: str, old: dict[str, str], new: dict[str, str]) -> list[MetadataRecord]:
        out: list[MetadataRecord] = []
        for k in sorted(set(old) | set(new)):
            if old.get(k) != new.get(k):
                out.append(
                    (
                        "ConfigRecord",
                        {
                            "resource_type": TOPIC_RESOURCE,
                            "resource_name": name,
                            "name": k,
                            "value": new.get(k),
                        },
                    )
                )
        return out

    def alter_configs(
        self, resource_type: int, name: str, configs: list[dict[str, Any]]
    ) -> tuple[Errors, str | None, list[MetadataRecord]]:
        """Legacy AlterConfigs: the given set replaces every override of the resource."""
        code, msg = self._check_resource(resource_type, name)
        if code != Errors.NONE:
            return code, msg, []
        new: dict[str, str] = {}
        for c in configs:
            if c["value"] is None:
                continue
            err = self.validate_config(c["name"], c["value"])
            if err is not None:
                return Errors.INVALID_CONFIG, err, []
            new[c["name"]] = c["value"]
        return Errors.NONE, None, self._records(name, self.image.topic_config(name), new)

    def incremental_alter_configs(
        self, resource_type: int, name: str, configs: list[dict[str, Any]]
    ) -> tuple[Errors, str | None, list[MetadataRecord]]:
        code, msg = self._check_resource(resource_type, name)
        if code != Errors.NONE:
            return code, msg, []
        old = self.image.topic_config(name)
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
            if op in (OP_APPEND, OP_SUBTRACT):
                if key not in LIST_CONFIGS:
                    return (
                        Errors.INVALID_CONFIG,
                        f"Config {key} is not a list config; APPEND/SUBTRACT are only for lists",
                        [],
                    )
                from odradek.server.config_defs import TOPIC_CONFIGS

                current_raw = new.get(key)
                if current_raw is None:
                    d = TOPIC_CONFIGS[key].default if key in TOPIC_CONFIGS else ""
                    current_raw = d or ""
                current = [x.strip() for x in current_raw.split(",") if x.strip()]
                items = [x.strip() for x in value.split(",") if x.strip()]
                if op == OP_APPEND:
                    merged = current + [x for x in items if x not in current]
                else:
                    merged = [x for x in current if x not in items]
                value = ",".join(merged)
            err = self.validate_config(key, value)
            if err is not None:
                return Errors.INVALID_CONFIG, err, []
            new[key] = value
        return Errors.NONE, None, self._records(name, old, new)
