"""Broker-only ``odradek server`` processes beside test_raft_quorum's controllers, for the KRaft
tests that start their nodes one by one (test_controller_failover, test_dynamic_quorum,
test_raft_snapshot_catch_up); test_kraft_cluster itself uses ``LocalCluster``."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from .test_raft_quorum import Controller


class Broker(Controller):
    """A broker-only node; reuses the controller's process handling with its own config."""

    def __init__(self, node_id: int, port: int, voters: str, base: Path) -> None:
        super().__init__(node_id, port, voters, base)
        self.config.write_text(
            "process.roles=broker\n"
            f"node.id={node_id}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{port}\n"
            "controller.listener.names=CONTROLLER\n"
            f"controller.quorum.voters={voters}\n"
            f"log.dirs={self.data}\n"
            "offsets.topic.replication.factor=1\n"
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def _create_topic(admin: AdminClient, name: str, partitions: int, timeout_s: float = 15) -> None:
    fut = admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=timeout_s,
                              operation_timeout=timeout_s)[name]
    fut.result(timeout=timeout_s + 5)


def _wait_for_brokers(broker: Broker, ids: set[int], deadline_s: float, others: list[Controller]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    end = time.monotonic() + deadline_s
    seen: set[int] = set()
    while time.monotonic() < end:
        try:
            seen = set(admin.list_topics(timeout=2).brokers)
        except KafkaException:
            seen = set()
        if seen == ids:
            return
        time.sleep(0.2)
    raise AssertionError(f"broker {broker.node_id} sees brokers {seen}, expected {ids}:\n"
                         + "\n".join(n.log_tail() for n in others))


def _stop_all(brokers: list[Controller], controllers: list[Controller]) -> None:
    """SIGTERM the brokers together (their controlled shutdown needs a controller), then the
    controllers together."""
    for group in (brokers, controllers):
        for n in group:
            if n.proc is not None:
                n.proc.terminate()
        for n in group:
            n.stop()


