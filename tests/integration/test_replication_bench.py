"""Smoke test of benchmarks/replication.py on Odradek alone (``--skip-kafka``), tiny counts: every
section is there with positive figures, and each failover found a record appended by a new
leader (a later partition leader epoch) on another broker. No timing is asserted (speed is never
asserted in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .support import REQUIRES_KCAT

pytestmark = [
    pytest.mark.integration,
    REQUIRES_KCAT,
]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_replication_bench_odradek_only_reports_every_section() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "replication.py"), "--skip-kafka",
         "--records", "3000", "--rounds", "1", "--warmup", "0", "--latency-seconds", "1",
         "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=540,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    data = json.loads(result.stdout)
    for key in ("a_single_acks1", "b_odradek_rf3_acksall"):
        assert data[key]["records_per_s"] > 0 and data[key]["mb_per_s"] > 0, data[key]
        assert [r["records"] for r in data[key]["runs"]] == [3000]
    assert "c_kafka_rf3_acksall" not in data
    assert data["b_over_a"] > 0
    lat = data["d_latency"]["odradek"]
    assert lat["records"] > 0 and 0 < lat["p50_ms"] <= lat["p99_ms"] <= lat["max_ms"], lat
    for kind in ("sigkill", "sigterm"):
        f = data["e_failover"]["odradek"][kind]
        assert "error" not in f, f
        (rnd,) = f["rounds"]
        assert rnd["new_leader"] != rnd["old_leader"] and rnd["ms"] > 0, f
