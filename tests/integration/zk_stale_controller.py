"""What an old ZooKeeper-mode controller can still do after a failover, done by the test on its
behalf, and proof that none of it lands.

:func:`assert_old_controller_is_fenced` sends a live ``odradek server`` broker the three control
requests an old controller would send (LeaderAndIsr, UpdateMetadata, StopReplica with deletion),
each carrying the old controller id and epoch and the broker's current broker epoch, and each one
that would change the partition if it were accepted (a higher leader epoch naming another leader,
metadata with only the old controller alive, the partition's deletion). Every one must be answered
STALE_CONTROLLER_EPOCH (11), logged by the broker with Kafka's line, and change nothing: the
broker's metadata for the partition, its log directory and the partition's state znode stay as
they were. Then the old controller's kind of ZooKeeper write — a partition state update in a multi
guarded by the ``/controller_epoch`` zkVersion it won — fails with ControllerMovedError and leaves
the znode as it was.
"""

from __future__ import annotations

import uuid

from odradek.controller.kafka_zk_adapter import uuid_from_kafka
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import ControllerMovedError, KafkaZkClient

from .support import RawConnection, ServerProcess

STALE_CONTROLLER_EPOCH = int(Errors.STALE_CONTROLLER_EPOCH)


def _partition_metadata(conn: RawConnection, topic: str, partition: int) -> tuple[int, int, list[int]]:
    """(leader, leader epoch, replicas) of the partition in the broker's metadata cache."""
    resp = conn.request(m.METADATA, 12, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                                         "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
    (t,) = resp["topics"]
    p = next(p for p in t["partitions"] if p["partition_index"] == partition)
    return p["leader_id"], p["leader_epoch"], sorted(p["replica_nodes"])


def _live_brokers(conn: RawConnection) -> list[int]:
    resp = conn.request(m.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
    return sorted(b["node_id"] for b in resp["brokers"])


def assert_old_controller_is_fenced(admin: KafkaZkClient, broker: ServerProcess, broker_id: int, topic: str,
                                    partition: int, old_controller: int, old_epoch: int,
                                    old_epoch_zk_version: int) -> None:
    """``broker`` (id ``broker_id``, alive, a replica of ``topic``-``partition``) refuses what the
    old controller (``old_controller`` with ``old_epoch``, which won ``/controller_epoch`` at
    ``old_epoch_zk_version``) sends, and ZooKeeper refuses its write; nothing changes."""
    tp = (topic, partition)
    current_epoch = admin.get_controller_epoch()
    assert current_epoch is not None and current_epoch[0] > old_epoch, "no failover happened"
    state = admin.get_topic_partition_states([tp])[tp]
    brokers = admin.get_all_broker_and_epochs()
    broker_epoch = brokers[broker_id][1]
    topic_id = admin.get_replica_assignment_and_topic_ids([topic])[topic]
    replicas = list(topic_id.partitions[partition].replicas)
    tid = uuid_from_kafka(topic_id.topic_id)
    assert tid is not None, "the topic has no id"
    partition_dir = broker.data_dir / f"{topic}-{partition}"
    assert partition_dir.is_dir(), f"broker {broker_id} does not host {topic}-{partition}"
    # a leader the old controller might name, with a leader epoch above the current one (so that
    # only the controller epoch can refuse it)
    old_leader = old_controller if old_controller in replicas else replicas[0]
    with RawConnection.to(broker) as conn:
        before = _partition_metadata(conn, topic, partition)
        live_before = _live_brokers(conn)
        lisr = conn.request(g.LEADER_AND_ISR, 7, {
            "controller_id": old_controller, "is_k_raft_controller": False, "controller_epoch": old_epoch,
            "broker_epoch": broker_epoch, "type": 0, "ungrouped_partition_states": [],
            "topic_states": [{"topic_name": topic, "topic_id": tid, "partition_states": [{
                "topic_name": topic, "partition_index": partition, "controller_epoch": old_epoch,
                "leader": old_leader, "leader_epoch": state.leader_epoch + 10, "isr": [old_leader],
                "partition_epoch": state.zk_version + 10, "replicas": replicas, "adding_replicas": [],
                "removing_replicas": [], "is_new": False, "leader_recovery_state": 0}]}],
            "live_leaders": [{"broker_id": old_leader, "host_name": "127.0.0.1", "port": 1}]})
        assert lisr["error_code"] == STALE_CONTROLLER_EPOCH, lisr
        assert all(pe["error_code"] == STALE_CONTROLLER_EPOCH for t in lisr["topics"]
                   for pe in t["partition_errors"]), lisr
        um = conn.request(g.UPDATE_METADATA, 8, {
            "controller_id": old_controller, "is_k_raft_controller": False, "type": 0,
            "controller_epoch": old_epoch, "broker_epoch": broker_epoch, "ungrouped_partition_states": [],
            "topic_states": [{"topic_name": topic, "topic_id": tid, "partition_states": [{
                "topic_name": topic, "partition_index": partition, "controller_epoch": old_epoch,
                "leader": old_leader, "leader_epoch": state.leader_epoch + 10, "isr": [old_leader],
                "zk_version": state.zk_version + 10, "replicas": replicas, "offline_replicas": []}]}],
            "live_brokers": [{"id": old_leader, "v0_host": "127.0.0.1", "v0_port": 1, "rack": None,
                              "endpoints": [{"port": 1, "host": "127.0.0.1", "listener": "PLAINTEXT",
                                             "security_protocol": 0}]}]})
        assert um["error_code"] == STALE_CONTROLLER_EPOCH, um
        sr = conn.request(g.STOP_REPLICA, 4, {
            "controller_id": old_controller, "is_k_raft_controller": False, "controller_epoch": old_epoch,
            "broker_epoch": broker_epoch, "delete_partitions": True, "ungrouped_partitions": [], "topics": [],
            "topic_states": [{"topic_name": topic, "partition_states": [
                {"partition_index": partition, "leader_epoch": -2, "delete_partition": True}]}]})
        assert sr["error_code"] == STALE_CONTROLLER_EPOCH, sr
        assert _partition_metadata(conn, topic, partition) == before
        assert _live_brokers(conn) == live_before
    assert partition_dir.is_dir(), "the refused StopReplica deleted the partition"
    log = broker.log_tail(1_000_000)
    for line in (f"Ignoring LeaderAndIsr request from controller {old_controller} since its controller epoch "
                 f"{old_epoch} is old",
                 f"Received UpdateMetadata request from an old controller {old_controller} with epoch {old_epoch}",
                 f"Ignoring StopReplica request from controller {old_controller} since its controller epoch "
                 f"{old_epoch} is old"):
        assert line in log, f"broker {broker_id} did not log: {line}"
    # the old controller's ZooKeeper write: guarded by the /controller_epoch version it won
    try:
        admin.update_leader_and_isr({tp: z.PartitionState(old_leader, state.leader_epoch + 10, (old_leader,),
                                                          old_epoch, 0, state.zk_version)}, old_epoch_zk_version)
    except ControllerMovedError:
        pass
    else:
        raise AssertionError("a write guarded by the old /controller_epoch version was not refused")
    assert admin.get_topic_partition_states([tp])[tp] == state
    assert admin.get_controller_epoch() == current_epoch


def assert_resigned_and_silent(log: str) -> None:
    """In an ``odradek server`` log: after the last ZooKeeper session expiry the controller
    resigned, and after that it neither won ``/controller`` nor sent a controller request."""
    assert "ZooKeeper session expired" in log, "no session expiry logged"
    after_expiry = log.rsplit("ZooKeeper session expired", 1)[1]
    assert "Resigned" in after_expiry, "the controller did not resign after its session expired"
    after_resigning = after_expiry.split("Resigned", 1)[1]
    assert "successfully elected as the controller" not in after_resigning
    assert not any(f"Sending {r} request" in after_resigning for r in ("LeaderAndIsr", "UpdateMetadata", "StopReplica")), \
        after_resigning[-3000:]

