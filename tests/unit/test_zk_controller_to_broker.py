"""The two halves of ZooKeeper mode together, in one process: KafkaController (over the fake
ZooKeeper) and an Odradek broker (KafkaApis + ZkControllerApis on a real ReplicaManager), every
request encoded and decoded with the generated protocol. The controller makes the broker leader and
follower; a controller deposed by a newer one gets STALE_CONTROLLER_EPOCH for whatever it still
sends, and its ZooKeeper writes are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from odradek.controller import controller_event_manager as ev
from odradek.controller.controller_channel_manager import API_BY_KEY
from odradek.protocol.errors import Errors
from tests.unit.kafka_controller_fakes import FakeControllerZk, Harness
from tests.unit.test_zk_broker_apis import BROKER_EPOCH, ME, Broker


def deliver(h: Harness, broker: Broker) -> list[tuple[int, dict[str, Any]]]:
    """Send what the controller queued for broker ME through the broker; answers to the callbacks."""
    out = []
    for s in h.channel.take():
        if s.broker_id != ME:
            continue
        resp = broker.send(API_BY_KEY[s.api_key], s.version, s.body)
        out.append((s.api_key, resp))
        s.callback(resp)
    h.run()
    return out


def test_controller_drives_an_odradek_broker_and_a_deposed_controller_is_refused(tmp_path: Path) -> None:
    zk = FakeControllerZk()
    zk.add_broker(ME, epoch=BROKER_EPOCH)
    zk.add_broker(2)
    zk.add_topic("t", {0: [1, 2], 1: [2, 1]}, with_states=False)
    broker = Broker(tmp_path)
    a = Harness(zk, 5)
    a.start()
    answers = deliver(a, broker)
    assert [k for k, _ in answers][:1] == [6]  # UpdateMetadata first, then LeaderAndIsr
    lisr = [r for k, r in answers if k == 4]
    assert lisr and all(pe["error_code"] == 0 for r in lisr for t in r["topics"] for pe in t["partition_errors"])
    assert all(r["error_code"] == 0 for _, r in answers)
    md = broker.metadata("t")
    leaders = {p["partition_index"]: p["leader_id"] for p in md["topics"][0]["partitions"]}
    assert leaders == {0: 1, 1: 2}
    broker.worker.run_all()  # the logs are created on the worker
    p0, p1 = broker.rm.partitions[("t", 0)], broker.rm.partitions[("t", 1)]
    assert p0.is_leader and not p1.is_leader and p0.controller_epoch == 1
    assert p0.topic_id == zk.topics["t"][0] and p0.partition_epoch == zk.leader_and_isr(("t", 0)).partition_epoch

    # a second controller takes over (epoch 2) and tells the broker
    zk.controller = None
    b = Harness(zk, 6)
    b.start()
    assert b.controller.epoch == 2
    assert all(r["error_code"] == 0 for _, r in deliver(b, broker))
    # the deposed one still thinks it leads: what it sends is refused, what it writes is refused
    a.controller.send_update_metadata_request({ME}, {("t", 0)})
    (api_key, resp), = deliver(a, broker)
    assert api_key == 6 and resp["error_code"] == Errors.STALE_CONTROLLER_EPOCH
    states = dict(zk.states)
    del zk.brokers[2]
    a.put(ev.BrokerChange())
    a.run()
    assert zk.states == states and not a.controller.is_active
