"""odradek.zk.kafka_zk_client.KafkaZkClient against a real ZooKeeper (Debian's package, started by
the ``zookeeper`` fixture): broker registration, the controller race, conditional partition state
updates, watches, notifications and session expiry."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import (
    BrokerIdRegisteredError,
    ControllerMovedError,
    KafkaZkClient,
    StateChangeHandler,
    ZkConfig,
    ZNodeChangeHandler,
    ZNodeChildChangeHandler,
    ZooKeeperClientTimeoutError,
)

from .zookeeper_support import ZooKeeperServer, _free_port

pytestmark = pytest.mark.timeout(180)


def client(connect: str, session_timeout_ms: int = 6000, **kw: object) -> KafkaZkClient:
    c = KafkaZkClient(ZkConfig(connect, session_timeout_ms, 10000), **kw)  # type: ignore[arg-type]
    c.start()
    return c


def wait_until(cond: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def expire_session(zookeeper: ZooKeeperServer, c: KafkaZkClient) -> None:
    """Expire ``c``'s session the way kazoo's own test harness does: a second connection with the
    same session id and password, then closed, ends the session on the server."""
    session = c.session_credentials
    assert session is not None
    other = KazooClient(hosts=zookeeper.connect, client_id=session, timeout=6.0)
    other.start(timeout=10)
    other.stop()
    other.close()


def broker_info(broker_id: int, port: int = 9092) -> z.BrokerInfo:
    return z.BrokerInfo.create(broker_id, [("PLAINTEXT", "PLAINTEXT", "127.0.0.1", port)],
                               timestamp_ms=int(time.time() * 1000), rack="r1",
                               features={"metadata.version": (1, 21)})


def test_chroot_created_and_broker_registered(zookeeper: ZooKeeperServer, connect: str) -> None:
    chroot = connect[connect.index("/"):]
    c = client(connect)
    try:
        c.create_top_level_paths()
        epoch = c.register_broker(broker_info(1))
        stat = c.exists_stat("/brokers/ids/1")
        assert stat is not None and stat.czxid == epoch and stat.ephemeralOwner == c.session_id
        bare = KazooClient(hosts=zookeeper.connect)
        bare.start(timeout=10)
        try:
            assert bare.exists(chroot) is not None
            assert bare.exists(f"{chroot}/brokers/ids/1") is not None
            assert bare.exists(f"{chroot}/config/changes") is not None
        finally:
            bare.stop()
            bare.close()
        brokers = c.get_all_broker_and_epochs()
        assert brokers[1][1] == epoch
        assert brokers[1][0].endpoint_tuples() == [("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)]
        assert brokers[1][0].rack == "r1"
        # Re-registering from the same session is accepted; another session's is refused.
        assert c.register_broker(broker_info(1)) == epoch
        other = client(connect)
        try:
            with pytest.raises(BrokerIdRegisteredError, match="does not match current session"):
                other.register_broker(broker_info(1))
        finally:
            other.close()
        assert c.create_or_get_cluster_id("abc") == "abc"
        assert c.create_or_get_cluster_id("xyz") == "abc"
    finally:
        c.close()


def test_controller_race_exactly_one_wins_and_epoch_increments(connect: str) -> None:
    clients = [client(connect) for _ in range(2)]
    try:
        results: dict[int, object] = {}
        barrier = threading.Barrier(2)

        def race(i: int) -> None:
            barrier.wait()
            try:
                results[i] = clients[i].register_controller_and_increment_controller_epoch(i + 1)
            except ControllerMovedError as e:
                results[i] = e

        threads = [threading.Thread(target=race, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        winners = [i for i, r in results.items() if isinstance(r, tuple)]
        assert len(winners) == 1, results
        w = winners[0]
        assert isinstance(results[1 - w], ControllerMovedError)
        epoch, epoch_version = results[w]  # type: ignore[misc]
        assert epoch == 1 and clients[0].get_controller_epoch() == (1, epoch_version)
        assert clients[1 - w].get_controller_id() == w + 1
        reg = z.decode_controller(clients[0].get_data("/controller")[0])  # type: ignore[index]
        assert reg.version == 2 and reg.kraft_controller_epoch == -1
        # The winner goes away: its ephemeral /controller goes, the other wins epoch 2.
        clients[w].close()
        wait_until(lambda: clients[1 - w].get_controller_id() is None, what="/controller deleted")
        epoch2, _ = clients[1 - w].register_controller_and_increment_controller_epoch(2 - w)
        assert epoch2 == 2 and clients[1 - w].get_controller_id() == 2 - w
    finally:
        for c in clients:
            c.close()


def test_conditional_partition_state_updates(connect: str) -> None:
    c = client(connect)
    other = client(connect)
    try:
        epoch, epoch_zkv = c.register_controller_and_increment_controller_epoch(1)
        c.create_topic_assignment("t", "vR7hLzxQRSq5ZbNQm0x4lA", {0: z.ReplicaAssignment((1, 2))})
        created = c.create_topic_partition_states(
            {("t", 0): z.PartitionState(1, 0, (1, 2), epoch)}, epoch_zkv)
        assert created == {("t", 0): None}
        state = c.get_topic_partition_states([("t", 0)])[("t", 0)]
        assert (state.leader, state.isr, state.zk_version) == (1, (1, 2), 0)
        # A write on the current version succeeds and returns the new version ...
        shrink = z.PartitionState(1, 1, (1,), epoch, zk_version=0)
        res = c.update_leader_and_isr({("t", 0): shrink}, epoch_zkv)
        assert res.partitions_to_retry == [] and res.finished[("t", 0)].zk_version == 1  # type: ignore[union-attr]
        # ... one on a stale version is to be retried and changes nothing.
        stale = z.PartitionState(2, 1, (2,), epoch, zk_version=0)
        res = c.update_leader_and_isr({("t", 0): stale}, epoch_zkv)
        assert res.partitions_to_retry == [("t", 0)] and res.finished == {}
        # A missing partition fails without stopping the others.
        res = c.update_leader_and_isr({("t", 9): stale}, epoch_zkv)
        assert isinstance(res.finished[("t", 9)], Exception)
        assert c.get_topic_partition_states([("t", 0)])[("t", 0)].isr == (1,)
        # Another controller takes over (epoch moves): the old one's writes land nowhere.
        c.delete_controller(epoch_zkv)
        assert other.register_controller_and_increment_controller_epoch(2)[0] == epoch + 1
        fresh = z.PartitionState(1, 2, (1, 2), epoch, zk_version=1)
        with pytest.raises(ControllerMovedError):
            c.update_leader_and_isr({("t", 0): fresh}, epoch_zkv)
        with pytest.raises(ControllerMovedError):
            c.delete_topic_deletions(["t"], epoch_zkv)
        now = other.get_topic_partition_states([("t", 0)])[("t", 0)]
        assert (now.leader_epoch, now.isr, now.zk_version) == (1, (1,), 1)
        assert other.get_replica_assignment_and_topic_ids(["t"])["t"].topic_id == "vR7hLzxQRSq5ZbNQm0x4lA"
        assert other.get_all_partitions() == {("t", 0)}
    finally:
        c.close()
        other.close()


class Recorder(ZNodeChangeHandler, ZNodeChildChangeHandler, StateChangeHandler):
    def __init__(self, path: str, name: str = "recorder") -> None:
        self.path = path
        self.name = name
        self.events: list[str] = []

    def handle_creation(self) -> None:
        self.events.append("created")

    def handle_deletion(self) -> None:
        self.events.append("deleted")

    def handle_data_change(self) -> None:
        self.events.append("changed")

    def handle_child_change(self) -> None:
        self.events.append("children")

    def before_initializing_session(self) -> None:
        self.events.append("expired")

    def after_initializing_session(self) -> None:
        self.events.append("new-session")


def test_watches_become_callbacks(connect: str) -> None:
    c = client(connect)
    writer = client(connect)
    try:
        h = Recorder("/controller")
        assert c.register_znode_change_handler_and_check_existence(h) is False
        writer.register_controller_and_increment_controller_epoch(7)
        wait_until(lambda: h.events == ["created"], what="creation callback")
        assert c.get_controller_id() == 7  # re-arms the one-shot watch, as Kafka's reads do
        writer.close()  # session ends -> ephemeral /controller deleted
        wait_until(lambda: h.events == ["created", "deleted"], what="deletion callback")
        kids = Recorder(z.DELETE_TOPICS_PATH)
        c.register_znode_child_change_handler(kids)
        c.create_top_level_paths()
        assert c.get_topic_deletions() == []
        c.create_delete_topic_path("gone")
        wait_until(lambda: kids.events == ["children"], what="child callback")
        assert c.get_topic_deletions() == ["gone"]
    finally:
        c.close()
        writer.close()


def test_session_expiry_removes_ephemerals_and_reports(zookeeper: ZooKeeperServer, connect: str) -> None:
    broker = client(connect, session_timeout_ms=4000)
    watcher = client(connect)
    try:
        broker.create_top_level_paths()
        first_epoch = broker.register_broker(broker_info(3))
        state = Recorder("", name="broker-session")
        broker.register_state_change_handler(state)
        ids = Recorder(z.BROKER_IDS_PATH)
        watcher.register_znode_child_change_handler(ids)
        assert watcher.get_sorted_broker_list() == [3]
        expire_session(zookeeper, broker)
        wait_until(lambda: ids.events == ["children"], what="broker znode removal seen")
        assert watcher.get_sorted_broker_list() == []
        wait_until(lambda: state.events == ["expired", "new-session"], timeout=30,
                   what="expiry then new session callbacks")
        # The broker re-registers in its new session: a new, larger broker epoch.
        assert broker.register_broker(broker_info(3)) > first_epoch
        assert watcher.get_sorted_broker_list() == [3]
    finally:
        broker.close()
        watcher.close()


def test_notifications_and_admin_znodes(connect: str) -> None:
    c = client(connect)
    try:
        c.create_top_level_paths()
        epoch, zkv = c.register_controller_and_increment_controller_epoch(1)
        first = c.propagate_isr_changes([("a", 0), ("b", 1)])
        c.propagate_isr_changes([("a", 2)])
        assert first.startswith("isr_change_")
        seqs = c.get_all_isr_change_notifications()
        assert len(seqs) == 2 and seqs == sorted(seqs)
        assert c.get_partitions_from_isr_change_notifications(seqs) == {("a", 0), ("b", 1), ("a", 2)}
        c.delete_isr_change_notifications(seqs, zkv)
        assert c.get_all_isr_change_notifications() == []
        c.propagate_log_dir_event(4)
        events = c.get_all_log_dir_event_notifications()
        assert c.get_broker_ids_from_log_dir_events(events) == [4]
        c.delete_log_dir_event_notifications(events, zkv)
        c.create_partition_reassignment([("a", 0, [2, 3])])
        assert c.get_partition_reassignment() == {("a", 0): [2, 3]}
        c.delete_partition_reassignment(zkv)
        assert c.get_partition_reassignment() == {}
        c.create_preferred_replica_election([("a", 0)])
        assert c.get_preferred_replica_election() == {("a", 0)}
        c.delete_preferred_replica_election(zkv)
        c.set_or_create_entity_configs("topics", "a", {"retention.ms": "5"})
        name = c.create_config_change_notification("topics/a")
        assert c.get_entity_configs("topics", "a") == {"retention.ms": "5"}
        got = c.get_data(f"{z.CONFIG_CHANGES_PATH}/{name}")
        assert got is not None and z.decode_config_change_notification(got[0]) == "topics/a"
        # A garbage znode is reported, never raised into the reader's loop.
        c.create_recursive(f"{z.ISR_CHANGE_NOTIFICATION_PATH}/{z.ISR_CHANGE_PREFIX}9999999999", b"{nope")
        assert c.get_partitions_from_isr_change_notifications(["9999999999"]) == set()
        assert epoch == 1
    finally:
        c.close()


def test_async_callers_run_off_the_loop(connect: str) -> None:
    c = client(connect)
    try:
        async def main() -> tuple[int | None, str]:
            loop_thread = threading.current_thread().name
            await c.call_async(c.register_controller_and_increment_controller_epoch, 5)
            seen: list[str] = []

            def probe() -> int | None:
                seen.append(threading.current_thread().name)
                return c.get_controller_id()
            got = await c.call_async(probe)
            assert seen and seen[0] != loop_thread
            return got, seen[0]

        got, thread = asyncio.run(main())
        assert got == 5 and thread.startswith("zk-call")
    finally:
        c.close()


def test_requests_wait_out_a_lost_connection() -> None:
    """ZooKeeper is killed and restarted under a client: a request made while the connection is
    down waits (kazoo queues it; a request cut off in flight is retried by KafkaZkClient._call)
    and answers once the server is back, in the same session."""
    with ZooKeeperServer() as zk:
        c = client(zk.connect + "/r", session_timeout_ms=20000)
        try:
            c.create_top_level_paths()
            epoch = c.register_broker(broker_info(2))
            session = c.session_id
            results: list[object] = []

            def read() -> None:
                try:
                    results.append(c.get_all_broker_and_epochs()[2][1])
                except Exception as e:  # recorded, asserted below
                    results.append(e)

            zk.kill()
            wait_until(lambda: not c.connected, what="the connection to drop")
            reader = threading.Thread(target=read)
            reader.start()
            time.sleep(1.0)
            assert results == []  # waiting, not failed
            zk.start()
            reader.join(60)
            assert results == [epoch]
            assert c.session_id == session
        finally:
            c.close()


def test_connection_timeout_is_reported() -> None:
    dead = f"127.0.0.1:{_free_port()}"
    c = KafkaZkClient(ZkConfig(dead, 6000, 1000))
    started = time.monotonic()
    with pytest.raises(ZooKeeperClientTimeoutError):
        c.start()
    assert time.monotonic() - started < 30
    c.close()


def test_zk_config_from_kafka_properties() -> None:
    cfg = ZkConfig.from_props({"zookeeper.connect": "h1:2181,h2:2181/kafka/a",
                               "zookeeper.session.timeout.ms": "9000"})
    assert (cfg.hosts, cfg.chroot, cfg.session_timeout_ms, cfg.connection_timeout_ms) == (
        "h1:2181,h2:2181", "/kafka/a", 9000, None)
    assert ZkConfig.from_props({"zookeeper.connect": "h:1"}).session_timeout_ms == 18000
