"""ControllerApis: the controller's request handlers (Kafka's ``ControllerApis``).

Brokers reach them through their controller channel (:mod:`odradek.server.controller_channel`);
clients on the controller listener reach the ones the protocol definitions declare. Every
handler takes a :class:`ControllerRequest` and returns the response data. A controller that is
not the active one answers the writes with ``NOT_CONTROLLER``, as Kafka's does.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from odradek.controller import envelope
from odradek.controller.quorum_controller import QuorumController
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, KafkaError
from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api
from odradek.security.standard_authorizer import StandardAuthorizer
from odradek.server import acl_apis, config_defs
from odradek.server.acl_operations import AUTHORIZED_OPS_OMITTED, CLUSTER_AUTHORIZED_OPERATIONS
from odradek.server.controller_channel import (
    ControllerRequest,
    RequestClient,
    error_response,
)
from odradek.server.kafka_config import KafkaConfig

if TYPE_CHECKING:
    from odradek.server.api_dispatcher import Handler, RequestContext
    from odradek.server.raft_apis import RaftApis

log = logging.getLogger(__name__)

_ZERO_UUID = uuid.UUID(int=0)
_ENDPOINT_TYPE_BROKER = 1
_ENDPOINT_TYPE_CONTROLLER = 2

# What a Kafka broker forwards to its controller in an Envelope (the admin writes).
_FORWARDABLE: list[Api] = [
    m.CREATE_TOPICS, m.DELETE_TOPICS, m.CREATE_PARTITIONS, m.ALTER_CONFIGS, m.INCREMENTAL_ALTER_CONFIGS,
    m.ELECT_LEADERS, m.ALTER_PARTITION_REASSIGNMENTS, m.LIST_PARTITION_REASSIGNMENTS,
    g.CREATE_ACLS, g.DELETE_ACLS,
    m.ALTER_USER_SCRAM_CREDENTIALS, g.ALTER_CLIENT_QUOTAS,
]

ControllerHandler = Callable[[ControllerRequest], Awaitable[dict[str, Any]]]


class ControllerApis:
    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        config: KafkaConfig,
        controller: QuorumController,
        leader_id: Callable[[], int | None],
        raft_apis: RaftApis | None = None,
    ) -> None:
        """``leader_id``: the current Raft leader of the controller quorum (None if unknown);
        this controller is active when it is the leader. ``raft_apis``: the quorum's APIs, which
        answer the DescribeQuorum requests brokers forward (None: not served)."""
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.config = config
        self.controller = controller
        self.leader_id = leader_id
        self.raft_apis = raft_apis
        # The controller listener's advertised endpoints (name -> host, port), for
        # DescribeCluster with the controller endpoint type (KIP-919).
        self.listener_endpoints: dict[str, tuple[str, int]] = {}
        # The other voters' controller endpoints (the Raft voter set; KIP-853 changes it).
        self.voter_endpoints: Callable[[], dict[int, tuple[str, int]]] = dict
        self._handlers: dict[int, ControllerHandler] = {
            m.CREATE_TOPICS.api_key: self.handle_create_topics,
            m.DELETE_TOPICS.api_key: self.handle_delete_topics,
            m.CREATE_PARTITIONS.api_key: self.handle_create_partitions,
            m.ALTER_CONFIGS.api_key: self.handle_alter_configs,
            m.INCREMENTAL_ALTER_CONFIGS.api_key: self.handle_incremental_alter_configs,
            m.DESCRIBE_CLUSTER.api_key: self.handle_describe_cluster,
            g.ALLOCATE_PRODUCER_IDS.api_key: self.handle_allocate_producer_ids,
            g.BROKER_REGISTRATION.api_key: self.handle_broker_registration,
            g.BROKER_HEARTBEAT.api_key: self.handle_broker_heartbeat,
            g.ALTER_PARTITION.api_key: self.handle_alter_partition,
            m.ELECT_LEADERS.api_key: self.handle_elect_leaders,
            m.ALTER_PARTITION_REASSIGNMENTS.api_key: self.handle_alter_partition_reassignments,
            m.LIST_PARTITION_REASSIGNMENTS.api_key: self.handle_list_partition_reassignments,
            g.ASSIGN_REPLICAS_TO_DIRS.api_key: self.handle_assign_replicas_to_dirs,
            g.CREATE_ACLS.api_key: self.handle_create_acls,
            g.DELETE_ACLS.api_key: self.handle_delete_acls,
            g.DESCRIBE_ACLS.api_key: self.handle_describe_acls,
            m.ALTER_USER_SCRAM_CREDENTIALS.api_key: self.handle_alter_user_scram_credentials,
            g.ALTER_CLIENT_QUOTAS.api_key: self.handle_alter_client_quotas,
        }
        # The controller's authorizer (authorizer.class.name), set by the ControllerServer, and
        # the check of a request a Kafka broker forwarded in an Envelope (see
        # odradek.security.auth_helper.forwarded_check): None (go ahead), an envelope response
        # (refused), a 1-tuple of the inner response (refused), or a Narrowed request.
        self.authorizer: StandardAuthorizer | None = None
        self.check_forwarded: Callable[[Any, bytes | None, RequestContext], Any] | None = None
        if raft_apis is not None:
            self._handlers[g.DESCRIBE_QUORUM.api_key] = self.handle_describe_quorum
            self._handlers[g.ADD_RAFT_VOTER.api_key] = self.handle_voter_change
            self._handlers[g.REMOVE_RAFT_VOTER.api_key] = self.handle_voter_change

    def is_active(self) -> bool:
        return self.leader_id() == self.node_id

    def handle(self, request: ControllerRequest) -> Awaitable[dict[str, Any]]:
        handler = self._handlers.get(request.api_key)
        if handler is None:
            raise ValueError(f"the controller does not handle API {request.api_key}")
        return self._answer(handler, request)

    async def _answer(self, handler: ControllerHandler, request: ControllerRequest) -> dict[str, Any]:
        try:
            return await handler(request)
        except KafkaError as e:
            # A write refused by the QuorumController itself, typically NOT_CONTROLLER when
            # this node stopped leading the quorum while the request waited.
            log.info("API %d refused by the controller: %s", request.api_key, e.message)
            return error_response(request, e.code, e.message)

    def _not_controller(self, request: ControllerRequest) -> dict[str, Any] | None:
        if self.is_active():
            return None
        leader = self.leader_id()
        return error_response(
            request, Errors.NOT_CONTROLLER,
            f"The active controller appears to be node {leader}" if leader is not None
            else "No controller appears to be active.",
        )

    # -- the controller listener ----------------------------------------------------------------

    def handlers(self) -> dict[Api, Handler]:
        """The handlers the controller listener serves (an ApiExtension of its KafkaApis), and
        so advertises in its ApiVersions: the client admin APIs a controller answers, and the
        broker → controller APIs (BrokerRegistration, BrokerHeartbeat, AllocateProducerIds)
        that brokers in other processes send through their network controller channel. None of
        them is served on a broker listener."""

        def served(api: Api) -> Handler:
            def handler(ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
                client = RequestClient(ctx.header.client_id, ctx.conn.peer)
                return self.handle(ControllerRequest(api.api_key, ctx.version, req, client))

            return handler

        apis = [
            m.CREATE_TOPICS, m.DELETE_TOPICS, m.CREATE_PARTITIONS, m.ALTER_CONFIGS,
            m.INCREMENTAL_ALTER_CONFIGS, m.DESCRIBE_CLUSTER,
            g.BROKER_REGISTRATION, g.BROKER_HEARTBEAT, g.ALLOCATE_PRODUCER_IDS, g.ALTER_PARTITION,
            m.ELECT_LEADERS, m.ALTER_PARTITION_REASSIGNMENTS, m.LIST_PARTITION_REASSIGNMENTS,
            g.ASSIGN_REPLICAS_TO_DIRS, g.CREATE_ACLS, g.DELETE_ACLS, g.DESCRIBE_ACLS,
            m.ALTER_USER_SCRAM_CREDENTIALS, g.ALTER_CLIENT_QUOTAS,
        ]
        out = {api: served(api) for api in apis}
        raft = [g.DESCRIBE_QUORUM, g.ADD_RAFT_VOTER, g.REMOVE_RAFT_VOTER] if self.raft_apis is not None else []
        out[g.ENVELOPE] = self.envelope_handler([*_FORWARDABLE, *raft])
        return out

    def envelope_handler(self, forwardable: list[Api]) -> Handler:
        """Envelope (KIP-590): a Kafka broker forwards its client's admin request wrapped, and
        gets the whole response back; the request is answered as if the client had sent it."""
        served = {api.api_key: api for api in forwardable}

        async def handler(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
            try:
                inner = envelope.unwrap(req, served, invalid_request=Errors.INVALID_REQUEST,
                                        unsupported_version=Errors.UNSUPPORTED_VERSION)
            except envelope.EnvelopeError as e:
                log.warning("Envelope from %s refused: %s", ctx.conn.peer, e.message)
                return {"response_data": None, "error_code": e.code}
            client = RequestClient(inner.client_id, inner.client_host or ctx.conn.peer)
            data, merge = inner.data, None
            if self.check_forwarded is not None:
                # With an authorizer the inner request is checked for the client's principal.
                verdict = self.check_forwarded(inner, req.get("request_principal"), ctx)
                if isinstance(verdict, dict):
                    return verdict
                if isinstance(verdict, tuple):
                    return {"response_data": envelope.wrap_response(inner, verdict[0]), "error_code": Errors.NONE}
                if verdict is not None:
                    data, merge = verdict.request, verdict.merge
            resp = await self.handle(ControllerRequest(inner.api.api_key, inner.version, data, client))
            if merge is not None:
                resp = merge(resp)
            return {"response_data": envelope.wrap_response(inner, resp), "error_code": Errors.NONE}

        return handler

    # -- ACLs (Kafka's ControllerApis.handleCreateAcls / handleDeleteAcls / handleDescribeAcls) --

    async def handle_create_acls(self, request: ControllerRequest) -> dict[str, Any]:
        if self.authorizer is None:
            return acl_apis.security_disabled(request.api_key, request.data)
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        results = await self.controller.create_acls(acl_apis.acl_creations(request.data))
        return acl_apis.create_acls_response(results)

    async def handle_delete_acls(self, request: ControllerRequest) -> dict[str, Any]:
        if self.authorizer is None:
            return acl_apis.security_disabled(request.api_key, request.data)
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        filters = [acl_apis.acl_filter(f, request.api_version) for f in request.data.get("filters") or []]
        results = await self.controller.delete_acls(filters)
        return acl_apis.delete_acls_response(results)

    async def handle_describe_acls(self, request: ControllerRequest) -> dict[str, Any]:
        return acl_apis.describe_acls_response(self.authorizer, request.data, request.api_version)

    # -- DescribeQuorum -------------------------------------------------------------------------

    async def handle_describe_quorum(self, request: ControllerRequest) -> dict[str, Any]:
        """A DescribeQuorum a broker forwarded: answered by the Raft core as on the controller
        listener (any controller answers; a follower says NOT_LEADER_OR_FOLLOWER per partition)."""
        assert self.raft_apis is not None
        try:
            return await self.raft_apis.describe_quorum(request.data)
        except TimeoutError:
            log.info("DescribeQuorum: Raft is shutting down or did not answer")
            return error_response(request, Errors.REQUEST_TIMED_OUT, "Raft did not answer")

    async def handle_voter_change(self, request: ControllerRequest) -> dict[str, Any]:
        """An AddRaftVoter or RemoveRaftVoter a broker forwarded (KIP-853): answered by the Raft
        core as on the controller listener (only the leader makes the change)."""
        assert self.raft_apis is not None
        try:
            return await self.raft_apis.voter_change(request.api_key, request.data)
        except TimeoutError:
            log.info("API %d: Raft is shutting down or did not answer", request.api_key)
            return error_response(request, Errors.REQUEST_TIMED_OUT, "Raft did not answer")

    # -- CreateTopics ---------------------------------------------------------------------------

    async def handle_create_topics(self, request: ControllerRequest) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        req = request.data
        seen: dict[str, int] = {}
        for t in req["topics"]:
            seen[t["name"]] = seen.get(t["name"], 0) + 1
        dup = {n for n, c in seen.items() if c > 1}
        valid = [t for t in req["topics"] if t["name"] not in dup]
        results = await self.controller.create_topics(valid, req["validate_only"], req.get("timeout_ms")) if valid else []
        out = []
        for r in results:
            entry: dict[str, Any] = {
                "name": r.name,
                "topic_id": r.topic_id,
                "error_code": r.error,
                "error_message": r.message,
                "num_partitions": r.num_partitions,
                "replication_factor": r.replication_factor,
                "configs": None,
            }
            if r.error == Errors.NONE and request.api_version >= 5:
                entry["configs"] = [
                    {
                        "name": c.name,
                        "value": c.value,
                        "read_only": c.read_only,
                        "config_source": c.source,
                        "is_sensitive": c.is_sensitive,
                    }
                    for c in config_defs.describe_topic_config(self.config, r.configs)
                ]
            out.append(entry)
        client_id = request.client.client_id if request.client is not None else None
        for n in sorted(dup):
            out.append(
                {
                    "name": n,
                    "error_code": Errors.INVALID_REQUEST,
                    "error_message": f"Create topics request from client `{client_id}` contains multiple entries for the following topics: {n}",
                    "num_partitions": -1,
                    "replication_factor": -1,
                }
            )
        return {"throttle_time_ms": 0, "topics": out}

    # -- DeleteTopics ---------------------------------------------------------------------------

    async def handle_delete_topics(self, request: ControllerRequest) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        names: list[str | None] = []
        ids: list[uuid.UUID | None] = []
        if request.api_version >= 6:
            for t in request.data["topics"]:
                if t.get("name") is not None:
                    names.append(t["name"])
                    ids.append(None)
                else:
                    names.append(None)
                    ids.append(t.get("topic_id") or _ZERO_UUID)
        else:
            for n in request.data["topic_names"]:
                names.append(n)
                ids.append(None)
        results = await self.controller.delete_topics(names, ids, request.data.get("timeout_ms"))
        return {
            "throttle_time_ms": 0,
            "responses": [
                {"name": n, "topic_id": tid, "error_code": code, "error_message": msg}
                for n, tid, code, msg in results
            ],
        }

    # -- CreatePartitions -----------------------------------------------------------------------

    async def handle_create_partitions(self, request: ControllerRequest) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        req = request.data
        results = await self.controller.create_partitions(req["topics"], req["validate_only"], req.get("timeout_ms"))
        return {
            "throttle_time_ms": 0,
            "results": [{"name": n, "error_code": c, "error_message": msg} for n, c, msg in results],
        }

    async def handle_alter_user_scram_credentials(self, request: ControllerRequest) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        return await self.controller.alter_user_scram_credentials(request.data)

    # -- Configs --------------------------------------------------------------------------------

    async def _alter_configs(self, request: ControllerRequest, incremental: bool) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        req = request.data
        outcomes = await self.controller.alter_configs(req["resources"], req["validate_only"], incremental)
        responses = []
        for r, (code, msg) in zip(req["resources"], outcomes, strict=True):
            if code != Errors.NONE:
                log.info(
                    "%sAlterConfigs of %s %r refused: %s",
                    "Incremental" if incremental else "",
                    {2: "topic", 4: "broker", 8: "broker logger"}.get(r["resource_type"], r["resource_type"]),
                    r["resource_name"], msg,
                )
            responses.append(
                {
                    "error_code": code,
                    "error_message": msg,
                    "resource_type": r["resource_type"],
                    "resource_name": r["resource_name"],
                }
            )
        return {"throttle_time_ms": 0, "responses": responses}

    def handle_alter_configs(self, request: ControllerRequest) -> Awaitable[dict[str, Any]]:
        return self._alter_configs(request, incremental=False)

    def handle_incremental_alter_configs(self, request: ControllerRequest) -> Awaitable[dict[str, Any]]:
        return self._alter_configs(request, incremental=True)

    # -- AlterClientQuotas ----------------------------------------------------------------------

    async def handle_alter_client_quotas(self, request: ControllerRequest) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        req = request.data
        outcomes = await self.controller.alter_client_quotas(req["entries"], req["validate_only"])
        entries = []
        for e, (code, msg) in zip(req["entries"], outcomes, strict=True):
            if code != Errors.NONE:
                log.info("AlterClientQuotas of %s refused: %s", e["entity"], msg)
            entries.append({"error_code": code, "error_message": msg, "entity": e["entity"]})
        return {"throttle_time_ms": 0, "entries": entries}

    # -- DescribeCluster (KIP-919: the controllers, asked of a controller) ----------------------

    async def handle_describe_cluster(self, request: ControllerRequest) -> dict[str, Any]:
        req = request.data
        endpoint_type = req.get("endpoint_type", _ENDPOINT_TYPE_BROKER)
        body: dict[str, Any] = {
            "throttle_time_ms": 0,
            "error_code": Errors.NONE,
            "error_message": None,
            "endpoint_type": _ENDPOINT_TYPE_CONTROLLER,
            "cluster_id": self.cluster_id,
            "controller_id": -1,
            "brokers": [],
            "cluster_authorized_operations": CLUSTER_AUTHORIZED_OPERATIONS
            if req["include_cluster_authorized_operations"]
            else AUTHORIZED_OPS_OMITTED,
        }
        if endpoint_type not in (_ENDPOINT_TYPE_BROKER, _ENDPOINT_TYPE_CONTROLLER):
            body["error_code"] = (
                Errors.INVALID_REQUEST if request.api_version == 0 else Errors.UNSUPPORTED_ENDPOINT_TYPE
            )
            body["error_message"] = f"Unsupported endpoint type {endpoint_type}"
            return body
        if endpoint_type != _ENDPOINT_TYPE_CONTROLLER:
            body["error_code"] = (
                Errors.INVALID_REQUEST if request.api_version == 0 else Errors.MISMATCHED_ENDPOINT_TYPE
            )
            body["error_message"] = (
                "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type BROKER"
            )
            return body
        # The controllers this node knows: itself (controller registrations are not kept yet).
        listener = self.config.controller_listener_names[0] if self.config.controller_listener_names else ""
        endpoint = self.listener_endpoints.get(listener)
        if endpoint is not None:
            body["brokers"].append({"broker_id": self.node_id, "host": endpoint[0], "port": endpoint[1], "rack": None})
        for voter, (host, port) in sorted(self.voter_endpoints().items()):
            if voter != self.node_id:
                body["brokers"].append({"broker_id": voter, "host": host, "port": port, "rack": None})
        leader = self.leader_id()
        if any(b["broker_id"] == leader for b in body["brokers"]):
            body["controller_id"] = leader
        return body

    # -- AllocateProducerIds --------------------------------------------------------------------

    async def handle_allocate_producer_ids(self, request: ControllerRequest) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        broker_id, epoch = request.data["broker_id"], request.data["broker_epoch"]
        try:
            first, count = await self.controller.allocate_producer_ids(broker_id, epoch)
        except KafkaError as e:
            log.info("AllocateProducerIds from broker %d refused: %s", broker_id, e.message)
            return error_response(request, e.code, e.message)
        return {"throttle_time_ms": 0, "error_code": Errors.NONE, "producer_id_start": first, "producer_id_len": count}

    # -- BrokerRegistration / BrokerHeartbeat ---------------------------------------------------

    async def handle_broker_registration(self, request: ControllerRequest) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        req = request.data
        try:
            epoch = await self.controller.register_broker(req)
        except KafkaError as e:
            log.warning("Registration of broker %d refused: %s", req["broker_id"], e.message)
            return error_response(request, e.code, e.message)
        log.info("Registered broker %d with broker epoch %d", req["broker_id"], epoch)
        return {"throttle_time_ms": 0, "error_code": Errors.NONE, "broker_epoch": epoch}

    async def handle_broker_heartbeat(self, request: ControllerRequest) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        req = request.data
        try:
            # As Kafka: a heartbeat waits in the controller's queue at most half an interval.
            reply = await self.controller.broker_heartbeat(req, self.config.broker_heartbeat_interval_ms // 2)
        except KafkaError as e:
            log.info("Heartbeat of broker %d refused: %s", req["broker_id"], e.message)
            return error_response(request, e.code, e.message)
        return {
            "throttle_time_ms": 0,
            "error_code": Errors.NONE,
            "is_caught_up": reply.is_caught_up,
            "is_fenced": reply.is_fenced,
            "should_shut_down": reply.should_shut_down,
        }

    # -- AlterPartition -------------------------------------------------------------------------

    async def handle_assign_replicas_to_dirs(self, request: ControllerRequest) -> dict[str, Any]:
        """A broker's replica directories (KIP-858), as an Apache Kafka broker sends them."""
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        try:
            return await self.controller.assign_replicas_to_dirs(request.data)
        except KafkaError as e:
            log.info("AssignReplicasToDirs from broker %d refused: %s", request.data.get("broker_id", -1), e.message)
            return error_response(request, e.code, e.message)

    async def handle_alter_partition(self, request: ControllerRequest) -> dict[str, Any]:
        """A partition leader's ISR change (Kafka's handleAlterPartitionRequest)."""
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        try:
            return await self.controller.alter_partition(request.data, request.api_version)
        except KafkaError as e:
            log.info("AlterPartition from broker %d refused: %s", request.data.get("broker_id", -1), e.message)
            return error_response(request, e.code, e.message)

    # -- ElectLeaders / reassignments (odradek.controller.replication_ops) ----------------------

    async def handle_elect_leaders(self, request: ControllerRequest) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        return await self.controller.replication_ops.elect_leaders(request.data)

    async def handle_alter_partition_reassignments(self, request: ControllerRequest) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        return await self.controller.replication_ops.alter_partition_reassignments(request.data)

    async def handle_list_partition_reassignments(self, request: ControllerRequest) -> dict[str, Any]:
        refused = self._not_controller(request)
        if refused is not None:
            return refused
        return self.controller.replication_ops.list_partition_reassignments(request.data)
