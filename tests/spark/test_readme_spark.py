"""The README's Spark script runs as printed (only the broker address differs)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.embedded import EmbeddedBroker

from .support import consume_all

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:  # a broker of its own: the script uses the topic "clicks"
        yield b


def _spark_script(source: str = "odradek") -> str:
    """The section's Python block that reads with format(source)."""
    section = README.read_text().split("## Spark pipeline", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```$", section, re.M | re.S)
    blocks = [b for b in blocks if f'read.format("{source}")' in b or f'readStream.format("{source}")' in b]
    assert len(blocks) == 1
    return str(blocks[0])


def test_readme_spark_script_writes_then_streams(spark: Any, broker: EmbeddedBroker) -> None:
    script = _spark_script()
    assert script.count("localhost:9092") == 2 and ".mode(\"append\")" in script
    script = script.replace("localhost:9092", broker.bootstrap_servers)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            exec(compile(script, "README.md", "exec"), {"__name__": "__readme__"})
        except BaseException as e:  # noqa: BLE001 - reported below
            failure.append(e)

    # The script ends in query.awaitTermination(); stopping its query from here ends it.
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    rows = 0
    deadline = time.monotonic() + 180
    while rows < 2 and time.monotonic() < deadline and thread.is_alive():
        rows = sum(
            p["numInputRows"] for q in spark.streams.active for p in q.recentProgress
        )
        time.sleep(0.5)
    spark.sparkContext.setLogLevel("FATAL")
    try:
        for q in spark.streams.active:
            q.stop()
    finally:
        spark.sparkContext.setLogLevel("ERROR")
    thread.join(60)
    assert not failure, failure
    assert not thread.is_alive()
    assert rows == 2  # the streaming query read both records the batch write wrote
    written = sorted((m.key(), m.value()) for m in consume_all(broker.bootstrap_servers, "clicks", 1))
    assert written == [(b"u1", b"/cart"), (b"u2", b"/checkout")]


def test_batch_write_needs_mode_append(spark: Any, broker: EmbeddedBroker) -> None:
    """What the README says about mode("append"): without it, Spark refuses the write."""
    frame = spark.createDataFrame([("k", "v")], "key string, value string")
    writer = (
        frame.write.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", "mode-check")
    )
    with pytest.raises(Exception) as e:
        writer.save()
    assert "ErrorIfExists" in str(e.value) or "errorifexists" in str(e.value).lower(), str(e.value)


def test_readme_kafka_connector_script_writes_then_reads(
    spark: Any, kafka_connector: str, broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's format("kafka") script (Spark's JVM connector) runs as printed; the
    session's getOrCreate() returns the test session, which has the connector loaded."""
    script = _spark_script("kafka")
    assert script.count("localhost:9092") == 2 and "spark-sql-kafka-0-10_2.13" in script
    script = script.replace("localhost:9092", broker.bootstrap_servers)
    script = script.replace('"clicks"', '"clicks-jvm-readme"')  # auto-created, its own topic
    exec(compile(script, "README.md", "exec"), {"__name__": "__readme__"})
    shown = capsys.readouterr().out
    assert re.search(r"\|\s*u3\s*\|\s*/home\s*\|\s*0\s*\|", shown), shown
    written = consume_all(broker.bootstrap_servers, "clicks-jvm-readme", 1)
    assert [(m.key(), m.value()) for m in written] == [(b"u3", b"/home")]
