"""Hostile requests against an ``odradek server`` process (issue 8, items 6 and 8): impossible
partition counts get Kafka's error through a real admin client, and a request past the decode
limits closes only its own connection, with one log line."""

from __future__ import annotations

import socket
import struct

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import PolicyViolationError

from odradek.protocol.header import RequestHeader, encode_request_header

from .support import ServerProcess, unique_name, wait_until

pytestmark = pytest.mark.integration

EXCESSIVE = "Unable to perform excessively large batch operation."


def _error_of(future: object) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=30)  # type: ignore[attr-defined]
    err = info.value.args[0]
    assert isinstance(err, KafkaError)
    return err


def test_admin_client_sees_policy_violation_for_impossible_partition_counts(
    server_process: ServerProcess,
) -> None:
    # confluent-kafka itself refuses more than 100,000 partitions, so that is the count it sends.
    admin = AdminClient({"bootstrap.servers": server_process.bootstrap_servers})
    name = unique_name("huge")
    for validate_only in (True, False):
        futures = admin.create_topics(
            [NewTopic(name, 100_000, 1)], validate_only=validate_only, operation_timeout=30
        )
        err = _error_of(futures[name])
        assert err.code() == KafkaError.POLICY_VIOLATION
        assert EXCESSIVE in err.str()

    # A normal topic is created, and cannot grow to 100,000 partitions at once either.
    admin.create_topics([NewTopic(name, 2, 1)], operation_timeout=30)[name].result(timeout=30)
    futures = admin.create_partitions([NewPartitions(name, 100_000)], operation_timeout=30)
    err = _error_of(futures[name])
    assert err.code() == KafkaError.POLICY_VIOLATION
    assert EXCESSIVE in err.str()
    md = admin.list_topics(name, timeout=30)
    assert len(md.topics[name].partitions) == 2
    assert server_process.proc is not None and server_process.proc.poll() is None


def test_kafka_python_sees_policy_violation_for_two_billion_partitions(
    server_process: ServerProcess,
) -> None:
    # kafka-python sends whatever count it is given: 2^31 - 1, with and without validate_only.
    admin = KafkaAdminClient(bootstrap_servers=server_process.bootstrap_servers)
    try:
        name = unique_name("huge")
        for validate_only in (True, False):
            with pytest.raises(PolicyViolationError, match=EXCESSIVE):
                admin.create_topics([KpNewTopic(name, 2**31 - 1, 1)], validate_only=validate_only)
        admin.create_topics([KpNewTopic(name, 1, 1)])
        with pytest.raises(PolicyViolationError, match=EXCESSIVE):
            admin.create_partitions({name: KpNewPartitions(2**31 - 1)})
        assert admin.describe_topics([name])[0]["partitions"].__len__() == 1
    finally:
        admin.close()
    assert server_process.proc is not None and server_process.proc.poll() is None


def test_oversized_decode_closes_the_connection_and_the_server_keeps_serving(
    server_process: ServerProcess,
) -> None:
    n = 300_000  # the DescribeGroups of one-byte group ids, 900 KB
    frame = encode_request_header(RequestHeader(15, 4, 1, "hostile"), 1)
    frame += struct.pack(">i", n) + b"\x00\x01a" * n + b"\x00"
    with socket.create_connection(("127.0.0.1", server_process.port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert s.recv(4) == b""  # closed, no response
    log = server_process.log_path
    wait_until(lambda: "past its limit of 200000 array elements" in log.read_text(), timeout=10)
    lines = [ln for ln in log.read_text().splitlines() if "past its limit" in ln]
    assert len(lines) == 1 and "malformed DescribeGroups v4 request" in lines[0]
    assert "Traceback" not in log.read_text()
    assert server_process.proc is not None and server_process.proc.poll() is None
    admin = AdminClient({"bootstrap.servers": server_process.bootstrap_servers})
    assert admin.list_topics(timeout=30).brokers
