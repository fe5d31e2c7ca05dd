"""A consumer group of the new rebalance protocol (KIP-848, ``group.protocol=consumer``): Kafka's
``ConsumerGroup``, the model.

The group's state is its **group epoch** (bumped whenever the assignment must be recomputed), its
members (:mod:`~odradek.coordinator.group.consumer_group_member`), the metadata of the topics they
subscribe to, and the **target assignment** (member id -> partitions) of the target assignment
epoch. Persistent state changes only through :meth:`ConsumerGroup.replay` of a coordinator record
(:mod:`~odradek.coordinator.group.consumer_group_records`): as written by a heartbeat
(:mod:`~odradek.coordinator.group.consumer_group_heartbeat`) or read back from the log after a
restart, so a group rebuilt from its records is the group that wrote them. The members' session
and rebalance deadlines are soft state, rebuilt by :meth:`ConsumerGroup.on_loaded`. No clock, no
I/O.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from enum import Enum
from typing import Any

from odradek.coordinator.group.assignors import TopicMetadata
from odradek.coordinator.group.consumer_group_member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerGroupError,
    ConsumerGroupMember,
    MemberState,
    Partitions,
    as_uuid,
    from_tp_list,
    new_member_id,
)
from odradek.coordinator.group.consumer_group_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    CoordinatorRecord,
    current_assignment_record,
    group_metadata_record,
    member_metadata_record,
    partition_metadata_record,
    target_member_record,
    target_metadata_record,
)
from odradek.coordinator.group.dynamic_group_config import with_group_overrides
from odradek.coordinator.group.group_coordinator_config import ConsumerGroupConfig
from odradek.protocol.errors import Errors

# Kafka 4.0's error for an invalid subscribed_topic_regex.
INVALID_REGULAR_EXPRESSION = int(Errors.INVALID_REGULAR_EXPRESSION)
# Never matched by a subscribed regular expression.
INTERNAL_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"}
)
# Which of the topics a regex matched its member may see (the authorizer's topic DESCRIBE).
TopicFilter = Callable[[frozenset[str]], "set[str] | frozenset[str]"]


def _no_overrides() -> Mapping[str, str]:
    return {}


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"



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
        member_id_factory: Callable[[], str] = new_member_id,
    ) -> None:
        self.group_id = group_id
        self.base_config = config or ConsumerGroupConfig()
        # The group's own configs (resource type GROUP), looked up at each use: set by the
        # metadata manager to read the metadata image.
        self.config_overrides: Callable[[], Mapping[str, str]] = _no_overrides
        self.new_member_id = member_id_factory
        self._regex_cache: dict[str, re.Pattern[str]] = {}
        self._regex_matches_cache: dict[
            str, tuple[Mapping[str, Any], int, frozenset[str], TopicFilter | None]
        ] = {}
        # With an authorizer, a regex resolves to the topics the member whose heartbeat made it
        # resolve may DESCRIBE (Kafka 4, KAFKA-18813). Set for the time of a heartbeat
        # (consumer_group_heartbeat): the sender's regex and its filter. Its own regex is
        # resolved with it; other regexes keep the filter they were last resolved with (no
        # ping-pong between members of different principals), or take it if they have none.
        self.regex_topic_filter: tuple[str | None, TopicFilter] | None = None
        # Offsets (the Group protocol): written by the shell once a commit is appended.
        self.offsets: dict[tuple[str, int], Any] = {}
        self.pending_offset_commits: dict[tuple[str, int], int] = {}
        # Consumer group offsets expire on their commit timestamp alone (Kafka's
        # ConsumerGroup.offsetExpirationCondition), so there is no state timestamp to add.
        self.current_state_timestamp = -1
        self._reset()

    @property
    def config(self) -> ConsumerGroupConfig:
        """The broker's consumer-group settings with this group's own session timeout and
        heartbeat interval (KIP-848 group configs) laid over."""
        overrides = self.config_overrides()
        return with_group_overrides(self.base_config, overrides) if overrides else self.base_config

    def _reset(self) -> None:
        self.group_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        self.target_assignment_epoch = 0
        self.target_assignment: dict[str, Partitions] = {}
        # (topic id, partition) -> member owning it (assigned or pending revocation).
        self._owners: dict[tuple[uuid.UUID, int], str] = {}
        # Soft state, set by the heartbeat (consumer_group_heartbeat) and by on_loaded.
        self.session_deadlines: dict[str, int] = {}
        self.rebalance_deadlines: dict[str, tuple[int, int]] = {}  # member -> (deadline, epoch)

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

    def validate_txn_offset_commit(
        self, member_id: str, member_epoch: int, group_instance_id: str | None
    ) -> Errors:
        """Kafka's ``ConsumerGroup.validateOffsetCommit`` for a TxnOffsetCommit (any version):
        a negative epoch while the group has no members is accepted, else the member must exist
        and give its current epoch (a newer one is FENCED_MEMBER_EPOCH, an older one
        ILLEGAL_GENERATION, as Kafka answers STALE_MEMBER_EPOCH for TxnOffsetCommit)."""
        if member_epoch < 0 and not self.members:
            return Errors.NONE
        member = self.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if member_epoch > member.member_epoch:
            return Errors.FENCED_MEMBER_EPOCH
        if member_epoch < member.member_epoch:
            return Errors.ILLEGAL_GENERATION
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
            dict(self.session_deadlines),
            dict(self.rebalance_deadlines),
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
        self.session_deadlines = dict(session_deadlines)
        self.rebalance_deadlines = dict(rebalance_deadlines)

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
        return self.session_deadlines.get(member_id)

    def rebalance_deadline(self, member_id: str) -> int | None:
        """When the member is fenced unless it has revoked its partitions by then."""
        d = self.rebalance_deadlines.get(member_id)
        return None if d is None else d[0]

    def next_deadline(self) -> int | None:
        """The earliest session or rebalance deadline of any member (one timer is enough)."""
        ds = list(self.session_deadlines.values())
        ds += [d for d, _ in self.rebalance_deadlines.values()]
        return min(ds) if ds else None

    # -- timers --------------------------------------------------------------------------------

    def on_loaded(self, now_ms: int) -> None:
        """After the group was rebuilt by :meth:`replay`: give every member a fresh session, and
        a fresh rebalance timeout to those still revoking (as Kafka does when it loads)."""
        self.session_deadlines = {m: now_ms + self.config.session_timeout_ms for m in self.members}
        self.rebalance_deadlines = {
            mid: (now_ms + max(m.rebalance_timeout_ms, 0), m.member_epoch)
            for mid, m in self.members.items()
            if m.state == MemberState.UNREVOKED_PARTITIONS
        }

    # -- subscriptions ---------------------------------------------------------------------------

    def compile_regex(self, regex: str) -> re.Pattern[str]:
        """A member's ``subscribed_topic_regex``; INVALID_REGULAR_EXPRESSION if it is not one."""
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
        pat = self.compile_regex(regex)
        found = frozenset(t for t in topics if t not in INTERNAL_TOPICS and pat.fullmatch(t))
        allowed = cached[3] if cached is not None else None
        current = self.regex_topic_filter
        if current is not None and (current[0] == regex or allowed is None):
            allowed = current[1]
        if allowed is not None and found:
            found = frozenset(allowed(found))
        self._regex_matches_cache[regex] = (topics, len(topics), found, allowed)
        return found

    def compute_subscription_metadata(
        self, topics: Mapping[str, TopicMetadata]
    ) -> dict[str, TopicMetadata]:
        """Metadata of every topic of ``topics`` some member subscribes to (by name or regex)."""
        wanted: set[str] = set()
        for m in self.members.values():
            wanted |= self.member_subscribed_topics(m, topics)
        return {t: TopicMetadata(*topics[t]) for t in sorted(wanted)}

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
                        as_uuid(t["topic_id"]), t["topic_name"], int(t["num_partitions"])
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
                self.target_assignment[mid] = from_tp_list(value["topic_partitions"])
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
                assigned_partitions=from_tp_list(value["assigned_partitions"]),
                partitions_pending_revocation=from_tp_list(value["partitions_pending_revocation"]),
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
        out = [group_metadata_record(gid, self.group_epoch)]
        if self.subscription_metadata:
            out.append(partition_metadata_record(gid, self.subscription_metadata))
        for mid in sorted(self.members):
            out.append(member_metadata_record(gid, self.members[mid]))
        for mid in sorted(self.target_assignment):
            out.append(target_member_record(gid, mid, self.target_assignment[mid]))
        out.append(target_metadata_record(gid, self.target_assignment_epoch))
        for mid in sorted(self.members):
            out.append(current_assignment_record(gid, self.members[mid]))
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


def describe_error(group_id: str, code: Errors, message: str | None = None) -> dict[str, Any]:
    """A group of a ConsumerGroupDescribe response that could not be described."""
    return {
        "error_code": code,
        "error_message": message if message is not None else code.name,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor_name": "",
        "members": [],
        "authorized_operations": -(2**31),
    }
