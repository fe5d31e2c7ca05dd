"""ConsumerGroupHeartbeat and the member timeouts of KIP-848 groups (Kafka's
``GroupMetadataManager.consumerGroupHeartbeat`` and its session / rebalance timeouts).

Sans-I/O: a request (a plain dict, as decoded by the codec), the current time and the topic
metadata go in; the response dict and the coordinator records to write come out. The records are
already applied to the group (through :meth:`ConsumerGroup.replay`, the path a group loaded from
the log takes too); an error response comes with no records and leaves the group untouched.
Nothing here reads a clock or schedules anything: the heartbeat sets the member's deadlines on the
group and the shell calls :func:`expire_due` when :meth:`ConsumerGroup.next_deadline` passes.

A heartbeat, in Kafka's order:

1. the member's metadata and subscriptions are updated; the **group epoch** is bumped when a
   member joins, its subscription (names, regex, preferred assignor) changes, or the metadata of a
   subscribed topic changed;
2. when the group epoch is ahead of the target assignment epoch, a new target assignment is
   computed (:class:`~odradek.coordinator.group.target_assignment_builder.TargetAssignmentBuilder`);
3. the member is reconciled towards its target
   (:class:`~odradek.coordinator.group.current_assignment_builder.CurrentAssignmentBuilder`).

A member is fenced (removed, and the group epoch bumped) when it leaves, when it does not
heartbeat within ``group.consumer.session.timeout.ms``, or when it has not revoked partitions
within its rebalance timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from odradek.coordinator.group.assignors import TopicMetadata
from odradek.coordinator.group.consumer_group import ConsumerGroup, TopicFilter
from odradek.coordinator.group.consumer_group_member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupError,
    ConsumerGroupMember,
    MemberState,
    Partitions,
    from_tp_list,
    is_subset,
    tp_list,
)
from odradek.coordinator.group.consumer_group_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    MEMBER_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    CoordinatorRecord,
    current_assignment_record,
    group_metadata_record,
    member_metadata_record,
    partition_metadata_record,
    target_member_record,
)
from odradek.coordinator.group.current_assignment_builder import CurrentAssignmentBuilder
from odradek.coordinator.group.target_assignment_builder import TargetAssignmentBuilder
from odradek.protocol.errors import Errors


def error_response(code: int, message: str | None = None) -> dict[str, Any]:
    """A failed ConsumerGroupHeartbeat response (the message defaults to the error's name)."""
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message if message is not None else Errors(code).name,
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


def consumer_group_heartbeat(
    group: ConsumerGroup,
    request: Mapping[str, Any],
    now_ms: int,
    topics_metadata: Mapping[str, TopicMetadata],
    *,
    client_id: str = "",
    client_host: str = "",
    topic_filter: TopicFilter | None = None,
) -> tuple[dict[str, Any], list[CoordinatorRecord]]:
    """Handle one ConsumerGroupHeartbeat request for ``group``.

    ``topics_metadata``: every topic of the cluster, name -> :class:`TopicMetadata`. Treat it as
    immutable: pass a new mapping when the metadata changes (regex matches are cached for as
    long as the same mapping comes back), e.g. the one of the current metadata image. Returns
    the response dict and the records to write (already applied to the group; if the write
    fails, the shell restores the group from a :meth:`ConsumerGroup.snapshot`). ``topic_filter``
    (an authorizer's topic DESCRIBE for the sender): what the regexes this heartbeat resolves
    may match.
    """
    records: list[CoordinatorRecord] = []
    if topic_filter is not None:
        own = request.get("subscribed_topic_regex")
        if own is None:
            member = group.members.get(request.get("member_id") or "")
            own = member.subscribed_topic_regex if member is not None else None
        group.regex_topic_filter = (own or None, topic_filter)
    try:
        response = _heartbeat(group, request, now_ms, topics_metadata, client_id, client_host, records)
    except ConsumerGroupError as e:
        if records:  # a bug: errors must be raised before the first state change
            raise
        return error_response(e.code, e.message), []
    finally:
        group.regex_topic_filter = None
    return response, records


def expire_member(
    group: ConsumerGroup, member_id: str, now_ms: int, *, force: bool = False
) -> list[CoordinatorRecord]:
    """Fence a member whose session or rebalance timeout has passed at ``now_ms``.

    A stale timer is harmless: if the member heartbeated (or revoked) since, nothing happens and
    no record is returned. ``force`` fences it regardless."""
    member = group.members.get(member_id)
    if member is None:
        return []
    if not force:
        sd = group.session_deadlines.get(member_id)
        rd = group.rebalance_deadlines.get(member_id)
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
    fence_member(group, member_id, records)
    return records


def expire_due(group: ConsumerGroup, now_ms: int) -> list[CoordinatorRecord]:
    """Fence every member whose deadline has passed (call at :meth:`ConsumerGroup.next_deadline`)."""
    records: list[CoordinatorRecord] = []
    for mid in sorted(group.members):
        records += expire_member(group, mid, now_ms)
    return records


def fence_member(group: ConsumerGroup, member_id: str, records: list[CoordinatorRecord]) -> None:
    """Remove a member (leave, session or rebalance timeout) and bump the group epoch."""
    _remove_member_records(group, member_id, records)
    group.session_deadlines.pop(member_id, None)
    group.rebalance_deadlines.pop(member_id, None)
    # Only topics nobody subscribes to any more can disappear: use what is known.
    new_metadata = group.compute_subscription_metadata(group.subscription_metadata)
    if new_metadata != group.subscription_metadata:
        _append(group, records, partition_metadata_record(group.group_id, new_metadata))
    _append(group, records, group_metadata_record(group.group_id, group.group_epoch + 1))


# -- the heartbeat -------------------------------------------------------------------------------


def _heartbeat(
    group: ConsumerGroup,
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
    if gid != group.group_id:
        raise ConsumerGroupError(invalid, f"GroupId {gid} is not group {group.group_id}.")
    if instance_id is not None and not instance_id:
        raise ConsumerGroupError(invalid, "InstanceId can't be empty.")
    if rack_id is not None and not rack_id:
        raise ConsumerGroupError(invalid, "RackId can't be empty.")
    if (epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) and not member_id:
        raise ConsumerGroupError(invalid, "MemberId can't be empty.")
    if epoch == 0:
        if rebalance_timeout_ms == -1:
            raise ConsumerGroupError(invalid, "RebalanceTimeoutMs must be provided in first request.")
        if owned_raw is None or len(owned_raw) > 0:
            raise ConsumerGroupError(invalid, "TopicPartitions must be empty when (re-)joining.")
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
    if assignor is not None and assignor not in group.config.assignors:
        raise ConsumerGroupError(
            Errors.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {assignor} is not supported. Supported assignors: "
            f"{', '.join(group.config.assignors)}.",
        )
    if regex:
        group.compile_regex(regex)
    owned = None if owned_raw is None else from_tp_list(owned_raw)

    if epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
        return _leave(group, member_id, epoch, instance_id, now_ms, records)

    # -- find or create the member --
    replaced: ConsumerGroupMember | None = None  # static member replaced by this one
    reset = False  # an existing member rejoins (epoch 0): it starts over without partitions
    if instance_id is None:
        if epoch == 0:
            member_id = member_id or group.new_member_id()
            existing = group.members.get(member_id)
            if existing is None:
                _check_not_full(group)
                member = ConsumerGroupMember(member_id)
            else:
                member, reset = existing, True
        else:
            member = _get_member(group, member_id)
            _check_epoch(member, epoch, owned)
    else:
        static_id = group.static_members.get(instance_id)
        static = group.members.get(static_id) if static_id is not None else None
        if epoch == 0:
            member_id = member_id or group.new_member_id()
            if static is None:
                existing = group.members.get(member_id)
                if existing is None:
                    _check_not_full(group)
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
            _check_epoch(member, epoch, owned)
    if reset:
        member = replace(
            member,
            member_epoch=0,
            previous_member_epoch=-1,
            state=MemberState.STABLE,
            assigned_partitions={},
            partitions_pending_revocation={},
        )
    is_new = member_id not in group.members and replaced is None

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
        previous_target = group.target_assignment.get(replaced.member_id, {})
        _remove_member_records(group, replaced.member_id, records)
        group.session_deadlines.pop(replaced.member_id, None)
        group.rebalance_deadlines.pop(replaced.member_id, None)
        reference = replaced
    else:
        reference = member
    if is_new or replaced is not None or not updated.metadata_equals(group.members[member_id]):
        _append(group, records, member_metadata_record(group.group_id, updated))
    bump = (
        is_new
        or updated.subscribed_topic_names != reference.subscribed_topic_names
        or updated.subscribed_topic_regex != reference.subscribed_topic_regex
        or updated.server_assignor != reference.server_assignor
    )
    new_metadata = group.compute_subscription_metadata(topics)
    if new_metadata != group.subscription_metadata:
        _append(group, records, partition_metadata_record(group.group_id, new_metadata))
        bump = True
    if bump:
        _append(group, records, group_metadata_record(group.group_id, group.group_epoch + 1))

    # -- 2. target assignment --
    if group.group_epoch > group.target_assignment_epoch:
        extra = {member_id: previous_target} if previous_target is not None else {}
        for record in TargetAssignmentBuilder(group, extra).build():
            _append(group, records, record)
    elif previous_target is not None:
        _append(group, records, target_member_record(group.group_id, member_id, previous_target))

    # -- 3. reconcile the member towards its target --
    before = group.members[member_id]  # as stored now (metadata applied)
    current = replace(
        before,
        member_epoch=updated.member_epoch,
        previous_member_epoch=updated.previous_member_epoch,
        state=updated.state,
        assigned_partitions=updated.assigned_partitions,
        partitions_pending_revocation=updated.partitions_pending_revocation,
    )
    reconciled = (
        CurrentAssignmentBuilder(current)
        .with_target_assignment(
            group.target_assignment_epoch, group.target_assignment.get(member_id, {})
        )
        .with_partition_owner(group.partition_owner)
        .with_owned_topic_partitions(owned)
        .build()
    )
    if is_new or replaced is not None or not reconciled.assignment_equals(before):
        _append(group, records, current_assignment_record(group.group_id, reconciled))
        if reconciled.state == MemberState.UNREVOKED_PARTITIONS:
            group.rebalance_deadlines[member_id] = (
                now_ms + max(reconciled.rebalance_timeout_ms, 0),
                reconciled.member_epoch,
            )
        else:
            group.rebalance_deadlines.pop(member_id, None)
    group.session_deadlines[member_id] = now_ms + group.config.session_timeout_ms

    response: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "member_id": member_id,
        "member_epoch": reconciled.member_epoch,
        "heartbeat_interval_ms": group.config.heartbeat_interval_ms,
        "assignment": None,
    }
    # Kafka sends the assignment on a full request (a join, or every field set after an
    # error) and whenever it changed; otherwise null means "unchanged".
    full = epoch == 0 or (rebalance_timeout_ms != -1 and names is not None and owned_raw is not None)
    if full or reconciled.assigned_partitions != member.assigned_partitions:
        response["assignment"] = {"topic_partitions": tp_list(reconciled.assigned_partitions)}
    return response


def _leave(
    group: ConsumerGroup,
    member_id: str,
    epoch: int,
    instance_id: str | None,
    now_ms: int,
    records: list[CoordinatorRecord],
) -> dict[str, Any]:
    if instance_id is None:
        member = _get_member(group, member_id)
    else:
        static_id = group.static_members.get(instance_id)
        if static_id is None or static_id not in group.members:
            raise ConsumerGroupError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if static_id != member_id:
            raise ConsumerGroupError(
                Errors.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} is fenced by "
                f"existing member {static_id}.",
            )
        member = group.members[static_id]
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
        _append(group, records, current_assignment_record(group.group_id, leaving))
        group.rebalance_deadlines.pop(member.member_id, None)
        group.session_deadlines[member.member_id] = now_ms + group.config.session_timeout_ms
    else:
        fence_member(group, member.member_id, records)
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "member_id": member.member_id,
        "member_epoch": epoch,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


