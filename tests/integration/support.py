"""Helpers for the integration tests: server processes, record sets, checks, raw protocol access.

Every test here talks to a real Odradek node through a real client. Most tests share one embedded
broker for the session (``broker``); tests that restart or kill a node get their own, either an
``EmbeddedBroker`` or an ``odradek server`` subprocess (:class:`ServerProcess`).
"""

from __future__ import annotations

import itertools
import os
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from odradek.embedded import EmbeddedBroker
from odradek.protocol import messages as m
from odradek.protocol.header import (
    RequestHeader,
    decode_response_header,
    encode_request_header,
)
from odradek.protocol.schema import Api
from odradek.records.builder import build_batch

CODECS: tuple[str, ...] = ("none", "gzip", "snappy", "lz4", "zstd")
# Timestamps of generated records: fixed, recent enough to stay inside the default retention.
# kcat is installed by the README's test command (CI sets CI=1): missing there, the tests fail
# rather than skip; outside CI they skip.
REQUIRES_KCAT = pytest.mark.skipif(
    shutil.which("kcat") is None and not os.environ.get("CI"),
    reason="kcat is not installed (CI installs it and fails without it)",
)

BASE_TIMESTAMP_MS = int(time.time() * 1000) - 3_600_000




# ---- brokers ----------------------------------------------------------------------------------




def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process dies (PR_SET_PDEATHSIG), so a
    killed or timed-out test run never leaves a Kafka JVM behind. The signal comes when the
    *thread* that started the child ends: start such children from the main thread only (the
    ``odradek server`` processes of :class:`ServerProcess` are restarted from helper threads, so
    they do not use it)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


_counter = itertools.count()


def unique_name(hint: str = "t") -> str:
    clean = re.sub(r"[^a-zA-Z0-9._-]+", "-", hint).strip("-.")[:60] or "t"
    return f"{clean}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


# "Odradek broker ready: node id 1, cluster id ..., listening on PLAINTEXT://127.0.0.1:40123, data in ..."
_READY_RE = re.compile(r"Odradek broker ready: .*?listening on (.*?), data in")


