"""The controller's ZooKeeper session expires while its process keeps running.

Three ``odradek server`` processes in ZooKeeper mode; broker 1 reaches ZooKeeper through a TCP
proxy and is started first, so it is the controller. The proxy kills its connection and refuses
new ones past ``zookeeper.session.timeout.ms``: ZooKeeper expires the session, ``/controller`` and
``/brokers/ids/1`` go, another broker wins with epoch + 1. The proxy lets broker 1 through again:
its client is told the session expired, the controller resigns (Expire), the broker registers
again with a new session (a new broker epoch), does not take ``/controller`` back, and its replicas
rejoin the ISR; what the old controller would send is refused with STALE_CONTROLLER_EPOCH; produce
and consume work throughout, nothing acknowledged lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig

from .tcp_cut_proxy import CutProxy
from .test_zk_mode import (
    PARTITIONS,
    SESSION_TIMEOUT_MS,
    TOPIC,
    ZkServerProcess,
    all_logs,
    consume_all,
    produce,
)
from .zk_stale_controller import assert_old_controller_is_fenced, assert_resigned_and_silent
from .zookeeper_support import ZooKeeperServer, wait_for

kafka_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.timeout(400)


def test_controller_session_expiry_resigns_registers_again_and_another_broker_takes_over(tmp_path: Path) -> None:
    chroot = "/odradek-session-expiry"
    with ZooKeeperServer() as zk, CutProxy(zk.port) as proxy:
        brokers = {1: ZkServerProcess(tmp_path / "broker1", proxy.address + chroot, 1)}
        brokers |= {i: ZkServerProcess(tmp_path / f"broker{i}", zk.connect + chroot, i) for i in (2, 3)}
        admin = KafkaZkClient(ZkConfig(zk.connect + chroot, 10000, 20000))

        def logs() -> str:
            return all_logs(brokers)

        try:
            brokers[1].start(60)
            admin.start()
            wait_for("broker 1 to be the controller", lambda: admin.get_controller_id() == 1, 30, logs)
            brokers[2].start(60)
            brokers[3].start(60)
            wait_for("three registrations", lambda: admin.get_sorted_broker_list() == [1, 2, 3], 30, logs)
            epoch = admin.get_controller_epoch()
            assert epoch is not None
            old_broker_epoch = admin.get_all_broker_and_epochs()[1][1]
            bootstrap = ",".join(b.bootstrap_servers for b in brokers.values())
            ac = kafka_admin.AdminClient({"bootstrap.servers": bootstrap})
            ac.create_topics([kafka_admin.NewTopic(TOPIC, PARTITIONS, 3)], request_timeout=30)[TOPIC].result(60)
            tps = [(TOPIC, p) for p in range(PARTITIONS)]

            def states() -> dict[tuple[str, int], z.PartitionState]:
                return admin.get_topic_partition_states(tps)

            wait_for("leaders", lambda: len(states()) == PARTITIONS and all(
                len(s.isr) == 3 for s in states().values()), 30, logs)
            acked = produce(bootstrap, 0, 100)
            assert len(acked) == 100, logs()
            assert "ZooKeeper session expired" not in brokers[1].log_tail(1_000_000)

            proxy.cut()  # broker 1 keeps running; its ZooKeeper connection is gone
            try:
                new = wait_for("another controller", lambda: (
                    c if (c := admin.get_controller_id()) not in (None, 1) else None),
                    SESSION_TIMEOUT_MS / 1000 + 30, logs)
                new_epoch = admin.get_controller_epoch()
                assert new_epoch is not None and new_epoch[0] == epoch[0] + 1
                assert 1 not in admin.get_sorted_broker_list()
                wait_for("broker 1 out of every ISR", lambda: all(1 not in s.isr for s in states().values()),
                         30, logs)
                assert brokers[1].proc is not None and brokers[1].proc.poll() is None
            finally:
                proxy.restore()

            # back in touch: broker 1 learns its session expired, resigns, registers again
            wait_for("broker 1 to resign after its session expired", lambda: (
                (log := brokers[1].log_tail(1_000_000)).find("Resigned",
                                                             log.find("ZooKeeper session expired")) > 0), 60, logs)
            wait_for("broker 1 registered again", lambda: (
                admin.get_all_broker_and_epochs().get(1, (None, -1))[1] > old_broker_epoch), 60, logs)
            wait_for("its replicas back in the ISR", lambda: all(
                len(s.isr) == 3 for s in states().values()), 60, logs)
            assert admin.get_controller_id() == new
            assert admin.get_controller_epoch() == new_epoch  # the old controller wrote nothing more
            assert_resigned_and_silent(brokers[1].log_tail(1_000_000))
            for i in (2, 3):
                assert_old_controller_is_fenced(admin, brokers[i], i, TOPIC, 0, 1, epoch[0], epoch[1])
            acked += produce(bootstrap, 100, 100)
            assert len(acked) == 200, logs()
            got = consume_all(bootstrap, len(acked))
            assert sorted(got) == sorted(acked)
        finally:
            admin.close()
            for b in brokers.values():
                b.kill()
