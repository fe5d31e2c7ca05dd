"""Consumer groups of the new rebalance protocol (KIP-848, ``group.protocol=consumer``).

A sans-I/O state machine: requests (plain dicts, as decoded by the codec), the current time and the
topic metadata go in; response dicts and the coordinator records to write to ``__consumer_offsets``
come out. It never reads a clock and never schedules anything: it exposes deadlines and the asyncio
shell calls back when they pass.

The model, after Kafka's ``GroupMetadataManager`` / ``CurrentAssignmentBuilder``:

* The **group epoch** is bumped whenever the assignment must be recomputed: a member joins or
  leaves (or is fenced), a subscription (names, regex, preferred assignor) changes, or the
  metadata of a subscribed topic changes (created, deleted, more partitions).
* When the group epoch is ahead of the **target assignment epoch**, the server assignor computes a
  new target assignment (member id -> partitions) for that epoch.
* Each member converges independently from its **current assignment** to its target. A member
  first revokes the partitions it must give up (state ``UNREVOKED_PARTITIONS``, it keeps its epoch
  until its heartbeat stops reporting them), then moves to the target epoch and receives its
  target minus the partitions still owned by another member (``UNRELEASED_PARTITIONS`` until those
  are released), and is ``STABLE`` once it has everything. No partition is ever owned twice.

Every state change is expressed as a coordinator record and applied through :meth:`replay`, the
same path used when the group is loaded from the log after a restart, so a group rebuilt from its
records is the group that wrote them. Records are :class:`CoordinatorRecord` tuples
``(record_name, key_dict, value_dict | None)``; ``None`` is a tombstone. :func:`encode_record` /
:func:`decode_record` give them their ``__consumer_offsets`` bytes (int16 version + body for both
key and value, as Kafka's ``CoordinatorRecordSerde``).
"""

from __future__ import annotations

import re
import struct
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
from typing import Any, NamedTuple

from odradek.coordinator.group.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNORS,
    MemberSubscription,
    TopicMetadata,
)
from odradek.protocol.errors import Errors
from odradek.protocol.schema import INF, A, F, S, Schema, SchemaError

__all__ = [
    "ConsumerGroup",
    "ConsumerGroupConfig",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "CoordinatorRecord",
    "MemberState",
    "TopicMetadata",
    "RECORD_SCHEMAS",
    "decode_record",
    "encode_record",
]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
# Kafka 4.0's error for an invalid subscribed_topic_regex (not in our Errors enum yet).
INVALID_REGULAR_EXPRESSION = int(Errors.INVALID_REGULAR_EXPRESSION)
# Never matched by a subscribed regular expression.
INTERNAL_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"}
)

Partitions = dict[uuid.UUID, frozenset[int]]


class MemberState(IntEnum):
    """Reconciliation state of a member (Kafka's ``MemberState``; the value is what is stored)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


class CoordinatorRecord(NamedTuple):
    name: str
    key: dict[str, Any]
    value: dict[str, Any] | None


class ConsumerGroupError(Exception):
    """A heartbeat failed: becomes ``error_code``/``error_message`` in the response."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message


# ---------------------------------------------------------------------------------------------
# Configuration


_ASSIGNOR_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
    "org.apache.kafka.coordinator.group.api.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.api.assignor.RangeAssignor": "range",
}


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """The broker's ``group.consumer.*`` settings that the state machine needs."""

    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = DEFAULT_ASSIGNORS  # group.consumer.assignors; first = default

    def __post_init__(self) -> None:
        if not self.assignors:
            raise ValueError("group.consumer.assignors must name at least one assignor")
        for name in self.assignors:
            if name not in ASSIGNORS:
                raise ValueError(f"unknown assignor {name!r} in group.consumer.assignors")

    @property
    def default_assignor(self) -> str:
        return self.assignors[0]

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> ConsumerGroupConfig:
        """Read Kafka's keys; assignors may be names or Kafka's class names, comma separated."""
        kw: dict[str, Any] = {}
        if "group.consumer.session.timeout.ms" in props:
            kw["session_timeout_ms"] = int(props["group.consumer.session.timeout.ms"])
        if "group.consumer.heartbeat.interval.ms" in props:
            kw["heartbeat_interval_ms"] = int(props["group.consumer.heartbeat.interval.ms"])
        if "group.consumer.max.size" in props:
            kw["max_size"] = int(props["group.consumer.max.size"])
        raw = props.get("group.consumer.assignors")
        if raw is not None:
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            names = [_ASSIGNOR_CLASS_NAMES.get(s.strip(), s.strip()) for s in items if s.strip()]
            kw["assignors"] = tuple(names)
        return cls(**kw)


# ---------------------------------------------------------------------------------------------
# Members


@dataclass(frozen=True)
class ConsumerGroupMember:
    member_id: str
    # Metadata (ConsumerGroupMemberMetadata record).
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    # Current assignment (ConsumerGroupCurrentMemberAssignment record).
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned_partitions: Partitions = field(default_factory=dict)
    partitions_pending_revocation: Partitions = field(default_factory=dict)

    def metadata_equals(self, other: ConsumerGroupMember) -> bool:
        return _metadata_value(self) == _metadata_value(other)

    def assignment_equals(self, other: ConsumerGroupMember) -> bool:
        return _assignment_value(self) == _assignment_value(other)


def _clean(parts: Mapping[uuid.UUID, Iterable[int]]) -> Partitions:
    out: Partitions = {}
    for tid, ps in parts.items():
        s = frozenset(ps)
        if s:
            out[tid] = s
    return out


def _tp_list(parts: Mapping[uuid.UUID, Iterable[int]]) -> list[dict[str, Any]]:
    return [
        {"topic_id": tid, "partitions": sorted(ps)}
        for tid, ps in sorted(parts.items(), key=lambda kv: str(kv[0]))
        if ps
    ]


def _as_uuid(v: Any) -> uuid.UUID:
    if isinstance(v, uuid.UUID):
        return v
    if isinstance(v, bytes | bytearray | memoryview):
        return uuid.UUID(bytes=bytes(v))
    if isinstance(v, str):
        try:
            return uuid.UUID(v)
        except ValueError:
            import base64

            return uuid.UUID(bytes=base64.urlsafe_b64decode(v + "=" * (-len(v) % 4)))
    raise ConsumerGroupError(Errors.INVALID_REQUEST, f"Invalid topic id {v!r}.")


