"""Kafka's ``ControllerEventManager`` core: the ZooKeeper-mode controller's single queue of
``ControllerEvent``s, each tagged with its ``ControllerState`` (Kafka's enum and ids, which name the
``<State>RateAndTimeMs`` timers).

Sans-I/O: no thread, no clock (callers pass ``now_ms``). :class:`ControllerEventQueue` keeps
Kafka's semantics: ``put`` appends; ``clear_and_put`` drains the queue, *preempts* every drained
event (an event with a callback answers it, e.g. ControlledShutdown fails with NOT_CONTROLLER,
instead of running) and then appends; a queued event runs or is preempted, never both.
``process_next`` runs one event: the state becomes the event's while it runs, back to Idle after;
an exception is logged and the queue goes on. The shell (a thread or an asyncio task) just
waits for ``put`` and calls ``process_next``.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from odradek.controller.controller_context import TopicPartition

log = logging.getLogger(__name__)


class ControllerState(enum.Enum):
    """Kafka's ``ControllerState``: (id, rate-and-time metric name or None)."""

    Idle = (0, None)
    ControllerChange = (1, "ControllerChangeRateAndTimeMs")
    BrokerChange = (2, "LeaderElectionRateAndTimeMs")
    TopicChange = (3, "TopicChangeRateAndTimeMs")
    TopicDeletion = (4, "TopicDeletionRateAndTimeMs")
    AlterPartitionReassignment = (5, "PartitionReassignmentRateAndTimeMs")
    AutoLeaderBalance = (6, "AutoLeaderBalanceRateAndTimeMs")
    ManualLeaderBalance = (7, "ManualLeaderBalanceRateAndTimeMs")
    ControlledShutdown = (8, "ControlledShutdownRateAndTimeMs")
    IsrChange = (9, "IsrChangeRateAndTimeMs")
    LeaderAndIsrResponseReceived = (10, "LeaderAndIsrResponseReceivedRateAndTimeMs")
    LogDirChange = (11, "LogDirChangeRateAndTimeMs")
    ControllerShutdown = (12, "ControllerShutdownRateAndTimeMs")
    UncleanLeaderElectionEnable = (13, "UncleanLeaderElectionEnableRateAndTimeMs")
    TopicUncleanLeaderElectionEnable = (14, "TopicUncleanLeaderElectionEnableRateAndTimeMs")
    ListPartitionReassignment = (15, "ListPartitionReassignmentRateAndTimeMs")
    UpdateMetadataResponseReceived = (16, None)
    UpdateFeatures = (17, "UpdateFeaturesRateAndTimeMs")

    @property
    def value_id(self) -> int:
        """Kafka's ``ControllerState.value`` (the ``ActiveControllerState`` gauge... and logs)."""
        return int(self.value[0])

    @property
    def rate_and_time_metric_name(self) -> str | None:
        name = self.value[1]
        return str(name) if name is not None else None


_S = ControllerState


@dataclass
class ControllerEvent:
    """Base: ``state`` is the ControllerState the controller is in while processing it."""

    state: ClassVar[ControllerState]

    def preempt(self) -> None:
        """Called instead of processing when the queue is cleared (resignation, shutdown)."""


@dataclass
class Startup(ControllerEvent):
    state = _S.ControllerChange


@dataclass
class ControllerChange(ControllerEvent):
    state = _S.ControllerChange


@dataclass
class Reelect(ControllerEvent):
    state = _S.ControllerChange


@dataclass
class RegisterBrokerAndReelect(ControllerEvent):
    state = _S.ControllerChange


@dataclass
class Expire(ControllerEvent):
    state = _S.ControllerChange


@dataclass
class ShutdownEventThread(ControllerEvent):
    state = _S.ControllerShutdown


@dataclass
class BrokerChange(ControllerEvent):
    state = _S.BrokerChange


@dataclass
class BrokerModifications(ControllerEvent):
    broker_id: int = -1
    state = _S.BrokerChange


@dataclass
class TopicChange(ControllerEvent):
    state = _S.TopicChange


@dataclass
class PartitionModifications(ControllerEvent):
    topic: str = ""
    state = _S.TopicChange


@dataclass
class TopicDeletion(ControllerEvent):
    state = _S.TopicDeletion


@dataclass
class TopicDeletionStopReplicaResponseReceived(ControllerEvent):
    replica_id: int = -1
    request_error: int = 0
    partition_errors: dict[TopicPartition, int] = field(default_factory=dict)
    state = _S.TopicDeletion


@dataclass
class ZkPartitionReassignment(ControllerEvent):
    """``/admin/reassign_partitions`` was created (Kafka's issue name: PartitionReassignment)."""

    state = _S.AlterPartitionReassignment


PartitionReassignment = ZkPartitionReassignment


@dataclass
class ApiPartitionReassignment(ControllerEvent):
    reassignments: Mapping[TopicPartition, list[int] | None] = field(default_factory=dict)
    callback: Callable[[Any], None] | None = None
    state = _S.AlterPartitionReassignment

    def preempt(self) -> None:
        if self.callback is not None:
            self.callback("NOT_CONTROLLER")


@dataclass
class PartitionReassignmentIsrChange(ControllerEvent):
    partition: TopicPartition = ("", -1)
    state = _S.AlterPartitionReassignment


@dataclass
class IsrChangeNotification(ControllerEvent):
    state = _S.IsrChange


@dataclass
class LogDirEventNotification(ControllerEvent):
    state = _S.LogDirChange


class ElectionTrigger(enum.Enum):
    AutoTriggered = "AutoTriggered"
    ZkTriggered = "ZkTriggered"
    AdminClientTriggered = "AdminClientTriggered"


