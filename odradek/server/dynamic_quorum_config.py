"""Where a node's voter set comes from at start-up (KIP-853), as Kafka's ``KafkaRaftManager``
builds it from the configuration and the log directory.

* ``controller.quorum.voters`` set: the static voters (kraft.version 0), unless the log says more;
* only ``controller.quorum.bootstrap.servers``: the voter set is read from the latest snapshot
  (or the ``00000000000000000000-0000000000.checkpoint`` that ``storage format --standalone`` /
  ``--initial-controllers`` writes) and then the log's VotersRecords; a node formatted with
  ``--no-initial-controllers`` has none and starts as an observer, fetching from the bootstrap
  servers (Kafka gives them the ids -2, -3, ...) until it finds the leader.

A controller's own voter key is its node id and the ``directory.id`` of its metadata log
directory; its endpoints are its advertised controller listeners.
"""

from __future__ import annotations

import base64
import logging
import os
import uuid
from dataclasses import dataclass

from odradek.raft.dynamic_quorum import DynamicQuorum, snapshot_control
from odradek.raft.kraft_control_record_state_machine import KRaftControlRecordStateMachine
from odradek.raft.voter_set import VoterNode, VoterSet
from odradek.server.kafka_config import KafkaConfig, parse_listener
from odradek.server.meta_properties import META_PROPERTIES, read_meta_properties

log = logging.getLogger(__name__)


def bootstrap_id(index: int) -> int:
    """Kafka's id for the ``index``-th bootstrap server (-2, -3, ...)."""
    return -2 - index


@dataclass
class QuorumBootstrap:
    dynamic: DynamicQuorum
    bootstrap_endpoints: dict[int, tuple[str, int]]
    static_endpoints: dict[int, tuple[str, int]]

    @property
    def bootstrap_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self.bootstrap_endpoints, reverse=True))


def parse_directory_id(text: str | None) -> uuid.UUID | None:
    if not text:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        return None
    return uuid.UUID(bytes=raw) if len(raw) == 16 else None


def local_voter_node(config: KafkaConfig) -> VoterNode | None:
    """This controller as a voter: its id, metadata directory id, advertised controller
    listeners; None for a broker-only process."""
    if "controller" not in config.process_roles:
        return None
    props: dict[str, str] = {}
    path = os.path.join(config.metadata_log_dir, META_PROPERTIES)
    if os.path.exists(path):
        try:
            props = read_meta_properties(path)
        except OSError as e:
            log.warning("Cannot read %s: %s", path, e)
    names = config.controller_listener_names
    advertised = {
        lst.name: lst
        for lst in (parse_listener(x, "advertised.listeners") for x in config.get("advertised.listeners") or [])
    }
    endpoints = []
    for listener in config.controller_listeners:
        chosen = advertised.get(listener.name, listener)
        host = chosen.host or "localhost"
        if host in ("0.0.0.0", "::"):
            host = "localhost"
        endpoints.append((listener.name, host, chosen.port))
    endpoints.sort(key=lambda e: names.index(e[0]) if e[0] in names else len(names))
    return VoterNode(config.node_id, parse_directory_id(props.get("directory.id")), tuple(endpoints), 0, 1)


def quorum_bootstrap(config: KafkaConfig, metadata_partition_dir: str) -> QuorumBootstrap:
    listener = (config.controller_listener_names or ["CONTROLLER"])[0]
    static_endpoints = {v.node_id: (v.host, v.port) for v in config.controller_quorum_voters}
    static = VoterSet.static(static_endpoints, listener) if static_endpoints else None
    version, voters = snapshot_control(metadata_partition_dir)
    sm = KRaftControlRecordStateMachine(static, version, voters)
    bootstrap: dict[int, tuple[str, int]] = {}
    if not static_endpoints:
        for i, hp in enumerate(config.controller_quorum_bootstrap_servers):
            host, _, port = hp.rpartition(":")
            bootstrap[bootstrap_id(i)] = (host.strip("[]"), int(port))
    dynamic = DynamicQuorum(config.node_id, sm, local_voter_node(config), listener)
    return QuorumBootstrap(dynamic, bootstrap, static_endpoints)