def _from_tp_list(items: Iterable[Mapping[str, Any]] | None) -> Partitions:
    out: dict[uuid.UUID, set[int]] = {}
    for it in items or ():
        out.setdefault(_as_uuid(it["topic_id"]), set()).update(int(p) for p in it["partitions"])
    return _clean(out)


def _metadata_value(m: ConsumerGroupMember) -> dict[str, Any]:
    return {
        "instance_id": m.instance_id,
        "rack_id": m.rack_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "subscribed_topic_names": list(m.subscribed_topic_names),
        "subscribed_topic_regex": m.subscribed_topic_regex,
        "rebalance_timeout_ms": m.rebalance_timeout_ms,
        "server_assignor": m.server_assignor,
        "classic_member_metadata": None,
    }


def _assignment_value(m: ConsumerGroupMember) -> dict[str, Any]:
    return {
        "member_epoch": m.member_epoch,
        "previous_member_epoch": m.previous_member_epoch,
        "state": int(m.state),
        "assigned_partitions": _tp_list(m.assigned_partitions),
        "partitions_pending_revocation": _tp_list(m.partitions_pending_revocation),
    }


def _owns_any(owned: Partitions | None, parts: Partitions) -> bool:
    """Whether the member still reports any of ``parts``; not reporting counts as owning."""
    if owned is None:
        return True
    return any(owned.get(tid, frozenset()) & ps for tid, ps in parts.items())


def _is_subset(owned: Partitions | None, parts: Partitions) -> bool:
    if owned is None:
        return True
    return all(ps <= parts.get(tid, frozenset()) for tid, ps in owned.items())


def _new_member_id() -> str:
    # Kafka's Uuid.toString(): URL-safe base64 without padding.
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


# ---------------------------------------------------------------------------------------------
# The group


