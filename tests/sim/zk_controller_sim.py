"""A deterministic simulation of the ZooKeeper-mode controller core: the partition and replica state
machines and the request batch, over an in-memory ZooKeeper (the partition state znodes, written
with zkVersion-conditional updates) and simulated brokers that accept LeaderAndIsr by leader epoch.

Each schedule (one seed) starts a few brokers and topics, then runs seeded steps: a broker dies
(Kafka's onBrokerFailure / onReplicasBecomeOffline), comes back (onBrokerStartup), shuts down in a
controlled way (ControlledShutdown strategy, then dies), a partition leader shrinks or expands its
ISR (its own conditional write, sometimes racing the controller's: BADVERSION), a preferred
election runs. After every step the invariants are checked:

- one leader per partition per leader epoch, over every write ever made;
- leader epochs of a partition never go down, and go up whenever the leader changes;
- a partition's leader is -1 or a live broker, and is in the ISR; the ISR is never empty;
- the controller's cached leadership equals ZooKeeper's;
- every live replica was told the partition's current leader epoch (and never accepted a lower one).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.controller.controller_broker_request_batch import ControllerBrokerRequestBatch
from odradek.controller.controller_context import (
    NO_LEADER,
    Broker,
    ControllerContext,
    EndPoint,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionAndReplica,
    PartitionState,
    ReplicaAssignment,
    ReplicaState,
    TopicPartition,
)
from odradek.controller.partition_state_machine import (
    ControlledShutdownPartitionLeaderElectionStrategy,
    OfflinePartitionLeaderElectionStrategy,
    PartitionStateMachine,
    PreferredReplicaPartitionLeaderElectionStrategy,
)
from odradek.controller.replica_state_machine import ReplicaStateMachine
from tests.unit.zk_controller_fakes import FakeZk

CONTROLLER_EPOCH = 3


class Violation(AssertionError):
    pass


class SimZk(FakeZk):
    """The unit tests' in-memory partition state znodes, fenced at this controller's epoch, with
    what the invariants read: every write's (tp, leader, leader epoch), the BADVERSION count."""

    def __init__(self) -> None:
        super().__init__(controller_epoch_zk_version=CONTROLLER_EPOCH - 1)

    @property
    def history(self) -> list[tuple[TopicPartition, int, int]]:
        return [(tp, lai.leader, lai.leader_epoch) for tp, lai in self.writes]

    @property
    def bad_versions(self) -> int:
        return self.bad_version_attempts

    def leader_write(self, tp: TopicPartition, isr: tuple[int, ...]) -> None:
        """The partition leader changes the ISR (same leader and epoch); the znode version goes up."""
        info, _ = self.states[tp]
        lai = info.leader_and_isr
        self.external_write(tp, LeaderAndIsr(lai.leader, isr, lai.leader_epoch, lai.leader_recovery_state),
                            info.controller_epoch)


@dataclass
class SimBroker:
    id: int
    alive: bool = True
    epoch: int = 0
    known: dict[TopicPartition, int] = field(default_factory=dict)  # leader epoch accepted per partition


class SimSender:
    """Delivers each request at once to the simulated broker (if it is alive and the broker epoch
    matches), which accepts a LeaderAndIsr partition state only with a leader epoch >= its own."""

    def __init__(self, sim: ZkControllerSimulation) -> None:
        self.sim = sim

    def send_request(self, broker_id: int, api_key: int, api_version: int, body: dict[str, Any],
                     callback: Callable[[dict[str, Any]], None]) -> None:
        b = self.sim.brokers[broker_id]
        if not b.alive or body["broker_epoch"] != b.epoch:
            return
        if api_key == 4:
            for ts in body["topic_states"]:
                for ps in ts["partition_states"]:
                    tp = (ts["topic_name"], ps["partition_index"])
                    if ps["leader_epoch"] < b.known.get(tp, -1):
                        continue  # stale: Kafka's STALE_CONTROLLER... per partition FENCED_LEADER_EPOCH
                    b.known[tp] = ps["leader_epoch"]


class NoResponses:
    def leader_and_isr_response(self, broker_id: int, response: dict[str, Any]) -> None: ...

    def update_metadata_response(self, broker_id: int, response: dict[str, Any]) -> None: ...

    def stop_replica_response(self, broker_id: int, response: dict[str, Any], d: set[TopicPartition]) -> None: ...


