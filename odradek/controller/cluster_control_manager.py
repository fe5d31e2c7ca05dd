"""ClusterControlManager: broker registrations, heartbeats and fencing, decided as records (sans-I/O).

Kafka's class of that name (with the broker-state half of its ReplicationControlManager): it reads
the controller's image for the hard state (registrations, epochs, fencing — what is in the log)
and keeps the soft state in a :class:`BrokerHeartbeatManager` (last contact, controlled-shutdown
offsets) while this controller is active. Each operation validates and returns its result with the
records that carry it out; it never writes. The time comes in as ``now_ms``.

- BrokerRegistration: the cluster id must match (INCONSISTENT_CLUSTER_ID); a registration with the
  incarnation id already registered amends it and keeps its broker epoch; another incarnation
  while the registered one still has a live session is refused (DUPLICATE_BROKER_REGISTRATION),
  otherwise it replaces it with a new broker epoch, fenced; the broker must support every
  finalized feature level (UNSUPPORTED_VERSION).
- BrokerHeartbeat: refreshes the session; unfences a fenced broker once its metadata offset has
  reached its registration record; fences on request; runs a controlled shutdown on
  ``want_shut_down`` (leaderships moved away, then ``should_shut_down``).
- Fencing of silent brokers: one whose session (``broker.session.timeout.ms``) ran out is fenced,
  one per call, and loses its leaderships and ISR memberships.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from odradek.controller.broker_heartbeat_manager import (
    DEFAULT_SESSION_TIMEOUT_MS,
    BrokerControlState,
    BrokerHeartbeatManager,
)
from odradek.controller.broker_partition_changes import (
    handle_broker_fenced,
    handle_broker_in_controlled_shutdown,
    handle_broker_unfenced,
    has_leaderships,
)
from odradek.controller.feature_control_manager import (
    METADATA_VERSION_FEATURE,
    MINIMUM_KRAFT_METADATA_VERSION,
    FeatureControlManager,
)
from odradek.controller.replication_control import MetadataRecord
from odradek.metadata.image import BrokerRegistration, MetadataImage
from odradek.protocol.errors import Errors, KafkaError

log = logging.getLogger(__name__)

# metadata.version 3.7-IV2: brokers register their log directories (KIP-858).
_DIRECTORY_ASSIGNMENT_METADATA_VERSION = 17
_RESERVED_DIRECTORY_IDS = 100  # Kafka's DirectoryId.reserved: the first 100 UUIDs

# BrokerRegistrationChangeRecord values (Kafka's BrokerRegistrationFencingChange and
# BrokerRegistrationInControlledShutdownChange).
FENCE = 1
UNFENCE = -1
IN_CONTROLLED_SHUTDOWN = 1


@dataclass(frozen=True)
class BrokerHeartbeatReply:
    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


class ClusterControlManager:
    def __init__(
        self,
        cluster_id: str,
        image: MetadataImage,
        feature_control: FeatureControlManager,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    ) -> None:
        self.cluster_id = cluster_id
        self.image = image
        self.feature_control = feature_control
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_manager: BrokerHeartbeatManager | None = None
        # The static unclean.leader.election.enable (topics and the dynamic default override it).
        self.unclean_leader_election_default = False
        # Offset of each broker's latest RegisterBrokerRecord (what it must have caught up with
        # to be unfenced), from the records replayed through replay().
        self._register_offsets: dict[int, int] = {}
        # The same for the records this active controller appended that are not committed yet
        # (None: unregistered); dropped when they commit or are abandoned.
        self._speculative_register_offsets: dict[int, int | None] = {}

    # -- active / standby ----------------------------------------------------------------------

    def activate(self, now_ms: int, expired: frozenset[int] = frozenset()) -> None:
        """This controller became active: every registered broker gets a fresh session, except
        the ``expired`` ones, known to have no live incarnation (held as fenced: a new
        incarnation registers at once)."""
        self.heartbeat_manager = BrokerHeartbeatManager(self.session_timeout_ms)
        for broker_id, b in sorted(self.image.brokers.items()):
            self.heartbeat_manager.register(broker_id, b.fenced or broker_id in expired, now_ms)

    def deactivate(self) -> None:
        self.heartbeat_manager = None

    def _heartbeats(self) -> BrokerHeartbeatManager:
        if self.heartbeat_manager is None:
            raise KafkaError(Errors.NOT_CONTROLLER, "ClusterControlManager is not active.")
        return self.heartbeat_manager

    def replay(self, name: str, record: dict[str, Any], offset: int) -> None:
        """A record applied to the image (committed, or appended by this active controller)."""
        if name == "RegisterBrokerRecord":
            self._register_offsets[record["broker_id"]] = offset
        elif name == "UnregisterBrokerRecord":
            self._register_offsets.pop(record["broker_id"], None)

    def replay_speculative(self, name: str, record: dict[str, Any], offset: int) -> None:
        """A record this active controller appended, not committed yet."""
        if name == "RegisterBrokerRecord":
            self._speculative_register_offsets[record["broker_id"]] = offset
        elif name == "UnregisterBrokerRecord":
            self._speculative_register_offsets[record["broker_id"]] = None

    def drop_speculative(self) -> None:
        """The appended records are all committed (and replayed), or abandoned."""
        self._speculative_register_offsets.clear()

    def register_broker_record_offset(self, broker_id: int) -> int | None:
        """Offset of the broker's registration record; its broker epoch (never past it) for a
        registration this node did not replay itself."""
        if broker_id in self._speculative_register_offsets:
            offset = self._speculative_register_offsets[broker_id]
        else:
            offset = self._register_offsets.get(broker_id)
        if offset is not None:
            return offset
        b = self.image.brokers.get(broker_id)
        return None if b is None else b.epoch

    # -- checks --------------------------------------------------------------------------------

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        """Kafka's checkBrokerEpoch: STALE_BROKER_EPOCH for an unknown broker or another epoch."""
        b = self.image.brokers.get(broker_id)
        if b is None:
            raise KafkaError(Errors.STALE_BROKER_EPOCH, f"No broker registration found for broker id {broker_id}")
        if b.epoch != broker_epoch:
            raise KafkaError(
                Errors.STALE_BROKER_EPOCH, f"Expected broker epoch {b.epoch}, but got broker epoch {broker_epoch}"
            )
        return b

    # -- BrokerRegistration --------------------------------------------------------------------

    def register_broker(
        self, request: dict[str, Any], new_broker_epoch: int, now_ms: int
    ) -> tuple[int, list[MetadataRecord]]:
        """(broker epoch, records). ``new_broker_epoch``: the offset the records will start at."""
        heartbeats = self._heartbeats()
        if request["cluster_id"] != self.cluster_id:
            raise KafkaError(
                Errors.INCONSISTENT_CLUSTER_ID,
                f"Expected cluster ID {self.cluster_id}, but got cluster ID {request['cluster_id']}",
            )
        broker_id: int = request["broker_id"]
        incarnation: uuid.UUID = request["incarnation_id"]
        existing = self.image.brokers.get(broker_id)
        if (
            existing is not None
            and heartbeats.has_valid_session(broker_id, now_ms)
            and existing.incarnation_id != incarnation
        ):
            raise KafkaError(Errors.DUPLICATE_BROKER_REGISTRATION, "Another broker is registered with that broker id.")
        if request.get("is_migrating_zk_broker"):
            raise KafkaError(Errors.BROKER_ID_NOT_REGISTERED, "Controller does not support registering ZK brokers.")
        log_dirs: list[uuid.UUID] = list(request.get("log_dirs") or [])
        self._check_log_dirs(broker_id, log_dirs)
        features = self._registration_features(broker_id, request.get("features") or [])
        record: dict[str, Any] = {
            "broker_id": broker_id,
            "is_migrating_zk_broker": False,
            "incarnation_id": incarnation,
            "end_points": [
                {"name": e["name"], "host": e["host"], "port": e["port"], "security_protocol": e["security_protocol"]}
                for e in request["listeners"]
            ],
            "features": features,
            "rack": request.get("rack"),
            "log_dirs": log_dirs,
        }
        if existing is not None and existing.incarnation_id == incarnation:
            log.info(
                "Amending registration of broker %d, incarnation ID %s. Broker epoch remains %d.",
                broker_id, incarnation, existing.epoch,
            )
            record.update(
                broker_epoch=existing.epoch, fenced=existing.fenced, in_controlled_shutdown=existing.in_controlled_shutdown
            )
        else:
            if existing is None:
                log.info(
                    "No previous registration found for broker %d. New incarnation ID is %s. "
                    "New broker epoch is %d.", broker_id, incarnation, new_broker_epoch,
                )
            else:
                log.info(
                    "Registering a new incarnation of broker %d. Previous incarnation ID was %s; new "
                    "incarnation ID is %s. Broker epoch will become %d.",
                    broker_id, existing.incarnation_id, incarnation, new_broker_epoch,
                )
            heartbeats.remove(broker_id)  # the previous incarnation's session ends
            record.update(broker_epoch=new_broker_epoch, fenced=True, in_controlled_shutdown=False)
        heartbeats.register(broker_id, record["fenced"], now_ms)
        return record["broker_epoch"], [("RegisterBrokerRecord", record)]

    def _check_log_dirs(self, broker_id: int, log_dirs: list[uuid.UUID]) -> None:
        """Kafka's directory checks (KIP-858), for a broker that sends its directories."""
        if not log_dirs or self.feature_control.metadata_version() < _DIRECTORY_ASSIGNMENT_METADATA_VERSION:
            return
        if any(d.int < _RESERVED_DIRECTORY_IDS for d in log_dirs):
            raise KafkaError(Errors.INVALID_REGISTRATION, "Reserved directory ID in request")
        if len(set(log_dirs)) != len(log_dirs):
            raise KafkaError(Errors.INVALID_REGISTRATION, "Duplicate directory ID in request")
        for other_id, other in sorted(self.image.brokers.items()):
            if other_id == broker_id:
                continue
            for d in log_dirs:
                if d in other.log_dirs:
                    raise KafkaError(
                        Errors.INVALID_REGISTRATION, f"Broker {other_id} is already registered with directory {d}"
                    )

    def _registration_features(self, broker_id: int, requested: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The broker's feature ranges as the record keeps them; UNSUPPORTED_VERSION when one does
        not contain a finalized level (Kafka's processRegistrationFeature)."""
        finalized = self.feature_control.finalized_features()
        ranges = [(f["name"], f["min_supported_version"], f["max_supported_version"]) for f in requested]
        names = {name for name, _lo, _hi in ranges}
        if METADATA_VERSION_FEATURE not in names:
            # A broker that sends no range for it supports only the original metadata.version.
            ranges.append((METADATA_VERSION_FEATURE, MINIMUM_KRAFT_METADATA_VERSION, MINIMUM_KRAFT_METADATA_VERSION))
        out = []
        for name, lo, hi in ranges:
            level = finalized.get(name, MINIMUM_KRAFT_METADATA_VERSION if name == METADATA_VERSION_FEATURE else 0)
            _check_supports(name, level, lo, hi)
            out.append({"name": name, "min_supported_version": lo, "max_supported_version": hi})
        for name, level in sorted(finalized.items()):
            if level != 0 and name not in names and name != METADATA_VERSION_FEATURE:
                _check_supports(name, level, 0, 0)
        return out

    # -- BrokerHeartbeat -----------------------------------------------------------------------

    def process_broker_heartbeat(
        self, request: dict[str, Any], now_ms: int
    ) -> tuple[BrokerHeartbeatReply, list[MetadataRecord]]:
        broker_id: int = request["broker_id"]
        heartbeats = self._heartbeats()
        register_offset = self.register_broker_record_offset(broker_id)
        if register_offset is None:
            raise KafkaError(Errors.STALE_BROKER_EPOCH, f"Receive a heartbeat from broker {broker_id} before registration")
        b = self.check_broker_epoch(broker_id, request["broker_epoch"])
        if broker_id not in heartbeats.brokers:
            heartbeats.register(broker_id, b.fenced, now_ms)
        offset: int = request["current_metadata_offset"]
        states = heartbeats.calculate_next_broker_state(
            broker_id,
            want_fence=request["want_fence"],
            want_shut_down=request["want_shut_down"],
            current_metadata_offset=offset,
            register_broker_record_offset=register_offset,
            has_leaderships=lambda: has_leaderships(self.image, broker_id),
        )
        records: list[MetadataRecord] = []
        nxt = states.next
        if states.current is not nxt:
            if nxt in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW):
                records.extend(self._fence(b))
            elif nxt is BrokerControlState.UNFENCED:
                records.append(_registration_change(b, fenced=UNFENCE))
                records.extend(handle_broker_unfenced(self.image, broker_id, self.unclean_leader_election_default))
            elif nxt is BrokerControlState.CONTROLLED_SHUTDOWN:
                if not b.in_controlled_shutdown:
                    records.append(_registration_change(b, in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN))
                records.extend(handle_broker_in_controlled_shutdown(self.image, broker_id))
        heartbeats.touch(broker_id, nxt.fenced, offset, now_ms)
        reply = BrokerHeartbeatReply(
            is_caught_up=offset >= register_offset,
            is_fenced=nxt.fenced,
            in_controlled_shutdown=nxt.in_controlled_shutdown,
            should_shut_down=nxt.should_shut_down,
        )
        return reply, records

    def process_batch_end_offset(self, broker_id: int, reply: BrokerHeartbeatReply, last_offset: int) -> None:
        """After the heartbeat's records were appended up to ``last_offset`` (or, without records,
        the log's last offset): a broker entering controlled shutdown completes it once every
        active broker has caught up with that offset."""
        if reply.in_controlled_shutdown and self.heartbeat_manager is not None:
            self.heartbeat_manager.maybe_update_controlled_shutdown_offset(broker_id, last_offset)

    def process_expired_broker_heartbeat(self, request: dict[str, Any], now_ms: int) -> None:
        """A heartbeat that timed out in the queue still counts as contact (no state change),
        so that an overloaded controller does not fence a live broker."""
        b = self.check_broker_epoch(request["broker_id"], request["broker_epoch"])
        self._heartbeats().touch(b.broker_id, b.fenced, request["current_metadata_offset"], now_ms)
        log.error(
            "processExpiredBrokerHeartbeat: controller event queue overloaded. Timed out heartbeat from broker %d.",
            b.broker_id,
        )

    # -- fencing of silent brokers -------------------------------------------------------------

    def next_fencing_check_ms(self) -> int | None:
        return None if self.heartbeat_manager is None else self.heartbeat_manager.next_check_time_ms()

    def maybe_fence_one_stale_broker(self, now_ms: int) -> list[MetadataRecord]:
        """Fence one broker whose session ran out (one at a time, so each fencing's effect is
        seen before the next), or nothing."""
        heartbeats = self._heartbeats()
        broker_id = heartbeats.find_one_stale_broker(now_ms)
        if broker_id is None:
            return []
        b = self.image.brokers.get(broker_id)
        heartbeats.fence(broker_id)
        if b is None or b.fenced:
            return []
        log.info("Fencing broker %d because its session has timed out.", broker_id)
        return self._fence(b)

    def _fence(self, b: BrokerRegistration) -> list[MetadataRecord]:
        records = handle_broker_fenced(self.image, b.broker_id, self.unclean_leader_election_default)
        records.append(_registration_change(b, fenced=FENCE))
        return records


def _registration_change(b: BrokerRegistration, *, fenced: int = 0, in_controlled_shutdown: int = 0) -> MetadataRecord:
    record: dict[str, Any] = {"broker_id": b.broker_id, "broker_epoch": b.epoch, "fenced": fenced}
    if in_controlled_shutdown:
        record["in_controlled_shutdown"] = in_controlled_shutdown
    return ("BrokerRegistrationChangeRecord", record)


def _check_supports(name: str, level: int, lo: int, hi: int) -> None:
    if not lo <= level <= hi:
        raise KafkaError(
            Errors.UNSUPPORTED_VERSION,
            f"Unable to register because the broker does not support finalized version {level} of "
            f"{name}. The broker wants a version between {lo} and {hi}, inclusive.",
        )