class ConsumerGroup:
    """One KIP-848 consumer group. See the module docstring for the model.

    Persistent state changes only through :meth:`replay`; the deadlines (session and rebalance
    timeouts) are soft state the shell rebuilds with :meth:`on_loaded` after loading.

    It also follows the offsets manager's ``Group`` protocol
    (:class:`~odradek.coordinator.group.group_metadata_manager.Group`): committed offsets live in
    :attr:`offsets` (kept by the shell, never touched by :meth:`replay`), and OffsetCommit /
    OffsetFetch are validated against the member epochs.
    """

    group_type = "consumer"
    protocol_type: str | None = "consumer"

    def __init__(
        self,
        group_id: str,
        config: ConsumerGroupConfig | None = None,
        *,
        member_id_factory: Callable[[], str] = _new_member_id,
    ) -> None:
        self.group_id = group_id
        self.config = config or ConsumerGroupConfig()
        self._new_member_id = member_id_factory
        self._regex_cache: dict[str, re.Pattern[str]] = {}
        self._regex_matches_cache: dict[str, tuple[Mapping[str, Any], int, frozenset[str]]] = {}
        # Offsets (the Group protocol): written by the shell once a commit is appended.
        self.offsets: dict[tuple[str, int], Any] = {}
        self.pending_offset_commits: dict[tuple[str, int], int] = {}
        # Consumer group offsets expire on their commit timestamp alone (Kafka's
        # ConsumerGroup.offsetExpirationCondition), so there is no state timestamp to add.
        self.current_state_timestamp = -1
        self._reset()

    def _reset(self) -> None:
        self.group_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        self.target_assignment_epoch = 0
        self.target_assignment: dict[str, Partitions] = {}
        # (topic id, partition) -> member owning it (assigned or pending revocation).
        self._owners: dict[tuple[uuid.UUID, int], str] = {}
        self._session_deadlines: dict[str, int] = {}
        self._rebalance_deadlines: dict[str, tuple[int, int]] = {}  # member -> (deadline, epoch)

    # -- queries -------------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.target_assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.target_assignment_epoch or m.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def state_name(self) -> str:
        return self.state.value

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str]:
        """Topics some member subscribes to: its names (existing or not) and its regex matches
        among the known topics (OffsetDelete refuses these, offset expiry spares them)."""
        out: set[str] = set(self.subscription_metadata)
        for m in self.members.values():
            out.update(m.subscribed_topic_names)
        return out

    # -- offsets (the Group protocol) ----------------------------------------------------------

    def validate_offset_commit(
        self,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        now_ms: int,
        *,
        api_version: int = 9,
    ) -> Errors:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``; ``generation_id`` is the member epoch.

        A negative epoch (admin tools, standalone consumers) may commit only while the group
        is empty; a member must commit with its current epoch (else STALE_MEMBER_EPOCH), with
        OffsetCommit v9+."""
        if generation_id < 0 and not self.members:
            return Errors.NONE
        member = self.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if api_version < 9:
            return Errors.UNSUPPORTED_VERSION
        if generation_id != member.member_epoch:
            return Errors.STALE_MEMBER_EPOCH
        return Errors.NONE

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> Errors:
        """Kafka's ``ConsumerGroup.validateOffsetFetch``: no member id and a negative epoch (an
        admin client) is always accepted, a member must give its current epoch."""
        if member_id is None and member_epoch < 0:
            return Errors.NONE
        member = self.members.get(member_id or "")
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return Errors.STALE_MEMBER_EPOCH
        return Errors.NONE

    # -- snapshots (undo a change whose records could not be written) ---------------------------

    def snapshot(self) -> tuple[Any, ...]:
        """The group's state apart from its offsets, to :meth:`restore` if writing the records
        of a change fails. Cheap: members and partition sets are immutable, only the
        containers are copied."""
        return (
            self.group_epoch,
            dict(self.members),
            dict(self.static_members),
            dict(self.subscription_metadata),
            self.target_assignment_epoch,
            dict(self.target_assignment),
            dict(self._owners),
            dict(self._session_deadlines),
            dict(self._rebalance_deadlines),
        )

    def restore(self, snap: tuple[Any, ...]) -> None:
        (
            self.group_epoch,
            members,
            static_members,
            subscription_metadata,
            self.target_assignment_epoch,
            target_assignment,
            owners,
            session_deadlines,
            rebalance_deadlines,
        ) = snap
        self.members = dict(members)
        self.static_members = dict(static_members)
        self.subscription_metadata = dict(subscription_metadata)
        self.target_assignment = dict(target_assignment)
        self._owners = dict(owners)
        self._session_deadlines = dict(session_deadlines)
        self._rebalance_deadlines = dict(rebalance_deadlines)

    def preferred_assignor(self) -> str:
        """The most requested server assignor among the members, else the default one."""
        counts = Counter(
            m.server_assignor
            for m in self.members.values()
            if m.server_assignor in self.config.assignors
        )
        if not counts:
            return self.config.default_assignor
        return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]

    def partition_owner(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self._owners.get((topic_id, partition))

    def session_deadline(self, member_id: str) -> int | None:
        """When the member is expired unless it heartbeats again (ms, the shell's clock)."""
        return self._session_deadlines.get(member_id)

    def rebalance_deadline(self, member_id: str) -> int | None:
        """When the member is fenced unless it has revoked its partitions by then."""
        d = self._rebalance_deadlines.get(member_id)
        return None if d is None else d[0]

    def next_deadline(self) -> int | None:
        """The earliest session or rebalance deadline of any member (one timer is enough)."""
        ds = list(self._session_deadlines.values())
        ds += [d for d, _ in self._rebalance_deadlines.values()]
        return min(ds) if ds else None

    # -- timers --------------------------------------------------------------------------------

    def on_loaded(self, now_ms: int) -> None:
        """After the group was rebuilt by :meth:`replay`: give every member a fresh session, and
        a fresh rebalance timeout to those still revoking (as Kafka does when it loads)."""
        self._session_deadlines = {m: now_ms + self.config.session_timeout_ms for m in self.members}
        self._rebalance_deadlines = {
            mid: (now_ms + max(m.rebalance_timeout_ms, 0), m.member_epoch)
            for mid, m in self.members.items()
            if m.state == MemberState.UNREVOKED_PARTITIONS
        }

    def expire_member(
        self, member_id: str, now_ms: int, *, force: bool = False
    ) -> list[CoordinatorRecord]:
        """Fence a member whose session or rebalance timeout has passed at ``now_ms``.

        A stale timer is harmless: if the member heartbeated (or revoked) since, nothing
        happens and no record is returned. ``force`` fences it regardless."""
        member = self.members.get(member_id)
        if member is None:
            return []
        if not force:
            sd = self._session_deadlines.get(member_id)
            rd = self._rebalance_deadlines.get(member_id)
            session_expired = sd is not None and now_ms >= sd
            rebalance_expired = (
                rd is not None
                and now_ms >= rd[0]
                and member.state == MemberState.UNREVOKED_PARTITIONS
                and member.member_epoch == rd[1]
            )
            if not (session_expired or rebalance_expired):
                return []
        records: list[CoordinatorRecord] = []
        self._fence_member(member_id, records)
        return records

    def expire_due(self, now_ms: int) -> list[CoordinatorRecord]:
        """Fence every member whose deadline has passed (call at :meth:`next_deadline`)."""
        records: list[CoordinatorRecord] = []
        for mid in sorted(self.members):
            records += self.expire_member(mid, now_ms)
        return records

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------------

    def heartbeat(
        self,
        request: Mapping[str, Any],
        now_ms: int,
        topics_metadata: Mapping[str, TopicMetadata],
        *,
        client_id: str = "",
        client_host: str = "",
    ) -> tuple[dict[str, Any], list[CoordinatorRecord]]:
        """Handle one ConsumerGroupHeartbeat request.

        ``topics_metadata``: every topic of the cluster, name -> :class:`TopicMetadata`. Treat it
        as immutable: pass a new mapping when the metadata changes (regex matches are cached for
        as long as the same mapping comes back), e.g. the one of the current metadata image.
        Returns the response dict and the records to write (already applied to this group; if
        the write fails, the shell must rebuild the group from the log). An error response comes
        with no records and leaves the group untouched.
        """
        records: list[CoordinatorRecord] = []
        try:
            response = self._heartbeat(
                request, now_ms, topics_metadata, client_id, client_host, records
            )
        except ConsumerGroupError as e:
            if records:  # a bug: errors must be raised before the first state change
                raise
            return _error_response(e.code, e.message), []
        return response, records

    def _heartbeat(
        self,
        request: Mapping[str, Any],
        now_ms: int,
        topics: Mapping[str, TopicMetadata],
        client_id: str,
        client_host: str,
        records: list[CoordinatorRecord],
    ) -> dict[str, Any]:
        gid = request.get("group_id") or ""
        member_id: str = request.get("member_id") or ""
        epoch = int(request.get("member_epoch", 0))
        instance_id: str | None = request.get("instance_id")
        rack_id: str | None = request.get("rack_id")
        rebalance_timeout_ms = int(request.get("rebalance_timeout_ms", -1))
        names: list[str] | None = request.get("subscribed_topic_names")
        regex: str | None = request.get("subscribed_topic_regex")
        assignor: str | None = request.get("server_assignor")
        owned_raw = request.get("topic_partitions")

        # -- request validation (nothing may change before all checks have passed) --
        invalid = Errors.INVALID_REQUEST
        if not gid:
            raise ConsumerGroupError(invalid, "GroupId can't be empty.")
        if gid != self.group_id:
            raise ConsumerGroupError(invalid, f"GroupId {gid} is not group {self.group_id}.")
        if instance_id is not None and not instance_id:
            raise ConsumerGroupError(invalid, "InstanceId can't be empty.")
        if rack_id is not None and not rack_id:
            raise ConsumerGroupError(invalid, "RackId can't be empty.")
        if (epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) and not member_id:
            raise ConsumerGroupError(invalid, "MemberId can't be empty.")
        if epoch == 0:
            if rebalance_timeout_ms == -1:
                raise ConsumerGroupError(
                    invalid, "RebalanceTimeoutMs must be provided in first request."
                )
            if owned_raw is None or len(owned_raw) > 0:
                raise ConsumerGroupError(
                    invalid, "TopicPartitions must be empty when (re-)joining."
                )
            if names is None and regex is None:
                raise ConsumerGroupError(
                    invalid,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not member_id:
                raise ConsumerGroupError(invalid, "MemberId can't be empty.")
            if instance_id is None:
                raise ConsumerGroupError(invalid, "InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise ConsumerGroupError(invalid, "MemberEpoch is invalid.")
        if assignor is not None and assignor not in self.config.assignors:
            raise ConsumerGroupError(
                Errors.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {assignor} is not supported. Supported assignors: "
                f"{', '.join(self.config.assignors)}.",
            )
        if regex:
            self._compile(regex)
        owned = None if owned_raw is None else _from_tp_list(owned_raw)

        if epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(member_id, epoch, instance_id, now_ms, records)

        # -- find or create the member --
        replaced: ConsumerGroupMember | None = None  # static member replaced by this one
        reset = False  # an existing member rejoins (epoch 0): it starts over without partitions
        if instance_id is None:
            if epoch == 0:
                member_id = member_id or self._new_member_id()
                existing = self.members.get(member_id)
                if existing is None:
                    self._check_not_full()
                    member = ConsumerGroupMember(member_id)
                else:
                    member, reset = existing, True
            else:
                member = self._get_member(member_id)
                self._check_epoch(member, epoch, owned)
        else:
            static_id = self.static_members.get(instance_id)
            static = self.members.get(static_id) if static_id is not None else None
            if epoch == 0:
                member_id = member_id or self._new_member_id()
                if static is None:
                    existing = self.members.get(member_id)
                    if existing is None:
                        self._check_not_full()
                        member = ConsumerGroupMember(member_id)
                    else:
                        member, reset = existing, True
                elif static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    if static.member_id != member_id:
                        raise ConsumerGroupError(
                            Errors.UNRELEASED_INSTANCE_ID,
                            f"Static member {member_id} with instance id {instance_id} cannot "
                            f"join the group because the instance id is owned by "
                            f"{static.member_id} member.",
                        )
                    member, reset = static, True
                elif static.member_id == member_id:
                    # Back from a temporary leave: same partitions, reconciled from epoch 0.
                    member = replace(
                        static,
                        member_epoch=0,
                        previous_member_epoch=-1,
                        state=MemberState.STABLE,
                        partitions_pending_revocation={},
                    )
                else:
                    replaced = static
                    member = ConsumerGroupMember(
                        member_id, assigned_partitions=dict(static.assigned_partitions)
                    )
            else:
                if static is None:
                    raise ConsumerGroupError(
                        Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown."
                    )
                if static.member_id != member_id:
                    raise ConsumerGroupError(
                        Errors.FENCED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {instance_id} is fenced "
                        f"by existing member {static.member_id}.",
                    )
                member = static
                self._check_epoch(member, epoch, owned)
        if reset:
            member = replace(
                member,
                member_epoch=0,
                previous_member_epoch=-1,
                state=MemberState.STABLE,
                assigned_partitions={},
                partitions_pending_revocation={},
            )
        is_new = member_id not in self.members and replaced is None

        # -- 1. member metadata and subscriptions --
        updated = replace(
            member,
            instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=rack_id if rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(
                rebalance_timeout_ms if rebalance_timeout_ms != -1 else member.rebalance_timeout_ms
            ),
            subscribed_topic_names=(
                tuple(sorted(set(names))) if names is not None else member.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (regex or None) if regex is not None else member.subscribed_topic_regex
            ),
            server_assignor=assignor if assignor is not None else member.server_assignor,
            client_id=client_id,
            client_host=client_host,
        )
        previous_target: Partitions | None = None
        if replaced is not None:
            previous_target = self.target_assignment.get(replaced.member_id, {})
            self._remove_member_records(replaced.member_id, records)
            self._session_deadlines.pop(replaced.member_id, None)
            self._rebalance_deadlines.pop(replaced.member_id, None)
            reference = replaced
        else:
            reference = member
        if is_new or replaced is not None or not updated.metadata_equals(self.members[member_id]):
            self._append(records, _member_metadata_record(self.group_id, updated))
        bump = (
            is_new
            or updated.subscribed_topic_names != reference.subscribed_topic_names
            or updated.subscribed_topic_regex != reference.subscribed_topic_regex
            or updated.server_assignor != reference.server_assignor
        )
        new_metadata = self._compute_subscription_metadata(topics)
        if new_metadata != self.subscription_metadata:
            self._append(records, _partition_metadata_record(self.group_id, new_metadata))
            bump = True
        if bump:
            self._append(records, _group_metadata_record(self.group_id, self.group_epoch + 1))

        # -- 2. target assignment --
        if self.group_epoch > self.target_assignment_epoch:
            extra = {member_id: previous_target} if previous_target is not None else {}
            self._update_target_assignment(records, extra)
        elif previous_target is not None:
            self._append(records, _target_member_record(self.group_id, member_id, previous_target))

        # -- 3. reconcile the member towards its target --
        before = self.members[member_id]  # as stored now (metadata applied)
        current = replace(
            before,
            member_epoch=updated.member_epoch,
            previous_member_epoch=updated.previous_member_epoch,
            state=updated.state,
            assigned_partitions=updated.assigned_partitions,
            partitions_pending_revocation=updated.partitions_pending_revocation,
        )
        reconciled = self._reconcile(current, owned)
        if is_new or replaced is not None or not reconciled.assignment_equals(before):
            self._append(records, _current_assignment_record(self.group_id, reconciled))
            if reconciled.state == MemberState.UNREVOKED_PARTITIONS:
                self._rebalance_deadlines[member_id] = (
                    now_ms + max(reconciled.rebalance_timeout_ms, 0),
                    reconciled.member_epoch,
                )
            else:
                self._rebalance_deadlines.pop(member_id, None)
        self._session_deadlines[member_id] = now_ms + self.config.session_timeout_ms

        response: dict[str, Any] = {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "member_id": member_id,
            "member_epoch": reconciled.member_epoch,
            "heartbeat_interval_ms": self.config.heartbeat_interval_ms,
            "assignment": None,
        }
        # Kafka sends the assignment on a full request (a join, or every field set after an
        # error) and whenever it changed; otherwise null means "unchanged".
        full = epoch == 0 or (
            rebalance_timeout_ms != -1 and names is not None and owned_raw is not None
        )
        if full or reconciled.assigned_partitions != member.assigned_partitions:
            response["assignment"] = {"topic_partitions": _tp_list(reconciled.assigned_partitions)}
        return response

    def _leave(
        self,
        member_id: str,
        epoch: int,
        instance_id: str | None,
        now_ms: int,
        records: list[CoordinatorRecord],
    ) -> dict[str, Any]:
        if instance_id is None:
            member = self._get_member(member_id)
        else:
            static_id = self.static_members.get(instance_id)
            if static_id is None or static_id not in self.members:
                raise ConsumerGroupError(
                    Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown."
                )
            if static_id != member_id:
                raise ConsumerGroupError(
                    Errors.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} is fenced by "
                    f"existing member {static_id}.",
                )
            member = self.members[static_id]
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # The static member keeps its partitions until it comes back or its session ends.
            leaving = replace(
                member,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                partitions_pending_revocation={},
                state=(
                    MemberState.STABLE
                    if member.state == MemberState.UNREVOKED_PARTITIONS
                    else member.state
                ),
            )
            self._append(records, _current_assignment_record(self.group_id, leaving))
            self._rebalance_deadlines.pop(member.member_id, None)
            self._session_deadlines[member.member_id] = now_ms + self.config.session_timeout_ms
        else:
            self._fence_member(member.member_id, records)
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "member_id": member.member_id,
            "member_epoch": epoch,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }

    # -- internals -----------------------------------------------------------------------------

    def _get_member(self, member_id: str) -> ConsumerGroupMember:
        member = self.members.get(member_id)
        if member is None:
            raise ConsumerGroupError(
                Errors.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {self.group_id}.",
            )
        return member

    def _check_not_full(self) -> None:
        if len(self.members) >= self.config.max_size:
            raise ConsumerGroupError(
                Errors.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of "
                f"{self.config.max_size} members.",
            )

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, received: int, owned: Partitions | None) -> None:
        if received > member.member_epoch:
            raise ConsumerGroupError(
                Errors.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({received}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                f"all its partitions and rejoin.",
            )
        if received < member.member_epoch and (
            received != member.previous_member_epoch
            or not _is_subset(owned, member.assigned_partitions)
        ):
            # The previous epoch with a subset of the assignment is accepted: the response
            # that bumped the epoch may have been lost.
            raise ConsumerGroupError(
                Errors.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({received}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                f"all its partitions and rejoin.",
            )

    def _compile(self, regex: str) -> re.Pattern[str]:
        pat = self._regex_cache.get(regex)
        if pat is None:
            try:
                pat = re.compile(regex)
            except re.error as e:
                raise ConsumerGroupError(
                    INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{regex}` is not valid: {e}"
                ) from None
            self._regex_cache[regex] = pat
        return pat

    def member_subscribed_topics(
        self, member: ConsumerGroupMember, topics: Mapping[str, Any]
    ) -> frozenset[str]:
        """The member's subscription among ``topics`` (keyed by name): its names that exist plus
        the topics its regex fully matches (never internal topics)."""
        out = {t for t in member.subscribed_topic_names if t in topics}
        if member.subscribed_topic_regex:
            out |= self._regex_matches(member.subscribed_topic_regex, topics)
        return frozenset(out)

    def _regex_matches(self, regex: str, topics: Mapping[str, Any]) -> frozenset[str]:
        # Matching every topic of a large cluster on every heartbeat would be slow: results
        # are kept per regex for as long as the same (unchanged) mapping is passed in.
        cached = self._regex_matches_cache.get(regex)
        if cached is not None and cached[0] is topics and cached[1] == len(topics):
            return cached[2]
        pat = self._compile(regex)
        found = frozenset(t for t in topics if t not in INTERNAL_TOPICS and pat.fullmatch(t))
        self._regex_matches_cache[regex] = (topics, len(topics), found)
        return found

    def _compute_subscription_metadata(
        self, topics: Mapping[str, TopicMetadata]
    ) -> dict[str, TopicMetadata]:
        """Metadata of every topic of ``topics`` some member subscribes to (by name or regex)."""
        wanted: set[str] = set()
        for m in self.members.values():
            wanted |= self.member_subscribed_topics(m, topics)
        return {t: TopicMetadata(*topics[t]) for t in sorted(wanted)}

    def _update_target_assignment(
        self, records: list[CoordinatorRecord], previous: Mapping[str, Partitions]
    ) -> None:
        assignor = ASSIGNORS[self.preferred_assignor()]
        specs = {
            mid: MemberSubscription(
                subscribed_topics=self.member_subscribed_topics(m, self.subscription_metadata),
                assignment=previous.get(mid, self.target_assignment.get(mid, {})),
                rack_id=m.rack_id,
                instance_id=m.instance_id,
            )
            for mid, m in self.members.items()
        }
        result = assignor.assign(specs, self.subscription_metadata)
        for mid in sorted(self.members):
            new = _clean(result.get(mid, {}))
            if mid in previous or new != self.target_assignment.get(mid, {}):
                self._append(records, _target_member_record(self.group_id, mid, new))
        self._append(records, _target_metadata_record(self.group_id, self.group_epoch))

    def _reconcile(
        self, member: ConsumerGroupMember, owned: Partitions | None
    ) -> ConsumerGroupMember:
        target_epoch = self.target_assignment_epoch
        if member.state == MemberState.STABLE:
            if member.member_epoch == target_epoch:
                return member
            return self._next_assignment(member, member.member_epoch, owned)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(owned, member.partitions_pending_revocation):
                return member
            return self._next_assignment(member, member.member_epoch, owned)
        if member.state == MemberState.UNRELEASED_PARTITIONS:
            return self._next_assignment(member, member.member_epoch, owned)
        # UNKNOWN (a state from a newer version): start over from no partitions.
        if owned is None or owned:
            raise ConsumerGroupError(
                Errors.FENCED_MEMBER_EPOCH,
                "The consumer group member is in a unknown state. The member must abandon all "
                "its partitions and rejoin.",
            )
        return self._next_assignment(replace(member, assigned_partitions={}), target_epoch, owned)

    def _next_assignment(
        self, member: ConsumerGroupMember, epoch: int, owned: Partitions | None
    ) -> ConsumerGroupMember:
        target = self.target_assignment.get(member.member_id, {})
        current = member.assigned_partitions
        keep: dict[uuid.UUID, set[int]] = {}
        revoke: dict[uuid.UUID, set[int]] = {}
        add: dict[uuid.UUID, set[int]] = {}
        unreleased = False
        for tid in set(target) | set(current):
            tgt = target.get(tid, frozenset())
            cur = current.get(tid, frozenset())
            keep[tid] = set(cur & tgt)
            revoke[tid] = set(cur - tgt)
            wanted = tgt - cur
            free = {
                p
                for p in wanted
                if self._owners.get((tid, p), member.member_id) == member.member_id
            }
            unreleased = unreleased or len(free) != len(wanted)
            add[tid] = free
        revoking = _clean(revoke)

        def with_epoch(new_epoch: int, **kw: Any) -> ConsumerGroupMember:
            prev = member.previous_member_epoch
            if new_epoch != member.member_epoch:
                prev = member.member_epoch
            return replace(member, member_epoch=new_epoch, previous_member_epoch=prev, **kw)

        if revoking and _owns_any(owned, revoking):
            # Give up partitions first; the member stays in its epoch until it has.
            return with_epoch(
                epoch,
                state=MemberState.UNREVOKED_PARTITIONS,
                assigned_partitions=_clean(keep),
                partitions_pending_revocation=revoking,
            )
        assigned = _clean({tid: keep[tid] | add[tid] for tid in keep})
        return with_epoch(
            self.target_assignment_epoch,
            state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
            assigned_partitions=assigned,
            partitions_pending_revocation={},
        )

    def _remove_member_records(self, member_id: str, records: list[CoordinatorRecord]) -> None:
        # Order matters (Kafka's removeMember): assignment, target, then the member itself.
        key = {"group_id": self.group_id, "member_id": member_id}
        self._append(records, CoordinatorRecord(CURRENT_MEMBER_ASSIGNMENT, dict(key), None))
        self._append(records, CoordinatorRecord(TARGET_ASSIGNMENT_MEMBER, dict(key), None))
        self._append(records, CoordinatorRecord(MEMBER_METADATA, dict(key), None))

    def _fence_member(self, member_id: str, records: list[CoordinatorRecord]) -> None:
        """Remove a member (leave, session or rebalance timeout) and bump the group epoch."""
        self._remove_member_records(member_id, records)
        self._session_deadlines.pop(member_id, None)
        self._rebalance_deadlines.pop(member_id, None)
        # Only topics nobody subscribes to any more can disappear: use what is known.
        new_metadata = self._compute_subscription_metadata(self.subscription_metadata)
        if new_metadata != self.subscription_metadata:
            self._append(records, _partition_metadata_record(self.group_id, new_metadata))
        self._append(records, _group_metadata_record(self.group_id, self.group_epoch + 1))

    def _append(self, records: list[CoordinatorRecord], record: CoordinatorRecord) -> None:
        self.replay(record.name, record.key, record.value)
        records.append(record)

    # -- replay --------------------------------------------------------------------------------

    def replay(self, name: str, key: Mapping[str, Any], value: Mapping[str, Any] | None) -> None:
        """Apply one coordinator record of this group (as written, or read back from the log)."""
        if key.get("group_id", self.group_id) != self.group_id:
            raise ValueError(
                f"record of group {key.get('group_id')!r} replayed on {self.group_id!r}"
            )
        if name == GROUP_METADATA:
            if value is None:
                self._reset()
            else:
                self.group_epoch = int(value["epoch"])
        elif name == PARTITION_METADATA:
            self.subscription_metadata = (
                {}
                if value is None
                else {
                    t["topic_name"]: TopicMetadata(
                        _as_uuid(t["topic_id"]), t["topic_name"], int(t["num_partitions"])
                    )
                    for t in value["topics"]
                }
            )
        elif name == MEMBER_METADATA:
            mid = key["member_id"]
            old = self.members.get(mid)
            if value is None:
                if old is not None:
                    self._set_owner(old, None)
                    del self.members[mid]
                    if old.instance_id and self.static_members.get(old.instance_id) == mid:
                        del self.static_members[old.instance_id]
                return
            base = old or ConsumerGroupMember(mid)
            if old is not None and old.instance_id and old.instance_id != value["instance_id"]:
                if self.static_members.get(old.instance_id) == mid:
                    del self.static_members[old.instance_id]
            new = replace(
                base,
                instance_id=value.get("instance_id"),
                rack_id=value.get("rack_id"),
                client_id=value.get("client_id", ""),
                client_host=value.get("client_host", ""),
                subscribed_topic_names=tuple(value.get("subscribed_topic_names") or ()),
                subscribed_topic_regex=value.get("subscribed_topic_regex"),
                rebalance_timeout_ms=int(value.get("rebalance_timeout_ms", -1)),
                server_assignor=value.get("server_assignor"),
            )
            self.members[mid] = new
            if new.instance_id:
                self.static_members[new.instance_id] = mid
        elif name == TARGET_ASSIGNMENT_MEMBER:
            mid = key["member_id"]
            if value is None:
                self.target_assignment.pop(mid, None)
            else:
                self.target_assignment[mid] = _from_tp_list(value["topic_partitions"])
        elif name == TARGET_ASSIGNMENT_METADATA:
            self.target_assignment_epoch = 0 if value is None else int(value["assignment_epoch"])
        elif name == CURRENT_MEMBER_ASSIGNMENT:
            mid = key["member_id"]
            old = self.members.get(mid)
            if value is None:
                if old is not None:
                    self._set_owner(old, None)
                    self.members[mid] = replace(
                        old,
                        member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        state=MemberState.STABLE,
                        assigned_partitions={},
                        partitions_pending_revocation={},
                    )
                return
            base = old or ConsumerGroupMember(mid)
            try:
                state = MemberState(int(value["state"]))
            except ValueError:
                state = MemberState.UNKNOWN
            new = replace(
                base,
                member_epoch=int(value["member_epoch"]),
                previous_member_epoch=int(value["previous_member_epoch"]),
                state=state,
                assigned_partitions=_from_tp_list(value["assigned_partitions"]),
                partitions_pending_revocation=_from_tp_list(value["partitions_pending_revocation"]),
            )
            if old is not None:
                self._set_owner(old, None)
            self.members[mid] = new
            self._set_owner(new, mid)
        else:
            raise ValueError(f"not a consumer group record: {name!r}")

    def _set_owner(self, member: ConsumerGroupMember, owner: str | None) -> None:
        for parts in (member.assigned_partitions, member.partitions_pending_revocation):
            for tid, ps in parts.items():
                for p in ps:
                    if owner is None:
                        if self._owners.get((tid, p)) == member.member_id:
                            del self._owners[(tid, p)]
                    else:
                        self._owners[(tid, p)] = owner

    # -- records of the whole group (snapshot) -------------------------------------------------

    def records(self) -> list[CoordinatorRecord]:
        """Records that rebuild this group from nothing (e.g. to compare or to compact)."""
        gid = self.group_id
        out = [_group_metadata_record(gid, self.group_epoch)]
        if self.subscription_metadata:
            out.append(_partition_metadata_record(gid, self.subscription_metadata))
        for mid in sorted(self.members):
            out.append(_member_metadata_record(gid, self.members[mid]))
        for mid in sorted(self.target_assignment):
            out.append(_target_member_record(gid, mid, self.target_assignment[mid]))
        out.append(_target_metadata_record(gid, self.target_assignment_epoch))
        for mid in sorted(self.members):
            out.append(_current_assignment_record(gid, self.members[mid]))
        return out

    def tombstones(self) -> list[CoordinatorRecord]:
        """Records that delete the whole group (DeleteGroups, or offsets expired on an empty
        group), in Kafka's order: members first, then the group's own records. Not applied:
        the shell drops the group once they are written."""
        gid = self.group_id
        out: list[CoordinatorRecord] = []
        for mid in sorted(self.members):
            key = {"group_id": gid, "member_id": mid}
            out.append(CoordinatorRecord(CURRENT_MEMBER_ASSIGNMENT, dict(key), None))
            out.append(CoordinatorRecord(TARGET_ASSIGNMENT_MEMBER, dict(key), None))
            out.append(CoordinatorRecord(MEMBER_METADATA, dict(key), None))
        out.append(CoordinatorRecord(TARGET_ASSIGNMENT_METADATA, {"group_id": gid}, None))
        out.append(CoordinatorRecord(PARTITION_METADATA, {"group_id": gid}, None))
        out.append(CoordinatorRecord(GROUP_METADATA, {"group_id": gid}, None))
        return out

    # -- ConsumerGroupDescribe -----------------------------------------------------------------

    def describe(
        self, topics_metadata: Mapping[str, TopicMetadata] | None = None
    ) -> dict[str, Any]:
        """This group as one entry of ``groups`` in a ConsumerGroupDescribe response."""
        names: dict[uuid.UUID, str] = {
            t.topic_id: n for n, t in (topics_metadata or self.subscription_metadata).items()
        }
        if topics_metadata is not None:
            for n, t in self.subscription_metadata.items():
                names.setdefault(t.topic_id, n)

        def described(parts: Partitions) -> dict[str, Any]:
            return {
                "topic_partitions": [
                    {"topic_id": tid, "topic_name": names[tid], "partitions": sorted(ps)}
                    for tid, ps in sorted(parts.items(), key=lambda kv: names.get(kv[0], ""))
                    if tid in names
                ]
            }

        members = []
        for mid in sorted(self.members):
            m = self.members[mid]
            members.append(
                {
                    "member_id": mid,
                    "instance_id": m.instance_id,
                    "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "assignment": described(m.assigned_partitions),
                    "target_assignment": described(self.target_assignment.get(mid, {})),
                }
            )
        return {
            "error_code": 0,
            "error_message": None,
            "group_id": self.group_id,
            "group_state": self.state.value,
            "group_epoch": self.group_epoch,
            "assignment_epoch": self.target_assignment_epoch,
            "assignor_name": self.preferred_assignor(),
            "members": members,
            "authorized_operations": -(2**31),
        }


def _error_response(code: int, message: str | None) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


# ---------------------------------------------------------------------------------------------
# Records: names, builders and their __consumer_offsets encoding

GROUP_METADATA = "ConsumerGroupMetadata"
PARTITION_METADATA = "ConsumerGroupPartitionMetadata"
MEMBER_METADATA = "ConsumerGroupMemberMetadata"
TARGET_ASSIGNMENT_METADATA = "ConsumerGroupTargetAssignmentMetadata"
TARGET_ASSIGNMENT_MEMBER = "ConsumerGroupTargetAssignmentMember"
CURRENT_MEMBER_ASSIGNMENT = "ConsumerGroupCurrentMemberAssignment"


def _group_metadata_record(group_id: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(GROUP_METADATA, {"group_id": group_id}, {"epoch": epoch})


def _partition_metadata_record(
    group_id: str, metadata: Mapping[str, TopicMetadata]
) -> CoordinatorRecord:
    topics = [
        {
            "topic_id": t.topic_id,
            "topic_name": t.name,
            "num_partitions": t.num_partitions,
            "partition_metadata": [],
        }
        for _, t in sorted(metadata.items())
    ]
    return CoordinatorRecord(PARTITION_METADATA, {"group_id": group_id}, {"topics": topics})


def _member_metadata_record(group_id: str, m: ConsumerGroupMember) -> CoordinatorRecord:
    return CoordinatorRecord(
        MEMBER_METADATA, {"group_id": group_id, "member_id": m.member_id}, _metadata_value(m)
    )


def _target_member_record(group_id: str, member_id: str, parts: Partitions) -> CoordinatorRecord:
    return CoordinatorRecord(
        TARGET_ASSIGNMENT_MEMBER,
        {"group_id": group_id, "member_id": member_id},
        {"topic_partitions": _tp_list(parts)},
    )


def _target_metadata_record(group_id: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(
        TARGET_ASSIGNMENT_METADATA, {"group_id": group_id}, {"assignment_epoch": epoch}
    )


def _current_assignment_record(group_id: str, m: ConsumerGroupMember) -> CoordinatorRecord:
    return CoordinatorRecord(
        CURRENT_MEMBER_ASSIGNMENT,
        {"group_id": group_id, "member_id": m.member_id},
        _assignment_value(m),
    )


def _key_schema(name: str, version: int, with_member: bool) -> Schema:
    v = str(version)
    fields = [F("group_id", "string", v)]
    if with_member:
        fields.append(F("member_id", "string", v))
    return Schema(name + "Key", version, version, INF, fields)


_TOPIC_PARTITIONS = S(F("topic_id", "uuid", "0+"), F("partitions", A("int32"), "0+"))

# record name -> (key version, key schema, value version, value schema), from Kafka's
# group-coordinator/src/main/resources/common/message/ConsumerGroup*{Key,Value}.json.
RECORD_SCHEMAS: dict[str, tuple[int, Schema, int, Schema]] = {
    GROUP_METADATA: (
        3,
        _key_schema(GROUP_METADATA, 3, False),
        0,
        Schema(GROUP_METADATA + "Value", 0, 0, 0, [F("epoch", "int32", "0+")]),
    ),
    PARTITION_METADATA: (
        4,
        _key_schema(PARTITION_METADATA, 4, False),
        0,
        Schema(
            PARTITION_METADATA + "Value",
            0,
            0,
            0,
            [
                F(
                    "topics",
                    A(
                        S(
                            F("topic_id", "uuid", "0+"),
                            F("topic_name", "string", "0+"),
                            F("num_partitions", "int32", "0+"),
                            F(
                                "partition_metadata",
                                A(
                                    S(
                                        F("partition", "int32", "0+"),
                                        F("racks", A("string"), "0+"),
                                    )
                                ),
                                "0+",
                            ),
                        )
                    ),
                    "0+",
                )
            ],
        ),
    ),
    MEMBER_METADATA: (
        5,
        _key_schema(MEMBER_METADATA, 5, True),
        0,
        Schema(
            MEMBER_METADATA + "Value",
            0,
            0,
            0,
            [
                F("instance_id", "string", "0+", nullable="0+"),
                F("rack_id", "string", "0+", nullable="0+"),
                F("client_id", "string", "0+"),
                F("client_host", "string", "0+"),
                F("subscribed_topic_names", A("string"), "0+"),
                F("subscribed_topic_regex", "string", "0+", nullable="0+"),
                F("rebalance_timeout_ms", "int32", "0+", default="-1"),
                F("server_assignor", "string", "0+", nullable="0+"),
                F(
                    "classic_member_metadata",
                    S(
                        F("session_timeout_ms", "int32", "0+"),
                        F(
                            "supported_protocols",
                            A(S(F("name", "string", "0+"), F("metadata", "bytes", "0+"))),
                            "0+",
                        ),
                    ),
                    "0+",
                    nullable="0+",
                    tag=0,
                    tagged="0+",
                    default="null",
                ),
            ],
        ),
    ),
    TARGET_ASSIGNMENT_METADATA: (
        6,
        _key_schema(TARGET_ASSIGNMENT_METADATA, 6, False),
        0,
        Schema(
            TARGET_ASSIGNMENT_METADATA + "Value", 0, 0, 0, [F("assignment_epoch", "int32", "0+")]
        ),
    ),
    TARGET_ASSIGNMENT_MEMBER: (
        7,
        _key_schema(TARGET_ASSIGNMENT_MEMBER, 7, True),
        0,
        Schema(
            TARGET_ASSIGNMENT_MEMBER + "Value",
            0,
            0,
            0,
            [F("topic_partitions", A(_TOPIC_PARTITIONS), "0+")],
        ),
    ),
    CURRENT_MEMBER_ASSIGNMENT: (
        8,
        _key_schema(CURRENT_MEMBER_ASSIGNMENT, 8, True),
        0,
        Schema(
            CURRENT_MEMBER_ASSIGNMENT + "Value",
            0,
            0,
            0,
            [
                F("member_epoch", "int32", "0+"),
                F("previous_member_epoch", "int32", "0+"),
                F("state", "int8", "0+"),
                F("assigned_partitions", A(_TOPIC_PARTITIONS), "0+"),
                F("partitions_pending_revocation", A(_TOPIC_PARTITIONS), "0+"),
            ],
        ),
    ),
}

# key version -> record name (versions 0-2 are offset commits and classic group metadata).
RECORD_NAMES_BY_KEY_VERSION: dict[int, str] = {v[0]: n for n, v in RECORD_SCHEMAS.items()}

_I16 = struct.Struct(">h")


def encode_record(
    name: str, key: Mapping[str, Any], value: Mapping[str, Any] | None
) -> tuple[bytes, bytes | None]:
    """``(key bytes, value bytes or None for a tombstone)`` of a consumer group record."""
    key_version, key_schema, value_version, value_schema = RECORD_SCHEMAS[name]
    kb = _I16.pack(key_version) + key_schema.encode(key_version, dict(key))
    if value is None:
        return kb, None
    return kb, _I16.pack(value_version) + value_schema.encode(value_version, dict(value))


def is_consumer_group_key(key: bytes) -> bool:
    return len(key) >= 2 and _I16.unpack_from(key)[0] in RECORD_NAMES_BY_KEY_VERSION


def decode_record(key: bytes, value: bytes | None) -> CoordinatorRecord:
    """The inverse of :func:`encode_record`; raises SchemaError for other records."""
    if len(key) < 2:
        raise SchemaError("coordinator record key too short")
    key_version = _I16.unpack_from(key)[0]
    name = RECORD_NAMES_BY_KEY_VERSION.get(key_version)
    if name is None:
        raise SchemaError(f"key version {key_version} is not a consumer group record")
    _, key_schema, _, value_schema = RECORD_SCHEMAS[name]
    k, _ = key_schema.decode(key_version, key, 2)
    if value is None:
        return CoordinatorRecord(name, k, None)
    if len(value) < 2:
        raise SchemaError("coordinator record value too short")
    value_version = _I16.unpack_from(value)[0]
    if value_version != 0:
        raise SchemaError(f"{name} value version {value_version} is not supported")
    v, _ = value_schema.decode(value_version, value, 2)
    return CoordinatorRecord(name, k, v)
