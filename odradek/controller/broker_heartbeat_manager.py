"""BrokerHeartbeatManager: the soft state of broker heartbeats (Kafka's class of that name).

Soft state is what never reaches the metadata log: when each broker last heartbeated, the metadata
offset it reported, and the offset at which its controlled shutdown completes. Only the active
controller has one; a controller that becomes active builds it from its image (every registered
broker counts as just heard from, so a failover gives each broker a full session before fencing).

Sans-I/O: every method that needs the time takes ``now_ms``. It decides, it never writes: the
records that carry out a fencing or an unfencing come from the ClusterControlManager.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

# broker.session.timeout.ms: Kafka's default.
DEFAULT_SESSION_TIMEOUT_MS = 9000


class BrokerControlState(enum.Enum):
    """Kafka's ``BrokerControlState``: (fenced, in controlled shutdown, should shut down)."""

    FENCED = (True, False, False)
    UNFENCED = (False, False, False)
    CONTROLLED_SHUTDOWN = (False, True, False)
    SHUTDOWN_NOW = (True, False, True)

    @property
    def fenced(self) -> bool:
        return self.value[0]

    @property
    def in_controlled_shutdown(self) -> bool:
        return self.value[1]

    @property
    def should_shut_down(self) -> bool:
        return self.value[2]


@dataclass(frozen=True)
class BrokerControlStates:
    current: BrokerControlState
    next: BrokerControlState


@dataclass
class BrokerHeartbeatState:
    broker_id: int
    last_contact_ms: int = 0
    metadata_offset: int = -1
    # The offset at which the controlled shutdown is complete; -1 when not shutting down.
    controlled_shutdown_offset: int = -1
    fenced: bool = True

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0


