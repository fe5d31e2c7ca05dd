"""A classic group (Kafka's ``ClassicGroup``): the JoinGroup/SyncGroup protocol as a sans-I/O state
machine.

A :class:`ClassicGroup` is driven by method calls that carry the current time (``now_ms``) and an
opaque *waiter* for requests whose answer may be delayed (JoinGroup, SyncGroup). Every call returns
:class:`Effects`: the answers to deliver to waiters (possibly other members' waiters: completing a
join answers everyone), and whether the group must be written to the log. Timers are deadlines:
the shell asks :meth:`ClassicGroup.next_deadline` and calls :meth:`ClassicGroup.poll` when it
passes. Nothing here does I/O, reads a clock or knows asyncio. Its members are
:class:`~odradek.coordinator.group.classic_group_member.ClassicGroupMember`.

States (Kafka's ``ClassicGroupState``): Empty → PreparingRebalance → CompletingRebalance → Stable,
and Dead for a group that was deleted, expired or unloaded. The broker never looks into member
metadata or assignments: eager and cooperative clients differ only in what they put in those bytes.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.coordinator.group.classic_group_member import (
    UNKNOWN_MEMBER_ID,
    ClassicGroupMember,
    JoinResult,
    SyncResult,
)
from odradek.coordinator.group.group_coordinator_config import GroupConfig
from odradek.coordinator.group.records import GroupRecord, MemberRecord, OffsetAndMetadata
from odradek.protocol.errors import Errors

# A new member's JoinGroup waits at most this long (Kafka's NewMemberJoinTimeoutMs): sockets of
# waiting joins are not watched, so a client that gave up must not hold a rebalance forever.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
CLASSIC = "classic"


class ClassicGroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Effects:
    """What the shell must do after a call: answer waiters, maybe persist the group."""

    responses: list[tuple[Any, JoinResult | SyncResult]] = field(default_factory=list)
    # Write the group record; then call ``on_group_stored(generation, error, now)``.
    store_generation: int | None = None

    def answer(self, waiter: Any, result: JoinResult | SyncResult) -> None:
        if waiter is not None:
            self.responses.append((waiter, result))

    def merge(self, other: Effects) -> Effects:
        self.responses.extend(other.responses)
        if other.store_generation is not None:
            self.store_generation = other.store_generation
        return self


class ClassicGroup:
    """One classic group: membership, generation, assignments and committed offsets."""

    group_type = CLASSIC

    def __init__(
        self,
        group_id: str,
        config: GroupConfig,
        now_ms: int,
        new_member_id: Callable[[str], str] | None = None,
    ) -> None:
        self.group_id = group_id
        self.config = config
        self.state = ClassicGroupState.EMPTY
        self.current_state_timestamp = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, ClassicGroupMember] = {}
        self.pending_members: dict[str, int] = {}  # member id -> deadline (session timeout)
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_sync: set[str] = set()
        self.new_member_added = False
        # PreparingRebalance: when the join phase ends. With the initial delay (a group that was
        # Empty), the phase is extended while new members keep arriving, within the budget.
        self.join_deadline_ms: int | None = None
        self.initial_delay_remaining_ms: int | None = None
        self.sync_deadline_ms: int | None = None
        # The generation whose leader assignment is being written (answered once it is).
        self.assignment_store_generation: int | None = None
        # Committed offsets and commits still being written (for require_stable).
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.pending_offset_commits: dict[tuple[str, int], int] = {}
        self._new_member_id = new_member_id or (lambda client_id: f"{client_id}-{uuid.uuid4()}")

    # ------------------------------------------------------------------------ queries

    def __repr__(self) -> str:
        return f"ClassicGroup({self.group_id!r}, {self.state.value}, generation {self.generation_id})"

    @property
    def state_name(self) -> str:
        return self.state.value

    def is_empty(self) -> bool:
        return self.state == ClassicGroupState.EMPTY

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        if not sets:
            return set()
        return set.intersection(*sets)

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {n for n, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # Ties go to the protocol the earliest member prefers (deterministic).
        order = [n for m in self.members.values() for n, _ in m.protocols if n in candidates]
        return max(votes, key=lambda n: (votes[n], -order.index(n)))

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, if the group uses the consumer protocol (else None)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        from odradek.coordinator.group.consumer_protocol import parse_subscription

        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics.update(parse_subscription(m.metadata(self.protocol_name)).topics)
            except ValueError:
                return None
        return topics

    def next_deadline(self) -> int | None:
        candidates: list[int] = []
        if self.join_deadline_ms is not None:
            candidates.append(self.join_deadline_ms)
        if self.sync_deadline_ms is not None:
            candidates.append(self.sync_deadline_ms)
        candidates.extend(self.pending_members.values())
        for m in self.members.values():
            if m.awaiting_join:
                if m.is_new:
                    candidates.append(m.joined_at_ms + NEW_MEMBER_JOIN_TIMEOUT_MS)
            elif not m.awaiting_sync:
                candidates.append(m.heartbeat_deadline_ms)
        return min(candidates) if candidates else None

    # ------------------------------------------------------------------------ transitions

    def _transition(self, state: ClassicGroupState, now_ms: int) -> None:
        self.state = state
        self.current_state_timestamp = now_ms

    def _heartbeat(self, member: ClassicGroupMember, now_ms: int) -> None:
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    def _current_members(self) -> list[tuple[str, str | None, bytes]]:
        return [
            (m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        ]

    def _join_result(self, member: ClassicGroupMember, skip_assignment: bool = False) -> JoinResult:
        leader = self.is_leader(member.member_id)
        return JoinResult(
            Errors.NONE,
            member.member_id,
            self.generation_id,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            skip_assignment,
            self._current_members() if leader else [],
        )

    def _add_member(self, member: ClassicGroupMember, now_ms: int, fx: Effects) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        member.is_new = True
        member.joined_at_ms = now_ms
        if self.state == ClassicGroupState.PREPARING_REBALANCE:
            if self.generation_id == 0:
                self.new_member_added = True
            self._try_complete_join(now_ms, fx)
        else:
            self._maybe_prepare_rebalance(now_ms, fx)

    def _remove_member(self, member_id: str, now_ms: int, fx: Effects) -> ClassicGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def _remove_member_and_update(self, member_id: str, now_ms: int, fx: Effects) -> None:
        member = self._remove_member(member_id, now_ms, fx)
        if member is None:
            return
        if member.join_waiter is not None:
            fx.answer(member.join_waiter, JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id))
            member.join_waiter = None
        if member.sync_waiter is not None:
            fx.answer(member.sync_waiter, SyncResult(Errors.UNKNOWN_MEMBER_ID))
            member.sync_waiter = None
        if self.state in (ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(now_ms, fx)
        elif self.state == ClassicGroupState.PREPARING_REBALANCE:
            self._try_complete_join(now_ms, fx)

    def _maybe_prepare_rebalance(self, now_ms: int, fx: Effects) -> None:
        if self.state in (ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.EMPTY):
            self._prepare_rebalance(now_ms, fx)

    def _prepare_rebalance(self, now_ms: int, fx: Effects) -> None:
        self.assignment_store_generation = None
        if self.state == ClassicGroupState.COMPLETING_REBALANCE:
            self._reset_assignment_with_error(Errors.REBALANCE_IN_PROGRESS, fx)
        self.sync_deadline_ms = None
        self.pending_sync.clear()
        rebalance_timeout = self.rebalance_timeout_ms()
        if self.state == ClassicGroupState.EMPTY:
            delay = min(self.config.initial_rebalance_delay_ms, rebalance_timeout)
            self.initial_delay_remaining_ms = max(rebalance_timeout - delay, 0)
            self.join_deadline_ms = now_ms + delay
        else:
            self.initial_delay_remaining_ms = None
            self.join_deadline_ms = now_ms + rebalance_timeout
        self._transition(ClassicGroupState.PREPARING_REBALANCE, now_ms)
        self._try_complete_join(now_ms, fx)

    def _try_complete_join(self, now_ms: int, fx: Effects) -> None:
        # The initial delay always runs its course; an ordinary join phase ends as soon as every
        # known member has rejoined.
        if self.initial_delay_remaining_ms is None and self.all_members_joined():
            self._complete_join(now_ms, fx)

    def _complete_join(self, now_ms: int, fx: Effects) -> None:
        self.join_deadline_ms = None
        self.initial_delay_remaining_ms = None
        self.new_member_added = False
        for mid in [mid for mid, m in self.members.items() if not m.awaiting_join]:
            self._remove_member(mid, now_ms, fx)
        self.pending_members.clear()
        if self.state == ClassicGroupState.DEAD:
            return
        # Prefer a leader that rejoined (it is the one the old leader was, if it did).
        if self.leader_id is None or self.leader_id not in self.members:
            self.leader_id = next(iter(self.members), None)
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self._transition(ClassicGroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self._transition(ClassicGroupState.EMPTY, now_ms)
            fx.store_generation = self.generation_id
            return
        self.pending_sync = set(self.members)
        self.sync_deadline_ms = now_ms + self.rebalance_timeout_ms()
        for m in self.members.values():
            waiter, m.join_waiter = m.join_waiter, None
            fx.answer(waiter, self._join_result(m))
            m.is_new = False
            self._heartbeat(m, now_ms)

    def _reset_assignment_with_error(self, error: Errors, fx: Effects) -> None:
        for m in self.members.values():
            m.assignment = b""
            if m.sync_waiter is not None:
                fx.answer(m.sync_waiter, SyncResult(error))
                m.sync_waiter = None

    def _propagate_assignment(self, now_ms: int, fx: Effects) -> None:
        for m in self.members.values():
            if m.sync_waiter is not None:
                fx.answer(
                    m.sync_waiter,
                    SyncResult(Errors.NONE, self.protocol_type, self.protocol_name, m.assignment),
                )
                m.sync_waiter = None
                self._heartbeat(m, now_ms)

    # ------------------------------------------------------------------------ JoinGroup

    def join(
        self,
        waiter: Any,
        *,
        member_id: str,
        group_instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        now_ms: int,
    ) -> Effects:
        fx = Effects()
        if rebalance_timeout_ms < 0:  # JoinGroup v0 has no rebalance timeout
            rebalance_timeout_ms = session_timeout_ms
        if not (
            self.config.min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            fx.answer(waiter, JoinResult(Errors.INVALID_SESSION_TIMEOUT, member_id))
            return fx
        if self.state == ClassicGroupState.DEAD:
            fx.answer(waiter, JoinResult(Errors.COORDINATOR_NOT_AVAILABLE, member_id))
            return fx
        if not self.supports_protocols(protocol_type, protocols):
            fx.answer(waiter, JoinResult(Errors.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return fx
        if member_id == UNKNOWN_MEMBER_ID:
            if (
                group_instance_id is None or group_instance_id not in self.static_members
            ) and len(self.members) + len(self.pending_members) >= self.config.max_size:
                fx.answer(waiter, JoinResult(Errors.GROUP_MAX_SIZE_REACHED, member_id))
                return fx
            new_id = self._new_member_id(client_id)
            if group_instance_id is not None:
                old_id = self.static_members.get(group_instance_id)
                if old_id is not None and old_id in self.members:
                    return self._replace_static_member(
                        waiter, old_id, new_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, protocols, now_ms,
                    )
            elif require_known_member_id:
                # KIP-394: hand out the id first; the member rejoins with it. Until then it counts
                # as pending and the rebalance waits for it (up to its session timeout).
                self.pending_members[new_id] = now_ms + session_timeout_ms
                fx.answer(waiter, JoinResult(Errors.MEMBER_ID_REQUIRED, new_id))
                return fx
            member = ClassicGroupMember(
                new_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                session_timeout_ms, protocol_type, protocols, join_waiter=waiter,
            )
            self._add_member(member, now_ms, fx)
            return fx
        # A member that has an id.
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            member = ClassicGroupMember(
                member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                session_timeout_ms, protocol_type, protocols, join_waiter=waiter,
            )
            self._add_member(member, now_ms, fx)
            return fx
        if self.is_static_member_fenced(member_id, group_instance_id):
            fx.answer(waiter, JoinResult(Errors.FENCED_INSTANCE_ID, member_id))
            return fx
        member_or_none = self.members.get(member_id)
        if member_or_none is None or self.state == ClassicGroupState.EMPTY:
            fx.answer(waiter, JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id))
            return fx
        member = member_or_none
        if self.state == ClassicGroupState.COMPLETING_REBALANCE and member.matches(protocols):
            # A retried join of this generation: answer with what it already got.
            fx.answer(waiter, self._join_result(member))
            return fx
        if (
            self.state == ClassicGroupState.STABLE
            and not self.is_leader(member_id)
            and member.matches(protocols)
        ):
            # A follower asking for the current generation: nothing changed, no rebalance.
            fx.answer(waiter, self._join_result(member))
            return fx
        # Update and (re)join the rebalance.
        if member.join_waiter is not None and member.join_waiter is not waiter:
            fx.answer(member.join_waiter, JoinResult(Errors.REBALANCE_IN_PROGRESS, member_id))
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        member.join_waiter = waiter
        if self.state == ClassicGroupState.PREPARING_REBALANCE:
            self._try_complete_join(now_ms, fx)
        else:
            self._prepare_rebalance(now_ms, fx)
        return fx

    def _replace_static_member(
        self,
        waiter: Any,
        old_id: str,
        new_id: str,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocols: list[tuple[str, bytes]],
        now_ms: int,
    ) -> Effects:
        """A static member came back with a new member id: it takes the old member's place; the
        old incarnation is fenced. No rebalance unless it changes the group's protocol."""
        fx = Effects()
        old = self.members.pop(old_id)
        if old.join_waiter is not None:
            fx.answer(old.join_waiter, JoinResult(Errors.FENCED_INSTANCE_ID, old_id))
        if old.sync_waiter is not None:
            fx.answer(old.sync_waiter, SyncResult(Errors.FENCED_INSTANCE_ID))
        old_protocols = old.protocols
        member = old
        member.member_id = new_id
        member.join_waiter = None
        member.sync_waiter = None
        member.client_id, member.client_host = client_id, client_host
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.protocols = protocols
        self.members[new_id] = member
        assert member.group_instance_id is not None
        self.static_members[member.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        self._heartbeat(member, now_ms)
        if self.state == ClassicGroupState.STABLE:
            if self.select_protocol() != self.protocol_name:
                member.join_waiter = waiter
                self._prepare_rebalance(now_ms, fx)
            else:
                leader = self.is_leader(new_id)
                fx.answer(waiter, self._join_result(member, skip_assignment=leader))
                fx.store_generation = self.generation_id
            return fx
        if self.state == ClassicGroupState.COMPLETING_REBALANCE:
            member.join_waiter = waiter
            self._prepare_rebalance(now_ms, fx)
            return fx
        # PreparingRebalance
        member.join_waiter = waiter
        if old_protocols != protocols:
            pass  # the rebalance in progress picks up the new protocols
        self._try_complete_join(now_ms, fx)
        return fx

    # ------------------------------------------------------------------------ SyncGroup

    def sync(
        self,
        waiter: Any,
        *,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        now_ms: int,
    ) -> Effects:
        fx = Effects()
        if self.state == ClassicGroupState.DEAD:
            fx.answer(waiter, SyncResult(Errors.COORDINATOR_NOT_AVAILABLE))
            return fx
        if self.is_static_member_fenced(member_id, group_instance_id):
            fx.answer(waiter, SyncResult(Errors.FENCED_INSTANCE_ID))
            return fx
        member = self.members.get(member_id)
        if member is None:
            fx.answer(waiter, SyncResult(Errors.UNKNOWN_MEMBER_ID))
            return fx
        if generation_id != self.generation_id:
            fx.answer(waiter, SyncResult(Errors.ILLEGAL_GENERATION))
            return fx
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
            protocol_name is not None and protocol_name != self.protocol_name
        ):
            fx.answer(waiter, SyncResult(Errors.INCONSISTENT_GROUP_PROTOCOL))
            return fx
        if self.state == ClassicGroupState.EMPTY:
            fx.answer(waiter, SyncResult(Errors.UNKNOWN_MEMBER_ID))
        elif self.state == ClassicGroupState.PREPARING_REBALANCE:
            fx.answer(waiter, SyncResult(Errors.REBALANCE_IN_PROGRESS))
        elif self.state == ClassicGroupState.COMPLETING_REBALANCE:
            if member.sync_waiter is not None and member.sync_waiter is not waiter:
                fx.answer(member.sync_waiter, SyncResult(Errors.REBALANCE_IN_PROGRESS))
            member.sync_waiter = waiter
            self.pending_sync.discard(member_id)
            self._heartbeat(member, now_ms)
            if self.is_leader(member_id):
                for mid, m in self.members.items():
                    m.assignment = assignments.get(mid, b"")
                # The assignment is given out only once it is on the log.
                fx.store_generation = self.generation_id
                self.assignment_store_generation = self.generation_id
            if not self.pending_sync:
                self.sync_deadline_ms = None
        else:  # Stable: the assignment is known
            self.pending_sync.discard(member_id)
            self._heartbeat(member, now_ms)
            fx.answer(
                waiter,
                SyncResult(Errors.NONE, self.protocol_type, self.protocol_name, member.assignment),
            )
        return fx

    def on_group_stored(self, generation_id: int, error: Errors, now_ms: int) -> Effects:
        """The group record of ``generation_id`` was written (or failed to be)."""
        fx = Effects()
        if (
            self.state != ClassicGroupState.COMPLETING_REBALANCE
            or generation_id != self.generation_id
            or self.assignment_store_generation != generation_id
        ):
            return fx
        self.assignment_store_generation = None
        if error != Errors.NONE:
            self._reset_assignment_with_error(error, fx)
            self._prepare_rebalance(now_ms, fx)
            return fx
        self._transition(ClassicGroupState.STABLE, now_ms)
        self._propagate_assignment(now_ms, fx)
        return fx

    # ------------------------------------------------------------------------ Heartbeat

    def heartbeat(
        self, *, member_id: str, group_instance_id: str | None, generation_id: int, now_ms: int
    ) -> Errors:
        if self.state == ClassicGroupState.DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if self.is_static_member_fenced(member_id, group_instance_id):
            return Errors.FENCED_INSTANCE_ID
        member = self.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return Errors.ILLEGAL_GENERATION
        if self.state == ClassicGroupState.EMPTY:
            return Errors.UNKNOWN_MEMBER_ID
        self._heartbeat(member, now_ms)
        if self.state == ClassicGroupState.PREPARING_REBALANCE:
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.NONE

    # ------------------------------------------------------------------------ LeaveGroup

    def leave(
        self, members: list[tuple[str, str | None]], now_ms: int
    ) -> tuple[Errors, list[Errors], Effects]:
        """(top-level error, one error per leaving member, effects)."""
        fx = Effects()
        if self.state == ClassicGroupState.DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE, [], fx
        errors: list[Errors] = []
        for member_id, instance_id in members:
            if member_id == UNKNOWN_MEMBER_ID and instance_id is not None:
                mid = self.static_members.get(instance_id)
                if mid is None:
                    errors.append(Errors.UNKNOWN_MEMBER_ID)
                    continue
                member_id = mid
            elif self.is_static_member_fenced(member_id, instance_id):
                errors.append(Errors.FENCED_INSTANCE_ID)
                continue
            if member_id in self.pending_members:
                del self.pending_members[member_id]
                if self.state == ClassicGroupState.PREPARING_REBALANCE:
                    self._try_complete_join(now_ms, fx)
                errors.append(Errors.NONE)
                continue
            if member_id not in self.members:
                errors.append(Errors.UNKNOWN_MEMBER_ID)
                continue
            self._remove_member_and_update(member_id, now_ms, fx)
            errors.append(Errors.NONE)
        return Errors.NONE, errors, fx

    # ------------------------------------------------------------------------ OffsetCommit

    def validate_offset_commit(
        self, member_id: str, generation_id: int, group_instance_id: str | None, now_ms: int
    ) -> Errors:
        if self.state == ClassicGroupState.DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if self.is_static_member_fenced(member_id, group_instance_id):
            return Errors.FENCED_INSTANCE_ID
        if generation_id < 0 and self.state == ClassicGroupState.EMPTY:
            return Errors.NONE  # a standalone consumer using the group only to store offsets
        member = self.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return Errors.ILLEGAL_GENERATION
        if self.state == ClassicGroupState.COMPLETING_REBALANCE:
            return Errors.REBALANCE_IN_PROGRESS
        if self.state == ClassicGroupState.EMPTY:
            return Errors.UNKNOWN_MEMBER_ID
        self._heartbeat(member, now_ms)
        return Errors.NONE

    def validate_txn_offset_commit(
        self, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> Errors:
        """Kafka's ``ClassicGroup.validateOffsetCommit`` for a TxnOffsetCommit: member id,
        generation and instance id are checked only if one of them is given (v3+; older
        versions carry none), and the group's state does not matter otherwise."""
        if self.state == ClassicGroupState.DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state == ClassicGroupState.EMPTY:
            return Errors.NONE
        if generation_id < 0 and not member_id and group_instance_id is None:
            return Errors.NONE
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return Errors.UNKNOWN_MEMBER_ID
            if current != member_id:
                return Errors.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return Errors.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return Errors.ILLEGAL_GENERATION
        return Errors.NONE

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> Errors:
        # Classic groups accept any OffsetFetch; member id/epoch matter for KIP-848 groups.
        return Errors.NONE

    # ------------------------------------------------------------------------ timers

    def poll(self, now_ms: int) -> Effects:
        """Handle every deadline that has passed."""
        fx = Effects()
        for mid, deadline in list(self.pending_members.items()):
            if deadline <= now_ms:
                del self.pending_members[mid]
                if self.state == ClassicGroupState.PREPARING_REBALANCE:
                    self._try_complete_join(now_ms, fx)
        if (
            self.state == ClassicGroupState.PREPARING_REBALANCE
            and self.join_deadline_ms is not None
            and self.join_deadline_ms <= now_ms
        ):
            remaining = self.initial_delay_remaining_ms
            if remaining is not None and self.new_member_added and remaining > 0:
                # New members keep arriving: wait a little longer, within the rebalance timeout.
                self.new_member_added = False
                delay = min(self.config.initial_rebalance_delay_ms, remaining)
                self.initial_delay_remaining_ms = max(remaining - self.config.initial_rebalance_delay_ms, 0)
                self.join_deadline_ms = now_ms + delay
            else:
                self._complete_join(now_ms, fx)
        if (
            self.state == ClassicGroupState.COMPLETING_REBALANCE
            and self.sync_deadline_ms is not None
            and self.sync_deadline_ms <= now_ms
        ):
            # Members that never sent SyncGroup are gone; rebalance without them.
            self.sync_deadline_ms = None
            missing = list(self.pending_sync)
            self.pending_sync.clear()
            for mid in missing:
                self._remove_member(mid, now_ms, fx)
            if self.members:
                self._prepare_rebalance(now_ms, fx)
            else:
                self._transition(ClassicGroupState.PREPARING_REBALANCE, now_ms)
                self._complete_join(now_ms, fx)
        for mid, m in list(self.members.items()):
            if mid not in self.members:
                continue
            if m.awaiting_join:
                if m.is_new and m.joined_at_ms + NEW_MEMBER_JOIN_TIMEOUT_MS <= now_ms:
                    self._remove_member_and_update(mid, now_ms, fx)
                continue
            if m.awaiting_sync:
                continue
            if m.heartbeat_deadline_ms <= now_ms and self.state != ClassicGroupState.EMPTY:
                self._remove_member_and_update(mid, now_ms, fx)
        return fx

    # ------------------------------------------------------------------------ lifecycle

    def make_dead(self, error: Errors, now_ms: int) -> Effects:
        """Deleted, expired or unloaded: answer every waiter with ``error``."""
        fx = Effects()
        for m in self.members.values():
            if m.join_waiter is not None:
                fx.answer(m.join_waiter, JoinResult(error, m.member_id))
                m.join_waiter = None
            if m.sync_waiter is not None:
                fx.answer(m.sync_waiter, SyncResult(error))
                m.sync_waiter = None
        self.join_deadline_ms = self.sync_deadline_ms = None
        self._transition(ClassicGroupState.DEAD, now_ms)
        return fx

    def to_record(self) -> GroupRecord:
        return GroupRecord(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.current_state_timestamp,
            members=[
                MemberRecord(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.rebalance_timeout_ms, m.session_timeout_ms,
                    m.metadata(self.protocol_name), m.assignment,
                )
                for m in self.members.values()
            ],
        )

    @classmethod
    def from_record(
        cls, group_id: str, rec: GroupRecord, config: GroupConfig, now_ms: int
    ) -> ClassicGroup:
        """A group loaded from the log: Stable with its members, or Empty."""
        g = cls(group_id, config, now_ms)
        g.protocol_type = rec.protocol_type or None
        g.generation_id = rec.generation
        g.protocol_name = rec.protocol
        g.leader_id = rec.leader
        if rec.current_state_timestamp >= 0:
            g.current_state_timestamp = rec.current_state_timestamp
        for mr in rec.members:
            m = ClassicGroupMember(
                mr.member_id, mr.group_instance_id, mr.client_id, mr.client_host,
                mr.rebalance_timeout if mr.rebalance_timeout >= 0 else mr.session_timeout,
                mr.session_timeout, rec.protocol_type,
                [(rec.protocol or "", mr.subscription)], mr.assignment,
            )
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
            g.members[m.member_id] = m
            if m.group_instance_id is not None:
                g.static_members[m.group_instance_id] = m.member_id
        g.state = ClassicGroupState.STABLE if g.members else ClassicGroupState.EMPTY
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members), None)
        return g
