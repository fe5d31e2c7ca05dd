"""RaftApis: the KRaft quorum's APIs on the controller listener (Kafka routes Vote,
BeginQuorumEpoch, EndQuorumEpoch, Fetch of ``__cluster_metadata``, FetchSnapshot and DescribeQuorum from
``ControllerApis`` to its raft manager). Each request goes to the node's Raft core through the
KafkaRaftClient; the answer comes back when the core gives it (a Fetch may wait there for new
records up to its ``max_wait_ms``). Advertised by ApiVersions on the controller listener only;
brokers forward their clients' DescribeQuorum, AddRaftVoter and RemoveRaftVoter to the controller,
whose ``ControllerApis`` hands them to :meth:`RaftApis.describe_quorum` / :meth:`RaftApis.voter_change`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from odradek.network.request_channel import CloseConnection
from odradek.protocol import messages as m
from odradek.protocol.schema import Api
from odradek.raft import raft_messages as msgs
from odradek.raft.kafka_network_channel import RAFT_APIS, encode_fetch_records, fill_uuids
from odradek.raft.kafka_raft_client import KafkaRaftClient
from odradek.raft.record_batches import BatchCodec

if TYPE_CHECKING:
    from odradek.server.api_dispatcher import Handler, RequestContext

log = logging.getLogger(__name__)

# The longest a request may wait for the core's answer (a parked Fetch waits up to its
# max_wait_ms); past it the connection is closed, as a peer that never answers would be.
ANSWER_TIMEOUT_S = 30.0


def _source(api_key: int, data: dict[str, Any]) -> int:
    """The node that sent a request, as the core sees it (-1: not known)."""
    if api_key == msgs.FETCH:
        return msgs.fetch_replica_id(data)
    if api_key == msgs.FETCH_SNAPSHOT:
        replica = data.get("replica_id")
        return replica if isinstance(replica, int) else msgs.NO_ID
    partition = msgs.single_partition(data)
    if partition is None:
        return msgs.NO_ID
    key = "candidate_id" if api_key == msgs.VOTE else "leader_id"
    value = partition.get(key)
    return value if isinstance(value, int) else msgs.NO_ID


class RaftApis:
    def __init__(self, client: KafkaRaftClient[Any], codec: BatchCodec[Any]) -> None:
        self.client = client
        self.codec = codec

    def handlers(self) -> dict[Api, Handler]:
        apis = {**RAFT_APIS, msgs.FETCH: m.FETCH}

        def served(api_key: int) -> Handler:
            def handler(ctx: RequestContext, req: dict[str, Any]) -> Awaitable[dict[str, Any]]:
                return self._answer(ctx, api_key, req)

            return handler

        return {api: served(key) for key, api in apis.items()}

    async def describe_quorum(self, req: dict[str, Any]) -> dict[str, Any]:
        """The DescribeQuorum answer for ``req``; TimeoutError when Raft is shutting down or does
        not answer."""
        return await self._request(msgs.DESCRIBE_QUORUM, req)

    async def voter_change(self, api_key: int, req: dict[str, Any]) -> dict[str, Any]:
        """The answer to an AddRaftVoter or RemoveRaftVoter a broker forwarded; TimeoutError as
        :meth:`describe_quorum`."""
        return await self._request(api_key, req)

    async def _request(self, api_key: int, req: dict[str, Any]) -> dict[str, Any]:
        future = self.client.handle_request(_source(api_key, req), api_key, req)
        try:
            data = await asyncio.wait_for(future, ANSWER_TIMEOUT_S)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the caller went away
            raise TimeoutError from None  # the core dropped the request (shutting down)
        if api_key == msgs.FETCH:
            data = encode_fetch_records(data, self.codec)
            data["node_endpoints"] = self._leader_endpoints(data)
        elif api_key == msgs.FETCH_SNAPSHOT:
            loop = asyncio.get_running_loop()
            data = await loop.run_in_executor(None, self.client.read_snapshot_slice, data)
        elif api_key == msgs.DESCRIBE_QUORUM:
            self._add_voter_details(data)
        return fill_uuids(data)

    def _add_voter_details(self, data: dict[str, Any]) -> None:
        """The voters' directory ids (known with a dynamic quorum only) and, in ``nodes`` (v2),
        their listeners from the voter set — with a static quorum the controller listener and
        the address of ``controller.quorum.voters`` — as Kafka's leader answers."""
        voters = self.client.core.dynamic.voters
        answered = False
        for topic in data.get("topics") or []:
            for partition in topic.get("partitions") or []:
                answered = answered or int(partition.get("error_code", 0)) == 0
                for replica in partition.get("current_voters") or []:
                    node = voters.get(int(replica["replica_id"]))
                    if node is not None and node.directory_id is not None:
                        replica["replica_directory_id"] = node.directory_id
        if not answered or int(data.get("error_code", 0)) != 0:
            return  # an error answer (not the leader...) names no nodes, as Kafka's
        data["nodes"] = [
            {
                "node_id": v,
                "listeners": [
                    {"name": n, "host": h, "port": p} for n, h, p in voters.voters[v].endpoints
                ],
            }
            for v in sorted(voters.ids)
        ]

    def _leader_endpoints(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        """Fetch's ``node_endpoints`` (v16+): where the leader named in the answer listens, so
        that an observer that found it through a bootstrap server can reach it (KIP-853)."""
        out: list[dict[str, Any]] = []
        leaders = {
            int(p.get("current_leader", {}).get("leader_id", -1))
            for t in data.get("responses") or []
            for p in t.get("partitions") or []
        }
        for leader in sorted(x for x in leaders if x >= 0):
            endpoint = self.client.core.dynamic.endpoint(leader)
            if endpoint is not None:
                out.append({"node_id": leader, "host": endpoint[0], "port": endpoint[1], "rack": None})
        return out

    async def _answer(self, ctx: RequestContext, api_key: int, req: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._request(api_key, req)
        except TimeoutError:
            raise CloseConnection(
                f"{msgs.API_NAMES[api_key]} from {ctx.conn.peer}: Raft is shutting down or did "
                "not answer"
            ) from None
