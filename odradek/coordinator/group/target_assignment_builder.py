"""The target assignment of a KIP-848 group for a new group epoch (Kafka's
``TargetAssignmentBuilder``).

When the group epoch is ahead of the target assignment epoch, the group's server assignor
(:mod:`~odradek.coordinator.group.assignors`) computes member id -> partitions from the members'
subscriptions and their previous targets (assignors are sticky). The result is records: a
``ConsumerGroupTargetAssignmentMember`` for every member whose target changed, then the
``ConsumerGroupTargetAssignmentMetadata`` of the new epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from odradek.coordinator.group.assignors import ASSIGNORS, MemberSubscription
from odradek.coordinator.group.consumer_group_member import Partitions, clean
from odradek.coordinator.group.consumer_group_records import (
    CoordinatorRecord,
    target_member_record,
    target_metadata_record,
)

if TYPE_CHECKING:
    from odradek.coordinator.group.consumer_group import ConsumerGroup


class TargetAssignmentBuilder:
    """Records of the target assignment of ``group`` at its current group epoch.

    ``previous``: members whose previous target is not (yet) the group's, e.g. a static member
    that took the place of another one: it starts from the target of the member it replaced,
    and its target record is written even if unchanged."""

    def __init__(self, group: ConsumerGroup, previous: Mapping[str, Partitions] | None = None) -> None:
        self.group = group
        self.previous: Mapping[str, Partitions] = previous or {}

    def build(self) -> list[CoordinatorRecord]:
        g, previous = self.group, self.previous
        assignor = ASSIGNORS[g.preferred_assignor()]
        specs = {
            mid: MemberSubscription(
                subscribed_topics=g.member_subscribed_topics(m, g.subscription_metadata),
                assignment=previous.get(mid, g.target_assignment.get(mid, {})),
                rack_id=m.rack_id,
                instance_id=m.instance_id,
            )
            for mid, m in g.members.items()
        }
        result = assignor.assign(specs, g.subscription_metadata)
        records: list[CoordinatorRecord] = []
        for mid in sorted(g.members):
            new = clean(result.get(mid, {}))
            if mid in previous or new != g.target_assignment.get(mid, {}):
                records.append(target_member_record(g.group_id, mid, new))
        records.append(target_metadata_record(g.group_id, g.group_epoch))
        return records
