"""What :class:`~odradek.controller.kafka_controller.KafkaController` needs from ZooKeeper beyond the
state machines' :class:`~odradek.controller.controller_zk_client.ControllerZkClient`: election, the
failover reads, the admin znodes and the watches. A fake implements it in the unit tests;
``odradek.zk`` (KafkaZkClient over kazoo) through an adapter in the running controller.

Watches are registered with a ``put`` that queues a ControllerEvent: the client knows which znode
becomes which event (Kafka's ``*Handler`` classes: ``/brokers/ids`` children -> BrokerChange,
``/brokers/topics`` children -> TopicChange, ``/admin/delete_topics`` children -> TopicDeletion,
``/isr_change_notification`` children -> IsrChangeNotification, ``/log_dir_event_notification``
children -> LogDirEventNotification, ``/admin/preferred_replica_election`` created ->
ReplicaLeaderElection, ``/admin/reassign_partitions`` created -> ZkPartitionReassignment,
``/brokers/topics/<t>`` changed -> PartitionModifications, ``/controller`` created/changed ->
ControllerChange and deleted -> Reelect).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Protocol

from odradek.controller.controller_context import Broker, ReplicaAssignment, TopicPartition
from odradek.controller.controller_event_manager import ControllerEvent
from odradek.controller.controller_zk_client import ControllerZkClient

EventSink = Callable[[ControllerEvent], None]


class KafkaControllerZkClient(ControllerZkClient, Protocol):
    # --- election ---------------------------------------------------------------------------
    def register_controller_and_increment_controller_epoch(self, controller_id: int) -> tuple[int, int]:
        """Create the ephemeral ``/controller`` and bump ``/controller_epoch`` in one multi;
        ``(epoch, epoch zkVersion)``; ControllerMovedException if another broker won."""
        ...

    def get_controller_id(self) -> int | None: ...

    def delete_controller(self, expected_epoch_zk_version: int) -> None:
        """Delete ``/controller`` (epoch-checked; Kafka's triggerControllerMove)."""
        ...

    def watch_controller(self, put: EventSink) -> bool:
        """(Re)register the ``/controller`` watch; True if the znode exists."""
        ...

    # --- watches of the active controller ----------------------------------------------------
    def register_controller_watches(self, put: EventSink) -> None: ...

    def unregister_controller_watches(self) -> None: ...

    def watch_partition_modifications(self, topics: Collection[str], put: EventSink) -> None: ...

    def unwatch_partition_modifications(self, topics: Collection[str]) -> None: ...

    # --- reads -------------------------------------------------------------------------------
    def get_all_broker_and_epochs(self) -> dict[Broker, int]: ...

    def get_broker(self, broker_id: int) -> Broker | None: ...

    def get_all_topics(self) -> set[str]: ...

    def get_replica_assignment_and_topic_ids(
        self, topics: Collection[str]
    ) -> dict[str, tuple[uuid.UUID | None, dict[TopicPartition, ReplicaAssignment]]]: ...

    def get_topic_deletions(self) -> list[str]: ...

    def get_partition_reassignment(self) -> dict[TopicPartition, list[int]]: ...

    def get_preferred_replica_election(self) -> set[TopicPartition]: ...

    def get_all_isr_change_notifications(self) -> list[str]: ...

    def get_partitions_from_isr_change_notifications(self, seqs: Collection[str]) -> set[TopicPartition]: ...

    def get_all_log_dir_event_notifications(self) -> list[str]: ...

    def get_broker_ids_from_log_dir_events(self, seqs: Collection[str]) -> list[int]: ...

    # --- writes fenced by the controller epoch zkVersion -------------------------------------
    def delete_isr_change_notifications(self, seqs: Collection[str] | None, expected_epoch_zk_version: int) -> None:
        """None: all of them."""
        ...

    def delete_log_dir_event_notifications(self, seqs: Collection[str] | None, expected_epoch_zk_version: int) -> None:
        """None: all of them."""
        ...

    def delete_preferred_replica_election(self, expected_epoch_zk_version: int) -> None: ...

    def set_partition_reassignment(
        self, reassignment: Mapping[TopicPartition, list[int]], expected_epoch_zk_version: int
    ) -> None:
        """Rewrite ``/admin/reassign_partitions`` with what is left of it."""
        ...

    def delete_partition_reassignment(self, expected_epoch_zk_version: int) -> None: ...

    # --- /latest_producer_id_block (not epoch-fenced, as in Kafka) -----------------------------
    def get_producer_id_block(self) -> tuple[bytes | None, int]: ...

    def set_producer_id_block(self, data: bytes, expected_version: int) -> bool: ...

    def delete_topic(self, topic: str, expected_epoch_zk_version: int) -> None: ...

    def delete_topic_deletions(self, topics: Collection[str], expected_epoch_zk_version: int) -> None: ...

    def set_topic_assignment(
        self,
        topic: str,
        topic_id: uuid.UUID | None,
        assignment: Mapping[int, ReplicaAssignment],
        expected_epoch_zk_version: int,
    ) -> None: ...
