"""Where a node's voter set comes from at start-up (odradek/server/dynamic_quorum_config.py) and
what a snapshot of a dynamic quorum holds: the VotersRecord of the latest snapshot (or of the
bootstrap checkpoint ``storage format --standalone`` writes), the static controller.quorum.voters
otherwise, bootstrap servers as ids -2, -3, ...; snapshots carry the voter set in effect at their
end offset."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.raft import control_records as cr
from odradek.raft.dynamic_quorum import DynamicQuorum
from odradek.raft.kraft_control_record_state_machine import KRaftControlRecordStateMachine
from odradek.raft.raft_log import LogBatch
from odradek.raft.snapshot import SnapshotId, read_snapshot_header, snapshot_bytes, write_snapshot
from odradek.raft.voter_set import VoterNode, VoterSet
from odradek.server.dynamic_quorum_config import quorum_bootstrap, snapshot_control
from odradek.server.kafka_config import KafkaConfig


def _node(i: int) -> VoterNode:
    return VoterNode(i, uuid.UUID(int=i), (("CONTROLLER", "127.0.0.1", 9000 + i),), 0, 1)


def _write(directory: Path, sid: SnapshotId, voters: VoterSet) -> None:
    data = snapshot_bytes(
        [], METADATA_RECORD_SERDE, now_ms=1, last_contained_log_timestamp=1,
        control=[(cr.KRAFT_VERSION, {"version": 0, "k_raft_version": 1}),
                 (cr.KRAFT_VOTERS, voters.to_voters_record())],
    )
    write_snapshot(str(directory), sid, data)


def test_the_newest_snapshot_gives_the_voter_set(tmp_path: Path) -> None:
    assert snapshot_control(str(tmp_path)) == (0, None)
    _write(tmp_path, SnapshotId(0, 0), VoterSet.of([_node(1)]))  # the bootstrap checkpoint
    assert snapshot_control(str(tmp_path)) == (1, VoterSet.of([_node(1)]))
    _write(tmp_path, SnapshotId(10, 2), VoterSet.of([_node(1), _node(2)]))
    version, voters = snapshot_control(str(tmp_path))
    assert version == 1 and voters is not None and voters.ids == {1, 2}


def test_bootstrap_servers_only(tmp_path: Path) -> None:
    part = tmp_path / "__cluster_metadata-0"
    os.makedirs(part)
    config = KafkaConfig({
        "process.roles": "controller", "node.id": "2", "listeners": "CONTROLLER://127.0.0.1:9002",
        "controller.listener.names": "CONTROLLER", "log.dirs": str(tmp_path),
        "controller.quorum.bootstrap.servers": "127.0.0.1:9001,127.0.0.1:9003",
    })
    q = quorum_bootstrap(config, str(part))
    # --no-initial-controllers: no voter set yet, an observer fetching from the bootstrap servers.
    assert q.static_endpoints == {} and q.dynamic.voters.ids == frozenset()
    assert q.bootstrap_endpoints == {-2: ("127.0.0.1", 9001), -3: ("127.0.0.1", 9003)}
    assert q.dynamic.local_node is not None
    assert q.dynamic.local_node.endpoints == (("CONTROLLER", "127.0.0.1", 9002),)
    assert q.dynamic.is_dynamic
    # Formatted with --standalone: the checkpoint's VotersRecord.
    _write(part, SnapshotId(0, 0), VoterSet.of([_node(1)]))
    q = quorum_bootstrap(config, str(part))
    assert q.dynamic.voters.ids == {1} and q.dynamic.kraft_version == 1
    assert q.dynamic.endpoint(1) == ("127.0.0.1", 9001)


def test_static_voters(tmp_path: Path) -> None:
    config = KafkaConfig({
        "process.roles": "controller", "node.id": "1", "listeners": "CONTROLLER://127.0.0.1:9001",
        "controller.listener.names": "CONTROLLER", "log.dirs": str(tmp_path),
        "controller.quorum.voters": "1@127.0.0.1:9001,2@127.0.0.1:9002",
    })
    q = quorum_bootstrap(config, str(tmp_path))
    assert q.dynamic.voters.ids == {1, 2} and q.dynamic.kraft_version == 0
    assert not q.dynamic.is_dynamic and q.bootstrap_endpoints == {}
    assert q.dynamic.endpoint(2) == ("127.0.0.1", 9002)


def test_snapshot_holds_the_voter_set_at_its_end_offset(tmp_path: Path) -> None:
    sm = KRaftControlRecordStateMachine(None, 1, VoterSet.of([_node(1)]))
    dq = DynamicQuorum(1, sm, _node(1), "CONTROLLER")
    two = VoterSet.of([_node(1), _node(2)])
    sm.update([LogBatch(5, 1, (cr.ControlRecord(cr.KRAFT_VOTERS, two.to_voters_record()),), 0, True)])
    assert dq.snapshot_control_records(5)[1][1] == VoterSet.of([_node(1)]).to_voters_record()
    records = dq.snapshot_control_records(6)
    assert records[0] == (cr.KRAFT_VERSION, {"version": 0, "k_raft_version": 1})
    assert VoterSet.from_voters_record(records[1][1]) == two
    # Written into a snapshot file and read back as start-up reads it.
    data = snapshot_bytes([], METADATA_RECORD_SERDE, now_ms=1, last_contained_log_timestamp=1, control=records)
    path = write_snapshot(str(tmp_path), SnapshotId(6, 1), data)
    header = read_snapshot_header(path)
    assert [k for k, _ in header.control] == [cr.KRAFT_VERSION, cr.KRAFT_VOTERS]
    assert snapshot_control(str(tmp_path)) == (1, two)