class ZkControllerSimulation:
    def __init__(self, seed: int, n_brokers: int = 4, n_partitions: int = 6, rf: int = 3) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.brokers = {i: SimBroker(i, epoch=100 + i) for i in range(1, n_brokers + 1)}
        self.next_epoch = 1000
        self.zk = SimZk()
        ctx = ControllerContext(epoch=CONTROLLER_EPOCH, epoch_zk_version=CONTROLLER_EPOCH - 1)
        self.ctx = ctx
        ctx.set_live_brokers({self._broker(b): b.epoch for b in self.brokers.values()})
        ctx.set_all_topics({"t"})
        ids = sorted(self.brokers)
        for p in range(n_partitions):
            replicas = self.rng.sample(ids, rf)
            ctx.update_partition_full_replica_assignment(("t", p), ReplicaAssignment.of(replicas))
        self.batch = ControllerBrokerRequestBatch(1, ctx, SimSender(self), NoResponses())
        self.psm = PartitionStateMachine(1, ctx, self.zk, self.batch)
        self.rsm = ReplicaStateMachine(1, ctx, self.zk, self.batch)
        self.steps: list[str] = []
        parts = sorted(ctx.all_partitions())
        self.psm.handle_state_changes(parts, PartitionState.NewPartition)
        replicas_ = sorted(ctx.replicas_for_partition(parts), key=_order)
        self.rsm.handle_state_changes(replicas_, ReplicaState.NewReplica)
        self.psm.handle_state_changes(parts, PartitionState.OnlinePartition, OfflinePartitionLeaderElectionStrategy())
        self.rsm.handle_state_changes(replicas_, ReplicaState.OnlineReplica)
        self.check()

    @staticmethod
    def _broker(b: SimBroker) -> Broker:
        return Broker(b.id, (EndPoint("127.0.0.1", 9000 + b.id, "PLAINTEXT"),))

    # --- Kafka's controller flows -------------------------------------------------------------

    def broker_failure(self, bid: int) -> None:
        ctx = self.ctx
        self.brokers[bid].alive = False
        self.brokers[bid].known.clear()
        ctx.remove_live_brokers([bid])
        ctx.shutting_down_broker_ids.discard(bid)
        offline_replicas = sorted(ctx.replicas_on_brokers({bid}), key=_order)
        self.psm.handle_state_changes(sorted(ctx.partitions_with_offline_leader()), PartitionState.OfflinePartition)
        self.psm.trigger_online_partition_state_change()
        self.rsm.handle_state_changes(offline_replicas, ReplicaState.OfflineReplica)

    def broker_startup(self, bid: int) -> None:
        b = self.brokers[bid]
        b.alive = True
        self.next_epoch += 1
        b.epoch = self.next_epoch  # a new registration znode: a new czxid
        self.ctx.add_live_brokers({self._broker(b): b.epoch})
        replicas = sorted(self.ctx.replicas_on_brokers({bid}), key=_order)
        self.rsm.handle_state_changes(replicas, ReplicaState.OnlineReplica)
        self.psm.trigger_online_partition_state_change()

    def controlled_shutdown(self, bid: int) -> None:
        ctx = self.ctx
        ctx.shutting_down_broker_ids.add(bid)
        led = sorted(ctx.partition_leaders_on_broker(bid))
        self.psm.handle_state_changes(led, PartitionState.OnlinePartition,
                                      ControlledShutdownPartitionLeaderElectionStrategy())
        followed = sorted(
            (PartitionAndReplica(tp, bid) for tp in ctx.partitions_on_broker(bid)
             if (info := ctx.partition_leadership_info(tp)) is not None
             and info.leader_and_isr.leader != bid and len(ctx.partition_replica_assignment(tp)) > 1),
            key=_order,
        )
        self.rsm.handle_state_changes(followed, ReplicaState.OfflineReplica)
        self.broker_failure(bid)

    def preferred_election(self) -> None:
        ctx = self.ctx
        candidates = sorted(
            tp for tp, info in ctx.partitions_leadership_info.items()
            if info.leader_and_isr.leader != ctx.partition_replica_assignment(tp)[0]
        )
        if candidates:
            self.psm.handle_state_changes(candidates, PartitionState.OnlinePartition,
                                          PreferredReplicaPartitionLeaderElectionStrategy())

    def leader_isr_change(self, tp: TopicPartition, race: bool, add: int | None = None) -> None:
        """The leader drops a follower or takes back a live, caught-up replica (``add``)."""
        info, _ = self.zk.states[tp]
        lai = info.leader_and_isr
        if lai.leader == NO_LEADER or not self.brokers[lai.leader].alive:
            return
        assignment = self.ctx.partition_replica_assignment(tp)
        out = [r for r in assignment if r not in lai.isr and self.brokers[r].alive]
        if add is not None:
            if add not in out:
                return
            new_isr = (*lai.isr, add)
        elif out and self.rng.random() < 0.6:
            new_isr = (*lai.isr, self.rng.choice(out))
        elif len(lai.isr) > 1:
            drop = self.rng.choice([r for r in lai.isr if r != lai.leader])
            new_isr = tuple(r for r in lai.isr if r != drop)
        else:
            return

        def write() -> None:
            self.zk.leader_write(tp, new_isr)
            # in Kafka the controller learns it from /isr_change_notification
            cur, v = self.zk.states[tp]
            self.ctx.put_partition_leadership_info(tp, LeaderIsrAndControllerEpoch(
                cur.leader_and_isr.with_partition_epoch(v), cur.controller_epoch))

        if race:
            self.zk.before_update = lambda _zk: write()  # lands between the controller's read and its write
        else:
            write()

    def step(self) -> None:
        rng = self.rng
        alive = sorted(b for b, s in self.brokers.items() if s.alive)
        dead = sorted(b for b, s in self.brokers.items() if not s.alive)
        roll = rng.random()
        if roll < 0.15 and len(alive) > 1:
            bid = rng.choice(alive)
            self.steps.append(f"broker {bid} dies")
            self.broker_failure(bid)
        elif roll < 0.45 and dead:
            bid = rng.choice(dead)
            self.steps.append(f"broker {bid} starts")
            self.broker_startup(bid)
            for tp in sorted(self.ctx.partitions_on_broker(bid)):
                if rng.random() < 0.7:  # its followers catch up and the leaders take them back
                    self.leader_isr_change(tp, race=False, add=bid)
        elif roll < 0.52 and len(alive) > 1:
            bid = rng.choice(alive)
            self.steps.append(f"broker {bid} controlled shutdown")
            self.controlled_shutdown(bid)
        elif roll < 0.62:
            self.steps.append("preferred election")
            self.preferred_election()
        else:
            tp = rng.choice(sorted(self.zk.states))
            race = rng.random() < 0.5
            self.steps.append(f"leader ISR change of {tp} race={race}")
            self.leader_isr_change(tp, race)
            if race and len(alive) > 1 and rng.random() < 0.5:  # something for the race to race with
                bid = rng.choice(alive)
                self.steps.append(f"broker {bid} dies")
                self.broker_failure(bid)
            self.zk.before_update = None

    # --- invariants ---------------------------------------------------------------------------

    def fail(self, msg: str) -> None:
        raise Violation(f"seed {self.seed}: {msg}; steps: {self.steps}")

    def check(self) -> None:
        leaders: dict[tuple[TopicPartition, int], int] = {}
        last: dict[TopicPartition, tuple[int, int]] = {}
        for tp, leader, epoch in self.zk.history:
            prev = leaders.setdefault((tp, epoch), leader)
            if prev != leader:
                self.fail(f"{tp} epoch {epoch} had leaders {prev} and {leader}")
            if tp in last:
                l0, e0 = last[tp]
                if epoch < e0 or (leader != l0 and epoch <= e0):
                    self.fail(f"{tp} leader epoch went from {e0} (leader {l0}) to {epoch} (leader {leader})")
            last[tp] = (leader, epoch)
        for tp, (info, version) in self.zk.states.items():
            lai = info.leader_and_isr
            if not lai.isr:
                self.fail(f"{tp} has an empty ISR")
            if lai.leader != NO_LEADER:
                if lai.leader not in lai.isr:
                    self.fail(f"{tp} leader {lai.leader} not in ISR {lai.isr}")
                if not self.brokers[lai.leader].alive:
                    self.fail(f"{tp} led by dead broker {lai.leader}")
            cached = self.ctx.partition_leadership_info(tp)
            if cached is None or cached.leader_and_isr != lai.with_partition_epoch(version):
                self.fail(f"{tp} cached {cached} != ZooKeeper {lai} v{version}")
            for r in self.ctx.partition_replica_assignment(tp):
                b = self.brokers[r]
                if b.alive and lai.leader != NO_LEADER and b.known.get(tp) != lai.leader_epoch:
                    self.fail(f"live replica {r} of {tp} knows epoch {b.known.get(tp)}, ZooKeeper {lai.leader_epoch}")


def _order(r: PartitionAndReplica) -> tuple[TopicPartition, int]:
    return (r.topic_partition, r.replica)


def run_schedule(seed: int, steps: int = 40) -> ZkControllerSimulation:
    sim = ZkControllerSimulation(seed)
    for _ in range(steps):
        sim.step()
        sim.check()
    return sim
