"""The ZooKeeper-mode KafkaController against a real ZooKeeper (Debian's package): two controllers
(two ZooKeeper sessions, one process) race for ``/controller`` — exactly one wins, creates the
partition state znodes with its epoch; when its session ends the other takes over with epoch + 1;
a write fenced with the old controller's epoch zkVersion is refused and lands nowhere; a controller
whose session expires resigns and is elected again in its new session (epoch + 1).

The brokers here are only registrations (their endpoints answer nothing): the channel manager keeps
retrying its requests to them, which is what it must do."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from odradek.controller.controller_context import LeaderAndIsr
from odradek.controller.controller_zk_client import ControllerMovedException
from odradek.controller.kafka_controller import KafkaControllerConfig
from odradek.controller.kafka_controller_driver import ZkControllerRuntime
from odradek.controller.kafka_controller_zk import KafkaControllerZkClient
from odradek.controller.kafka_zk_adapter import KafkaControllerZkAdapter
from odradek.controller.zk_producer_ids import AllocateProducerIds
from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import KafkaZkClient

from .test_zk_client import expire_session
from .zookeeper_support import ZooKeeperServer, _free_port, wait_until, zk_client

pytestmark = pytest.mark.timeout(180)


def seed_cluster(connect: str) -> dict[int, KafkaZkClient]:
    """Two registered brokers, each in its own session (endpoints that answer nothing), and a topic
    with no partition state yet."""
    out = {}
    for b in (1, 2):
        out[b] = zk_client(connect)
        out[b].register_broker(z.BrokerInfo.create(b, [("PLAINTEXT", "PLAINTEXT", "127.0.0.1", _free_port())],
                                                   timestamp_ms=int(time.time() * 1000)))
    out[1].create_topic_assignment("t", "AAAAAAAAAAAAAAAAAAAAAQ", {0: z.ReplicaAssignment((1, 2)),
                                                                   1: z.ReplicaAssignment((2, 1))})
    return out


def test_two_controllers_race_one_wins_and_the_other_takes_over_with_epoch_plus_one(connect: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        sessions = seed_cluster(connect)
        brokers = sessions[2]
        clients = {i: zk_client(connect) for i in (1, 2)}
        runtimes = {i: ZkControllerRuntime(KafkaControllerConfig(broker_id=i, auto_leader_rebalance_enable=False),
                                           clients[i], loop) for i in (1, 2)}
        _: KafkaControllerZkClient = runtimes[1].adapter  # the adapter is a full KafkaControllerZkClient
        closed: set[int] = set()
        try:
            for r in runtimes.values():
                r.start()
            await wait_until(lambda: any(r.controller.is_active for r in runtimes.values()), "an election")
            await wait_until(lambda: all(r.controller.active_controller_id != -1 for r in runtimes.values()),
                             "both to know the controller")
            active = [i for i, r in runtimes.items() if r.controller.is_active]
            assert len(active) == 1
            winner = active[0]
            loser = 3 - winner
            assert runtimes[loser].controller.active_controller_id == winner
            assert brokers.get_controller_id() == winner
            epoch, epoch_version = brokers.get_controller_epoch() or (-1, -1)
            assert epoch == 1
            await wait_until(lambda: len(brokers.get_topic_partition_states([("t", 0), ("t", 1)])) == 2,
                             "partition states created")
            states = brokers.get_topic_partition_states([("t", 0), ("t", 1)])
            assert states[("t", 0)].leader == 1 and states[("t", 1)].leader == 2
            assert {s.controller_epoch for s in states.values()} == {1}
            ctx = runtimes[winner].controller.context
            assert ctx.live_or_shutting_down_broker_ids == {1, 2}
            assert str(ctx.topic_ids["t"]) == str(uuid.UUID(int=1))

            # the winner's session ends: the loser's watch fires and it takes over with epoch + 1
            await runtimes[winner].close()
            clients[winner].close()
            closed.add(winner)
            await wait_until(lambda: runtimes[loser].controller.is_active, "the other controller to take over")
            assert brokers.get_controller_id() == loser
            assert (brokers.get_controller_epoch() or (0, 0))[0] == 2
            assert runtimes[loser].controller.epoch == 2

            # a write fenced with the old controller's epoch zkVersion is refused and lands nowhere
            old = KafkaControllerZkAdapter(brokers)
            before = brokers.get_topic_partition_states([("t", 0)])[("t", 0)]
            with pytest.raises(ControllerMovedException):
                old.update_leader_and_isr({("t", 0): LeaderAndIsr(2, (2,), before.leader_epoch + 1, 0,
                                                                  before.zk_version)}, 1, epoch_version)
            assert brokers.get_topic_partition_states([("t", 0)])[("t", 0)] == before

            # broker 1 dies (its session ends): the new controller elects the other replica of t-0
            t0 = brokers.get_topic_partition_states([("t", 0)])[("t", 0)]
            assert t0.leader == 1 and t0.isr == (1, 2)
            sessions.pop(1).close()

            def moved() -> bool:
                s = brokers.get_topic_partition_states([("t", 0)]).get(("t", 0))
                return s is not None and s.leader == 2 and s.leader_epoch > t0.leader_epoch

            await wait_until(moved, "t-0's leadership to move to broker 2")
            after = brokers.get_topic_partition_states([("t", 0)])[("t", 0)]
            assert after.controller_epoch == 2 and after.isr == (2,) and after.leader_epoch == t0.leader_epoch + 1
        finally:
            for i, r in runtimes.items():
                if i not in closed:
                    await r.close()
                    clients[i].close()
            for sess in sessions.values():
                sess.close()

    asyncio.run(main())


def test_controller_session_expiry_resigns_and_reelects(zookeeper: ZooKeeperServer, connect: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        c = zk_client(connect)
        r = ZkControllerRuntime(KafkaControllerConfig(broker_id=1, auto_leader_rebalance_enable=False), c, loop)
        seen: list[str] = []
        orig = r.controller.on_controller_resignation

        def resigned() -> None:
            seen.append("resigned")
            orig()

        r.controller.on_controller_resignation = resigned  # type: ignore[method-assign]
        try:
            r.start()
            await wait_until(lambda: r.controller.is_active, "the election")
            assert r.controller.epoch == 1
            await loop.run_in_executor(None, expire_session, zookeeper, c)
            await wait_until(lambda: seen == ["resigned"] and r.controller.is_active and r.controller.epoch == 2,
                             "resignation, then re-election in the new session", timeout=60)
            assert c.get_controller_id() == 1 and (c.get_controller_epoch() or (0, 0))[0] == 2
        finally:
            await r.close()
            c.close()

    asyncio.run(main())


def test_watches_drive_topic_creation_and_reassignment_through_the_znode(connect: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        sessions = seed_cluster(connect)
        admin = zk_client(connect)
        c = zk_client(connect)
        r = ZkControllerRuntime(KafkaControllerConfig(broker_id=1, auto_leader_rebalance_enable=False), c, loop)
        try:
            r.start()
            await wait_until(lambda: r.controller.is_active, "the election")
            # a new topic znode: TopicChange -> partition states created by the controller
            admin.create_topic_assignment("u", None, {0: z.ReplicaAssignment((2, 1))})
            await wait_until(lambda: ("u", 0) in admin.get_topic_partition_states([("u", 0)]), "u-0's state znode")
            u0 = admin.get_topic_partition_states([("u", 0)])[("u", 0)]
            assert u0.leader == 2 and u0.isr == (2, 1) and u0.controller_epoch == 1
            # /admin/reassign_partitions: t-0 from [1, 2] to [2] (already in the ISR: completes at once)
            await wait_until(lambda: ("t", 0) in admin.get_topic_partition_states([("t", 0)]), "t-0's state")
            admin.create_partition_reassignment([("t", 0, [2])])
            await wait_until(lambda: not admin.exists(z.REASSIGN_PARTITIONS_PATH), "the reassignment znode to go")
            ta = admin.get_replica_assignment_and_topic_ids(["t"])["t"]
            assert ta.partitions[0].replicas == (2,) and not ta.partitions[0].adding_replicas
            t0 = admin.get_topic_partition_states([("t", 0)])[("t", 0)]
            assert t0.leader == 2 and t0.isr == (2,)
            # the watch is re-armed: a second reassignment is seen too
            admin.create_partition_reassignment([("t", 1, [2])])
            await wait_until(lambda: not admin.exists(z.REASSIGN_PARTITIONS_PATH), "the second reassignment")
            assert admin.get_replica_assignment_and_topic_ids(["t"])["t"].partitions[1].replicas == (2,)
            # broker 2 dies: u-0 moves to broker 1; broker 2 returns and (as its leader would
            # after it caught up) rejoins the ISR, announced by /isr_change_notification; then
            # /admin/preferred_replica_election moves u-0 back to broker 2, its preferred replica
            sessions.pop(2).close()
            await wait_until(lambda: admin.get_topic_partition_states([("u", 0)])[("u", 0)].leader == 1,
                             "u-0 to move to broker 1")
            sessions[2] = zk_client(connect)
            sessions[2].register_broker(z.BrokerInfo.create(2, [("PLAINTEXT", "PLAINTEXT", "127.0.0.1", _free_port())],
                                                            timestamp_ms=int(time.time() * 1000)))
            await wait_until(lambda: 2 in r.controller.context.live_broker_ids, "broker 2 back")
            u0 = admin.get_topic_partition_states([("u", 0)])[("u", 0)]
            res = admin.update_leader_and_isr({("u", 0): z.PartitionState(
                u0.leader, u0.leader_epoch, (1, 2), u0.controller_epoch, 0, u0.zk_version)}, z.MATCH_ANY_VERSION)
            assert not res.partitions_to_retry
            admin.propagate_isr_changes([("u", 0)])
            def isr_seen() -> bool:
                info = r.controller.context.partition_leadership_info(("u", 0))
                return info is not None and info.leader_and_isr.isr == (1, 2)

            await wait_until(isr_seen, "the ISR change to reach the controller")
            admin.create_preferred_replica_election([("u", 0)])
            await wait_until(lambda: admin.get_topic_partition_states([("u", 0)])[("u", 0)].leader == 2,
                             "the preferred replica election")
            await wait_until(lambda: not admin.exists(z.PREFERRED_REPLICA_ELECTION_PATH), "the election znode to go")
            assert admin.get_all_isr_change_notifications() == []
            # AllocateProducerIds: consecutive blocks through /latest_producer_id_block
            got: list[dict[str, object]] = []
            epoch1 = r.controller.context.broker_epoch(1)
            for _ in range(2):
                r.events.put(AllocateProducerIds(broker_id=1, broker_epoch=epoch1, callback=got.append))
            await wait_until(lambda: len(got) == 2, "two producer id blocks")
            assert [(g["error_code"], g["producer_id_start"]) for g in got] == [(0, 0), (0, 1000)]
            block = admin.get_data(z.PRODUCER_ID_BLOCK_PATH)
            assert block is not None and block[0] == b'{"version":1,"broker":1,"block_start":"1000","block_end":"1999"}'
        finally:
            await r.close()
            c.close()
            admin.close()
            for s in sessions.values():
                s.close()

    asyncio.run(main())
