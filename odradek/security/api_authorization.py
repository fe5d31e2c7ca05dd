"""The authorization of each API: the operation and resource Kafka checks (KafkaApis,
ControllerApis, AuthHelper of Kafka 4), and the error each refused part of a request gets.

Each check (see :mod:`odradek.security.auth_helper`) takes the request and returns None (allowed),
a response (refused as a whole: ``*_AUTHORIZATION_FAILED``), or a narrowed request whose
response is completed with the refused topics/partitions/groups. Authorized operations in
Metadata, DescribeCluster, DescribeGroups and ConsumerGroupDescribe responses are computed here
from the ACLs, replacing the "everything" a handler reports without an authorizer.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.network.request_channel import CloseConnection
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.security.acl import ResourceType
from odradek.security.auth_helper import AuthHelper, Check, Narrowed
from odradek.security.topic_visibility import (
    check_describe_transactions,
    hide_groups_with_undescribable_topics,
)
from odradek.server.acl_operations import (
    AUTHORIZED_OPS_OMITTED,
    CLUSTER_OPERATIONS,
    GROUP_OPERATIONS,
    TOPIC_OPERATIONS,
    AclOperation,
)

if TYPE_CHECKING:
    from odradek.server.api_dispatcher import RequestContext

Op = AclOperation
TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
_ZERO_UUID = uuid.UUID(int=0)
_TOPIC_DENIED = Errors.TOPIC_AUTHORIZATION_FAILED
_GROUP_DENIED = Errors.GROUP_AUTHORIZATION_FAILED
_CLUSTER_DENIED = Errors.CLUSTER_AUTHORIZATION_FAILED
_TXN_DENIED = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

# ConfigResource types
_CONFIG_TOPIC, _CONFIG_BROKER, _CONFIG_BROKER_LOGGER, _CONFIG_CLIENT_METRICS, _CONFIG_GROUP = 2, 4, 8, 16, 32


def _error(code: Errors, **fields: Any) -> dict[str, Any]:
    """A response refused as a whole (absent fields take their defaults)."""
    return {"throttle_time_ms": 0, "error_code": code, **fields}


# -- topic/partition lists ------------------------------------------------------------------------


def _split_topics(
    topics: list[dict[str, Any]], allowed: Callable[[str], bool], name_key: str = "name"
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ok: list[dict[str, Any]] = []
    denied: list[dict[str, Any]] = []
    for t in topics:
        (ok if allowed(t[name_key]) else denied).append(t)
    return ok, denied


def _partition_lists(
    req_key: str, resp_key: str, name_key: str, parts_key: str, index_key: str,
    out_name_key: str, entry: Callable[[int, Errors], dict[str, Any]], out_parts_key: str = "partitions",
) -> Callable[[dict[str, Any], Callable[[str], Errors | None]], dict[str, Any] | Narrowed | None]:
    """A narrowing for requests of the shape ``req_key[name_key, parts_key[index_key]]``: topics
    ``refusal(name)`` returns an error for are answered with it, per partition."""

    def narrow(req: dict[str, Any], refusal: Callable[[str], Errors | None]) -> dict[str, Any] | Narrowed | None:
        topics = req.get(req_key) or []
        denied = [(t, err) for t in topics if (err := refusal(t[name_key])) is not None]
        if not denied:
            return None
        refused = {id(t) for t, _ in denied}
        narrowed = {**req, req_key: [t for t in topics if id(t) not in refused]}

        def merge(resp: dict[str, Any] | None) -> dict[str, Any] | None:
            if resp is None:
                return None
            out = list(resp.get(resp_key) or [])
            for t, err in denied:
                parts = [p[index_key] if isinstance(p, dict) else p for p in t[parts_key] or []]
                out.append({out_name_key: t[name_key], out_parts_key: [entry(i, err) for i in parts]})
            return {**resp, resp_key: out}

        return Narrowed(narrowed, merge)

    return narrow


def _topic_refusal(
    h: AuthHelper, ctx: RequestContext, op: AclOperation, pre: Errors | None = None
) -> Callable[[str], Errors | None]:
    cache: dict[str, Errors | None] = {}

    def refusal(name: str) -> Errors | None:
        if pre is not None:
            return pre
        if name not in cache:
            cache[name] = None if h.authorize(ctx, op, TOPIC, name) else _TOPIC_DENIED
        return cache[name]

    return refusal


# -- Produce / Fetch / ListOffsets / OffsetForLeaderEpoch / DeleteRecords ----------------------


def _produce_entry(i: int, err: Errors) -> dict[str, Any]:
    return {"index": i, "error_code": err, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1,
            "record_errors": [], "error_message": None}


_produce_narrow = _partition_lists("topic_data", "responses", "name", "partition_data", "index", "name",
                                   _produce_entry, "partition_responses")


def check_produce(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    tid = req.get("transactional_id")
    pre = None
    if tid is not None and not h.authorize(ctx, Op.WRITE, TXN, tid):
        pre = _TXN_DENIED
    verdict = _produce_narrow(req, _topic_refusal(h, ctx, Op.WRITE, pre))
    if verdict is not None and req["acks"] == 0:
        raise CloseConnection(f"acks=0 produce from {ctx.conn.peer} ({ctx.conn.principal}) not authorized")
    return verdict


def _fetch_entry(i: int, err: Errors) -> dict[str, Any]:
    return {"partition_index": i, "error_code": err, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}


def check_fetch(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    replica_id = req.get("replica_id", -1)
    if ctx.version >= 15:
        replica_id = (req.get("replica_state") or {}).get("replica_id", -1)
    if replica_id >= 0:
        if h.cluster(ctx, Op.CLUSTER_ACTION):
            return None
        refusal: Callable[[str], Errors | None] = lambda _n: _TOPIC_DENIED  # noqa: E731
    else:
        refusal = _topic_refusal(h, ctx, Op.READ)
    topics = req.get("topics") or []
    denied: list[tuple[dict[str, Any], str, Errors]] = []
    kept = []
    for t in topics:
        name = t.get("topic") or ""
        if ctx.version >= 13:
            name = h.topic_name(t.get("topic_id") or _ZERO_UUID) or ""
            if not name and replica_id < 0:
                kept.append(t)  # unknown topic id: the handler answers UNKNOWN_TOPIC_ID
                continue
        err = refusal(name)
        if err is None:
            kept.append(t)
        else:
            denied.append((t, name, err))
    # An incremental fetch (KIP-227) also returns partitions of the session that this request
    # does not name: their topics are checked again, as Kafka does for every session partition.
    incremental = replica_id < 0 and req.get("session_epoch", -1) > 0
    if not denied and not incremental:
        return None

    def merge(resp: dict[str, Any]) -> dict[str, Any]:
        out = list(resp.get("responses") or [])
        if incremental:
            for i, t in enumerate(out):
                name = t.get("topic") or h.topic_name(t.get("topic_id") or _ZERO_UUID) or ""
                if name and refusal(name) is not None:
                    out[i] = {**t, "partitions": [_fetch_entry(p["partition_index"], _TOPIC_DENIED)
                                                  for p in t.get("partitions") or []]}
        for t, name, err in denied:
            out.append({"topic": name, "topic_id": t.get("topic_id") or _ZERO_UUID,
                        "partitions": [_fetch_entry(p["partition"], err) for p in t["partitions"]]})
        return {**resp, "responses": out}

    return Narrowed({**req, "topics": kept}, merge)


def _offset_entry(i: int, err: Errors) -> dict[str, Any]:
    return {"partition_index": i, "error_code": err, "timestamp": -1, "offset": -1, "leader_epoch": -1,
            "old_style_offsets": []}


_list_offsets_narrow = _partition_lists("topics", "topics", "name", "partitions", "partition_index", "name",
                                        _offset_entry)


def check_list_offsets(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    return _list_offsets_narrow(req, _topic_refusal(h, ctx, Op.DESCRIBE))


_olfe_narrow = _partition_lists(
    "topics", "topics", "topic", "partitions", "partition", "topic",
    lambda i, err: {"error_code": err, "partition": i, "leader_epoch": -1, "end_offset": -1},
)


def check_offset_for_leader_epoch(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    if req.get("replica_id", -1) >= 0:
        if h.cluster(ctx, Op.CLUSTER_ACTION):
            return None
        return _olfe_narrow(req, lambda _n: _CLUSTER_DENIED)
    return _olfe_narrow(req, _topic_refusal(h, ctx, Op.DESCRIBE))


_delete_records_narrow = _partition_lists(
    "topics", "topics", "name", "partitions", "partition_index", "name",
    lambda i, err: {"partition_index": i, "low_watermark": -1, "error_code": err},
)


def check_delete_records(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    return _delete_records_narrow(req, _topic_refusal(h, ctx, Op.DELETE))


_describe_producers_narrow = _partition_lists(
    "topics", "topics", "name", "partition_indexes", "", "name",
    lambda i, err: {"partition_index": i, "error_code": err, "error_message": None, "active_producers": []},
)


def check_describe_producers(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    return _describe_producers_narrow(req, _topic_refusal(h, ctx, Op.READ))


# -- Metadata -------------------------------------------------------------------------------------


def check_metadata(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    version = ctx.version
    topics = req.get("topics")
    all_topics = topics is None or (version == 0 and not topics)
    denied: list[dict[str, Any]] = []
    narrowed = req
    drop_all = False
    if not all_topics:
        assert topics is not None
        kept = []
        auto = (req.get("allow_auto_topic_creation", True) if version >= 4 else True)
        cluster_create: bool | None = None
        for t in topics:
            name = t.get("name")
            tid = t.get("topic_id")
            if name is None and tid is not None:
                resolved = h.topic_name(tid)
                if resolved is None:
                    kept.append(t)
                    continue
                if not h.authorize(ctx, Op.DESCRIBE, TOPIC, resolved):
                    # (Kafka: topic ids are not sensitive, the refusal names the id)
                    denied.append({"error_code": _TOPIC_DENIED, "name": None, "topic_id": tid,
                                   "is_internal": False, "partitions": [],
                                   "topic_authorized_operations": AUTHORIZED_OPS_OMITTED})
                    continue
                kept.append(t)
                continue
            if name is None:
                kept.append(t)
                continue
            if not h.authorize(ctx, Op.DESCRIBE, TOPIC, name):
                denied.append(_denied_topic(name))
                continue
            if auto and not h.topic_exists(name):
                if cluster_create is None:
                    cluster_create = h.cluster(ctx, Op.CREATE, log_if_denied=False)
                if not cluster_create and not h.authorize(ctx, Op.CREATE, TOPIC, name):
                    denied.append(_denied_topic(name))
                    continue
            kept.append(t)
        if version == 0 and not kept:
            narrowed = {**req, "topics": None}  # v0: [] is every topic; none is asked for here
            drop_all = True
        elif len(kept) != len(topics):
            narrowed = {**req, "topics": kept}

    def merge(resp: dict[str, Any]) -> dict[str, Any]:
        out = []
        for t in [] if drop_all else resp.get("topics") or []:
            name = t.get("name")
            if name is not None:
                if all_topics and not h.authorize(ctx, Op.DESCRIBE, TOPIC, name, log_if_denied=False):
                    continue
                if t.get("topic_authorized_operations", AUTHORIZED_OPS_OMITTED) != AUTHORIZED_OPS_OMITTED:
                    t["topic_authorized_operations"] = h.operations(ctx, TOPIC, name, TOPIC_OPERATIONS)
            out.append(t)
        out.extend(denied)
        resp = {**resp, "topics": out}
        if resp.get("cluster_authorized_operations", AUTHORIZED_OPS_OMITTED) != AUTHORIZED_OPS_OMITTED:
            resp["cluster_authorized_operations"] = h.operations(ctx, CLUSTER, "kafka-cluster", CLUSTER_OPERATIONS)
        return resp

    return Narrowed(narrowed, merge)


def _denied_topic(name: str) -> dict[str, Any]:
    return {"error_code": _TOPIC_DENIED, "name": name, "topic_id": _ZERO_UUID, "is_internal": False,
            "partitions": [], "topic_authorized_operations": AUTHORIZED_OPS_OMITTED}


def check_describe_cluster(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    if not req.get("include_cluster_authorized_operations"):
        return None

    def merge(resp: dict[str, Any]) -> dict[str, Any]:
        if resp.get("cluster_authorized_operations", AUTHORIZED_OPS_OMITTED) != AUTHORIZED_OPS_OMITTED:
            resp["cluster_authorized_operations"] = h.operations(ctx, CLUSTER, "kafka-cluster", CLUSTER_OPERATIONS)
        return resp

    return Narrowed(req, merge)


# -- admin: topics and configs --------------------------------------------------------------------


def check_create_topics(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    cluster_ok = h.cluster(ctx, Op.CREATE, log_if_denied=False)
    topics = req.get("topics") or []
    kept = topics if cluster_ok else [t for t in topics if h.authorize(ctx, Op.CREATE, TOPIC, t["name"])]
    denied = [t for t in topics if t not in kept] if not cluster_ok else []

    def merge(resp: dict[str, Any]) -> dict[str, Any]:
        out = list(resp.get("topics") or [])
        for t in out:
            if t.get("error_code") == Errors.NONE and not h.authorize(ctx, Op.DESCRIBE_CONFIGS, TOPIC, t["name"], False):
                t["topic_config_error_code"] = _TOPIC_DENIED
                t["configs"] = None
        for t in denied:
            out.append({"name": t["name"], "topic_id": _ZERO_UUID, "error_code": _TOPIC_DENIED,
                        "error_message": None, "num_partitions": -1, "replication_factor": -1, "configs": None})
        return {**resp, "topics": out}

    return Narrowed({**req, "topics": kept} if denied else req, merge)


def check_delete_topics(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    denied: list[dict[str, Any]] = []
    if ctx.version >= 6:
        kept = []
        for t in req.get("topics") or []:
            name = t.get("name") or h.topic_name(t.get("topic_id") or _ZERO_UUID)
            if name is None or h.authorize(ctx, Op.DELETE, TOPIC, name):
                kept.append(t)
            else:
                denied.append({"name": t.get("name"), "topic_id": t.get("topic_id") or _ZERO_UUID,
                               "error_code": _TOPIC_DENIED, "error_message": None})
        narrowed = {**req, "topics": kept}
    else:
        names = req.get("topic_names") or []
        ok = [n for n in names if h.authorize(ctx, Op.DELETE, TOPIC, n)]
        denied = [{"name": n, "topic_id": _ZERO_UUID, "error_code": _TOPIC_DENIED, "error_message": None}
                  for n in names if n not in ok]
        narrowed = {**req, "topic_names": ok}
    if not denied:
        return None
    return Narrowed(narrowed, lambda resp: {**resp, "responses": list(resp.get("responses") or []) + denied})


def check_create_partitions(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    topics = req.get("topics") or []
    kept, denied = _split_topics(topics, lambda n: h.authorize(ctx, Op.ALTER, TOPIC, n))
    if not denied:
        return None
    extra = [{"name": t["name"], "error_code": _TOPIC_DENIED, "error_message": None} for t in denied]
    return Narrowed({**req, "topics": kept}, lambda resp: {**resp, "results": list(resp.get("results") or []) + extra})


def _config_refusal(h: AuthHelper, ctx: RequestContext, op: AclOperation, rtype: int, name: str) -> Errors | None:
    if rtype == _CONFIG_TOPIC:
        return None if h.authorize(ctx, op, TOPIC, name) else _TOPIC_DENIED
    if rtype == _CONFIG_GROUP:
        return None if h.authorize(ctx, op, GROUP, name) else _GROUP_DENIED
    return None if h.cluster(ctx, op) else _CLUSTER_DENIED


def _configs_check(op: AclOperation, resp_key: str, describe: bool) -> Check:
    def check(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
        kept, extra = [], []
        for r in req.get("resources") or []:
            err = _config_refusal(h, ctx, op, r["resource_type"], r["resource_name"])
            if err is None:
                kept.append(r)
                continue
            entry = {"error_code": err, "error_message": None, "resource_type": r["resource_type"],
                     "resource_name": r["resource_name"]}
            if describe:
                entry["configs"] = []
            extra.append(entry)
        if not extra:
            return None
        return Narrowed({**req, "resources": kept},
                        lambda resp: {**resp, resp_key: list(resp.get(resp_key) or []) + extra})

    return check


# -- groups ---------------------------------------------------------------------------------------


def _group_whole(op: AclOperation, **fields: Any) -> Check:
    def check(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
        if h.authorize(ctx, op, GROUP, req["group_id"]):
            return None
        return _error(_GROUP_DENIED, **fields)

    return check


def check_join_group(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    if h.authorize(ctx, Op.READ, GROUP, req["group_id"]):
        return None
    return _error(_GROUP_DENIED, generation_id=-1, member_id=req.get("member_id") or "", leader="", members=[],
                  protocol_name=None)


_commit_entry: Callable[[int, Errors], dict[str, Any]] = lambda i, err: {"partition_index": i, "error_code": err}  # noqa: E731
_commit_narrow = _partition_lists("topics", "topics", "name", "partitions", "partition_index", "name",
                                  _commit_entry)


def check_offset_commit(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    pre = None if h.authorize(ctx, Op.READ, GROUP, req["group_id"]) else _GROUP_DENIED
    return _commit_narrow(req, _topic_refusal(h, ctx, Op.READ, pre))


def check_txn_offset_commit(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    pre = None
    if not h.authorize(ctx, Op.WRITE, TXN, req["transactional_id"]):
        pre = _TXN_DENIED
    elif not h.authorize(ctx, Op.READ, GROUP, req["group_id"]):
        pre = _GROUP_DENIED
    return _commit_narrow(req, _topic_refusal(h, ctx, Op.READ, pre))


def check_offset_delete(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    if not h.authorize(ctx, Op.DELETE, GROUP, req["group_id"]):
        return _error(_GROUP_DENIED, topics=[])
    return _commit_narrow(req, _topic_refusal(h, ctx, Op.READ))


def _fetch_offsets_topics(
    h: AuthHelper, ctx: RequestContext, topics: list[dict[str, Any]] | None
) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]]]:
    if topics is None:
        return None, []
    kept, denied = _split_topics(topics, lambda n: h.authorize(ctx, Op.DESCRIBE, TOPIC, n))
    extra = [
        {"name": t["name"], "partitions": [
            {"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
             "error_code": _TOPIC_DENIED} for i in t["partition_indexes"]
        ]}
        for t in denied
    ]
    return kept, extra


def _visible_topics(h: AuthHelper, ctx: RequestContext, topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in topics if h.authorize(ctx, Op.DESCRIBE, TOPIC, t["name"], log_if_denied=False)]


def check_offset_fetch(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    if ctx.version < 8:
        if not h.authorize(ctx, Op.DESCRIBE, GROUP, req["group_id"]):
            return _error(_GROUP_DENIED, topics=[])
        all_topics = req.get("topics") is None
        kept, extra = _fetch_offsets_topics(h, ctx, req.get("topics"))

        def merge(resp: dict[str, Any]) -> dict[str, Any]:
            topics = list(resp.get("topics") or [])
            if all_topics:
                topics = _visible_topics(h, ctx, topics)
            return {**resp, "topics": topics + extra}

        return Narrowed({**req, "topics": kept}, merge)
    groups, refused, extras, all_of = [], [], {}, set()
    for grp in req.get("groups") or []:
        gid = grp["group_id"]
        if not h.authorize(ctx, Op.DESCRIBE, GROUP, gid):
            refused.append({"group_id": gid, "topics": [], "error_code": _GROUP_DENIED})
            continue
        if grp.get("topics") is None:
            all_of.add(gid)
        kept, extra = _fetch_offsets_topics(h, ctx, grp.get("topics"))
        extras[gid] = extra
        groups.append({**grp, "topics": kept})

    def merge_groups(resp: dict[str, Any]) -> dict[str, Any]:
        out = []
        for grp in resp.get("groups") or []:
            gid = grp["group_id"]
            topics = list(grp.get("topics") or [])
            if gid in all_of:
                topics = _visible_topics(h, ctx, topics)
            out.append({**grp, "topics": topics + extras.get(gid, [])})
        return {**resp, "groups": out + refused}

    if not groups:
        return {"throttle_time_ms": 0, "groups": refused}
    return Narrowed({**req, "groups": groups}, merge_groups)


def check_find_coordinator(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    key_type = req.get("key_type", 0)

    def refusal(key: str) -> Errors | None:
        if key_type == 1:
            return None if h.authorize(ctx, Op.DESCRIBE, TXN, key) else _TXN_DENIED
        if key_type == 0:
            return None if h.authorize(ctx, Op.DESCRIBE, GROUP, key) else _GROUP_DENIED
        return None

    if ctx.version < 4:
        err = refusal(req["key"])
        return None if err is None else _error(err, error_message=None, node_id=-1, host="", port=-1)
    keys = req.get("coordinator_keys") or []
    refused = [(k, e) for k in keys if (e := refusal(k)) is not None]
    if not refused:
        return None
    denied = {k for k, _ in refused}
    extra = [{"key": k, "node_id": -1, "host": "", "port": -1, "error_code": e, "error_message": None}
             for k, e in refused]
    return Narrowed({**req, "coordinator_keys": [k for k in keys if k not in denied]},
                    lambda resp: {**resp, "coordinators": list(resp.get("coordinators") or []) + extra})


def _groups_describe_check(
    req_key: str, empty: Callable[[str], dict[str, Any]], hide_topics: bool = False
) -> Check:
    def check(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
        ids = req.get(req_key) or []
        ok = [gid for gid in ids if h.authorize(ctx, Op.DESCRIBE, GROUP, gid)]
        extra = [empty(gid) for gid in ids if gid not in ok]

        def merge(resp: dict[str, Any]) -> dict[str, Any]:
            out = list(resp.get("groups") or [])
            if hide_topics:
                out = hide_groups_with_undescribable_topics(h, ctx, out)
            for grp in out:
                if grp.get("authorized_operations", AUTHORIZED_OPS_OMITTED) != AUTHORIZED_OPS_OMITTED:
                    grp["authorized_operations"] = h.operations(ctx, GROUP, grp["group_id"], GROUP_OPERATIONS)
            return {**resp, "groups": out + extra}

        if not ok and extra:
            return {"throttle_time_ms": 0, "groups": extra}
        return Narrowed({**req, req_key: ok}, merge)

    return check


check_describe_groups = _groups_describe_check("groups", lambda gid: {
    "error_code": _GROUP_DENIED, "group_id": gid, "group_state": "", "protocol_type": "", "protocol_data": "",
    "members": [], "authorized_operations": AUTHORIZED_OPS_OMITTED,
})
check_consumer_group_describe = _groups_describe_check("group_ids", lambda gid: {
    "error_code": _GROUP_DENIED, "error_message": None, "group_id": gid, "group_state": "", "group_epoch": -1,
    "assignment_epoch": -1, "assignor_name": "", "members": [], "authorized_operations": AUTHORIZED_OPS_OMITTED,
}, hide_topics=True)


def check_list_groups(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    if h.cluster(ctx, Op.DESCRIBE, log_if_denied=False):
        return None
    return Narrowed(req, lambda resp: {**resp, "groups": [
        grp for grp in resp.get("groups") or []
        if h.authorize(ctx, Op.DESCRIBE, GROUP, grp["group_id"], log_if_denied=False)
    ]})


def check_delete_groups(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    names = req.get("groups_names") or []
    ok = [n for n in names if h.authorize(ctx, Op.DELETE, GROUP, n)]
    if len(ok) == len(names):
        return None
    extra = [{"group_id": n, "error_code": _GROUP_DENIED} for n in names if n not in ok]
    return Narrowed({**req, "groups_names": ok}, lambda resp: {**resp, "results": list(resp.get("results") or []) + extra})


def check_consumer_group_heartbeat(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    if not h.authorize(ctx, Op.READ, GROUP, req["group_id"]):
        return _error(_GROUP_DENIED, error_message=None, member_id=None, member_epoch=-1, heartbeat_interval_ms=0,
                      assignment=None)
    subscribed = req.get("subscribed_topic_names") or []
    if subscribed and len(h.allowed(ctx, Op.DESCRIBE, TOPIC, subscribed)) < len(set(subscribed)):
        return _error(_TOPIC_DENIED, error_message="The member is not authorized to describe every subscribed topic",
                      member_id=None, member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    return None


# -- transactions ---------------------------------------------------------------------------------


def check_init_producer_id(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    tid = req.get("transactional_id")
    if tid is not None:
        if h.authorize(ctx, Op.WRITE, TXN, tid):
            return None
        return _error(_TXN_DENIED, producer_id=-1, producer_epoch=-1)
    if h.cluster(ctx, Op.IDEMPOTENT_WRITE, log_if_denied=False) or h.by_resource_type(ctx, Op.WRITE, TOPIC):
        return None
    return _error(_CLUSTER_DENIED, producer_id=-1, producer_epoch=-1)


def check_add_partitions_to_txn(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    if ctx.version >= 4:  # sent by brokers (KIP-890)
        return None if h.cluster(ctx, Op.CLUSTER_ACTION) else _error(_CLUSTER_DENIED, results_by_transaction=[])
    topics = req.get("v3_and_below_topics") or []
    if not h.authorize(ctx, Op.WRITE, TXN, req["v3_and_below_transactional_id"]):
        errors = dict.fromkeys((t["name"] for t in topics), _TXN_DENIED)
    else:
        errors = {t["name"]: _TOPIC_DENIED for t in topics if not h.authorize(ctx, Op.WRITE, TOPIC, t["name"])}
        if not errors:
            return None
    return _error(Errors.NONE, results_by_topic_v3_and_below=[
        {"name": t["name"], "results_by_partition": [
            {"partition_index": p, "partition_error_code": errors.get(t["name"], Errors.OPERATION_NOT_ATTEMPTED)}
            for p in t["partitions"]
        ]}
        for t in topics
    ])


def check_add_offsets_to_txn(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    if not h.authorize(ctx, Op.WRITE, TXN, req["transactional_id"]):
        return _error(_TXN_DENIED)
    if not h.authorize(ctx, Op.READ, GROUP, req["group_id"]):
        return _error(_GROUP_DENIED)
    return None


def check_end_txn(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    if h.authorize(ctx, Op.WRITE, TXN, req["transactional_id"]):
        return None
    return _error(_TXN_DENIED, producer_id=-1, producer_epoch=-1)


def check_write_txn_markers(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    if h.cluster(ctx, Op.CLUSTER_ACTION):
        return None
    return {"markers": [
        {"producer_id": mk["producer_id"], "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p, "error_code": _CLUSTER_DENIED} for p in t["partition_indexes"]
            ]} for t in mk["topics"]
        ]} for mk in req.get("markers") or []
    ]}


def check_list_transactions(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
    return Narrowed(req, lambda resp: {**resp, "transaction_states": [
        t for t in resp.get("transaction_states") or []
        if h.authorize(ctx, Op.DESCRIBE, TXN, t["transactional_id"], log_if_denied=False)
    ]})


# -- cluster-wide ---------------------------------------------------------------------------------


def _cluster_whole(op: AclOperation, response: Callable[[dict[str, Any]], dict[str, Any]]) -> Check:
    def check(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | Narrowed | None:
        return None if h.cluster(ctx, op) else response(req)

    return check


def _elect_leaders_refused(req: dict[str, Any]) -> dict[str, Any]:
    return _error(_CLUSTER_DENIED, replica_election_results=[
        {"topic": tp["topic"], "partition_result": [
            {"partition_id": p, "error_code": _CLUSTER_DENIED, "error_message": None} for p in tp["partitions"]
        ]} for tp in req.get("topic_partitions") or []
    ])


def _reassignments_refused(req: dict[str, Any]) -> dict[str, Any]:
    return _error(_CLUSTER_DENIED, error_message=None, responses=[
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": _CLUSTER_DENIED, "error_message": None}
            for p in t["partitions"]
        ]} for t in req.get("topics") or []
    ])


def _acl_results_refused(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def refused(req: dict[str, Any]) -> dict[str, Any]:
        items = req.get("creations" if key == "results" else "filters") or []
        entry: dict[str, Any] = {"error_code": _CLUSTER_DENIED, "error_message": None}
        if key == "filter_results":
            entry["matching_acls"] = []
        return {"throttle_time_ms": 0, key: [dict(entry) for _ in items]}

    return refused


def _scram_alter_refused(req: dict[str, Any]) -> dict[str, Any]:
    users = dict.fromkeys(x["name"] for x in [*(req.get("deletions") or []), *(req.get("upsertions") or [])])
    return {"throttle_time_ms": 0, "results": [
        {"user": u, "error_code": _CLUSTER_DENIED, "error_message": None} for u in users
    ]}


def _top_error(**fields: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda _req: _error(_CLUSTER_DENIED, **fields)


def _allow(h: AuthHelper, ctx: RequestContext, req: dict[str, Any]) -> None:
    return None


# -- the tables -----------------------------------------------------------------------------------

# Checked the same way on a broker and on the controller listener (KIP-919 clients, forwarded
# requests: the controller checks the connection's principal).
_ADMIN_CHECKS: dict[int, Check] = {
    m.CREATE_TOPICS.api_key: check_create_topics,
    m.DELETE_TOPICS.api_key: check_delete_topics,
    m.CREATE_PARTITIONS.api_key: check_create_partitions,
    m.DESCRIBE_CONFIGS.api_key: _configs_check(Op.DESCRIBE_CONFIGS, "results", True),
    m.ALTER_CONFIGS.api_key: _configs_check(Op.ALTER_CONFIGS, "responses", False),
    m.INCREMENTAL_ALTER_CONFIGS.api_key: _configs_check(Op.ALTER_CONFIGS, "responses", False),
    m.DESCRIBE_CLUSTER.api_key: check_describe_cluster,
    m.DESCRIBE_QUORUM.api_key: _cluster_whole(Op.DESCRIBE, _top_error(error_message=None, topics=[], nodes=[])),
    m.ELECT_LEADERS.api_key: _cluster_whole(Op.ALTER, _elect_leaders_refused),
    m.ALTER_PARTITION_REASSIGNMENTS.api_key: _cluster_whole(Op.ALTER, _reassignments_refused),
    m.LIST_PARTITION_REASSIGNMENTS.api_key: _cluster_whole(
        Op.DESCRIBE, _top_error(error_message=None, topics=[])),
    g.CREATE_ACLS.api_key: _cluster_whole(Op.ALTER, _acl_results_refused("results")),
    g.DELETE_ACLS.api_key: _cluster_whole(Op.ALTER, _acl_results_refused("filter_results")),
    g.DESCRIBE_ACLS.api_key: _cluster_whole(Op.DESCRIBE, _top_error(error_message=None, resources=[])),
    m.ALTER_USER_SCRAM_CREDENTIALS.api_key: _cluster_whole(Op.ALTER, _scram_alter_refused),
    m.DESCRIBE_USER_SCRAM_CREDENTIALS.api_key: _cluster_whole(
        Op.DESCRIBE, _top_error(error_message=None, results=[])),
    # Client quotas (Kafka: DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster)
    g.DESCRIBE_CLIENT_QUOTAS.api_key: _cluster_whole(
        Op.DESCRIBE_CONFIGS, _top_error(error_message=None, entries=None)),
    g.ALTER_CLIENT_QUOTAS.api_key: _cluster_whole(Op.ALTER_CONFIGS, lambda req: {"throttle_time_ms": 0, "entries": [
        {"error_code": _CLUSTER_DENIED, "error_message": None, "entity": e.get("entity") or []}
        for e in req.get("entries") or []
    ]}),
    # (a broker forwards these to the controller, which checks them again)
    g.ADD_RAFT_VOTER.api_key: _cluster_whole(Op.ALTER, _top_error(error_message=None)),
    g.REMOVE_RAFT_VOTER.api_key: _cluster_whole(Op.ALTER, _top_error(error_message=None)),
    # Authentication itself needs no authorization.
    m.SASL_HANDSHAKE.api_key: _allow,
    m.SASL_AUTHENTICATE.api_key: _allow,
}

BROKER_CHECKS: dict[int, Check] = {
    **_ADMIN_CHECKS,
    m.METADATA.api_key: check_metadata,
    m.PRODUCE.api_key: check_produce,
    m.FETCH.api_key: check_fetch,
    m.LIST_OFFSETS.api_key: check_list_offsets,
    m.OFFSET_FOR_LEADER_EPOCH.api_key: check_offset_for_leader_epoch,
    m.DELETE_RECORDS.api_key: check_delete_records,
    m.DESCRIBE_LOG_DIRS.api_key: _cluster_whole(Op.DESCRIBE, _top_error(results=[])),
    m.INIT_PRODUCER_ID.api_key: check_init_producer_id,
    m.OFFSET_COMMIT.api_key: check_offset_commit,
    m.TXN_OFFSET_COMMIT.api_key: check_txn_offset_commit,
    m.OFFSET_FETCH.api_key: check_offset_fetch,
    m.OFFSET_DELETE.api_key: check_offset_delete,
    m.FIND_COORDINATOR.api_key: check_find_coordinator,
    m.JOIN_GROUP.api_key: check_join_group,
    m.SYNC_GROUP.api_key: _group_whole(Op.READ, assignment=b"", protocol_type=None, protocol_name=None),
    m.HEARTBEAT.api_key: _group_whole(Op.READ),
    m.LEAVE_GROUP.api_key: _group_whole(Op.READ, members=[]),
    m.DESCRIBE_GROUPS.api_key: check_describe_groups,
    m.LIST_GROUPS.api_key: check_list_groups,
    m.DELETE_GROUPS.api_key: check_delete_groups,
    m.CONSUMER_GROUP_HEARTBEAT.api_key: check_consumer_group_heartbeat,
    m.CONSUMER_GROUP_DESCRIBE.api_key: check_consumer_group_describe,
    m.WRITE_TXN_MARKERS.api_key: check_write_txn_markers,
    m.DESCRIBE_PRODUCERS.api_key: check_describe_producers,
    m.ADD_PARTITIONS_TO_TXN.api_key: check_add_partitions_to_txn,
    m.ADD_OFFSETS_TO_TXN.api_key: check_add_offsets_to_txn,
    m.END_TXN.api_key: check_end_txn,
    m.DESCRIBE_TRANSACTIONS.api_key: check_describe_transactions,
    m.LIST_TRANSACTIONS.api_key: check_list_transactions,
}

# The controller listener: the admin APIs above, and what only brokers and controllers send
# (CLUSTER_ACTION, as Kafka's ControllerApis).
_CLUSTER_ACTION = _cluster_whole(Op.CLUSTER_ACTION, _top_error())
CONTROLLER_CHECKS: dict[int, Check] = {
    **_ADMIN_CHECKS,
    **{api.api_key: _CLUSTER_ACTION for api in (
        g.BROKER_REGISTRATION, g.BROKER_HEARTBEAT, g.ALLOCATE_PRODUCER_IDS, g.ALTER_PARTITION,
        g.ASSIGN_REPLICAS_TO_DIRS, g.ENVELOPE, g.VOTE, g.BEGIN_QUORUM_EPOCH, g.END_QUORUM_EPOCH,
        g.FETCH_SNAPSHOT, g.FETCH, g.UPDATE_RAFT_VOTER, g.CONTROLLED_SHUTDOWN, g.UNREGISTER_BROKER,
    )},
}
