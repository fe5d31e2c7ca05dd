"""BROKER_LOGGER resources: this node's log levels described and changed at run time."""

from __future__ import annotations

import logging

from odradek.protocol.errors import Errors
from odradek.server.runtime_logger_manager import RuntimeLoggerManager, log4j_level, loggers


def _res(name: str, *ops: tuple[str, int, str | None]) -> dict[str, object]:
    return {"resource_type": 8, "resource_name": name,
            "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]}


def test_set_describe_and_unset_a_logger() -> None:
    name = "odradek.test.runtime_logger"
    lg = logging.getLogger(name)
    mgr = RuntimeLoggerManager(1)
    try:
        assert mgr.apply(_res("1", (name, 0, "TRACE")), validate_only=True) == (Errors.NONE, None)
        assert lg.level == logging.NOTSET
        assert mgr.apply(_res("1", (name, 0, "DEBUG")), validate_only=False) == (Errors.NONE, None)
        assert lg.level == logging.DEBUG and loggers()[name] == "DEBUG"
        entry = {e.name: e for e in mgr.describe()}[name]
        assert (entry.value, entry.source, entry.read_only, entry.synonyms) == ("DEBUG", 6, False, [])
        assert mgr.apply(_res("1", (name, 1, None)), validate_only=False) == (Errors.NONE, None)
        assert lg.level == logging.NOTSET and loggers()[name] == log4j_level(lg.getEffectiveLevel())
    finally:
        lg.setLevel(logging.NOTSET)


def test_refusals_as_kafka() -> None:
    mgr = RuntimeLoggerManager(1)
    assert mgr.apply(_res("2", ("root", 0, "INFO")), False) == (
        Errors.INVALID_REQUEST, "Unexpected node id. Expected 1, but received 2")
    assert mgr.apply(_res("x", ("root", 0, "INFO")), False) == (
        Errors.INVALID_REQUEST, "Node id must be an integer, but it is: x")
    assert mgr.apply(_res("1", ("no.such.logger.here", 0, "INFO")), False) == (
        Errors.INVALID_CONFIG, "Logger no.such.logger.here does not exist!")
    assert mgr.apply(_res("1", ("root", 0, "LOUD")), False) == (
        Errors.INVALID_CONFIG, "Cannot set the log level of root to LOUD as it is not a supported log level. "
        "Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN")
    assert mgr.apply(_res("1", ("root", 1, None)), False) == (
        Errors.INVALID_REQUEST, "Removing the log level of the root logger is not allowed")
    assert mgr.apply(_res("1", ("root", 2, "INFO")), False) == (
        Errors.INVALID_REQUEST, "APPEND operation is not allowed for the BROKER_LOGGER resource")
    assert mgr.check_name("", describe=True) == "Broker id must not be empty"
    assert mgr.check_name("3", describe=True) == "Unexpected broker id, expected 1 but received 3"
