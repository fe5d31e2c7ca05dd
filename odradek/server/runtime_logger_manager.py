"""Log levels changed at run time (Kafka's BROKER_LOGGER resource: ``RuntimeLoggerManager`` and
``Log4jController``), over Python's :mod:`logging`.

DescribeConfigs on BROKER_LOGGER ``<this node's id>`` lists ``root`` and every logger the process
has created (``odradek.server.kafka_apis``, ...) with its effective level in log4j's names
(TRACE, DEBUG, INFO, WARN, ERROR, FATAL); IncrementalAlterConfigs SETs a logger's level or
DELETEs it (the logger then inherits from its parent, as log4j's ``setLevel(null)``). Changes are
this process's only: not stored, not forwarded, gone at restart, as in Kafka. Python has no TRACE
level: TRACE is level 5, below DEBUG.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from odradek.protocol.errors import Errors
from odradek.server.config_defs import ConfigEntry

BROKER_LOGGER_RESOURCE = 8
ROOT_LOGGER = "root"
LOGGER_SOURCE = 6  # DYNAMIC_BROKER_LOGGER_CONFIG
TRACE = 5
_TO_PYTHON = {"TRACE": TRACE, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
              "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
VALID_LOG_LEVELS = ", ".join(sorted(_TO_PYTHON))  # Kafka's message lists them sorted
_OPS = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}

logging.addLevelName(TRACE, "TRACE")


def log4j_level(level: int) -> str:
    """The log4j name of a Python level (the nearest one at or below it)."""
    best = "TRACE"
    for name, value in sorted(_TO_PYTHON.items(), key=lambda kv: kv[1]):
        if level >= value:
            best = name
    return best


def _existing(name: str) -> logging.Logger | None:
    if name == ROOT_LOGGER:
        return logging.getLogger()
    found = logging.Logger.manager.loggerDict.get(name)
    return found if isinstance(found, logging.Logger) else None


def loggers() -> dict[str, str]:
    """Every existing logger and its effective level (Kafka's Log4jController.loggers)."""
    out = {ROOT_LOGGER: log4j_level(logging.getLogger().level)}
    for name, obj in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(obj, logging.Logger):
            out[name] = log4j_level(obj.getEffectiveLevel())
    return out


class RuntimeLoggerManager:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id

    def check_name(self, resource_name: str, describe: bool = False) -> str | None:
        """Why BROKER_LOGGER ``resource_name`` is not this node, or None."""
        if describe:
            if not resource_name:
                return "Broker id must not be empty"
            if not resource_name.lstrip("-").isdigit() or int(resource_name) != self.node_id:
                return f"Unexpected broker id, expected {self.node_id} but received {resource_name}"
            return None
        try:
            requested = int(resource_name)
        except ValueError:
            return f"Node id must be an integer, but it is: {resource_name}"
        if requested != self.node_id:
            return f"Unexpected node id. Expected {self.node_id}, but received {requested}"
        return None

    def describe(self, keys: Sequence[str] | None = None) -> list[ConfigEntry]:
        return [ConfigEntry(name, level, False, LOGGER_SOURCE, False, [])
                for name, level in loggers().items() if not keys or name in keys]

    def _validate(self, ops: list[dict[str, Any]]) -> tuple[Errors, str] | None:
        for op in ops:
            name, code = op["name"], op["config_operation"]
            if code not in (0, 1):
                what = _OPS.get(code)
                if what is None:
                    return Errors.INVALID_REQUEST, (f"Unknown operation type {code} is not allowed for the "
                                                    "BROKER_LOGGER resource")
                return Errors.INVALID_REQUEST, f"{what} operation is not allowed for the BROKER_LOGGER resource"
            if _existing(name) is None:
                return Errors.INVALID_CONFIG, f"Logger {name} does not exist!"
            if code == 0 and op["value"] not in _TO_PYTHON:
                return Errors.INVALID_CONFIG, (f"Cannot set the log level of {name} to {op['value']} as it is not "
                                               f"a supported log level. Valid log levels are {VALID_LOG_LEVELS}")
            if code == 1 and name == ROOT_LOGGER:
                return Errors.INVALID_REQUEST, f"Removing the log level of the {ROOT_LOGGER} logger is not allowed"
        return None

    def apply(self, resource: dict[str, Any], validate_only: bool) -> tuple[Errors, str | None]:
        """An IncrementalAlterConfigs resource of type BROKER_LOGGER, answered by this node."""
        msg = self.check_name(resource["resource_name"])
        if msg is not None:
            return Errors.INVALID_REQUEST, msg
        ops = list(resource["configs"])
        names = [op["name"] for op in ops]
        if len(set(names)) != len(names):
            return Errors.INVALID_REQUEST, "Error due to duplicate config keys"
        nulls = [op["name"] for op in ops if op["config_operation"] != 1 and op["value"] is None]
        if nulls:
            return Errors.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls)
        refused = self._validate(ops)
        if refused is not None:
            return refused
        if validate_only:
            return Errors.NONE, None
        log = logging.getLogger(__name__)
        for op in ops:
            target = _existing(op["name"])
            assert target is not None  # validated above
            if op["config_operation"] == 0:
                target.setLevel(_TO_PYTHON[op["value"]])
                log.warning("Updated the log level of %s to %s", op["name"], op["value"])
            else:
                target.setLevel(logging.NOTSET)
                log.warning("Unset the log level of %s", op["name"])
        return Errors.NONE, None
