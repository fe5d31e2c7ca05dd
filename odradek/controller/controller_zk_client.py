"""What the controller's state machines need from ZooKeeper: the seam the I/O shell fills.

The state machines never talk to ZooKeeper themselves. They are handed an object with these
methods (Kafka's ``KafkaZkClient`` calls they use) and act on its answers; a fake implements it in
tests, ``odradek.zk`` (kazoo) in the running controller. Every write is fenced by the controller
epoch znode's zkVersion (Kafka wraps each write in a multi-op with a ``check`` on
``/controller_epoch``): a failed check raises :class:`ControllerMovedException`, which the state
machines let through (the controller then resigns). A partition state update is conditional on
``LeaderAndIsr.partition_epoch`` (the state znode's zkVersion); a mismatch is a BADVERSION, which
comes back in ``to_retry`` and the caller re-reads and retries.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from odradek.controller.controller_context import (
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    TopicPartition,
)


class ControllerMovedException(Exception):
    """The controller epoch znode moved on: another broker is controller now."""


class StateChangeFailedException(Exception):
    """A state change that cannot be made (Kafka's ``StateChangeFailedException``)."""


class ZkCode(enum.Enum):
    """The ZooKeeper result codes the controller tells apart (Kafka's ``KeeperException.Code``)."""

    OK = 0
    CONNECTION_LOSS = -4
    NO_NODE = -101
    BAD_VERSION = -103
    NODE_EXISTS = -110
    SESSION_EXPIRED = -112


@dataclass
class UpdateLeaderAndIsrResult:
    """Kafka's ``UpdateLeaderAndIsrResult``: per partition the written state (its
    ``partition_epoch`` the new zkVersion) or the error, and the partitions that hit BADVERSION."""

    finished: dict[TopicPartition, LeaderAndIsr | Exception] = field(default_factory=dict)
    to_retry: list[TopicPartition] = field(default_factory=list)


class ControllerZkClient(Protocol):
    def create_topic_partition_states(
        self,
        states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch],
        expected_controller_epoch_zk_version: int,
    ) -> dict[TopicPartition, ZkCode]:
        """Create ``/brokers/topics/<t>/partitions/<p>/state`` (and its parents) for each partition."""
        ...

    def get_topic_partition_states(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch | None | Exception]:
        """Each state znode's content, its zkVersion as ``partition_epoch``; None: no such znode."""
        ...

    def update_leader_and_isr(
        self,
        leader_and_isrs: Mapping[TopicPartition, LeaderAndIsr],
        controller_epoch: int,
        expected_controller_epoch_zk_version: int,
    ) -> UpdateLeaderAndIsrResult:
        """Write each state znode with ``setData(version=leader_and_isr.partition_epoch)``."""
        ...

    def unclean_leader_election_enable(self, topics: Collection[str]) -> dict[str, bool | Exception]:
        """Each topic's effective ``unclean.leader.election.enable`` (topic config over broker's)."""
        ...
