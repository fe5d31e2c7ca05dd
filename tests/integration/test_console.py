"""``odradek console`` against a real Odradek server process: pages fetched over HTTP show the
brokers, quorum, topics, partitions, configs, messages produced by confluent-kafka (keys,
headers, text and hex), consumer groups with members and lag; a topic created after the console
started appears without a restart; what comes from the cluster is HTML-escaped; a port in use
is refused; a cluster that goes away is an error page and the console recovers."""

from __future__ import annotations

import datetime as dt
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .console_support import ConsoleProcess, rows, tables
from .support import ServerProcess, unique_name

pytestmark = pytest.mark.integration
BASE_TS = (int(time.time()) - 600) * 1000  # whole seconds, inside the default retention
XSS = "<script>alert('x')</script>"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("console") / "data").start()
    try:
        yield s
    finally:
        s.terminate()


@pytest.fixture(scope="module")
def console(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    c = ConsoleProcess(server.bootstrap_servers, tmp_path_factory.mktemp("console-log") / "console.log",
                       "--lag-sample-interval-ms", "300").start()
    try:
        yield c
    finally:
        c.stop()


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        f.result(30)


Rec = tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]


def produce(bootstrap: str, topic: str, records: list[Rec], timestamps: list[int] | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, (key, value, headers, partition) in enumerate(records):
        p.produce(topic, key=key, value=value, headers=headers, partition=partition,
                  timestamp=timestamps[i] if timestamps else 0)
    assert p.flush(30) == 0


def test_overview_shows_brokers_controller_quorum_and_features(server: ServerProcess, console: ConsoleProcess) -> None:
    md = AdminClient({"bootstrap.servers": server.bootstrap_servers}).list_topics(timeout=10)
    body = console.page("/")
    assert md.cluster_id and f'<dd id="cluster-id">{md.cluster_id}</dd>' in body
    brokers = rows(body, "brokers")
    assert [(r[0], r[1]) for r in brokers] == [(str(b), f"127.0.0.1:{server.port}") for b in md.brokers]
    assert "controller" in brokers[0][3]
    quorum = rows(body, "quorum-replicas")  # a combined KRaft node: the quorum's only voter
    assert quorum and quorum[0][1] == "Leader (voter)" and quorum[0][3] == "0"
    features = {r[0]: r for r in rows(body, "features")}
    assert features["metadata.version"][1].isdigit()


def test_topics_partitions_and_configs(server: ServerProcess, console: ConsoleProcess) -> None:
    topic = unique_name("orders")
    create_topic(server.bootstrap_servers, topic, 3, {"retention.ms": "3600000"})
    produce(server.bootstrap_servers, topic, [(b"k", b"v", [], i % 3) for i in range(7)])
    listing = {r[0]: r for r in rows(console.wait_for("/topics", topic), "topics")}
    assert listing[topic][1:] == ["3", "1", "0", "0"]  # partitions, RF, under-replicated, offline
    body = console.page(f"/topic?name={topic}")
    parts = rows(body, "partitions")
    assert [r[0] for r in parts] == ["0", "1", "2"]
    assert all(r[1] == "1" and r[2] == "1" and r[3] == "1" for r in parts)  # leader, replicas, ISR
    assert [r[6] for r in parts] == ["3", "2", "2"]  # next offsets
    t = tables(body)
    assert all(c == "" for c in t.row_classes["partitions"][1:])  # none in red
    configs = {r[0]: r for r in t.tables["configs"][1:]}
    classes = dict(zip((r[0] for r in t.tables["configs"]), t.row_classes["configs"], strict=True))
    assert configs["retention.ms"][1] == "3600000" and "non-default" in configs["retention.ms"][2]
    assert classes["retention.ms"] == "override"
    assert configs["cleanup.policy"][2] == "DEFAULT_CONFIG" and classes["cleanup.policy"] == ""


def test_a_topic_created_after_start_appears_without_restart(server: ServerProcess, console: ConsoleProcess) -> None:
    console.page("/topics")
    late = unique_name("late")
    assert late not in console.page("/topics")
    create_topic(server.bootstrap_servers, late, 2)
    body = console.wait_for("/topics", late, timeout=20)
    assert {r[0]: r[1] for r in rows(body, "topics")}[late] == "2"
    assert [r[0] for r in rows(console.page(f"/topic?name={late}"), "partitions")] == ["0", "1"]


def test_message_browser_keys_values_headers_text_and_hex(server: ServerProcess, console: ConsoleProcess) -> None:
    topic = unique_name("browse")
    create_topic(server.bootstrap_servers, topic)
    big = b"B" * 5000
    produce(server.bootstrap_servers, topic, [
        (f"key-{i}".encode(), f"value-{i}".encode(), [("trace", f"t{i}".encode()), ("n", b"1")], 0) for i in range(30)
    ] + [(None, big, [], 0), (b"\x00\xff", b"\xca\xfe", [], 0)], [BASE_TS + 1000 * i for i in range(32)])
    path = f"/messages?topic={topic}&partition=0"
    latest = rows(console.page(path + "&limit=5"), "messages")  # no start: the last 5
    assert [r[0] for r in latest] == ["27", "28", "29", "30", "31"]
    msgs = rows(console.page(path + "&offset=3&limit=4"), "messages")
    assert [r[0] for r in msgs] == ["3", "4", "5", "6"]
    assert msgs[0][2] == "key-3" and msgs[0][3] == "value-3" and msgs[0][4] == "trace=t3\nn=1"
    hexed = rows(console.page(path + "&offset=3&limit=1&format=hex"), "messages")
    assert hexed[0][2] == b"key-3".hex(" ") and hexed[0][3] == b"value-3".hex(" ")
    tail = rows(console.page(path + "&offset=30&limit=10"), "messages")
    assert [r[0] for r in tail] == ["30", "31"]
    assert tail[0][2] == "null"
    assert tail[0][3].startswith("B" * 2048) and "5000 bytes, first 2048 shown" in tail[0][3]
    assert "B" * 2049 not in tail[0][3]  # long values are cut
    assert tail[1][2] == "hex 00 ff" and tail[1][3] == "hex ca fe"  # not UTF-8: shown as hex
    # By timestamp (epoch ms or ISO 8601): from the first record at or after it.
    by_time = rows(console.page(path + f"&timestamp={BASE_TS + 10_000}&limit=3"), "messages")
    assert [r[0] for r in by_time] == ["10", "11", "12"]
    iso = dt.datetime.fromtimestamp((BASE_TS + 12_500) / 1000, dt.UTC).isoformat()
    by_iso = rows(console.page(path + f"&timestamp={iso.replace('+', '%2B')}&limit=2"), "messages")
    assert [r[0] for r in by_iso] == ["13", "14"]
    assert by_iso[0][1] == dt.datetime.fromtimestamp((BASE_TS + 13_000) / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.000 UTC")
    # Bounded: a huge limit is capped, a bad one is a 400 page.
    capped = console.page(path + "&offset=0&limit=100000")
    assert len(rows(capped, "messages")) == 32 and "max 200" in capped
    status, body = console.get(path + "&offset=abc")
    assert status == 400 and "offset must be an integer" in body


def test_cluster_data_is_html_escaped(server: ServerProcess, console: ConsoleProcess) -> None:
    topic = unique_name("xss")
    create_topic(server.bootstrap_servers, topic)
    produce(server.bootstrap_servers, topic, [(XSS.encode(), XSS.encode(), [(XSS, XSS.encode())], 0)])
    group = "g" + XSS
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "client.id": XSS})
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    m = None
    while m is None and time.monotonic() < deadline:
        m = c.poll(1)
    assert m is not None and m.error() is None
    c.commit(asynchronous=False)
    try:
        pages = [
            console.page(f"/messages?topic={topic}&partition=0&offset=0"),
            console.page("/groups"),
            console.page("/group?id=" + re.sub(r"[^A-Za-z0-9]", lambda x: f"%{ord(x.group()):02X}", group)),
        ]
    finally:
        c.close()
    for body in pages:
        assert "<script" not in body.lower()
        assert "&lt;script&gt;" in body
    msg = rows(pages[0], "messages")[0]
    assert msg[2] == XSS and msg[3] == XSS and msg[4] == f"{XSS}={XSS}"  # shown as text, escaped in HTML