class ServerProcess:
    """``odradek server`` as a child process on loopback, for restarts and ``kill -9``.

    The first start binds free ports; later starts reuse the same ports and the same data
    directory, so a client keeps its bootstrap address across restarts.
    """

    def __init__(
        self, data_dir: Path, overrides: dict[str, str] | None = None, *, max_open_files: int = 0
    ) -> None:
        self.data_dir = data_dir
        self.overrides = dict(overrides or {})
        self.max_open_files = max_open_files  # RLIMIT_NOFILE of the process, if not 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0  # the client (PLAINTEXT) port, known after the first start
        self.starts = 0
        self.log_path = data_dir.parent / f"{data_dir.name}-server.log"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        # The client port is kept across restarts; the controller's may change.
        listeners = f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:0"
        props = {
            "log.dirs": str(self.data_dir),
            "listeners": listeners,
            "offsets.topic.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
            **self.overrides,
        }
        cmd = [sys.executable, "-m", "odradek.cli.main", "server"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 60.0) -> ServerProcess:
        assert self.proc is None, "already running"
        self.starts += 1
        with open(self.log_path, "ab") as logf:
            logf.write(f"\n===== start #{self.starts} =====\n".encode())
            offset = logf.tell()
            self.proc = subprocess.Popen(
                self._command(), stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=self._limit_open_files if self.max_open_files else None,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self._log_since(offset)
            ready = _READY_RE.search(text)
            if ready:
                endpoints = dict(e.split("://", 1) for e in ready.group(1).split(", "))
                port = int(endpoints["PLAINTEXT"].rsplit(":", 1)[1])
                assert self.port in (0, port), f"restarted on port {port}, not {self.port}"
                self.port = port
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"odradek server exited with {self.proc.returncode} during startup:\n{text[-4000:]}"
                )
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"odradek server not ready in {timeout}s:\n{self._log_since(offset)[-4000:]}")

    def _limit_open_files(self) -> None:
        n = self.max_open_files
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    def _log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text("utf-8", "replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        """``kill -9``: no shutdown, no flush."""
        self._signal(signal.SIGKILL)

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait for a clean shutdown; returns the exit code."""
        return self._signal(signal.SIGTERM, timeout)

    def _signal(self, sig: int, timeout: float = 60.0) -> int:
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(10)
        self.proc = None
        return code

    def restart(self, sig: int = signal.SIGTERM) -> ServerProcess:
        self._signal(sig)
        return self.start()




# ---- records ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    """A record as sent or as read back. ``offset`` is -1 on the sending side."""

    partition: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    offset: int = field(default=-1, compare=False)

    def content(self) -> tuple[int, bytes | None, bytes, tuple[tuple[str, bytes | None], ...], int]:
        return (self.partition, self.key, self.value, self.headers, self.timestamp)


def make_records(
    n: int,
    partitions: int,
    tag: str,
    *,
    null_keys: bool = True,
    null_header_values: bool = True,
    value_size: int = 40,
) -> list[Rec]:
    """``n`` distinct records spread round-robin over ``partitions``.

    Values are unique (they embed ``tag`` and the sequence number), so a record read back is
    matched to the one sent by its value. Keys, headers (several, a repeated key, an empty and
    optionally a null value) and timestamps vary per record.
    """
    out: list[Rec] = []
    pad = "x" * max(0, value_size - 24)
    for i in range(n):
        key: bytes | None = f"key-{i % 997}-{i}".encode()
        if null_keys and i % 11 == 0:
            key = None
        headers: list[tuple[str, bytes | None]] = [("seq", str(i).encode()), ("tag", tag.encode())]
        if i % 3 == 0:
            headers.append(("seq", b"again"))
        if i % 5 == 0:
            headers.append(("empty", b""))
        if null_header_values and i % 7 == 0:
            headers.append(("null", None))
        value = f"{tag}|{i:09d}|{pad}{i % 13}".encode()
        out.append(Rec(i % partitions, key, value, tuple(headers), BASE_TIMESTAMP_MS + i))
    return out


def check_exactly_once(sent: Sequence[Rec], received: Iterable[Rec], *, ordered: bool = True) -> None:
    """Every record sent was received exactly once with identical content; nothing else came back.

    With ``ordered``, records of one partition also come back in the order they were sent, at
    increasing offsets.
    """
    by_value = {r.value: r for r in sent}
    assert len(by_value) == len(sent), "test bug: sent values are not unique"
    seen: dict[bytes, Rec] = {}
    duplicates: list[Rec] = []
    unexpected: list[Rec] = []
    mismatched: list[tuple[Rec, Rec]] = []
    per_partition: dict[int, list[Rec]] = {}
    for r in received:
        want = by_value.get(r.value)
        if want is None:
            unexpected.append(r)
            continue
        if r.value in seen:
            duplicates.append(r)
            continue
        seen[r.value] = r
        per_partition.setdefault(r.partition, []).append(r)
        if r.content() != want.content():
            mismatched.append((want, r))
    missing = [r for r in sent if r.value not in seen]
    problems = []
    if missing:
        problems.append(f"{len(missing)} records missing, first: {missing[:3]}")
    if duplicates:
        problems.append(f"{len(duplicates)} duplicates, first: {duplicates[:3]}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected records, first: {unexpected[:3]}")
    if mismatched:
        problems.append(
            f"{len(mismatched)} records differ from what was sent, first (sent, received): "
            f"{mismatched[:3]}"
        )
    if ordered and not problems:
        for part, recs in per_partition.items():
            offsets = [r.offset for r in recs]
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), (
                f"partition {part}: offsets not strictly increasing"
            )
            want_order = [r.value for r in sent if r.partition == part]
            if [r.value for r in recs] != want_order:
                problems.append(f"partition {part}: records not in the order they were sent")
    assert not problems, "; ".join(problems)


# ---- raw protocol -----------------------------------------------------------------------------


