"""A member of a classic group (Kafka's ``ClassicGroupMember``) and the answers its JoinGroup and
SyncGroup waiters receive.

A member's *waiters* are opaque to the state machine (the shell's futures): a JoinGroup or
SyncGroup whose answer may be delayed until the group's rebalance reaches the next step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.errors import Errors

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


@dataclass
class JoinResult:
    error: Errors
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    # (member id, group instance id, metadata) -- only for the leader
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class SyncResult:
    error: Errors
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""



@dataclass
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: Any = None
    sync_waiter: Any = None
    is_new: bool = False
    joined_at_ms: int = 0
    heartbeat_deadline_ms: int = 0

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")