class BrokerHeartbeatManager:
    def __init__(self, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.brokers: dict[int, BrokerHeartbeatState] = {}

    # -- tracking -------------------------------------------------------------------------------

    def register(self, broker_id: int, fenced: bool, now_ms: int) -> None:
        """Track the broker (if not yet) with its fencing state, as just heard from."""
        broker = self.brokers.get(broker_id)
        offset = -1
        if broker is None:
            broker = self.brokers[broker_id] = BrokerHeartbeatState(broker_id)
        elif broker.fenced != fenced:
            offset = broker.metadata_offset
        self.touch(broker_id, fenced, offset, now_ms)

    def touch(self, broker_id: int, fenced: bool, metadata_offset: int, now_ms: int) -> None:
        """A heartbeat (or a registration) from the broker: its last contact is now."""
        broker = self._state(broker_id)
        broker.last_contact_ms = now_ms
        broker.metadata_offset = metadata_offset
        broker.fenced = fenced
        if fenced:
            # A fenced broker leaves controlled shutdown: on its next heartbeat it shuts down.
            broker.controlled_shutdown_offset = -1

    def fence(self, broker_id: int) -> None:
        broker = self.brokers.get(broker_id)
        if broker is not None:
            broker.fenced = True
            broker.controlled_shutdown_offset = -1

    def remove(self, broker_id: int) -> None:
        self.brokers.pop(broker_id, None)

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        """Unfenced and heard from within the session timeout."""
        broker = self.brokers.get(broker_id)
        return broker is not None and self._valid(broker, now_ms)

    def _valid(self, broker: BrokerHeartbeatState, now_ms: int) -> bool:
        return not broker.fenced and broker.last_contact_ms + self.session_timeout_ms >= now_ms

    # -- fencing of silent brokers --------------------------------------------------------------

    def next_check_time_ms(self) -> int | None:
        """The first time at which the unfenced broker heard from longest ago has run out of
        session (None: no unfenced broker)."""
        unfenced = [b.last_contact_ms for b in self.brokers.values() if not b.fenced]
        return min(unfenced) + self.session_timeout_ms + 1 if unfenced else None

    def find_one_stale_broker(self, now_ms: int) -> int | None:
        """An unfenced broker whose session has run out: the one heard from longest ago."""
        unfenced = [b for b in self.brokers.values() if not b.fenced]
        if not unfenced:
            return None
        oldest = min(unfenced, key=lambda b: (b.last_contact_ms, b.broker_id))
        return None if self._valid(oldest, now_ms) else oldest.broker_id

    # -- controlled shutdown --------------------------------------------------------------------

    def maybe_update_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        """The broker entered controlled shutdown with the records up to ``offset``; kept from
        the first time only."""
        broker = self._state(broker_id)
        if broker.fenced:
            raise ValueError(f"Fenced broker {broker_id} cannot enter controlled shutdown.")
        if broker.controlled_shutdown_offset < 0:
            broker.controlled_shutdown_offset = offset

    def controlled_shutdown_offset(self, broker_id: int) -> int | None:
        broker = self.brokers.get(broker_id)
        if broker is None or broker.controlled_shutdown_offset < 0:
            return None
        return broker.controlled_shutdown_offset

    def lowest_active_offset(self) -> int | None:
        """The lowest metadata offset an active broker (unfenced, not shutting down) reported;
        None when there is no active broker."""
        offsets = [b.metadata_offset for b in self.brokers.values() if not b.fenced and not b.shutting_down]
        return min(offsets) if offsets else None

    def current_broker_state(self, broker_id: int) -> BrokerControlState:
        broker = self._state(broker_id)
        if broker.shutting_down:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.FENCED if broker.fenced else BrokerControlState.UNFENCED

    def calculate_next_broker_state(
        self,
        broker_id: int,
        *,
        want_fence: bool,
        want_shut_down: bool,
        current_metadata_offset: int,
        register_broker_record_offset: int,
        has_leaderships: Callable[[], bool],
    ) -> BrokerControlStates:
        """Kafka's ``calculateNextBrokerState`` for a heartbeat of a registered broker."""
        current = self.current_broker_state(broker_id)
        S = BrokerControlState
        if current is S.FENCED:
            if want_shut_down:
                log.info("Fenced broker %d has requested and been granted an immediate shutdown.", broker_id)
                return BrokerControlStates(current, S.SHUTDOWN_NOW)
            if not want_fence and current_metadata_offset >= register_broker_record_offset:
                log.info(
                    "The request from broker %d to unfence has been granted because it has caught "
                    "up with the offset of its register broker record %d.",
                    broker_id, register_broker_record_offset,
                )
                return BrokerControlStates(current, S.UNFENCED)
            return BrokerControlStates(current, S.FENCED)
        if current is S.UNFENCED:
            if want_fence:
                if want_shut_down:
                    log.info("Unfenced broker %d has requested and been granted an immediate shutdown.", broker_id)
                    return BrokerControlStates(current, S.SHUTDOWN_NOW)
                log.info("Unfenced broker %d has requested and been granted fencing", broker_id)
                return BrokerControlStates(current, S.FENCED)
            if want_shut_down:
                if has_leaderships():
                    log.info("Unfenced broker %d has requested and been granted a controlled shutdown.", broker_id)
                    return BrokerControlStates(current, S.CONTROLLED_SHUTDOWN)
                log.info("Unfenced broker %d has requested and been granted an immediate shutdown.", broker_id)
                return BrokerControlStates(current, S.SHUTDOWN_NOW)
            return BrokerControlStates(current, S.UNFENCED)
        # In controlled shutdown.
        if has_leaderships():
            log.debug("Broker %d is in controlled shutdown, but still leads partitions.", broker_id)
            return BrokerControlStates(current, S.CONTROLLED_SHUTDOWN)
        lowest = self.lowest_active_offset()
        offset = self._state(broker_id).controlled_shutdown_offset
        if lowest is None or offset <= lowest:
            log.info(
                "The request from broker %d to shut down has been granted since the lowest active "
                "offset %s is now greater than the broker's controlled shutdown offset %d.",
                broker_id, "(none)" if lowest is None else lowest, offset,
            )
            return BrokerControlStates(current, S.SHUTDOWN_NOW)
        return BrokerControlStates(current, S.CONTROLLED_SHUTDOWN)

    def _state(self, broker_id: int) -> BrokerHeartbeatState:
        broker = self.brokers.get(broker_id)
        if broker is None:
            raise ValueError(f"Broker {broker_id} is not registered.")
        return broker
