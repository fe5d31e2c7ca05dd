"""Fixtures for the integration tests (helpers live in :mod:`support`).

Every test here talks to a real Odradek node through a real client. Most tests share one embedded
broker for the session (``broker``); tests that restart or kill a node get their own, either an
``EmbeddedBroker`` or an ``odradek server`` subprocess (``server_process``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.embedded import EmbeddedBroker

from .support import ServerProcess, unique_name
from .txn_support import Target, start_target, txn_server_kinds
from .zookeeper_support import ZooKeeperServer


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3 loads its protocol schemas with importlib.resources' legacy functions
    for message in ("read_text is deprecated", "open_text is deprecated"):
        config.addinivalue_line("filterwarnings", f"ignore:{message}:DeprecationWarning")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One embedded broker shared by every test that neither restarts nor reconfigures it."""
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (and to this run)."""
    return unique_name(request.node.name)


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh ``odradek server`` subprocess with its own data directory."""
    server = ServerProcess(tmp_path / "data")
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module", params=txn_server_kinds())
def txn_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """A single-node server for the transaction tests of one module: Odradek, or Apache Kafka
    (``ODRADEK_TXN_SERVERS``, see txn_support.py); a module's ``TXN_SERVER_OVERRIDES`` adds
    broker settings."""
    overrides = getattr(request.module, "TXN_SERVER_OVERRIDES", None)
    yield from start_target(request.param, tmp_path_factory.mktemp("txn"), overrides)


@pytest.fixture(scope="module")
def zookeeper() -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper per test module (the ZooKeeper-mode tests)."""
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def connect(zookeeper: ZooKeeperServer) -> str:
    """A fresh chroot per test, so tests share the server but not their znodes."""
    return f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}"
