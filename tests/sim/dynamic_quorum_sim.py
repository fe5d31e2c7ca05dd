"""The Raft core with a dynamic voter set (KIP-853) under the seeded simulator of raft_sim.py.

Nodes 1..V are formatted with the same ``--initial-controllers`` (kraft.version 1, a VotersRecord
in the bootstrap checkpoint); the other nodes with ``--no-initial-controllers``: they start as
observers that know only the initial voters as bootstrap servers. During the fault phase an
admin sends AddRaftVoter and RemoveRaftVoter for random nodes to whoever leads, while the
network drops, delays, duplicates and partitions, nodes crash (losing what was not fsynced) and
pause, and the leader may remove itself.

The invariants are raft_sim's, with the voter set taken from the log: at most one leader per
epoch, log matching, leader completeness, state-machine safety, and every committed record
durable on a majority of the voter set the committing leader used (one change at a time makes
any two such majorities overlap); liveness once the faults heal.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from odradek.raft.dynamic_quorum import ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, DynamicQuorum
from odradek.raft.kraft_control_record_state_machine import KRaftControlRecordStateMachine
from odradek.raft.raft_core import RaftCore
from odradek.raft.raft_messages import RaftMessage
from odradek.raft.voter_set import VoterNode, VoterSet

from .raft_sim import CLUSTER_ID, TICK_MS, Faults, Node, Simulation, Violation

ADMIN = 0  # the node id the admin's requests come from (never a node of the simulation)
LISTENER = "CONTROLLER"


def voter_node(node_id: int) -> VoterNode:
    return VoterNode(node_id, uuid.UUID(int=0xD1 << 64 | node_id), ((LISTENER, "sim", 9000 + node_id),), 0, 1)


class DynamicQuorumSimulation(Simulation):
    def __init__(self, seed: int, initial_voters: int, joiners: int, faults: Faults) -> None:
        super().__init__(seed, voters=initial_voters, observers=joiners, faults=faults)
        self.initial = VoterSet.of(voter_node(i) for i in sorted(self.voter_ids))
        for node in self.nodes.values():
            node.voter = True  # any node may become a voter: the durability check uses the log
        self._committing_voters: frozenset[int] = frozenset()
        self.commit_voters: dict[int, frozenset[int]] = {}
        self.answers: dict[int, int] = {}  # correlation id -> error code of a voter change
        self._admin_correlation = 0
        self.changes_committed = 0

    def start(self, node: Node) -> None:
        node.incarnation += 1
        node.applied = []
        node.pending_ops = []
        node.fsync_scheduled = False
        formatted = node.node_id in self.voter_ids
        sm = KRaftControlRecordStateMachine(None, 1 if formatted else 0, self.initial if formatted else None)
        node.core = RaftCore(
            node.node_id,
            frozenset(),
            CLUSTER_ID,
            self.config,
            random.Random(self.rng.random()),
            node.local_ms(self.now),
            election=node.disk.election,
            batches=node.disk.batches(),
            max_fetch_batches=self.max_fetch_batches,
            pre_vote=self.pre_vote,
            dynamic=DynamicQuorum(node.node_id, sm, voter_node(node.node_id), LISTENER),
            bootstrap_ids=tuple(sorted(self.voter_ids)),
        )
        self.log(f"start node {node.node_id} #{node.incarnation} as {node.core.state!r} voters {sorted(node.core.voters)}")
        self.on_start(node)
        self.drain(node)
        incarnation = node.incarnation
        self.at(self.now + self.rng.randrange(1, TICK_MS), lambda: self.tick(node, incarnation))

    def _partition_someone(self) -> None:
        """As raft_sim's, for any number of voters (one, with a standalone start)."""
        ids = sorted(self.nodes)
        leader = self._current_leader()
        if leader is not None and self.rng.random() < 0.5:
            others = [i for i in ids if i != leader]
            size = self.rng.randrange(0, max(1, len(ids) // 2))
            side = frozenset([leader, *self.rng.sample(others, min(size, len(others)))])
        else:
            side = frozenset(self.rng.sample(ids, self.rng.randrange(1, len(ids))))
        self._set_partition(side, frozenset(ids) - side)

    # -- the admin --------------------------------------------------------------------------

    def schedule_faults(self) -> None:
        super().schedule_faults()
        t = 0
        while True:
            t += self.rng.randrange(100, 500)
            if t >= self.faults.fault_phase_ms:
                break
            self.at(t, self._change_voters)

    def _change_voters(self) -> None:
        leader_id = self._current_leader()
        if leader_id is None:
            return
        node = self.nodes[leader_id]
        core = node.core
        assert core is not None
        voters = sorted(core.voters)
        others = sorted(set(self.nodes) - set(voters))
        if others and (len(voters) < 2 or self.rng.random() < 0.5):
            target = self.rng.choice(others)
            n = voter_node(target)
            api, data = ADD_RAFT_VOTER, {
                "cluster_id": CLUSTER_ID,
                "timeout_ms": 2000,
                "voter_id": target,
                "voter_directory_id": n.directory_id,
                "listeners": [{"name": LISTENER, "host": "sim", "port": 9000 + target}],
            }
        else:
            target = self.rng.choice(voters)
            api, data = REMOVE_RAFT_VOTER, {
                "cluster_id": CLUSTER_ID,
                "voter_id": target,
                "voter_directory_id": voter_node(target).directory_id,
            }
        self._admin_correlation += 1
        name = "add" if api == ADD_RAFT_VOTER else "remove"
        self.log(f"admin: {name} voter {target} at leader {leader_id} (voters {voters})")
        core.handle(RaftMessage(ADMIN, leader_id, api, self._admin_correlation, data), node.local_ms(self.now))
        self.drain(node)

    def send(self, node: Node, message: RaftMessage) -> None:
        if message.destination == ADMIN:
            code = int(message.data["error_code"])
            self.answers[message.correlation_id] = code
            self.changes_committed += code == 0
            self.log(f"admin: answer #{message.correlation_id} from {node.node_id}: error {code} {message.data.get('error_message')}")
            return
        super().send(node, message)

    # -- invariants with a voter set from the log -------------------------------------------

    def apply_committed(self, node: Node, batch: Any) -> None:
        core = node.core
        assert core is not None
        self._committing_voters = core.voters
        super().apply_committed(node, batch)

    def check_durable_on_majority(self, offset: int, entry: tuple[int, Any]) -> None:
        voters = self.commit_voters.setdefault(offset, self._committing_voters)
        holders = [
            i
            for i in voters
            if offset < len(self.nodes[i].disk.entries)
            and (self.nodes[i].disk.entries[offset].epoch, self.nodes[i].disk.entries[offset].record) == entry
        ]
        if len(holders) < len(voters) // 2 + 1:
            raise Violation(
                f"committed offset {offset} {entry} is durable only on {holders} of voters {sorted(voters)}"
            )


def run_dynamic_schedule(seed: int, light: bool = False) -> DynamicQuorumSimulation:
    """One schedule: 1-3 initial voters, 1-3 joiners, faults drawn from the seed (``light``:
    rare crashes and partitions, so that most voter changes get through)."""
    shape = random.Random(seed ^ 0xD1AA)
    faults = Faults(
        drop=shape.choice((0.0, 0.02, 0.1)),
        duplicate=shape.choice((0.0, 0.05)),
        max_delay_ms=shape.choice((5, 40, 150)),
    )
    if light:
        faults = Faults(drop=0.01, duplicate=0.02, max_delay_ms=20, crash_every_ms=5000, partition_every_ms=5000)
    sim = DynamicQuorumSimulation(
        seed,
        initial_voters=shape.choice((1, 3, 3)),
        joiners=shape.randrange(1, 4),
        faults=faults,
    )
    sim.run()
    return sim
