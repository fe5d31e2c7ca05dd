"""The demo pipeline end to end: known clicks in, known per-minute counts and table out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from odradek.cli.pipeline import _summary
from odradek.embedded import EmbeddedBroker
from odradek.spark import demo

from .support import consume_all, create_topic


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def test_demo_pipeline_counts_per_minute_and_writes_the_table(
    spark: Any, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    clicks, per_minute = f"{topic}-clicks", f"{topic}-per-minute"
    create_topic(broker.bootstrap_servers, clicks, 2)
    create_topic(broker.bootstrap_servers, per_minute, 1)
    base = datetime(2026, 3, 1, 23, 58, tzinfo=UTC)  # windows cross midnight: two dates
    events = [
        demo.click(f"u{i}", page, base + timedelta(minutes=minute, seconds=(7 * i) % 60))
        for i, (minute, page) in enumerate(
            [(0, "/")] * 5 + [(0, "/cart")] * 2 + [(1, "/")] * 3 + [(2, "/cart")] * 4
            + [(3, "/about")] * 1
        )
    ]
    events.append({"user": "x", "page": None, "ts": "garbage"})  # type: ignore[dict-item]
    demo.produce_clicks(broker.bootstrap_servers, clicks, events)
    # A late click far ahead moves the watermark past every window above.
    flush = demo.click("late", "/", base + timedelta(minutes=10))
    queries = demo.start_pipeline(
        spark,
        broker.bootstrap_servers,
        input_topic=clicks,
        output_topic=per_minute,
        table_path=str(tmp_path / "table"),
        checkpoint_dir=str(tmp_path / "checkpoints"),
        trigger="500 milliseconds",
    )
    expected = {
        (w, p): c
        for (w, p), c in demo.expected_counts(e for e in events if e["page"]).items()
    }
    try:
        for q in queries:
            q.processAllAvailable()
        demo.produce_clicks(broker.bootstrap_servers, clicks, [flush])
        deadline = time.time() + 90
        got: dict[tuple[str, str], int] = {}
        while got != expected and time.time() < deadline:
            for q in queries:
                assert q.exception() is None, q.exception()
                q.processAllAvailable()
            got = {}
            for m in consume_all(broker.bootstrap_servers, per_minute, 1):
                row = json.loads(m.value())
                assert m.key() == row["page"].encode()
                got[(row["window_start"], row["page"])] = row["count"]
            time.sleep(0.5)
    finally:
        spark.sparkContext.setLogLevel("FATAL")
        for q in queries:
            q.stop()
        spark.sparkContext.setLogLevel("ERROR")
    assert got == expected
    assert got[("2026-03-01T23:58:00Z", "/")] == 5

    table = spark.read.parquet(str(tmp_path / "table"))
    assert table.count() == 16  # 15 clicks + the late one; the unparsable event is dropped
    dates = {str(r["date"]): r["n"] for r in table.groupBy("date").count().withColumnRenamed("count", "n").collect()}
    assert dates == {"2026-03-01": 7 + 3, "2026-03-02": 4 + 1 + 1}
    assert sorted(p.name for p in (tmp_path / "table").iterdir() if p.name.startswith("date=")) == [
        "date=2026-03-01",
        "date=2026-03-02",
    ]
    # the demo's closing line shows ISO dates, not Python reprs
    assert _summary(spark, str(tmp_path / "table")).endswith(
        "(16 rows; date partitions: 2026-03-01, 2026-03-02)"
    )


def test_demo_cli_says_what_it_waits_for_and_stops_cleanly_on_ctrl_c(
    spark: Any, tmp_path: Path
) -> None:
    """``odradek pipeline demo``: progress lines while Spark starts and the first micro-batch
    runs, its files under --workdir, and Ctrl-C (SIGINT to the whole process group, as a
    terminal sends it) stops the queries and Spark: exit code 130, no traceback."""
    workdir = tmp_path / "demo"
    out_path, err_path = tmp_path / "out.txt", tmp_path / "err.txt"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "odradek.cli.main", "pipeline", "demo", "--duration", "600",
             "--rate", "50", "--trigger", "1 second", "--workdir", str(workdir)],
            stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while "first micro-batch done" not in out_path.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, out_path.read_text() + err_path.read_text()
            time.sleep(1)
        output = out_path.read_text()
        assert "first micro-batch done" in output, output + err_path.read_text()
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    output, errors = out_path.read_text(), err_path.read_text()
    assert code == 130, output + errors
    for said in ("starting Spark (local[2]): the JVM takes", "waiting for the first micro-batch",
                 f"table and checkpoints go to {workdir}", "Ctrl-C: stopping the queries", "stopped"):
        assert said in output, output
    assert "Traceback" not in errors and "KeyboardInterrupt" not in errors, errors
    assert len(errors.splitlines()) < 30, errors  # Spark's own start-up warnings only
    assert (workdir / "checkpoints").is_dir()
