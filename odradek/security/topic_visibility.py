"""Topics a principal may not DESCRIBE, hidden inside responses that are about something else.

Kafka 4 never shows a client a topic name it may not DESCRIBE, even where the request is about a
group or a transaction (KafkaApis):

- ConsumerGroupDescribe (KAFKA-18813): a described group whose members' assignment or target
  assignment names such a topic is answered, in its place, with TOPIC_AUTHORIZATION_FAILED, the
  message "The group has described topic(s) that the client is not authorized to describe." and
  no members;
- DescribeTransactions: a transactional id needs DESCRIBE on it (else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and the topics of a described transaction the
  principal may not DESCRIBE are left out.

(Metadata and OffsetFetch for all topics leave such topics out in
:mod:`odradek.security.api_authorization`; a regex subscription resolves only to describable
topics in the consumer group coordinator, given :func:`~odradek.security.auth_helper.describable_topics`.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.protocol.errors import Errors
from odradek.security.acl import ResourceType
from odradek.security.auth_helper import AuthHelper, Narrowed
from odradek.server.acl_operations import AUTHORIZED_OPS_OMITTED, AclOperation

if TYPE_CHECKING:
    from odradek.server.api_dispatcher import RequestContext

UNDESCRIBABLE_GROUP_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


def _assigned_topics(group: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for member in group.get("members") or []:
        for key in ("assignment", "target_assignment"):
            for tp in (member.get(key) or {}).get("topic_partitions") or []:
                names.add(tp["topic_name"])
    return names


def hide_groups_with_undescribable_topics(
    h: AuthHelper, ctx: RequestContext, groups: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """ConsumerGroupDescribe: each described group (in place, order kept) that assigns a topic
    the principal may not DESCRIBE becomes a TOPIC_AUTHORIZATION_FAILED entry. Each group is
    judged on its own topics (a caller may see group A and not group B)."""
    out = []
    for grp in groups:
        topics = _assigned_topics(grp) if grp.get("error_code") == Errors.NONE else set()
        if topics and len(h.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)) < len(topics):
            grp = {
                "error_code": Errors.TOPIC_AUTHORIZATION_FAILED, "error_message": UNDESCRIBABLE_GROUP_TOPICS,
                "group_id": grp["group_id"], "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                "assignor_name": "", "members": [], "authorized_operations": AUTHORIZED_OPS_OMITTED,
            }
        out.append(grp)
    return out


def check_describe_transactions(
    h: AuthHelper, ctx: RequestContext, req: dict[str, Any]
) -> dict[str, Any] | Narrowed | None:
    """DescribeTransactions: DESCRIBE on each transactional id, then only the topics the
    principal may DESCRIBE in each answer."""
    ids = req.get("transactional_ids") or []
    ok = [t for t in ids if h.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t)]
    refused = [
        {"error_code": Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional_id": t, "transaction_state": "",
         "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1,
         "topics": []}
        for t in ids if t not in ok
    ]

    def merge(resp: dict[str, Any]) -> dict[str, Any]:
        states = []
        for state in resp.get("transaction_states") or []:
            topics = state.get("topics") or []
            if topics:
                names = [t["topic"] for t in topics]
                visible = h.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
                if len(visible) < len(set(names)):
                    state = {**state, "topics": [t for t in topics if t["topic"] in visible]}
            states.append(state)
        return {**resp, "transaction_states": states + refused}

    return Narrowed({**req, "transactional_ids": ok}, merge)
