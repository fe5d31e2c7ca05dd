"""Where the group coordinator lives (Kafka's group-coordinator layout under
odradek/coordinator/group/), that its sans-I/O cores stay free of clocks, asyncio and files, and that
ZooKeeper mode's package (odradek/zk/) holds the znode layer and nothing of the controller."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import odradek.coordinator.group as group_pkg

OLD_MODULES = [
    "odradek.coordinator.assignors",
    "odradek.coordinator.consumer_group",
    "odradek.coordinator.consumer_protocol",
    "odradek.coordinator.group_coordinator",
    "odradek.coordinator.group_events",
    "odradek.coordinator.group_metadata",
    "odradek.coordinator.group_metadata_manager",
    "odradek.coordinator.records",
    "odradek.coordinator.group.group_metadata",
]

# Driven with now_ms and plain data only.
SANS_IO = [
    "assignors",
    "classic_group",
    "classic_group_member",
    "consumer_group",
    "consumer_group_heartbeat",
    "consumer_group_member",
    "consumer_group_records",
    "consumer_protocol",
    "current_assignment_builder",
    "records",
    "target_assignment_builder",
    "txn_offsets",
]
FORBIDDEN = {"asyncio", "time", "os", "socket", "threading", "datetime"}


@pytest.mark.parametrize("name", OLD_MODULES)
def test_old_module_paths_are_gone(name: str) -> None:
    assert importlib.util.find_spec(name) is None


def test_every_group_module_is_named_in_the_package_docstring_and_short() -> None:
    doc = group_pkg.__doc__ or ""
    names = [m.name for m in pkgutil.iter_modules(group_pkg.__path__)]
    assert "consumer_group_heartbeat" in names and "classic_group" in names
    for name in names:
        assert f":mod:`.{name}`" in doc, name
        lines = (Path(group_pkg.__path__[0]) / f"{name}.py").read_text().count("\n")
        assert lines < 800, (name, lines)


@pytest.mark.parametrize("name", SANS_IO)
def test_sans_io_cores_import_no_clock_asyncio_or_files(name: str) -> None:
    source = (Path(group_pkg.__path__[0]) / f"{name}.py").read_text()
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN, (name, imported & FORBIDDEN)
    assert "open(" not in source


def test_coordinator_packages_say_what_they_own() -> None:
    coordinator = importlib.import_module("odradek.coordinator")
    assert "group" in (coordinator.__doc__ or "") and "transaction" in (coordinator.__doc__ or "")
    transaction = importlib.import_module("odradek.coordinator.transaction")
    assert "__transaction_state" in (transaction.__doc__ or "")


def test_zk_package_holds_the_znode_layer_only() -> None:
    # Issue 14 part 1 put Kafka's kafka.zk (ZkData, KafkaZkClient) here; the ZooKeeper-mode
    # controller belongs in odradek.controller, not in this package.
    zk = importlib.import_module("odradek.zk")
    assert "issue 14" in (zk.__doc__ or "")
    assert sorted(m.name for m in pkgutil.iter_modules(zk.__path__)) == [
        "admin_zk_client", "kafka_zk_client", "zk_config_manager", "zk_data"]
