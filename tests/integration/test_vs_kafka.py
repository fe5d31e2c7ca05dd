"""Smoke test of benchmarks/vs_kafka.py: a --quick run with tiny counts against a real Apache
Kafka 4.x and Odradek must produce every row of the comparison with positive figures for both
brokers. No timing is asserted (speed is never asserted in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .kafka_reference import find_kafka_tools
from .support import REQUIRES_KCAT

pytestmark = [
    pytest.mark.integration,
    REQUIRES_KCAT,
]

REPO = Path(__file__).resolve().parents[2]
MEASURES = [
    "ck_produce_acks1", "ck_produce_acksall", "kcat_produce", "perf_produce",
    "ck_consume", "perf_consume", "latency_p50", "latency_p99", "latency_p999",
    "cpu_produce", "cpu_consume",
]


@pytest.mark.timeout(900)
def test_vs_kafka_quick_reports_every_row(tmp_path: Path) -> None:
    find_kafka_tools()
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "vs_kafka.py"), "--quick",
         "--records-small", "2000", "--records-large", "500", "--warmup", "500",
         "--latency-seconds", "1", "--json", "--workdir", str(tmp_path / "work")],
        cwd=REPO, capture_output=True, text=True, timeout=840,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    data = json.loads(result.stdout)
    rows = {row["key"]: row for row in data["rows"]}
    expected = {f"{tag}.{m}" for tag in ("100B", "1024B") for m in MEASURES}
    expected |= {"rss_peak", "rss_now"}
    assert set(rows) == expected
    for key, row in rows.items():
        assert row["kafka"] > 0 and row["odradek"] > 0, (key, row)
        assert row["ratio"] == pytest.approx(row["odradek"] / row["kafka"], rel=1e-2), (key, row)
        if row["unit"] == "rec/s":
            assert row["kafka_mb_per_s"] > 0 and row["odradek_mb_per_s"] > 0, (key, row)
    (run,) = data["runs"]
    for broker in ("kafka", "odradek"):
        for tag, count in (("100B", 2000), ("1024B", 500)):
            assert run[broker]["throughput"][tag]["ck_produce_acks1"]["records"] == count
            assert run[broker]["latency"][tag]["rate"] > 0
    # the load average is recorded before every phase
    assert run["kafka"]["throughput"]["100B"]["perf_produce"]["loadavg"]
