"""GroupApis: the group coordinator's APIs, served through KafkaApis as an ApiExtension.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete, and KIP-848's ConsumerGroupHeartbeat and
ConsumerGroupDescribe, for every version declared in
:mod:`odradek.protocol.messages`. Handlers translate between the request/response dicts and
:class:`~odradek.coordinator.group.group_coordinator.GroupCoordinator`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from odradek.coordinator.group.classic_group import ClassicGroup, ClassicGroupState
from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from odradek.coordinator.group.offset_metadata_manager import CommitRequest
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.schema import Api
from odradek.server.acl_operations import AUTHORIZED_OPS_OMITTED, GROUP_AUTHORIZED_OPERATIONS
from odradek.server.api_dispatcher import Handler, RequestContext

log = logging.getLogger(__name__)

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


class GroupApis:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        # FindCoordinator key type TRANSACTION: (transactional id, listener) -> (error, node, host,
        # port), from the transaction coordinator (TxnApis.coordinator_for).
        self.find_transaction_coordinator: Callable[[str, str], tuple[Errors, int, str, int]] | None = None
        # KIP-890 part 2: TxnOffsetCommit v5 of a transactions-version-2 producer (which sent no
        # AddOffsetsToTxn) adds the group's offsets partition to its transaction first:
        # (transactional id, producer id, epoch, partitions) -> the partitions not added.
        self.add_txn_partitions: (
            Callable[[str, int, int, list[tuple[str, int]]], Awaitable[dict[tuple[str, int], Errors]]] | None
        ) = None
        self.transaction_version: Callable[[], int] = lambda: 0
        # With an authorizer (set at start-up): the topics of a set the request's principal may
        # DESCRIBE, for the topics a regex subscription resolves to.
        self.describable_topics: Callable[[RequestContext, frozenset[str]], set[str]] | None = None

    def handlers(self) -> dict[Api, Handler]:
        return {
            m.FIND_COORDINATOR: self.handle_find_coordinator,
            m.JOIN_GROUP: self.handle_join_group,
            m.SYNC_GROUP: self.handle_sync_group,
            m.HEARTBEAT: self.handle_heartbeat,
            m.LEAVE_GROUP: self.handle_leave_group,
            m.OFFSET_COMMIT: self.handle_offset_commit,
            m.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
            m.OFFSET_FETCH: self.handle_offset_fetch,
            m.DESCRIBE_GROUPS: self.handle_describe_groups,
            m.LIST_GROUPS: self.handle_list_groups,
            m.DELETE_GROUPS: self.handle_delete_groups,
            m.OFFSET_DELETE: self.handle_offset_delete,
            m.CONSUMER_GROUP_HEARTBEAT: self.handle_consumer_group_heartbeat,
            m.CONSUMER_GROUP_DESCRIBE: self.handle_consumer_group_describe,
        }

    # ------------------------------------------------------------------------ FindCoordinator

    def _find_one(self, ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
        out: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_message": None}
        msg: str | None = None
        if key_type == TRANSACTION_KEY_TYPE:
            if self.find_transaction_coordinator is None:
                err, node, host, port = Errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1
            else:
                err, node, host, port = self.find_transaction_coordinator(key, ctx.conn.listener_name)
            if err == Errors.NONE:
                out.update(node_id=node, host=host, port=port)
        elif key_type != GROUP_KEY_TYPE:
            err, msg = Errors.INVALID_REQUEST, f"Unsupported coordinator key type {key_type}"
        elif not key:
            err, msg = Errors.INVALID_GROUP_ID, "The group id must not be empty"
        else:
            err, node, host, port = self.coordinator.coordinator_for(key, ctx.conn.listener_name)
            msg = None
            if err == Errors.NONE:
                out.update(node_id=node, host=host, port=port)
        out["error_code"] = err
        if err != Errors.NONE:
            out["error_message"] = msg or err.name
        return out

    def handle_find_coordinator(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        key_type = req.get("key_type", 0)
        if ctx.version >= 4:
            return {
                "throttle_time_ms": 0,
                "coordinators": [self._find_one(ctx, k, key_type) for k in req["coordinator_keys"]],
            }
        one = self._find_one(ctx, req["key"], key_type)
        return {"throttle_time_ms": 0, **one}

    # ------------------------------------------------------------------------ JoinGroup

    async def handle_join_group(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        version = ctx.version
        protocols = [(p["name"], bytes(p["metadata"])) for p in req["protocols"]]
        r = await self.coordinator.join_group(
            req["group_id"],
            member_id=req["member_id"],
            group_instance_id=req.get("group_instance_id"),
            require_known_member_id=version >= 4,
            client_id=ctx.header.client_id or "",
            client_host="/" + _host(ctx),
            rebalance_timeout_ms=req["rebalance_timeout_ms"] if version >= 1 else req["session_timeout_ms"],
            session_timeout_ms=req["session_timeout_ms"],
            protocol_type=req["protocol_type"],
            protocols=protocols,
        )
        skip = r.skip_assignment
        members = r.members
        if skip and version < 9:
            # Older leaders cannot skip: they run the assignment again (the result is ignored
            # in a Stable group, which answers SyncGroup with the current assignment).
            skip = False
        protocol_name = r.protocol_name
        if protocol_name is None and version < 7:
            protocol_name = ""
        return {
            "throttle_time_ms": 0,
            "error_code": r.error,
            "generation_id": r.generation_id,
            "protocol_type": r.protocol_type,
            "protocol_name": protocol_name,
            "leader": r.leader,
            "skip_assignment": skip,
            "member_id": r.member_id,
            "members": [
                {"member_id": mid, "group_instance_id": iid, "metadata": meta}
                for mid, iid, meta in members
            ],
        }

    # ------------------------------------------------------------------------ SyncGroup

    async def handle_sync_group(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        assignments = {a["member_id"]: bytes(a["assignment"]) for a in req["assignments"]}
        r = await self.coordinator.sync_group(
            req["group_id"],
            member_id=req["member_id"],
            generation_id=req["generation_id"],
            group_instance_id=req.get("group_instance_id"),
            protocol_type=req.get("protocol_type"),
            protocol_name=req.get("protocol_name"),
            assignments=assignments,
        )
        return {
            "throttle_time_ms": 0,
            "error_code": r.error,
            "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name,
            "assignment": r.assignment,
        }

    # ------------------------------------------------------------------------ Heartbeat/LeaveGroup

    def handle_heartbeat(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        err = self.coordinator.heartbeat(
            req["group_id"], req["member_id"], req.get("group_instance_id"), req["generation_id"]
        )
        return {"throttle_time_ms": 0, "error_code": err}

    def handle_leave_group(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        if ctx.version >= 3:
            members = [(x["member_id"], x.get("group_instance_id")) for x in req["members"]]
        else:
            members = [(req["member_id"], None)]
        for (mid, iid), x in zip(members, req.get("members") or [{}] * len(members), strict=False):
            log.info(
                "Member %s (instance %s) of group %s leaves: %s",
                mid, iid, req["group_id"], x.get("reason") or "no reason given",
            )
        top, errors = self.coordinator.leave_group(req["group_id"], members)
        if ctx.version < 3:
            if top == Errors.NONE and errors:
                top = errors[0]
            return {"throttle_time_ms": 0, "error_code": top, "members": []}
        return {
            "throttle_time_ms": 0,
            "error_code": top,
            "members": [
                {"member_id": mid, "group_instance_id": iid, "error_code": e}
                for (mid, iid), e in zip(members, errors, strict=False)
            ]
            if top == Errors.NONE
            else [],
        }

    # ------------------------------------------------------------------------ OffsetCommit

    async def handle_offset_commit(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        offsets, order = _commit_requests(req)
        results = await self.coordinator.commit_offsets(
            req["group_id"],
            req["member_id"],
            req["generation_id_or_member_epoch"],
            req.get("group_instance_id"),
            offsets,
            api_version=ctx.version,
        )
        return _commit_response(order, results)

    # ------------------------------------------------------------------------ TxnOffsetCommit

    async def handle_txn_offset_commit(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        offsets, order = _commit_requests(req)
        producer_id, producer_epoch = req["producer_id"], req["producer_epoch"]
        # As KafkaApis: partitions the metadata does not know are UNKNOWN_TOPIC_OR_PARTITION
        # before the group (and its id) is looked at; only the others go to the coordinator.
        exists = self.coordinator.metadata_cache.contains_partition
        unknown = {tp for tp in offsets if not exists(*tp)}
        for tp in unknown:
            del offsets[tp]
        results: dict[tuple[str, int], Errors]
        if not offsets:
            results = {}
        elif producer_id < 0 or producer_epoch < 0:
            log.warning(
                "TxnOffsetCommit of group %s (transactional id %r) from %s refused: no producer "
                "id/epoch (%d/%d)", req["group_id"], req["transactional_id"], ctx.conn.peer,
                producer_id, producer_epoch,
            )
            results = {tp: Errors.INVALID_PRODUCER_ID_MAPPING for tp in offsets}
        elif (added := await self._add_offsets_partition(ctx, req)) != Errors.NONE:
            results = dict.fromkeys(offsets, added)
        else:
            results = await self.coordinator.commit_txn_offsets(
                req["group_id"],
                req["transactional_id"],
                producer_id,
                producer_epoch,
                req.get("member_id", ""),
                req.get("generation_id", -1),
                req.get("group_instance_id"),
                offsets,
            )
        results.update(dict.fromkeys(unknown, Errors.UNKNOWN_TOPIC_OR_PARTITION))
        return _commit_response(order, results)

    async def _add_offsets_partition(self, ctx: RequestContext, req: dict[str, Any]) -> Errors:
        """TxnOffsetCommit v5 with transaction.version 2: the offsets partition of the group is
        added to the transaction (Kafka's addPartition verification of the group coordinator)."""
        if ctx.version < 5 or self.add_txn_partitions is None or self.transaction_version() < 2:
            return Errors.NONE
        tp = (OFFSETS_TOPIC, self.coordinator.partition_for(req["group_id"]))
        failed = await self.add_txn_partitions(
            req["transactional_id"], req["producer_id"], req["producer_epoch"], [tp]
        )
        err = failed.get(tp, Errors.NONE)
        if err != Errors.NONE:
            log.info("TxnOffsetCommit of group %s (transactional id %r): adding %s-%d to the "
                     "transaction failed: %s", req["group_id"], req["transactional_id"], tp[0], tp[1], err.name)
        if err in (Errors.NETWORK_EXCEPTION, Errors.COORDINATOR_NOT_AVAILABLE):
            return Errors.COORDINATOR_LOAD_IN_PROGRESS  # retriable for every producer
        return err

    # ------------------------------------------------------------------------ OffsetFetch

    def _fetch_group(
        self,
        group_id: str,
        topics: list[dict[str, Any]] | None,
        require_stable: bool,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[Errors, list[dict[str, Any]]]:
        tps = None
        if topics is not None:
            tps = [(t["name"], p) for t in topics for p in t["partition_indexes"]]
        err, rows = self.coordinator.fetch_offsets(group_id, tps, require_stable, member_id, member_epoch)
        if err != Errors.NONE and tps is not None:
            # Per-partition errors as well, for clients that only look there.
            rows = [(tp, None, err) for tp in tps]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, o, perr in rows:
            by_topic.setdefault(tp[0], []).append(
                {
                    "partition_index": tp[1],
                    "committed_offset": o.offset if o is not None else -1,
                    "committed_leader_epoch": o.leader_epoch if o is not None else -1,
                    "metadata": o.metadata if o is not None else "",
                    "error_code": perr,
                }
            )
        return err, [{"name": n, "partitions": ps} for n, ps in by_topic.items()]

    def handle_offset_fetch(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        require_stable = bool(req.get("require_stable", False))
        if ctx.version >= 8:
            groups = []
            for g in req["groups"]:
                err, topics = self._fetch_group(
                    g["group_id"], g["topics"], require_stable, g.get("member_id"), g.get("member_epoch", -1)
                )
                groups.append({"group_id": g["group_id"], "topics": topics, "error_code": err})
            return {"throttle_time_ms": 0, "groups": groups}
        topics_req = req["topics"]
        if ctx.version < 2 and not topics_req:
            topics_req = []
        err, topics = self._fetch_group(req["group_id"], topics_req, require_stable)
        return {"throttle_time_ms": 0, "topics": topics, "error_code": err}

    # ------------------------------------------------------------------------ Describe/List

    def handle_describe_groups(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        out = []
        seen: dict[str, dict[str, Any]] = {}  # a repeated group id shares one answer (~330 B)
        for gid in req["groups"]:
            if gid in seen:
                out.append(seen[gid])
                continue
            entry: dict[str, Any] = {
                "error_code": Errors.NONE,
                "group_id": gid,
                "group_state": ClassicGroupState.DEAD.value,
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": AUTHORIZED_OPS_OMITTED,
            }
            seen[gid] = entry
            err, g = self.coordinator.describe_group(gid)
            if err != Errors.NONE:
                entry["error_code"] = err
            elif g is not None and isinstance(g, ClassicGroup):
                stable = g.state == ClassicGroupState.STABLE
                entry.update(
                    group_state=g.state_name,
                    protocol_type=g.protocol_type or "",
                    protocol_data=(g.protocol_name or "") if stable else "",
                    members=[
                        {
                            "member_id": mm.member_id,
                            "group_instance_id": mm.group_instance_id,
                            "client_id": mm.client_id,
                            "client_host": mm.client_host,
                            "member_metadata": mm.metadata(g.protocol_name) if stable else b"",
                            "member_assignment": mm.assignment if stable else b"",
                        }
                        for mm in g.members.values()
                    ],
                )
            elif isinstance(g, ConsumerGroup):
                # As Kafka before DescribeGroups v6: not a classic group, so Dead and no
                # members (clients describe KIP-848 groups with ConsumerGroupDescribe).
                pass
            elif g is not None:
                entry.update(group_state=g.state_name, protocol_type=g.protocol_type or "consumer")
            if entry["error_code"] == Errors.NONE and req.get("include_authorized_operations", False):
                entry["authorized_operations"] = GROUP_AUTHORIZED_OPERATIONS  # no authorizer: all
            out.append(entry)
        return {"throttle_time_ms": 0, "groups": out}

    def handle_list_groups(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        err, groups = self.coordinator.list_groups(req.get("states_filter"), req.get("types_filter"))
        return {
            "throttle_time_ms": 0,
            "error_code": err,
            "groups": [
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type or "",
                    "group_state": g.state_name,
                    "group_type": g.group_type,
                }
                for g in groups
            ],
        }

    # ------------------------------------------------------------------------ KIP-848

    async def handle_consumer_group_heartbeat(
        self, ctx: RequestContext, req: dict[str, Any]
    ) -> dict[str, Any]:
        describable = self.describable_topics
        return await self.coordinator.consumer_group_heartbeat(
            req, client_id=ctx.header.client_id or "", client_host="/" + _host(ctx),
            topic_filter=None if describable is None else lambda names: describable(ctx, names),
        )

    def handle_consumer_group_describe(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        groups = self.coordinator.consumer_group_describe(list(req["group_ids"]))
        if req["include_authorized_operations"]:
            for g in groups:
                if g["error_code"] == Errors.NONE:
                    g["authorized_operations"] = GROUP_AUTHORIZED_OPERATIONS  # no authorizer: all
        return {"throttle_time_ms": 0, "groups": groups}

    # ------------------------------------------------------------------------ Delete

    async def handle_delete_groups(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        results = await self.coordinator.delete_groups(list(req["groups_names"]))
        return {
            "throttle_time_ms": 0,
            "results": [{"group_id": gid, "error_code": e} for gid, e in results.items()],
        }

    async def handle_offset_delete(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        tps = [(t["name"], p["partition_index"]) for t in req["topics"] for p in t["partitions"]]
        err, results = await self.coordinator.delete_offsets(req["group_id"], tps)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        if err == Errors.NONE:
            for tp in tps:
                by_topic.setdefault(tp[0], []).append(
                    {"partition_index": tp[1], "error_code": results.get(tp, Errors.NONE)}
                )
        return {
            "error_code": err,
            "throttle_time_ms": 0,
            "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
        }


def _host(ctx: RequestContext) -> str:
    peer = getattr(ctx.conn, "peer", "")
    if isinstance(peer, tuple):
        return str(peer[0])
    text = str(peer)
    return text.rsplit(":", 1)[0] if ":" in text else text


def _commit_requests(
    req: dict[str, Any],
) -> tuple[dict[tuple[str, int], CommitRequest], list[tuple[str, int]]]:
    """The offsets of an OffsetCommit or TxnOffsetCommit, and their partitions in request order."""
    offsets: dict[tuple[str, int], CommitRequest] = {}
    order: list[tuple[str, int]] = []
    for t in req["topics"]:
        for p in t["partitions"]:
            tp = (t["name"], p["partition_index"])
            order.append(tp)
            offsets[tp] = CommitRequest(
                p["committed_offset"], p.get("committed_leader_epoch", -1), p["committed_metadata"]
            )
    return offsets, order


def _commit_response(order: list[tuple[str, int]], results: dict[tuple[str, int], Errors]) -> dict[str, Any]:
    """The OffsetCommit / TxnOffsetCommit response: each partition's error, in request order."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp in order:
        by_topic.setdefault(tp[0], []).append(
            {"partition_index": tp[1], "error_code": results.get(tp, Errors.UNKNOWN_SERVER_ERROR)}
        )
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
    }
