"""``odradek console`` in headless Chromium, against a KRaft cluster (controller 0, brokers 1-3)
with broker 3 killed: every page renders (the DOM Chromium built holds the expected content), and
a screenshot of each is decoded and checked — not blank, the under-replicated rows' red on the
pages of a topic that lost a replica, none of it on a healthy topic's page, the lag chart drawn.

Set ``ODRADEK_CONSOLE_SCREENSHOT=docs/console.png`` to write the README's screenshot (the
degraded topic's page) from this run.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from .console_support import ConsoleProcess, rows
from .replication_cluster import ReplicationCluster

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        CHROMIUM is None and not os.environ.get("CI"),
        reason="chromium is not installed (apt-get install chromium; CI installs it and fails without it)",
    ),
]
UNDER_REPLICATED_RED = (0xFF, 0xCC, 0xCC)  # tr.under-replicated td background in base.html
CHART_BACKGROUND = (0xFA, 0xFA, 0xFA)  # the lag chart's plot area
HEADER_BLUE = (0x2B, 0x3A, 0x4A)


@dataclass
class Setup:
    cluster: ReplicationCluster
    console: ConsoleProcess
    profile: Path
    group: str


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    base = tmp_path_factory.mktemp("console-browser")
    cluster = ReplicationCluster(base)
    console: ConsoleProcess | None = None
    consumer: Consumer | None = None
    try:
        cluster.start()
        admin = cluster.admin()
        futures = admin.create_topics([
            NewTopic("healthy", 2, replica_assignment=[[1, 2], [2, 1]]),
            NewTopic("degraded", 3, replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]],
                     config={"min.insync.replicas": "2"}),
        ])
        for f in futures.values():
            f.result(30)
        p = Producer({"bootstrap.servers": cluster.bootstrap})
        for i in range(12):
            p.produce("healthy", key=f"user-{i}", value=f'{{"order": {i}, "item": "<b>book</b>"}}',
                      headers=[("source", b"console-test")], partition=i % 2)
            p.produce("degraded", value=f"event {i}", partition=i % 3)
        assert p.flush(30) == 0
        # Broker 3 goes before the group exists: __consumer_offsets (replication factor 1 here)
        # is then made on brokers 1 and 2 and the group's coordinator stays reachable.
        cluster.brokers[3].kill()
        cluster.wait_for("degraded", lambda s: all(3 not in isr for _, _, isr in s.values()), 30,
                         "lost broker 3 from its ISRs")
        group = "billing"
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "client.id": "billing-1",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.subscribe(["healthy"])
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition("healthy", 0, 2), TopicPartition("healthy", 1, 5)], asynchronous=False)
        console = ConsoleProcess(cluster.bootstrap, base / "console.log", "--lag-sample-interval-ms", "300").start()
        console.wait_for(f"/group?id={group}", "polyline")  # the chart has two samples or more
        yield Setup(cluster, console, base / "chromium-profile", group)
    finally:
        if consumer is not None:
            consumer.close()
        if console is not None:
            console.stop()
        cluster.stop()


def chromium(setup: Setup, *args: str) -> subprocess.CompletedProcess[bytes]:
    assert CHROMIUM is not None, "chromium is not installed"
    r = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         f"--user-data-dir={setup.profile}", *args],
        capture_output=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    return r


def dump_dom(setup: Setup, path: str) -> str:
    return chromium(setup, "--dump-dom", setup.console.url + path).stdout.decode("utf-8")


def screenshot(setup: Setup, path: str, out: Path) -> dict[tuple[int, int, int], int]:
    """A 1280x900 screenshot of ``path`` saved to ``out``: its pixel count per colour."""
    from PIL import Image

    chromium(setup, f"--screenshot={out}", "--window-size=1280,900", setup.console.url + path)
    image = Image.open(io.BytesIO(out.read_bytes())).convert("RGB")
    assert image.size == (1280, 900)
    colors = image.getcolors(maxcolors=1280 * 900)
    assert colors is not None
    return {rgb: n for n, rgb in colors}


def near(colors: dict[tuple[int, int, int], int], rgb: tuple[int, int, int], tolerance: int = 3) -> int:
    return sum(n for c, n in colors.items() if all(abs(a - b) <= tolerance for a, b in zip(c, rgb, strict=True)))


def check_not_blank(name: str, colors: dict[tuple[int, int, int], int]) -> None:
    total = 1280 * 900
    assert len(colors) > 20, f"{name}: only {len(colors)} colours, a blank page"
    assert max(colors.values()) < total * 0.97, f"{name}: one colour covers nearly the whole page"
    assert near(colors, HEADER_BLUE) > 1280 * 20, f"{name}: no header bar"


PAGES = {
    "overview": "/",
    "topics": "/topics",
    "degraded": "/topic?name=degraded",
    "healthy": "/topic?name=healthy",
    "messages": "/messages?topic=healthy&partition=0&offset=0",
    "groups": "/groups",
    "group": "/group?id=billing",
}


def test_pages_render_in_chromium(setup: Setup) -> None:
    ports = {i: b.port for i, b in setup.cluster.brokers.items()}
    dom = {name: dump_dom(setup, path) for name, path in PAGES.items()}
    # Broker 3 was killed: fenced, it is no longer listed.
    assert [r[:2] for r in rows(dom["overview"], "brokers")] == [["1", f"127.0.0.1:{ports[1]}"], ["2", f"127.0.0.1:{ports[2]}"]]
    assert 'id="quorum-replicas"' in dom["overview"] and "Leader (voter)" in dom["overview"]
    assert ">degraded</a>" in dom["topics"] and ">healthy</a>" in dom["topics"]
    assert '<tr class="under-replicated">' in dom["topics"]
    assert dom["degraded"].count('<tr class="under-replicated">') == 3 and "3 under-replicated" in dom["degraded"]
    assert "under-replicated\">" not in dom["healthy"] and "0 under-replicated" in dom["healthy"]
    assert "user-0" in dom["messages"] and "source=console-test" in dom["messages"]
    assert "&lt;b&gt;book&lt;/b&gt;" in dom["messages"] and "<b>book</b>" not in dom["messages"]
    assert ">billing</a>" in dom["groups"]
    assert "<polyline" in dom["group"] and "billing-1" in dom["group"]


def test_screenshots_show_the_expected_content(setup: Setup, tmp_path: Path) -> None:
    shots = {name: screenshot(setup, path, tmp_path / f"{name}.png") for name, path in PAGES.items()}
    for name, colors in shots.items():
        check_not_blank(name, colors)
    # Three under-replicated partition rows in red (9 cells each about 25 px high).
    assert near(shots["degraded"], UNDER_REPLICATED_RED) > 3 * 700 * 20
    assert near(shots["topics"], UNDER_REPLICATED_RED) > 300 * 20  # the degraded topic's row
    assert near(shots["healthy"], UNDER_REPLICATED_RED) == 0
    assert near(shots["overview"], UNDER_REPLICATED_RED) == 0
    assert near(shots["group"], CHART_BACKGROUND, 0) > 400 * 150  # the lag chart's plot area
    target = os.environ.get("ODRADEK_CONSOLE_SCREENSHOT")
    if target:
        from PIL import Image

        image = Image.open(tmp_path / "degraded.png").convert("RGB").crop((0, 0, 1280, 560))
        image.quantize(colors=64).save(target, optimize=True)
