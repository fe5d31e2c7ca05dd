"""Smoke test of benchmarks/zk_failover.py with tiny parameters (1 round, 30 partitions, a 6 s
ZooKeeper session), ZooKeeper mode and KRaft: every section is there, the killed nodes are the
ones the rounds name, and the election covered the partitions the killed broker led. No timing
is asserted (speed is never asserted in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .zookeeper_support import _missing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]


def test_zk_failover_bench_reports_both_modes() -> None:
    why = _missing()
    if why:
        pytest.skip(f"ZooKeeper unavailable: {why}")
    pytest.importorskip("kazoo")
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "zk_failover.py"), "--rounds", "1", "--partitions", "30",
         "--zk-session-timeout-ms", "6000", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=540,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    data = json.loads(result.stdout)
    assert data["partitions"] == 30 and data["rounds"] == 1
    for mode in ("zk", "kraft"):
        (rnd,) = data[mode]["failover"]
        assert rnd["failover_s"] > 0 and rnd["attempts"] >= 1, rnd
        assert data[mode]["failover_s"]["median"] == rnd["failover_s"]
        e = data[mode]["election"]
        assert e["partitions"] == 30 and e["led_by_killed"] >= 1 and e["election_s"] > 0, e
    assert data["zk"]["zookeeper.session.timeout.ms"] == 6000
    assert data["zk"]["failover"][0]["killed"] in (1, 2, 3)