class RawConnection:
    """A plain socket speaking Kafka framing, for hand-built (and broken) requests."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = itertools.count(1)

    @classmethod
    def to(cls, broker: EmbeddedBroker | ServerProcess, timeout: float = 10.0) -> RawConnection:
        return cls("127.0.0.1", broker.port, timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes | None:
        """The next response frame, or None when the broker closed the connection."""
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def encode_request(
        self,
        api: Api,
        version: int,
        body: dict[str, Any],
        correlation_id: int | None = None,
        client_id: str | None = "odradek-integration",
    ) -> tuple[int, bytes]:
        cid = next(self._correlation) if correlation_id is None else correlation_id
        header = encode_request_header(
            RequestHeader(api.api_key, version, cid, client_id), api.request_header_version(version)
        )
        return cid, header + b"".join(bytes(b) for b in api.encode_request(version, body))

    def request(
        self, api: Api, version: int, body: dict[str, Any], *, response_version: int | None = None
    ) -> dict[str, Any]:
        cid, payload = self.encode_request(api, version, body)
        self.send_frame(payload)
        frame = self.recv_frame()
        assert frame is not None, f"{api.name} v{version}: the broker closed the connection"
        rv = version if response_version is None else response_version
        got_cid, pos = decode_response_header(frame, api.response_header_version(rv))
        assert got_cid == cid, f"correlation id {got_cid} != {cid}"
        response, end = api.decode_response(rv, frame, pos)
        assert end == len(frame), f"{api.name} v{rv}: {len(frame) - end} trailing bytes"
        return response

    def is_closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the broker closes the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return data == b""


def metadata(conn: RawConnection, topics: list[str] | None = None, version: int = 12) -> dict[str, Any]:
    body: dict[str, Any] = {
        "topics": None if topics is None else [{"name": t, "topic_id": uuid.UUID(int=0)} for t in topics],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    return conn.request(m.METADATA, version, body)


def produce_request(
    topic: str, partition: int, records: bytes, *, acks: int = -1, transactional_id: str | None = None,
    timeout_ms: int = 10_000,
) -> dict[str, Any]:
    """The body of a one-partition Produce (v3+)."""
    return {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }


def transactional_batch(pid: int, values: list[bytes], *, epoch: int = 0, seq: int = 0,
                        timestamp_ms: int | None = None) -> bytes:
    """One transactional batch of producer ``pid`` (keys null, timestamps now by default)."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return build_batch([(None, v, [], ts) for v in values], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=True)


def write_txn_markers_request(pid: int, commit: bool, topic: str, partitions: Sequence[int] = (0,), *,
                              epoch: int = 0, coordinator_epoch: int = 0) -> dict[str, Any]:
    """The body of a WriteTxnMarkers (v1) with one marker, as a transaction coordinator sends it."""
    return {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
        "coordinator_epoch": coordinator_epoch, "topics": [{"name": topic, "partition_indexes": list(partitions)}],
    }]}


def produce(
    conn: RawConnection,
    topic: str,
    partition: int,
    records: bytes,
    *,
    version: int = 9,
    acks: int = -1,
    transactional_id: str | None = None,
) -> dict[str, Any]:
    """A one-partition Produce; returns that partition's response."""
    body = produce_request(topic, partition, records, acks=acks, transactional_id=transactional_id)
    resp = conn.request(m.PRODUCE, version, body)
    (t,) = resp["responses"]
    (p,) = t["partition_responses"]
    return p


def fetch(
    conn: RawConnection, topic: str, partition: int, offset: int, *, version: int = 12
) -> dict[str, Any]:
    """A one-partition Fetch by topic name (v12) that does not wait; returns the partition result."""
    body = {
        "cluster_id": None,
        "replica_id": -1,
        "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 50 * 1024 * 1024,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "topic_id": uuid.UUID(int=0),
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 10 * 1024 * 1024,
                        "replica_directory_id": uuid.UUID(int=0),
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    resp = conn.request(m.FETCH, version, body)
    (t,) = resp["responses"]
    (p,) = t["partitions"]
    return p


def wait_until(predicate: Any, timeout: float = 30.0, interval: float = 0.1, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; that value is returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def read_committed(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0) -> list[bytes]:
    """The values a ``read_committed`` consumer reads from the start of partitions 0 to
    ``partitions - 1`` of ``topic``: until ``expected`` arrived and a poll brings nothing more,
    or ``timeout`` s passed."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"), "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value() or b"")
            elif len(got) >= expected:
                break
        return got
    finally:
        c.close()


def open_transaction(bootstrap: str, transactional_id: str, topic: str, values: list[bytes], partition: int = 0,
                     **config: Any) -> Any:
    """A confluent-kafka producer whose transaction is left open after ``values`` were written to
    ``topic``-``partition`` (flushed: on the broker's log)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **config})
    p.init_transactions(60)
    p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=partition)
    assert p.flush(60) == 0
    return p