def test_groups_with_members_and_lag(server: ServerProcess, console: ConsoleProcess) -> None:
    topic = unique_name("lagging")
    create_topic(server.bootstrap_servers, topic, 2)
    produce(server.bootstrap_servers, topic, [(None, b"x", [], i % 2) for i in range(20)])  # 10 per partition
    group = unique_name("group")
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": group, "client.id": "console-test",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert len(c.assignment()) == 2
        c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 7)], asynchronous=False)
        listing = {r[0]: r for r in rows(console.wait_for("/groups", group), "groups")}
        assert listing[group][1] == "Stable" and listing[group][3] == "consumer"
        body = console.wait_for(f"/group?id={group}", "polyline")  # two samples or more: a line
        members = rows(body, "members")
        assert len(members) == 1 and members[0][2] == "console-test"
        assert members[0][4] == f"{topic}: 0,1"
        lag = {(r[0], r[1]): r for r in rows(body, "lag")}
        assert lag[(topic, "0")][2:5] == ["4", "10", "6"] and lag[(topic, "1")][2:5] == ["7", "10", "3"]
        assert lag[(topic, "0")][5] == members[0][0]
        assert '<dd id="total-lag">9</dd>' in body
        assert "total 9" in body  # the chart's last sample
        # Lag moves: commit more, and the chart's latest value follows.
        c.commit(offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 10)], asynchronous=False)
        body = console.wait_for(f"/group?id={group}", "total 0")
        assert '<dd id="total-lag">0</dd>' in body
    finally:
        c.close()


def test_port_in_use_is_refused(server: ServerProcess, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "odradek.cli.main", "console", "--bootstrap-server", server.bootstrap_servers,
             "--port", str(port)], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )
    assert r.returncode == 1
    assert f"odradek console: port {port} on 127.0.0.1 is already in use" in r.stderr


def test_cluster_going_away_is_an_error_page_and_the_console_recovers(tmp_path: Path) -> None:
    s = ServerProcess(tmp_path / "data").start()
    c = ConsoleProcess(s.bootstrap_servers, tmp_path / "console.log", "--lag-sample-interval-ms", "200").start()
    try:
        create_topic(s.bootstrap_servers, "survivor")
        console_rows = rows(c.wait_for("/topics", "survivor"), "topics")
        assert [r[0] for r in console_rows] == ["survivor"]
        s.kill()
        for path in ("/", "/topics", "/topic?name=survivor", "/groups"):
            status, body = c.get(path)
            assert status == 503, (path, status, body)
            assert "Cluster unavailable" in body and f"127.0.0.1:{s.port}" in body
        time.sleep(1)  # the lag sampler fails a few rounds too
        assert c.alive()
        s.start()
        body = c.wait_for("/topics", "survivor", timeout=60)
        assert [r[0] for r in rows(body, "topics")] == ["survivor"]
        assert c.page("/").count('id="cluster-id"') == 1
    finally:
        c.stop()
        s.terminate()
