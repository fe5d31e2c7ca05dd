"""InternalTopic: a coordinator's internal topic (``__consumer_offsets``, ``__transaction_state``).

What the group and the transaction coordinator share about the topic they keep their state in:

* :meth:`InternalTopic.exists` -- whether the topic is there; the first time a topic of that name
  is seen its partition count is taken up (Kafka's coordinators take the count of an existing
  topic, falling back to ``<prefix>.num.partitions``: a client may create the topic itself, with
  any count, before the coordinator does). The count is kept while the topic lives, also if
  partitions are added, so that no key moves to another partition.
* :meth:`InternalTopic.ensure` -- creates the topic in the background through the controller
  channel (as Kafka's ``AutoTopicCreationManager`` does for internal topics on FindCoordinator),
  one creation at a time, with the topic's own configs.
* :meth:`InternalTopic.replication_factor` -- ``<prefix>.replication.factor`` as configured: with
  fewer brokers up the controller refuses the topic (INVALID_REPLICATION_FACTOR, said once at
  WARNING) and FindCoordinator answers COORDINATOR_NOT_AVAILABLE until they are; a single-node
  cluster gets 1.
* :meth:`InternalTopic.coordinator_for` -- FindCoordinator: the leader of a key's partition.
* :class:`CoordinatorPartitions` -- the partitions a coordinator leads: loaded (their log
  replayed, :func:`read_to_log_end`) when this node becomes their leader, unloaded when it stops
  being it; the base of the group and the transaction state managers.
* :func:`append_error` -- a failed append to the topic as the coordinator's client is told.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Collection
from typing import Generic, Protocol, TypeVar

from odradek.log.errors import KafkaStorageError
from odradek.log.log import Log
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.records.batch import RecordBatchHeader, iter_batches
from odradek.server.controller_channel import (
    ControllerChannel,
    ControllerRequest,
    ControllerRequestTimeout,
)
from odradek.server.kafka_config import KafkaConfig
from odradek.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

TOO_LARGE = (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE)


def append_error(code: Errors, too_large: Errors, too_large_codes: Collection[Errors] = TOO_LARGE) -> Errors:
    """A failed append to a coordinator's internal topic as its client is told (the mapping both
    of Kafka's coordinators apply): the partition gone or under-replicated, or the append timed
    out -> COORDINATOR_NOT_AVAILABLE; not its leader any more -> NOT_COORDINATOR; a code of
    ``too_large_codes`` -> ``too_large``; any other code as it is."""
    if code in (
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.NOT_ENOUGH_REPLICAS,
        Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        Errors.REQUEST_TIMED_OUT,
    ):
        return Errors.COORDINATOR_NOT_AVAILABLE
    if code in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR):
        return Errors.NOT_COORDINATOR
    if code in too_large_codes:
        return too_large
    return code

Loaded = TypeVar("Loaded")


class PartitionedState(Protocol):
    """The state kept on the topic's partitions (GroupMetadataManager, TransactionStateManager):
    how many partitions its keys are spread over, and which one a key is on."""

    num_partitions: int

    def partition_for(self, key: str) -> int: ...


class InternalTopic:
    def __init__(
        self,
        *,
        name: str,
        config_prefix: str,
        keys: str,
        num_partitions: int,
        replication_factor: int,
        topic_configs: Callable[[int], dict[str, str]],
        state: PartitionedState,
        node_id: int,
        config: KafkaConfig,
        metadata_cache: KRaftMetadataCache,
        replica_manager: ReplicaManager,
        controller_channel: ControllerChannel | None,
    ) -> None:
        """``config_prefix`` names the topic's settings (``offsets.topic``,
        ``transaction.state.log``) in log lines; ``keys`` what is spread over its partitions
        (``groups``); ``num_partitions`` and ``replication_factor`` are the configured ones;
        ``topic_configs(replication_factor)`` the topic configs it is created with."""
        self.name = name
        self.config_prefix = config_prefix
        self.keys = keys
        self.num_partitions = num_partitions
        self.configured_replication_factor = replication_factor
        self.topic_configs = topic_configs
        self.state = state
        self.node_id = node_id
        self.config = config
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        self.controller_channel = controller_channel
        self._topic_id: uuid.UUID | None = None
        self._create_task: asyncio.Task[None] | None = None
        self._rf_warned = False  # the topic refused for want of brokers, said once

    def exists(self) -> bool:
        """Whether the topic exists; the first time a topic of that name is seen, the state's
        keys are spread over the partitions it actually has."""
        topic_id = self.metadata_cache.get_topic_id(self.name)
        if topic_id is None:
            return False
        count = self.metadata_cache.num_partitions(self.name) or 0
        if topic_id != self._topic_id and count:
            self._topic_id = topic_id
            if count != self.state.num_partitions:
                log.warning(
                    "%s has %d partition(s), not %s.num.partitions=%d: %s are spread over the %d it has",
                    self.name, count, self.config_prefix, self.num_partitions, self.keys, count,
                )
                self.state.num_partitions = count
        return True

    def ensure(self) -> None:
        """Create the topic in the background if it does not exist yet (one creation at a time)."""
        if self.exists() or self.controller_channel is None:
            return
        if self._create_task is not None and not self._create_task.done():
            return
        self._create_task = asyncio.get_running_loop().create_task(self._create())

    def replication_factor(self) -> int:
        """The configured replication factor, as Kafka creates the topic: with fewer brokers up,
        the controller refuses it and the coordinator waits (COORDINATOR_NOT_AVAILABLE) until
        they are. One exception, where waiting could never end: a single-node cluster (this node
        its only controller and only registered broker, e.g. ``odradek server`` without a config,
        which Kafka runs with the ``=1`` of its shipped server.properties) gets 1."""
        cfg = self.config
        rf = self.configured_replication_factor
        voters = cfg.controller_quorum_voters
        single_node = (
            "controller" in cfg.process_roles
            and len(voters) == 1
            and voters[0].node_id == self.node_id
            and set(self.metadata_cache.image.cluster.brokers) <= {self.node_id}
        )
        if single_node and rf > 1:
            log.info(
                "%s: %s.replication.factor=%d cannot be met by a single-node cluster; "
                "creating it with replication factor 1", self.name, self.config_prefix, rf,
            )
            return 1
        return max(1, rf)

    async def _create(self) -> None:
        assert self.controller_channel is not None
        rf = self.replication_factor()
        topic = {
            "name": self.name,
            "num_partitions": self.num_partitions,
            "replication_factor": rf,
            "configs": [{"name": k, "value": v} for k, v in self.topic_configs(rf).items()],
        }
        request = ControllerRequest(
            m.CREATE_TOPICS.api_key, 7,
            {"topics": [topic], "timeout_ms": self.config.request_timeout_ms, "validate_only": False},
        )
        try:
            results = (await self.controller_channel.send(request))["topics"]
        except (KafkaStorageError, ControllerRequestTimeout) as e:  # disk full (logged once by
            log.debug("Creating %s failed: %s", self.name, e)  # the log layer): tried again
            return  # at the next FindCoordinator
        except Exception:  # what the controller raised: tried again at the next FindCoordinator
            log.warning("Creating %s failed", self.name, exc_info=True)
            return
        for r in results:
            error = Errors(r["error_code"])
            message = r.get("error_message")
            if error == Errors.INVALID_REPLICATION_FACTOR:
                # Kafka's answer too: no coordinator until enough brokers are up (clients retry,
                # and every FindCoordinator tries again: said once at WARNING).
                level = logging.DEBUG if self._rf_warned else logging.WARNING
                self._rf_warned = True
                log.log(
                    level,
                    "Creating %s failed: %s; FindCoordinator answers COORDINATOR_NOT_AVAILABLE until "
                    "%d brokers are up (%s.replication.factor=%d)",
                    self.name, message or error.name, rf, self.config_prefix,
                    self.configured_replication_factor,
                )
            elif error not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
                log.warning("Creating %s failed: %s %s", self.name, error.name, message or "")
            elif error == Errors.NONE:  # the controller logs the creation at INFO
                log.debug(
                    "Created %s with %d partitions, replication factor %d", self.name, self.num_partitions, rf,
                )

    def coordinator_for(self, key: str, listener: str) -> tuple[Errors, int, str, int]:
        """FindCoordinator: (error, node id, host, port) of the leader of ``key``'s partition;
        COORDINATOR_NOT_AVAILABLE (clients retry) while the topic is being created, the partition
        has no leader, or its log is still being created on this node."""
        if not self.exists():
            self.ensure()
            return Errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        partition = self.state.partition_for(key)
        reg = self.metadata_cache.get_partition_info(self.name, partition)
        if reg is None or reg.leader < 0:
            return Errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        if reg.leader == self.node_id and self.replica_manager.is_loading((self.name, partition)):
            # Its log is still being created: not this node's to serve yet (clients retry).
            return Errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        node = self.metadata_cache.get_alive_broker_node(reg.leader, listener)
        if node is None:
            return Errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return Errors.NONE, node.id, node.host, node.port


async def read_to_log_end(lg: Log, buffer_size: int) -> AsyncIterator[tuple[bytes | bytearray, RecordBatchHeader]]:
    """Every batch of a partition's log from its start to its end, with the bytes read it is in
    (the batch is ``data[h.position : h.position + h.size]``), ``buffer_size`` bytes a read and
    a turn of the event loop between reads.

    To the log end, not the high watermark (Kafka's loaders read to the log end too): a follower
    that has just become leader may know a HW below records the old leader had acknowledged;
    its log is the partition's now, and they are in it."""
    pos = lg.log_start_offset
    while True:
        end = lg.log_end_offset
        if pos >= end:
            return
        data = lg.read(pos, buffer_size, isolation_max_offset=end).to_bytes()
        if not data:
            return
        progressed = False
        for h in iter_batches(data):
            progressed = True
            pos = h.next_offset
            yield data, h
        if not progressed:
            return
        await asyncio.sleep(0)


class CoordinatorPartitions(ABC, Generic[Loaded]):
    """The partitions of ``topic`` this node leads, as a coordinator's state manager keeps them:
    ``loading`` (partition -> leader epoch) while :meth:`_replay` reads one, ``owned`` once the
    subclass's :meth:`_install` took up what was read. A load that lost its leadership meanwhile
    (unloaded, or a newer epoch scheduled) is dropped."""

    def __init__(self, topic: str, keys: str, clock_ms: Callable[[], int]) -> None:
        self.topic = topic
        self.keys = keys  # what the partitions hold, for log lines ("groups")
        self.clock_ms = clock_ms
        self.owned: dict[int, int] = {}  # loaded partition -> leader (coordinator) epoch
        self.loading: dict[int, int] = {}  # partition being loaded -> leader epoch
        self._load_tasks: dict[int, asyncio.Task[None]] = {}

    def on_leadership_change(self, topic: str, partition: int, is_leader: bool, epoch: int) -> None:
        """ReplicaManager leadership listener (called on the event loop)."""
        if topic != self.topic:
            return
        if is_leader:
            self.schedule_load(partition, epoch)
        else:
            self.unload_partition(partition)

    def schedule_load(self, partition: int, epoch: int) -> None:
        if self.owned.get(partition) == epoch or self.loading.get(partition) == epoch:
            return
        self.unload_partition(partition)
        self.loading[partition] = epoch
        self._load_tasks[partition] = asyncio.get_running_loop().create_task(
            self._load(partition, epoch), name=f"load-{self.topic}-{partition}"
        )

    async def _load(self, partition: int, epoch: int) -> None:
        started = self.clock_ms()
        try:
            loaded = await self._replay(partition)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Loading %s-%d failed; its %s stay unavailable", self.topic, partition, self.keys)
            self.loading.pop(partition, None)
            return
        finally:
            self._load_tasks.pop(partition, None)
        if self.loading.get(partition) != epoch:
            return  # leadership changed meanwhile
        self._install(partition, epoch, loaded, started)

    @abstractmethod
    async def _replay(self, partition: int) -> Loaded:
        """What the partition's log holds (read with :func:`read_to_log_end`)."""

    @abstractmethod
    def _install(self, partition: int, epoch: int, loaded: Loaded, started_ms: int) -> None:
        """Take up what :meth:`_replay` read; moves the partition from ``loading`` to ``owned``."""

    @abstractmethod
    def unload_partition(self, partition: int) -> None:
        """Drop the partition's state: this node no longer leads it."""

    def _stop_loading(self, partition: int) -> None:
        """The first step of an unload: a load under way is cancelled."""
        task = self._load_tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        self.loading.pop(partition, None)

    def shutdown(self) -> None:
        for t in self._load_tasks.values():
            t.cancel()
        self._load_tasks.clear()