def _get_member(group: ConsumerGroup, member_id: str) -> ConsumerGroupMember:
    member = group.members.get(member_id)
    if member is None:
        raise ConsumerGroupError(
            Errors.UNKNOWN_MEMBER_ID,
            f"Member {member_id} is not a member of group {group.group_id}.",
        )
    return member


def _check_not_full(group: ConsumerGroup) -> None:
    if len(group.members) >= group.config.max_size:
        raise ConsumerGroupError(
            Errors.GROUP_MAX_SIZE_REACHED,
            f"The consumer group has reached its maximum capacity of "
            f"{group.config.max_size} members.",
        )


def _check_epoch(member: ConsumerGroupMember, received: int, owned: Partitions | None) -> None:
    if received > member.member_epoch:
        raise ConsumerGroupError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            f"all its partitions and rejoin.",
        )
    if received < member.member_epoch and (
        received != member.previous_member_epoch or not is_subset(owned, member.assigned_partitions)
    ):
        # The previous epoch with a subset of the assignment is accepted: the response that
        # bumped the epoch may have been lost.
        raise ConsumerGroupError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a smaller member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            f"all its partitions and rejoin.",
        )


def _remove_member_records(
    group: ConsumerGroup, member_id: str, records: list[CoordinatorRecord]
) -> None:
    # Order matters (Kafka's removeMember): assignment, target, then the member itself.
    key = {"group_id": group.group_id, "member_id": member_id}
    _append(group, records, CoordinatorRecord(CURRENT_MEMBER_ASSIGNMENT, dict(key), None))
    _append(group, records, CoordinatorRecord(TARGET_ASSIGNMENT_MEMBER, dict(key), None))
    _append(group, records, CoordinatorRecord(MEMBER_METADATA, dict(key), None))


def _append(group: ConsumerGroup, records: list[CoordinatorRecord], record: CoordinatorRecord) -> None:
    """Apply ``record`` to the group and keep it for writing."""
    group.replay(record.name, record.key, record.value)
    records.append(record)
