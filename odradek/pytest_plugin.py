"""pytest fixtures for an embedded Odradek broker (registered as the ``odradek`` pytest11 plugin).

``odradek_broker`` is a fresh broker per test; ``odradek_broker_session`` is shared by the whole
session. Per-test configuration: ``@pytest.mark.odradek_config({"num.partitions": "3"})`` or
``@pytest.mark.odradek_config(num_partitions="3")`` (underscores become dots).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from odradek.embedded import EmbeddedBroker


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "odradek_config(overrides=None, **keys): configuration of the odradek_broker fixture",
    )


def _overrides(request: pytest.FixtureRequest) -> dict[str, str]:
    marker = request.node.get_closest_marker("odradek_config")
    out: dict[str, str] = {}
    if marker is None:
        return out
    for arg in marker.args:
        out.update({str(k): str(v) for k, v in dict(arg).items()})
    for key, value in marker.kwargs.items():
        out[key.replace("_", ".")] = str(value)
    return out


@pytest.fixture
def odradek_broker(request: pytest.FixtureRequest) -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker(_overrides(request))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def odradek_broker_session() -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


__all__: list[Any] = ["odradek_broker", "odradek_broker_session"]
