"""Fixtures for the Spark tests: one local SparkSession (``local[2]``) for the whole session.

Spark's Python workers must run this interpreter (they import ``odradek``), so
``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` are set to ``sys.executable`` before the JVM starts.
The tests skip when pyspark or Java 17+ is missing.

The session also loads Spark's own Kafka connector (``spark-sql-kafka-0-10``, for
test_kafka_connector.py) when it resolves: ``scripts/spark_kafka_connector.py`` (run by
scripts/test.sh) resolves it through Spark into ``~/.cache/odradek/ivy``, or it is resolved here
on first use. When it can't be, only the tests that need it skip (fail under CI).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.spark)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: runs a local Spark (JVM) session")


def _load_connector_helper() -> Any:
    path = Path(__file__).parents[2] / "scripts" / "spark_kafka_connector.py"
    spec = importlib.util.spec_from_file_location("spark_kafka_connector", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The coordinate of Spark's Kafka connector loaded into the session, or why it is not.
KAFKA_CONNECTOR: dict[str, str] = {}


@pytest.fixture(scope="session")
def kafka_connector(spark: Any) -> str:
    """The spark-sql-kafka package the session loaded; skips (fails under CI) without it."""
    if "package" not in KAFKA_CONNECTOR:
        reason = KAFKA_CONNECTOR.get("missing", "not resolved")
        if os.environ.get("CI"):
            pytest.fail(f"Spark's Kafka connector: {reason}; CI resolves it and fails without it")
        pytest.skip(f"Spark's Kafka connector: {reason}")
    return KAFKA_CONNECTOR["package"]


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark tests need Java 17+ (java not found)")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from odradek.spark import OdradekDataSource

    helper = _load_connector_helper()
    package = helper.resolve()
    if package is None:
        KAFKA_CONNECTOR["missing"] = f"did not resolve (see {helper.IVY_DIR / 'resolve.log'})"
    else:
        KAFKA_CONNECTOR["package"] = package
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    builder = SparkSession.builder
    for key, value in (helper.spark_conf(package) if package else {}).items():
        builder = builder.config(key, value)
    session = (
        builder.master("local[2]")
        .appName("odradek-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.extraJavaOptions", "-Djava.io.tmpdir=" + str(warehouse))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(OdradekDataSource)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:6]}"