@dataclass
class ReplicaLeaderElection(ControllerEvent):
    """Kafka's ``ReplicaLeaderElection`` (before 2.4: ``PreferredReplicaLeaderElection``):
    ``partitions`` None means those of ``/admin/preferred_replica_election``; ``election_type``
    0 preferred, 1 unclean (ElectLeaders' values). Preempted: every partition gets NOT_CONTROLLER."""

    partitions: Collection[TopicPartition] | None = None
    election_type: int = 0
    trigger: ElectionTrigger = ElectionTrigger.ZkTriggered
    callback: Callable[[dict[TopicPartition, Any]], None] | None = None
    state = _S.ManualLeaderBalance

    def preempt(self) -> None:
        if self.callback is not None:
            self.callback(dict.fromkeys(self.partitions or (), "NOT_CONTROLLER"))


PreferredReplicaLeaderElection = ReplicaLeaderElection


@dataclass
class ControlledShutdown(ControllerEvent):
    """A broker asks to shut down; ``callback`` gets the partitions it still leads, or an
    exception (preempted: the controller moved)."""

    broker_id: int = -1
    broker_epoch: int = -1
    callback: Callable[[set[TopicPartition] | Exception], None] | None = None
    state = _S.ControlledShutdown

    def preempt(self) -> None:
        if self.callback is not None:
            self.callback(ControllerMovedError(f"controlled shutdown of broker {self.broker_id}: controller moved"))


@dataclass
class AutoPreferredReplicaLeaderElection(ControllerEvent):
    state = _S.AutoLeaderBalance


@dataclass
class UncleanLeaderElectionEnable(ControllerEvent):
    state = _S.UncleanLeaderElectionEnable


@dataclass
class TopicUncleanLeaderElectionEnable(ControllerEvent):
    topic: str = ""
    state = _S.TopicUncleanLeaderElectionEnable


@dataclass
class LeaderAndIsrResponseReceived(ControllerEvent):
    response: dict[str, Any] = field(default_factory=dict)
    broker_id: int = -1
    state = _S.LeaderAndIsrResponseReceived


@dataclass
class UpdateMetadataResponseReceived(ControllerEvent):
    response: dict[str, Any] = field(default_factory=dict)
    broker_id: int = -1
    state = _S.UpdateMetadataResponseReceived


class ControllerMovedError(Exception):
    """Handed to a preempted event's callback: this broker is no longer the controller."""


class ControllerEventProcessor(Protocol):
    def process(self, event: ControllerEvent) -> None: ...

    def preempt(self, event: ControllerEvent) -> None: ...


class QueuedEvent:
    """An event in the queue; it is processed or preempted, once."""

    __slots__ = ("enqueue_time_ms", "event", "spent")

    def __init__(self, event: ControllerEvent, enqueue_time_ms: int) -> None:
        self.event = event
        self.enqueue_time_ms = enqueue_time_ms
        self.spent = False

    def process(self, processor: ControllerEventProcessor) -> bool:
        if self.spent:
            return False
        self.spent = True
        processor.process(self.event)
        return True

    def preempt(self, processor: ControllerEventProcessor) -> bool:
        if self.spent:
            return False
        self.spent = True
        processor.preempt(self.event)
        return True

    def __repr__(self) -> str:
        return f"QueuedEvent(event={self.event!r}, enqueueTimeMs={self.enqueue_time_ms})"


class ControllerEventQueue:
    """The queue and the processing step of Kafka's ``ControllerEventManager``, without the thread."""

    def __init__(self, controller_id: int, processor: ControllerEventProcessor) -> None:
        self.controller_id = controller_id
        self.processor = processor
        self._queue: deque[QueuedEvent] = deque()
        self.state = ControllerState.Idle
        self.queue_times_ms: list[int] = []  # the EventQueueTimeMs samples since the last read
        self.processing_times_ms: dict[ControllerState, list[int]] = {}

    def __len__(self) -> int:
        return len(self._queue)

    def is_empty(self) -> bool:
        return not self._queue

    def put(self, event: ControllerEvent, now_ms: int) -> QueuedEvent:
        queued = QueuedEvent(event, now_ms)
        self._queue.append(queued)
        return queued

    def clear_and_put(self, event: ControllerEvent, now_ms: int) -> QueuedEvent:
        """Preempt everything queued (in order), then append ``event``."""
        drained = list(self._queue)
        self._queue.clear()
        for q in drained:
            try:
                q.preempt(self.processor)
            except Exception as e:
                log.error("Error preempting event %r: %r", q.event, e)
        return self.put(event, now_ms)

    def poll(self) -> QueuedEvent | None:
        return self._queue.popleft() if self._queue else None

    def process_next(self, now_ms: int, clock: Callable[[], int] | None = None) -> ControllerEvent | None:
        """Run the oldest event (None if the queue is empty). ``clock`` (ms) times the processing."""
        queued = self.poll()
        if queued is None:
            return None
        event = queued.event
        if isinstance(event, ShutdownEventThread):
            return event
        self.state = event.state
        self.queue_times_ms.append(now_ms - queued.enqueue_time_ms)
        try:
            queued.process(self.processor)
        except Exception as e:
            log.error("[ControllerEventThread controllerId=%d] Uncaught error processing event %r: %r",
                      self.controller_id, event, e, exc_info=True)
        finally:
            if clock is not None and event.state.rate_and_time_metric_name is not None:
                self.processing_times_ms.setdefault(event.state, []).append(clock() - now_ms)
            self.state = ControllerState.Idle
        return event
