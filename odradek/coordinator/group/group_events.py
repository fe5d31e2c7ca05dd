"""What an operator reads about classic groups: new generations and members that were removed.

The state machine (:mod:`odradek.coordinator.group.classic_group`) does no I/O, logging included; the
coordinator takes a :func:`membership` snapshot before each call that can change a group and
hands it to :func:`log_changes` afterwards, which writes one INFO line per new generation (with
the members that joined since the last one) and one per member removed by a timeout or replaced
by a static member. Leaving members are logged where their LeaveGroup is handled.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from odradek.coordinator.group.classic_group import ClassicGroup, ClassicGroupState
from odradek.coordinator.group.classic_group_member import ClassicGroupMember

log = logging.getLogger("odradek.coordinator.group.group_coordinator")

MAX_IDS = 10  # member ids listed in one line


@dataclass(frozen=True)
class Membership:
    generation: int
    state: ClassicGroupState
    members: dict[str, ClassicGroupMember]
    new: frozenset[str]  # joined since the last generation


def membership(group: ClassicGroup) -> Membership:
    return Membership(
        group.generation_id,
        group.state,
        dict(group.members),
        frozenset(mid for mid, m in group.members.items() if m.is_new),
    )


def _ids(ids: Iterable[str]) -> str:
    ordered = sorted(ids)
    shown = ", ".join(ordered[:MAX_IDS])
    return shown if len(ordered) <= MAX_IDS else f"{shown} and {len(ordered) - MAX_IDS} more"


def _removal_reason(member: ClassicGroupMember, before: Membership, now_ms: int, timers: bool) -> str:
    if not timers:
        return "replaced by a new member with the same group.instance.id"
    if member.heartbeat_deadline_ms <= now_ms and before.state != ClassicGroupState.EMPTY:
        return f"no heartbeat within its session timeout ({member.session_timeout_ms} ms)"
    if before.state == ClassicGroupState.COMPLETING_REBALANCE:
        return f"no SyncGroup within the rebalance timeout ({member.rebalance_timeout_ms} ms)"
    return f"did not rejoin within the rebalance timeout ({member.rebalance_timeout_ms} ms)"


def log_changes(
    group: ClassicGroup, before: Membership, now_ms: int, *, leaving: bool = False, timers: bool = False
) -> None:
    """Log what changed since ``before``. ``leaving``: a LeaveGroup (its members are logged by
    the request handler); ``timers``: the group's deadlines were handled (poll)."""
    gid = group.group_id
    if not leaving:
        for mid in sorted(set(before.members) - set(group.members)):
            reason = _removal_reason(before.members[mid], before, now_ms, timers)
            log.info("Member %s removed from group %s: %s", mid, gid, reason)
    if group.generation_id == before.generation or group.state == ClassicGroupState.DEAD:
        return
    if not group.members:
        log.info("Classic group %s: generation %d, no members (Empty)", gid, group.generation_id)
        return
    joined = (before.new | (set(group.members) - set(before.members))) & set(group.members)
    log.info(
        "Classic group %s: generation %d, protocol type %s, protocol %s, %d member(s), leader %s%s",
        gid, group.generation_id, group.protocol_type, group.protocol_name, len(group.members),
        group.leader_id, f", joined: {_ids(joined)}" if joined else "",
    )
