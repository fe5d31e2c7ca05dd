"""The controller channel (odradek.server.controller_channel) and the controller's request
handlers (odradek.controller.controller_apis), in one process, without sockets: order, the
NOT_CONTROLLER and timeout paths as Kafka's forwarding has them, every forwarded operation
reaching ControllerApis, broker registration and heartbeats, and the controller id clients see."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.controller.controller_apis import ControllerApis
from odradek.controller.feature_control_manager import SUPPORTED_FEATURES
from odradek.controller.quorum_controller import QuorumController
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE, MetadataImage
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.network.request_channel import ConnectionInfo
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, KafkaError
from odradek.protocol.header import RequestHeader
from odradek.protocol.messages import generated as g
from odradek.raft.kafka_raft_client import KafkaRaftClient, KafkaRaftClientDriver
from odradek.raft.metadata_log import MetadataLog
from odradek.raft.quorum_state import FileQuorumStateStore
from odradek.server import config_defs
from odradek.server.acl_operations import AUTHORIZED_OPS_OMITTED, CLUSTER_AUTHORIZED_OPERATIONS
from odradek.server.admin_apis import AdminApis
from odradek.server.api_dispatcher import RequestContext
from odradek.server.broker_lifecycle_manager import BrokerLifecycleManager
from odradek.server.controller_channel import (
    ControllerRequest,
    ControllerRequestTimeout,
    ForwardingManager,
    InMemoryControllerChannel,
    RequestClient,
)
from odradek.server.kafka_apis import KafkaApis
from odradek.server.kafka_config import KafkaConfig
from odradek.server.producer_id_manager import ProducerIdManager

ALLOCATE_PRODUCER_IDS = g.ALLOCATE_PRODUCER_IDS.api_key
BROKER_HEARTBEAT = g.BROKER_HEARTBEAT.api_key
BROKER_REGISTRATION = g.BROKER_REGISTRATION.api_key

CLUSTER_ID = "q1Sh-9_ISia_zwGINzRvyQ"
CONFIG = KafkaConfig({"log.dirs": "/nonexistent"})


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(fn(), 30))  # type: ignore[arg-type]


def new_controller(path: Path, node_id: int = 1, session_timeout_ms: int = 9000) -> QuorumController:
    """An active controller on a quorum of one (a Raft client on a metadata log in ``path``, run
    by its driver on the running loop)."""
    cfg = LogConfig(segment_bytes=8 * 1024 * 1024, retention_ms=-1, retention_bytes=-1)
    d = path / f"meta-{node_id}"
    log = MetadataLog(Log.load(str(d), cfg, now_ms=0, clean_shutdown=False), METADATA_RECORD_SERDE)
    raft = KafkaRaftClient(node_id, log, FileQuorumStateStore(str(d / "quorum-state")), lambda: 0)
    raft.initialize()
    controller = QuorumController(
        node_id, raft, default_partitions=1, default_replication_factor=1, delete_topic_enable=True,
        validate_config=config_defs.validate_topic_config, cluster_id=CLUSTER_ID,
        session_timeout_ms=session_timeout_ms,
    )
    raft.register(controller)
    raft.step()  # the only voter elects itself
    KafkaRaftClientDriver(raft).start()
    return controller


def ctx(api: int, version: int, client_id: str = "admin-1") -> RequestContext:
    return RequestContext(RequestHeader(api, version, 7, client_id), ConnectionInfo("c1", "127.0.0.1:5555", "PLAINTEXT"))


class Recorder:
    """A controller that records what reaches it; each answer after ``delays[i]`` seconds."""

    def __init__(self, delays: list[float] | None = None, not_controller: int = 0) -> None:
        self.seen: list[int] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.delays = delays or []
        self.not_controller = not_controller  # answer NOT_CONTROLLER this many times first

    def handle(self, request: ControllerRequest) -> Awaitable[dict[str, Any]]:
        async def answer() -> dict[str, Any]:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            i = len(self.seen)
            self.seen.append(request.data["n"])
            await asyncio.sleep(self.delays[i] if i < len(self.delays) else 0)
            self.in_flight -= 1
            if self.not_controller > 0:
                self.not_controller -= 1
                return {"error_code": Errors.NOT_CONTROLLER}
            return {"error_code": Errors.NONE, "n": request.data["n"]}

        return answer()


def req(n: int, client: RequestClient | None = None) -> ControllerRequest:
    return ControllerRequest(ALLOCATE_PRODUCER_IDS, 0, {"n": n}, client)


# -- the channel ---------------------------------------------------------------------------------


def test_channel_delivers_in_send_order_one_at_a_time() -> None:
    async def go() -> None:
        # The first requests take longest: still answered, and delivered, in order.
        rec = Recorder(delays=[0.03, 0.02, 0.01, 0, 0, 0])
        channel = InMemoryControllerChannel({1: rec}, lambda: 1)
        answers = await asyncio.gather(*(channel.send(req(n)) for n in range(6)))
        assert rec.seen == [0, 1, 2, 3, 4, 5]
        assert [a["n"] for a in answers] == [0, 1, 2, 3, 4, 5]
        assert rec.max_in_flight == 1
        await channel.close()

    run(go)


def test_channel_retries_not_controller_first_in_line_until_the_new_controller_answers() -> None:
    async def go() -> None:
        old, new = Recorder(not_controller=99), Recorder()
        leader = [1]

        class Moving(Recorder):
            def handle(self, request: ControllerRequest) -> Awaitable[dict[str, Any]]:
                leader[0] = 2  # the quorum elects node 2 while node 1 answers
                return old.handle(request)

        channel = InMemoryControllerChannel({1: Moving(), 2: new}, lambda: leader[0], retry_backoff_ms=1)
        first, second = await asyncio.gather(channel.send(req(1)), channel.send(req(2)))
        assert (first["n"], second["n"]) == (1, 2)
        assert old.seen == [1] and new.seen == [1, 2]  # retried ahead of the later request
        await channel.close()

    run(go)


def test_channel_times_out_without_a_controller_and_forwarding_answers_request_timed_out() -> None:
    async def go() -> None:
        rec = Recorder()
        channel = InMemoryControllerChannel({1: rec}, lambda: None, retry_timeout_ms=50, retry_backoff_ms=5)
        with pytest.raises(ControllerRequestTimeout):
            await channel.send(req(1))
        # A client's CreateTopics forwarded: every topic REQUEST_TIMED_OUT (Kafka's onTimeout).
        apis = AdminApis(node_id=1, config=CONFIG, metadata_cache=KRaftMetadataCache(), forwarding=ForwardingManager(channel))
        create = {"topics": [{"name": "a"}, {"name": "b"}], "timeout_ms": 1000, "validate_only": False}
        resp = await apis.handle_create_topics(ctx(m.CREATE_TOPICS.api_key, 7), create)
        assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [
            ("a", Errors.REQUEST_TIMED_OUT), ("b", Errors.REQUEST_TIMED_OUT),
        ]
        # A forwarded DescribeQuorum: a top-level REQUEST_TIMED_OUT, encodable at every version.
        quorum = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}
        resp = await apis.handle_describe_quorum(ctx(m.DESCRIBE_QUORUM.api_key, 2), quorum)
        assert (resp["error_code"], resp["topics"]) == (Errors.REQUEST_TIMED_OUT, [])
        for v in range(m.DESCRIBE_QUORUM.min_version, m.DESCRIBE_QUORUM.max_version + 1):
            assert m.DESCRIBE_QUORUM.encode_response(v, resp)
        assert rec.seen == []
        await channel.close()

    run(go)


def test_forwarded_request_gets_not_controller_back_without_retry(tmp_path: Path) -> None:
    """An inactive controller answers NOT_CONTROLLER; a forwarded client request is not retried
    (Kafka's Envelope): the client gets NOT_CONTROLLER in every entry and retries itself."""

    async def go() -> None:
        controller = new_controller(tmp_path)
        capis = ControllerApis(node_id=1, cluster_id=CLUSTER_ID, config=CONFIG, controller=controller, leader_id=lambda: 2)
        channel = InMemoryControllerChannel({1: capis}, lambda: 1)
        apis = AdminApis(node_id=1, config=CONFIG, metadata_cache=KRaftMetadataCache(), forwarding=ForwardingManager(channel))
        resp = await apis.handle_delete_topics(ctx(m.DELETE_TOPICS.api_key, 6), {"topics": [{"name": "x", "topic_id": None}], "timeout_ms": 1})
        assert resp["responses"][0]["error_code"] == Errors.NOT_CONTROLLER
        assert "node 2" in resp["responses"][0]["error_message"]
        alter = {"resources": [{"resource_type": 2, "resource_name": "x", "configs": []}], "validate_only": False}
        resp = await apis.handle_incremental_alter_configs(ctx(m.INCREMENTAL_ALTER_CONFIGS.api_key, 1), alter)
        assert resp["responses"][0]["error_code"] == Errors.NOT_CONTROLLER
        # The broker's own request to it is retried until the retry timeout instead.
        short = InMemoryControllerChannel({1: capis}, lambda: 1, retry_timeout_ms=40, retry_backoff_ms=5)
        pim = ProducerIdManager(1, lambda: 0, short)
        with pytest.raises(KafkaError) as info:
            await pim.generate_producer_id()
        assert info.value.code == Errors.COORDINATOR_LOAD_IN_PROGRESS
        await channel.close()
        await short.close()

    run(go)


def test_closing_answers_the_request_in_flight_and_fails_what_is_queued() -> None:
    async def go() -> None:
        rec = Recorder(delays=[0.05])
        channel = InMemoryControllerChannel({1: rec}, lambda: 1)
        in_flight = asyncio.ensure_future(channel.send(req(1)))
        queued = asyncio.ensure_future(channel.send(req(2)))
        await asyncio.sleep(0.01)
        await channel.close()
        assert (await in_flight)["n"] == 1  # a controller write is never cut short
        with pytest.raises(ControllerRequestTimeout):
            await queued
        with pytest.raises(ControllerRequestTimeout):
            await channel.send(req(3))
        assert rec.seen == [1]

    run(go)


# -- every forwarded operation reaches ControllerApis -----------------------------------------


def test_forwarded_admin_operations_reach_the_controller(tmp_path: Path) -> None:
    async def go() -> None:
        controller = new_controller(tmp_path)
        capis = ControllerApis(node_id=1, cluster_id=CLUSTER_ID, config=CONFIG, controller=controller, leader_id=lambda: 1)
        channel = InMemoryControllerChannel({1: capis}, lambda: 1)
        lifecycle = BrokerLifecycleManager(
            node_id=1, cluster_id=CLUSTER_ID, channel=channel, heartbeat_interval_ms=lambda: 10_000,
            metadata_offset=lambda: controller.image.offset,
        )
        lifecycle.start([("PLAINTEXT", "localhost", 9092)], SUPPORTED_FEATURES, None)
        await lifecycle.wait_for_unfence()
        apis = AdminApis(node_id=1, config=CONFIG, metadata_cache=KRaftMetadataCache(controller.image), forwarding=ForwardingManager(channel))

        create = {
            "topics": [
                {"name": "t", "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []},
                {"name": "dup", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
                {"name": "dup", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
            ],
            "timeout_ms": 1000, "validate_only": False,
        }
        resp = await apis.handle_create_topics(ctx(m.CREATE_TOPICS.api_key, 7, "cli-9"), create)
        by_name = {t["name"]: t for t in resp["topics"]}
        assert by_name["t"]["error_code"] == Errors.NONE and by_name["t"]["num_partitions"] == 2
        assert any(c["name"] == "cleanup.policy" for c in by_name["t"]["configs"])  # v5+ configs
        assert by_name["dup"]["error_code"] == Errors.INVALID_REQUEST
        assert "client `cli-9`" in by_name["dup"]["error_message"]
        assert sorted(controller.image.topics_by_name["t"].partitions) == [0, 1]

        resp = await apis.handle_create_partitions(
            ctx(m.CREATE_PARTITIONS.api_key, 3),
            {"topics": [{"name": "t", "count": 3, "assignments": None}], "timeout_ms": 1000, "validate_only": False},
        )
        assert resp["results"] == [{"name": "t", "error_code": Errors.NONE, "error_message": None}]
        assert len(controller.image.topics_by_name["t"].partitions) == 3

        alter = {
            "resources": [{"resource_type": 2, "resource_name": "t", "configs": [{"name": "retention.ms", "value": "1000"}]}],
            "validate_only": False,
        }
        resp = await apis.handle_alter_configs(ctx(m.ALTER_CONFIGS.api_key, 2), alter)
        assert resp["responses"][0]["error_code"] == Errors.NONE
        assert controller.image.topic_config("t") == {"retention.ms": "1000"}
        inc = {
            "resources": [{
                "resource_type": 2, "resource_name": "t",
                "configs": [{"name": "segment.ms", "config_operation": 0, "value": "60000"}],
            }],
            "validate_only": False,
        }
        resp = await apis.handle_incremental_alter_configs(ctx(m.INCREMENTAL_ALTER_CONFIGS.api_key, 1), inc)
        assert resp["responses"][0]["error_code"] == Errors.NONE
        assert controller.image.topic_config("t") == {"retention.ms": "1000", "segment.ms": "60000"}

        resp = await apis.handle_delete_topics(ctx(m.DELETE_TOPICS.api_key, 4), {"topic_names": ["t", "nope"], "timeout_ms": 1})
        assert [(r["name"], r["error_code"]) for r in resp["responses"]] == [
            ("t", Errors.NONE), ("nope", Errors.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        assert "t" not in controller.image.topics_by_name

        # InitProducerId's blocks: AllocateProducerIds with this broker's epoch.
        pim = ProducerIdManager(1, lambda: lifecycle.broker_epoch, channel)
        assert [await pim.generate_producer_id() for _ in range(3)] == [0, 1, 2]
        assert controller.image.next_producer_id == 1000
        stale = await channel.send(ControllerRequest(ALLOCATE_PRODUCER_IDS, 0, {"broker_id": 1, "broker_epoch": 12345}))
        assert stale["error_code"] == Errors.STALE_BROKER_EPOCH
        assert controller.image.next_producer_id == 1000
        await lifecycle.close()
        await channel.close()

    run(go)


# -- registration and heartbeats --------------------------------------------------------------


def test_registration_is_fenced_until_a_caught_up_heartbeat(tmp_path: Path) -> None:
    async def go() -> None:
        controller = new_controller(tmp_path)
        capis = ControllerApis(node_id=1, cluster_id=CLUSTER_ID, config=CONFIG, controller=controller, leader_id=lambda: 1)
        channel = InMemoryControllerChannel({1: capis}, lambda: 1)
        registration = {
            "broker_id": 1, "cluster_id": CLUSTER_ID, "incarnation_id": uuid.uuid4(),
            "listeners": [{"name": "PLAINTEXT", "host": "h", "port": 9092, "security_protocol": 0}],
            "features": [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 21}],
            "rack": "r1", "is_migrating_zk_broker": False, "log_dirs": [], "previous_broker_epoch": -1,
        }
        wrong = await channel.send(ControllerRequest(BROKER_REGISTRATION, 4, dict(registration, cluster_id="other")))
        assert wrong["error_code"] == Errors.INCONSISTENT_CLUSTER_ID
        resp = await channel.send(ControllerRequest(BROKER_REGISTRATION, 4, registration))
        assert resp["error_code"] == Errors.NONE
        epoch = resp["broker_epoch"]
        b = controller.image.brokers[1]
        assert (b.epoch, b.fenced, b.rack, b.endpoints["PLAINTEXT"].port) == (epoch, True, "r1", 9092)
        assert controller.image.features.levels["metadata.version"] == 21  # bootstrapped on the new log

        def beat(offset: int, broker_epoch: int = epoch, want_fence: bool = False) -> ControllerRequest:
            return ControllerRequest(BROKER_HEARTBEAT, 1, {
                "broker_id": 1, "broker_epoch": broker_epoch, "current_metadata_offset": offset,
                "want_fence": want_fence, "want_shut_down": False,
            })

        behind = await channel.send(beat(epoch - 1))
        assert (behind["is_caught_up"], behind["is_fenced"]) == (False, True)
        held = await channel.send(beat(epoch, want_fence=True))
        assert (held["is_caught_up"], held["is_fenced"]) == (True, True)
        assert controller.image.brokers[1].fenced
        stale = await channel.send(beat(epoch, broker_epoch=epoch - 1))
        assert stale["error_code"] == Errors.STALE_BROKER_EPOCH
        unknown = await channel.send(ControllerRequest(BROKER_HEARTBEAT, 1, dict(beat(epoch).data, broker_id=9)))
        # As Kafka's controller: "Receive a heartbeat from broker 9 before registration".
        assert unknown["error_code"] == Errors.STALE_BROKER_EPOCH
        ok = await channel.send(beat(epoch))
        assert (ok["error_code"], ok["is_caught_up"], ok["is_fenced"]) == (Errors.NONE, True, False)
        assert not controller.image.brokers[1].fenced
        await channel.close()

    run(go)


def test_lifecycle_manager_heartbeats_periodically_and_registers_again_when_stale(tmp_path: Path) -> None:
    async def go() -> None:
        controller = new_controller(tmp_path, session_timeout_ms=300)
        capis = ControllerApis(node_id=1, cluster_id=CLUSTER_ID, config=CONFIG, controller=controller, leader_id=lambda: 1)
        beats: list[int] = []
        paused = [False]  # heartbeats lost on the way while set

        async def lost() -> dict[str, Any]:
            return {"error_code": Errors.REQUEST_TIMED_OUT, "error_message": "lost"}

        class Counting:
            def handle(self, request: ControllerRequest) -> Awaitable[dict[str, Any]]:
                beats.append(request.api_key)
                if paused[0] and request.api_key == BROKER_HEARTBEAT:
                    return lost()
                return capis.handle(request)

        channel = InMemoryControllerChannel({1: Counting()}, lambda: 1)
        lifecycle = BrokerLifecycleManager(
            node_id=1, cluster_id=CLUSTER_ID, channel=channel, heartbeat_interval_ms=lambda: 5,
            metadata_offset=lambda: controller.image.offset,
        )
        lifecycle.start([("PLAINTEXT", "localhost", 9092)], SUPPORTED_FEATURES, None)
        await lifecycle.wait_for_unfence()
        first_epoch = lifecycle.broker_epoch
        assert beats[:2] == [BROKER_REGISTRATION, BROKER_HEARTBEAT]
        for _ in range(200):  # bounded: a few heartbeats at 5 ms
            if beats.count(BROKER_HEARTBEAT) >= 3:
                break
            await asyncio.sleep(0.01)
        assert beats.count(BROKER_HEARTBEAT) >= 3 and not lifecycle.is_fenced
        # Another incarnation of broker 1 while this one's session is alive: refused.
        other = {
            "broker_id": 1, "cluster_id": CLUSTER_ID, "incarnation_id": uuid.uuid4(), "listeners": [],
            "features": [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 21}],
            "rack": None,
        }
        with pytest.raises(KafkaError) as e:
            await controller.register_broker(other)
        assert e.value.code == Errors.DUPLICATE_BROKER_REGISTRATION
        # Its heartbeats stop arriving: after broker.session.timeout.ms the controller's
        # fencing check fences it, and the other incarnation may register.
        paused[0] = True
        for _ in range(300):  # bounded: the session is 300 ms
            if controller.image.brokers[1].fenced:
                break
            await asyncio.sleep(0.01)
        assert controller.image.brokers[1].fenced
        await controller.register_broker(other)
        # That registration makes this one's epoch stale: once its heartbeats arrive again the
        # manager registers again and is unfenced at a newer epoch.
        paused[0] = False
        for _ in range(200):
            if lifecycle.broker_epoch > first_epoch and not controller.image.brokers[1].fenced:
                break
            await asyncio.sleep(0.01)
        assert lifecycle.broker_epoch > first_epoch
        assert controller.image.brokers[1].incarnation_id == lifecycle.incarnation_id
        assert not controller.image.brokers[1].fenced
        await lifecycle.close()
        await channel.close()

    run(go)


def test_controlled_shutdown_fences_the_broker_so_its_next_incarnation_registers_at_once(tmp_path: Path) -> None:
    async def go() -> None:
        controller = new_controller(tmp_path)
        capis = ControllerApis(node_id=1, cluster_id=CLUSTER_ID, config=CONFIG, controller=controller, leader_id=lambda: 1)
        channel = InMemoryControllerChannel({1: capis}, lambda: 1)

        def lifecycle_manager() -> BrokerLifecycleManager:
            return BrokerLifecycleManager(
                node_id=1, cluster_id=CLUSTER_ID, channel=channel, heartbeat_interval_ms=lambda: 5,
                metadata_offset=lambda: controller.image.offset,
            )

        first = lifecycle_manager()
        first.start([("PLAINTEXT", "localhost", 9092)], SUPPORTED_FEATURES, None)
        await first.wait_for_unfence()
        assert await first.controlled_shutdown(5000)
        assert controller.image.brokers[1].fenced
        # Without it the next incarnation would get DUPLICATE_BROKER_REGISTRATION for up to
        # broker.session.timeout.ms (9 s): the controller still counted the old session alive.
        second = lifecycle_manager()
        second.start([("PLAINTEXT", "localhost", 9092)], SUPPORTED_FEATURES, None)
        await asyncio.wait_for(second.wait_for_unfence(), 5)
        assert controller.image.brokers[1].incarnation_id == second.incarnation_id
        assert second.broker_epoch > first.broker_epoch
        await second.close()
        await channel.close()

    run(go)


# -- the controller listener ---------------------------------------------------------------------


def test_controller_listener_serves_controller_apis_and_describes_the_controllers(tmp_path: Path) -> None:
    async def go() -> None:
        controller = new_controller(tmp_path, node_id=3000)
        leader = [3000]
        capis = ControllerApis(
            node_id=3000, cluster_id=CLUSTER_ID, config=CONFIG, controller=controller, leader_id=lambda: leader[0]
        )
        assert {a.api_key for a in capis.handlers()} == {
            m.CREATE_TOPICS.api_key, m.DELETE_TOPICS.api_key, m.CREATE_PARTITIONS.api_key,
            m.ALTER_CONFIGS.api_key, m.INCREMENTAL_ALTER_CONFIGS.api_key, m.DESCRIBE_CLUSTER.api_key,
            BROKER_REGISTRATION, BROKER_HEARTBEAT, ALLOCATE_PRODUCER_IDS,
            g.ALTER_PARTITION.api_key,  # partition leaders' ISR changes (issue 12)
            m.ELECT_LEADERS.api_key, m.ALTER_PARTITION_REASSIGNMENTS.api_key, m.LIST_PARTITION_REASSIGNMENTS.api_key,
            g.ENVELOPE.api_key,  # admin requests a Kafka broker forwards (KIP-590)
            g.ASSIGN_REPLICAS_TO_DIRS.api_key,  # replica directories (KIP-858)
            g.CREATE_ACLS.api_key, g.DELETE_ACLS.api_key, g.DESCRIBE_ACLS.api_key,  # the ACLs (issue 16)
            m.ALTER_USER_SCRAM_CREDENTIALS.api_key,  # SCRAM credentials (issue 16)
            g.ALTER_CLIENT_QUOTAS.api_key,  # client quotas (issue 16)
        }
        capis.listener_endpoints["CONTROLLER"] = ("ctl.example", 9093)
        describe = capis.handlers()[m.DESCRIBE_CLUSTER]
        resp = await describe(ctx(m.DESCRIBE_CLUSTER.api_key, 1), {"include_cluster_authorized_operations": False, "endpoint_type": 2})
        assert (resp["error_code"], resp["controller_id"], resp["endpoint_type"]) == (Errors.NONE, 3000, 2)
        assert resp["brokers"] == [{"broker_id": 3000, "host": "ctl.example", "port": 9093, "rack": None}]
        assert resp["cluster_authorized_operations"] == AUTHORIZED_OPS_OMITTED
        resp = await describe(ctx(m.DESCRIBE_CLUSTER.api_key, 1), {"include_cluster_authorized_operations": True, "endpoint_type": 2})
        assert resp["cluster_authorized_operations"] == CLUSTER_AUTHORIZED_OPERATIONS
        leader[0] = 3001  # not a controller this node knows: named -1, as Kafka does
        resp = await describe(ctx(m.DESCRIBE_CLUSTER.api_key, 1), {"include_cluster_authorized_operations": False, "endpoint_type": 2})
        assert resp["controller_id"] == -1
        resp = await describe(ctx(m.DESCRIBE_CLUSTER.api_key, 1), {"include_cluster_authorized_operations": False, "endpoint_type": 1})
        assert resp["error_code"] == Errors.MISMATCHED_ENDPOINT_TYPE
        create = capis.handlers()[m.CREATE_TOPICS]
        resp = await create(ctx(m.CREATE_TOPICS.api_key, 7), {"topics": [{"name": "x"}], "timeout_ms": 1, "validate_only": True})
        assert resp["topics"][0]["error_code"] == Errors.NOT_CONTROLLER

    run(go)


# -- the controller clients are told of ----------------------------------------------------------


class _Clock:
    clock_ms = staticmethod(lambda: 0)


def _image_with_brokers(*ids: int) -> MetadataImage:
    delta = MetadataDelta(EMPTY_IMAGE)
    for i in ids:
        delta.replay("RegisterBrokerRecord", {
            "broker_id": i, "incarnation_id": uuid.uuid4(), "broker_epoch": i * 10,
            "end_points": [{"name": "PLAINTEXT", "host": f"b{i}", "port": 9092, "security_protocol": 0}],
            "rack": None, "fenced": True,
        }, 2 * i)
        delta.replay("UnfenceBrokerRecord", {"id": i, "epoch": i * 10}, 2 * i + 1)
    return delta.apply()


def _controller_ids(image: MetadataImage, active: int | None) -> tuple[int, int]:
    channel = InMemoryControllerChannel({}, lambda: active)
    apis = KafkaApis(
        node_id=1, cluster_id=CLUSTER_ID, config=CONFIG, metadata_cache=KRaftMetadataCache(image), replica_manager=_Clock(),  # type: ignore[arg-type]
        controller_channel=channel, log_manager=None,  # type: ignore[arg-type]
        enabled_apis=[m.METADATA, m.DESCRIBE_CLUSTER],
    )
    md = apis.handle_metadata(ctx(m.METADATA.api_key, 12), {
        "topics": [], "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
    })
    dc = apis.handle_describe_cluster(ctx(m.DESCRIBE_CLUSTER.api_key, 1), {
        "include_cluster_authorized_operations": False, "endpoint_type": 1,
    })
    return md["controller_id"], dc["controller_id"]


def test_metadata_and_describe_cluster_name_the_active_controller_not_this_node() -> None:
    # Node 1 answers; node 2, a live broker too, is the active controller.
    assert _controller_ids(_image_with_brokers(1, 2, 3), active=2) == (2, 2)


def test_a_controller_clients_cannot_reach_is_replaced_by_a_live_broker() -> None:
    # A dedicated controller (3000) is no broker: clients are given a live broker (KIP-590).
    md, dc = _controller_ids(_image_with_brokers(1, 2), active=3000)
    assert md in (1, 2) and dc in (1, 2)
    assert _controller_ids(EMPTY_IMAGE, active=3000) == (-1, -1)


def test_metadata_auto_creates_topics_through_the_channel(tmp_path: Path) -> None:
    async def go() -> None:
        controller = new_controller(tmp_path)
        capis = ControllerApis(node_id=1, cluster_id=CLUSTER_ID, config=CONFIG, controller=controller, leader_id=lambda: 1)
        channel = InMemoryControllerChannel({1: capis}, lambda: 1)
        lifecycle = BrokerLifecycleManager(
            node_id=1, cluster_id=CLUSTER_ID, channel=channel, heartbeat_interval_ms=lambda: 10_000,
            metadata_offset=lambda: controller.image.offset,
        )
        lifecycle.start([("PLAINTEXT", "localhost", 9092)], SUPPORTED_FEATURES, None)
        await lifecycle.wait_for_unfence()

        def metadata(apis: KafkaApis, *names: str) -> Any:
            return apis.handle_metadata(ctx(m.METADATA.api_key, 12), {
                "topics": [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names],
                "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False,
            })

        cache = KRaftMetadataCache()
        controller.raft_client.register(MetadataLoader(cache))  # the broker's image follows Raft
        apis = KafkaApis(
            node_id=1, cluster_id=CLUSTER_ID, config=CONFIG, metadata_cache=cache, replica_manager=_Clock(),  # type: ignore[arg-type]
            controller_channel=channel, log_manager=None,  # type: ignore[arg-type]
            enabled_apis=[m.METADATA],
        )
        resp = await metadata(apis, "auto-1")
        assert [(t["name"], t["error_code"], len(t["partitions"])) for t in resp["topics"]] == [("auto-1", Errors.NONE, 1)]
        assert "auto-1" in controller.image.topics_by_name
        # No controller answers: the topic is LEADER_NOT_AVAILABLE (retriable), not created.
        lost = InMemoryControllerChannel({}, lambda: None, retry_timeout_ms=30, retry_backoff_ms=5)
        apis.auto_topic_creation.channel = lost
        resp = await metadata(apis, "auto-2")
        assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [("auto-2", Errors.LEADER_NOT_AVAILABLE)]
        assert "auto-2" not in controller.image.topics_by_name
        await lifecycle.close()
        await channel.close()
        await lost.close()

    run(go)
