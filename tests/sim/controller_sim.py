"""The metadata state machine under the deterministic simulator: RaftCore + the controller's managers.

:class:`ControllerSimulation` runs the world of :mod:`tests.sim.raft_sim` (network faults, crashes
losing unfsynced data, drifting clocks, pauses) and puts on top what ``QuorumController`` does:

* every node replays the committed metadata records (serialized with Kafka's framing,
  ``MetadataRecordSerde``) into its own ``MetadataImage`` through ``MetadataDelta``, one delta per
  committed batch; a restarted node starts again from the empty image;
* the node that leads the quorum is the active controller once it has applied its own epoch's
  LeaderChange record (Kafka's client tells the listener of its leadership only then: the image
  is caught up); it runs a seeded workload through the sans-I/O managers
  (ReplicationControlManager, ConfigurationControlManager, ClusterControlManager with a fake
  drifting clock and short broker sessions, ProducerIdControlManager, FeatureControlManager's
  bootstrap records), each write proposed with ``RaftCore.propose(epoch, ...)`` at the epoch it
  leads. Writes are pipelined as QuorumController's are: up to :data:`PIPELINE_DEPTH` in flight,
  the managers working on the write image (the committed image plus the records proposed and not
  yet applied), which goes back to the committed image when the node stops being active. A write
  is acknowledged when its proposer applies it (committed) while still active in that epoch.

Invariants, on top of raft_sim's (checked on every event; :class:`Violation`):

1. image safety: a node's image after applying up to offset N equals the reference image built
   from the committed records 0..N in other batchings (so any two nodes agree), and no
   committed record is refused by the replay;
2. acknowledged writes stay: an acknowledged topic is in every later image until a committed
   delete of its id; an acknowledged producer-id block stays below the image's next id;
3. a write proposed by a leader of epoch E after a leader of a later epoch was elected is never
   committed;
4. producer-id blocks never overlap (acknowledged blocks, and ``next_producer_id`` only grows in
   the committed records);
5. a broker's epoch never goes back in the committed registrations;
6. topic ids are unique over the whole log; a live topic name has one id.

Liveness: after the heal the active controller registers a new broker, which must be committed
and applied everywhere within raft_sim's bounds.

:func:`run_controller_schedule` is one random schedule; :func:`run_deposed_leader_schedule` a
directed one where a paused active controller resumes in an epoch the others left.
"""

from __future__ import annotations

import bisect
import contextlib
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from odradek.controller import replication_control
from odradek.controller.cluster_control_manager import ClusterControlManager
from odradek.controller.configuration_control import OP_DELETE, OP_SET, ConfigurationControlManager
from odradek.controller.feature_control_manager import METADATA_VERSION, FeatureControlManager
from odradek.controller.producer_id_control_manager import ProducerIdControlManager
from odradek.controller.replication_control import MetadataRecord, ReplicationControlManager
from odradek.metadata.delta import MetadataDelta, MetadataReplayError
from odradek.metadata.image import EMPTY_IMAGE, TOPIC_RESOURCE, MetadataImage
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.protocol.errors import KafkaError
from odradek.raft.epoch_state import LeaderState
from odradek.raft.raft_log import LogBatch

from .raft_sim import CLUSTER_ID, Faults, Node, Simulation, Violation

PIPELINE_DEPTH = 3  # writes in flight (proposed, not yet applied) per active controller
SESSION_TIMEOUT_MS = 2000  # short broker sessions, so that fencing happens within a schedule
TOPIC_NAMES = ("a", "b", "c.d", "c_d", "e", "f")  # 'c.d' and 'c_d' collide
BROKER_IDS = (1, 2, 3, 4)
CONFIG_KEYS = ("retention.ms", "segment.bytes")
_FEATURES = [
    {
        "name": "metadata.version",
        "min_supported_version": 7,
        "max_supported_version": METADATA_VERSION,
    }
]


def _no_config_errors(name: str, value: str) -> str | None:
    return None


@dataclass
class Write:
    epoch: int
    first: int
    last: int
    kind: str
    records: list[MetadataRecord]
    encoded: list[bytes]
    block: tuple[int, int] | None = None  # a producer-id block [first, end)


@dataclass
class Controller:
    """What one node's controller holds in memory (lost at a crash)."""

    node_id: int
    image: MetadataImage = EMPTY_IMAGE  # the committed image
    write_image: MetadataImage = EMPTY_IMAGE  # committed + proposed: what the managers see
    active_epoch: int | None = None  # the epoch this node is the active controller of
    inflight: list[Write] = field(default_factory=list)  # proposed, not yet applied
    replication: ReplicationControlManager = field(init=False)
    configuration: ConfigurationControlManager = field(init=False)
    features: FeatureControlManager = field(init=False)
    cluster: ClusterControlManager = field(init=False)
    producer_ids: ProducerIdControlManager = field(init=False)

    def __post_init__(self) -> None:
        self.replication = ReplicationControlManager(
            self.image,
            default_partitions=1,
            default_replication_factor=1,
            validate_config=_no_config_errors,
            rng=random.Random(self.node_id),
        )
        self.configuration = ConfigurationControlManager(self.image, _no_config_errors)
        self.features = FeatureControlManager(self.image)
        self.cluster = ClusterControlManager(
            CLUSTER_ID, self.image, self.features, session_timeout_ms=SESSION_TIMEOUT_MS
        )
        self.producer_ids = ProducerIdControlManager(self.image, self.cluster)

    def set_image(self, image: MetadataImage) -> None:
        """The committed image; the managers' too unless proposed writes are pending."""
        self.image = image
        if not self.inflight:
            self.set_write_image(image)

    def drop_speculative(self) -> None:
        """What was proposed is applied, or abandoned: back to the committed image."""
        self.inflight = []
        self.cluster.drop_speculative()
        self.set_write_image(self.image)

    def set_write_image(self, image: MetadataImage) -> None:
        self.write_image = image
        for m in (
            self.replication,
            self.configuration,
            self.features,
            self.cluster,
            self.producer_ids,
        ):
            m.image = image


def decode(record: Any) -> MetadataRecord:
    return METADATA_RECORD_SERDE.read(record)


def replay(
    image: MetadataImage, records: list[tuple[int, MetadataRecord]], who: str
) -> MetadataImage:
    delta = MetadataDelta(image)
    for offset, (name, fields) in records:
        try:
            delta.replay(name, fields, offset)
        except MetadataReplayError as e:
            raise Violation(f"{who}: a committed record is refused by the replay: {e}") from e
    return delta.apply()


class ControllerSimulation(Simulation):
    # Kafka's KafkaRaftClient tells the listener it leads only once it has replayed up to the
    # epoch's start; the mutation tests turn this off.
    wait_for_catch_up = True

    def __init__(self, seed: int, **kwargs: Any) -> None:
        super().__init__(seed, **kwargs)
        self.workload = random.Random(seed ^ 0xC0DE)
        self.controllers: dict[int, Controller] = {}
        # The reference images, by the number of records applied (offsets 0..n-1).
        self.ref_images: dict[int, MetadataImage] = {0: EMPTY_IMAGE}
        self.ref_keys: list[int] = [0]
        self.decoded: list[
            MetadataRecord | None
        ] = []  # committed records by offset (None: control)
        self.topic_ids_seen: dict[uuid.UUID, str] = {}
        self.live_names: dict[str, uuid.UUID] = {}
        self.removed_at: dict[uuid.UUID, int] = {}
        self.broker_epochs: dict[int, int] = {}
        self.next_producer_id = 0
        self.late_writes: dict[tuple[int, int], Any] = {}  # (offset, epoch) -> record
        self.acked: list[Write] = []
        self.acked_topics: dict[uuid.UUID, tuple[str, int]] = {}
        self.acked_blocks: list[tuple[int, int, int]] = []  # (first, end, offset)
        self.incarnations: dict[int, uuid.UUID] = {}
        self.writes_proposed = 0

    # -- hooks --------------------------------------------------------------------------------

    def on_start(self, node: Node) -> None:
        self.controllers[node.node_id] = Controller(node.node_id)

    def on_new_commit(self, offset: int, entry: tuple[int, Any], control: bool) -> None:
        epoch, record = entry
        late = self.late_writes.get((offset, epoch))
        if late is not None and late == record:
            raise Violation(
                f"a write proposed in epoch {epoch} after a later epoch's leader was elected is "
                f"committed at offset {offset}: {decode(record)}"
            )
        if control:
            self.decoded.append(None)
            return
        name, fields = decode(record)
        self.decoded.append((name, fields))
        if name == "TopicRecord":
            tid, tname = fields["topic_id"], fields["name"]
            if tid in self.topic_ids_seen:
                raise Violation(
                    f"topic id {tid} of {tname!r} at {offset} was already used by {self.topic_ids_seen[tid]!r}"
                )
            self.topic_ids_seen[tid] = tname
            if tname in self.live_names:
                raise Violation(
                    f"topic {tname!r} created again at {offset} while it lives as {self.live_names[tname]}"
                )
            self.live_names[tname] = tid
        elif name == "RemoveTopicRecord":
            tid = fields["topic_id"]
            self.removed_at.setdefault(tid, offset)
            self.live_names.pop(self.topic_ids_seen.get(tid, ""), None)
        elif name == "RegisterBrokerRecord":
            bid, bepoch = fields["broker_id"], fields["broker_epoch"]
            if bepoch < self.broker_epochs.get(bid, -1):
                raise Violation(
                    f"broker {bid}'s epoch goes back from {self.broker_epochs[bid]} to {bepoch} at {offset}"
                )
            self.broker_epochs[bid] = bepoch
        elif name == "ProducerIdsRecord":
            nxt = fields["next_producer_id"]
            if nxt <= self.next_producer_id:
                raise Violation(
                    f"producer ids: next_producer_id {nxt} at {offset} does not move past {self.next_producer_id}: "
                    "a block overlaps an earlier one"
                )
            self.next_producer_id = nxt

    def on_applied(self, node: Node, batch: LogBatch) -> None:
        c = self.controllers[node.node_id]
        if not batch.control:
            c.set_image(
                replay(
                    c.image,
                    [(batch.base_offset + i, decode(r)) for i, r in enumerate(batch.records)],
                    f"node {node.node_id}",
                )
            )
            for i, r in enumerate(batch.records):
                name, fields = decode(r)
                c.cluster.replay(name, fields, batch.base_offset + i)
        applied = len(node.applied)
        self.check_image(node, c.image, applied)
        while c.inflight and applied > c.inflight[0].last:
            w = c.inflight.pop(0)
            core = node.core
            if core is not None and core.is_leader() and core.epoch == w.epoch == c.active_epoch:
                self.acknowledge(w)
        if not c.inflight:
            c.drop_speculative()

    # -- invariants ---------------------------------------------------------------------------

    def ref_image(self, n: int) -> MetadataImage:
        image = self.ref_images.get(n)
        if image is not None:
            return image
        base = self.ref_keys[bisect.bisect_right(self.ref_keys, n) - 1]
        records = [(o, r) for o in range(base, n) if (r := self.decoded[o]) is not None]
        image = replay(self.ref_images[base], records, "reference")
        self.ref_images[n] = image
        bisect.insort(self.ref_keys, n)
        return image

    def check_image(self, node: Node, image: MetadataImage, applied: int) -> None:
        ref = self.ref_image(applied)
        if image != ref:
            raise Violation(
                f"image safety: node {node.node_id}'s image after {applied} records differs from the "
                f"one the committed records build:\n  {image}\n  {ref}"
            )
        for tid, (name, offset) in self.acked_topics.items():
            if offset < applied and self.removed_at.get(tid, applied) >= applied:
                t = image.topics_by_id.get(tid)
                if t is None or t.name != name:
                    raise Violation(
                        f"acknowledged topic {name!r} ({tid}, committed at {offset}) is missing from node "
                        f"{node.node_id}'s image after {applied} records"
                    )
        for first, end, offset in self.acked_blocks:
            if offset < applied and image.next_producer_id < end:
                raise Violation(
                    f"acknowledged producer-id block [{first}, {end}) is lost: node {node.node_id}'s next "
                    f"producer id is {image.next_producer_id} after {applied} records"
                )

    def acknowledge(self, w: Write) -> None:
        for i, record in enumerate(w.encoded):
            epoch, committed = self.committed[w.first + i]
            if (epoch, committed) != (w.epoch, record):
                raise Violation(
                    f"acknowledged write {w.kind} at {w.first + i} was replaced by {decode(committed)}"
                )
        self.acked.append(w)
        for i, (name, fields) in enumerate(w.records):
            if name == "TopicRecord":
                self.acked_topics[fields["topic_id"]] = (fields["name"], w.first + i)
        if w.block is not None:
            first, end = w.block
            for f, e, _ in self.acked_blocks:
                if first < e and f < end:
                    raise Violation(f"producer-id blocks [{first}, {end}) and [{f}, {e}) overlap")
            self.acked_blocks.append((first, end, w.last))

    # -- the active controller ----------------------------------------------------------------

    def active(self, node: Node) -> Controller | None:
        """The node's controller if it is active: leader, and caught up with its epoch's start."""
        core = node.core
        if core is None or not core.is_leader() or node.paused_until > self.now:
            return None
        c = self.controllers[node.node_id]
        state = core.quorum.state
        assert isinstance(state, LeaderState)
        if c.active_epoch != core.epoch:
            if self.wait_for_catch_up and len(node.applied) <= state.epoch_start_offset:
                return None
            c.active_epoch = core.epoch
            c.drop_speculative()
            c.cluster.activate(node.local_ms(self.now))
        return c

    def schedule_faults(self) -> None:
        super().schedule_faults()  # with a workload step every 37 ms or so: one more between
        for t in range(18, self.faults.fault_phase_ms, 37):
            self.at(t + self.rng.randrange(10), self.propose)

    def _pause_someone(self) -> None:
        """As raft_sim's, and the workload steps right when the node resumes: a deposed leader
        that has not heard of the next epoch yet still proposes (its writes must not commit)."""
        super()._pause_someone()
        resume = max(n.paused_until for n in self.nodes.values())
        if resume > self.now:
            self.at(resume, self.propose)

    def propose(self) -> None:
        """One step of the workload on each active controller with room in its pipeline."""
        for node in self.nodes.values():
            c = self.active(node)
            if c is None or len(c.inflight) >= PIPELINE_DEPTH:
                continue
            kind, records, block = self.next_operation(node, c)
            if records:
                self.propose_write(node, c, kind, records, block)

    def propose_write(
        self,
        node: Node,
        c: Controller,
        kind: str,
        records: list[MetadataRecord],
        block: tuple[int, int] | None = None,
    ) -> Write:
        core = node.core
        assert core is not None
        encoded = [METADATA_RECORD_SERDE.write(r) for r in records]
        first = core.log_end_offset
        last = core.propose(core.epoch, encoded, node.local_ms(self.now))
        w = Write(core.epoch, first, last, kind, records, encoded, block)
        # Applied to the write image when proposed (QuorumController refuses, before the
        # append, records the replay refuses; here they are a violation).
        c.set_write_image(replay(c.write_image, list(enumerate(records, first)), f"node {node.node_id} (write image)"))
        for i, (name, fields) in enumerate(records):
            c.cluster.replay_speculative(name, fields, first + i)
        c.inflight.append(w)
        self.writes_proposed += 1
        if max(self.leaders, default=0) > core.epoch:
            for i, r in enumerate(encoded):
                self.late_writes[(first + i, core.epoch)] = r
        self.log(f"node {node.node_id} proposes {kind} at {first}..{last} epoch {core.epoch}")
        self.drain(node)
        return w

    def next_operation(
        self, node: Node, c: Controller
    ) -> tuple[str, list[MetadataRecord], tuple[int, int] | None]:
        """A seeded random operation through the managers, as QuorumController runs them."""
        bootstrap = c.features.bootstrap_records()
        if bootstrap:
            return "activate", bootstrap, None
        rng = self.workload
        now = node.local_ms(self.now)
        fence = c.cluster.maybe_fence_one_stale_broker(now)
        if fence:
            return "fence", fence, None
        image = c.write_image
        op = rng.choice(
            (
                "create",
                "create",
                "delete",
                "partitions",
                "config",
                "register",
                "heartbeat",
                "heartbeat",
                "pids",
            )
        )
        try:
            if op == "create":
                name = rng.choice(TOPIC_NAMES)
                configs = (
                    [{"name": "retention.ms", "value": str(rng.randrange(1000, 9000))}]
                    if rng.random() < 0.3
                    else []
                )
                res, records = c.replication.create_topic(
                    name, rng.randrange(1, 4), 1, [], configs, pending_names=set()
                )
                return op, records, None
            if op == "delete" and image.topics_by_name:
                t = image.topics_by_name[rng.choice(sorted(image.topics_by_name))]
                return op, c.replication.delete_topic(t.topic_id), None
            if op == "partitions" and image.topics_by_name:
                name = rng.choice(sorted(image.topics_by_name))
                count = len(image.topics_by_name[name].partitions) + rng.randrange(1, 3)
                _code, _msg, records = c.replication.create_partitions(name, count, None)
                return op, records, None
            if op == "config" and image.topics_by_name:
                name = rng.choice(sorted(image.topics_by_name))
                key = rng.choice(CONFIG_KEYS)
                change = (
                    {"name": key, "config_operation": OP_DELETE, "value": None}
                    if rng.random() < 0.3
                    else {
                        "name": key,
                        "config_operation": OP_SET,
                        "value": str(rng.randrange(1, 10**6)),
                    }
                )
                _code, _msg, records = c.configuration.incremental_alter_configs(
                    TOPIC_RESOURCE, name, [change]
                )
                return op, records, None
            if op == "register":
                return (
                    op,
                    self.register(node, c, rng.choice(BROKER_IDS), new=rng.random() < 0.4),
                    None,
                )
            if op == "heartbeat" and image.brokers:
                b = image.brokers[rng.choice(sorted(image.brokers))]
                request = {
                    "broker_id": b.broker_id,
                    "broker_epoch": b.epoch if rng.random() < 0.9 else b.epoch - 1,
                    "current_metadata_offset": max(0, len(node.applied) - 1 - rng.randrange(0, 3)),
                    "want_fence": False,
                    "want_shut_down": rng.random() < 0.05,
                }
                _reply, records = c.cluster.process_broker_heartbeat(request, now)
                return op, records, None
            if op == "pids" and image.brokers:
                b = image.brokers[rng.choice(sorted(image.brokers))]
                block, records = c.producer_ids.generate_next_producer_id(b.broker_id, b.epoch)
                return op, records, (block.first_producer_id, block.next_block_first_id)
        except KafkaError:
            pass  # refused (stale broker epoch, duplicate registration...): nothing written
        return op, [], None

    def register(
        self, node: Node, c: Controller, broker_id: int, new: bool
    ) -> list[MetadataRecord]:
        incarnation = self.incarnations.get(broker_id)
        if incarnation is None or new:
            incarnation = self.incarnations[broker_id] = uuid.UUID(
                int=self.workload.getrandbits(128)
            )
        request = {
            "cluster_id": CLUSTER_ID,
            "broker_id": broker_id,
            "incarnation_id": incarnation,
            "listeners": [
                {
                    "name": "PLAINTEXT",
                    "host": "localhost",
                    "port": 9000 + broker_id,
                    "security_protocol": 0,
                }
            ],
            "features": _FEATURES,
            "rack": None,
        }
        assert node.core is not None
        _epoch, records = c.cluster.register_broker(
            request, node.core.log_end_offset, node.local_ms(self.now)
        )
        return records

    def _propose_probe(self, n: int) -> Any:
        """Liveness: the active controller registers a new broker; its record is the probe."""
        for node in self.nodes.values():
            c = self.active(node)
            if c is None:
                continue
            records = c.features.bootstrap_records() + self.register(node, c, 100 + n, new=True)
            self.propose_write(node, c, "probe", records)
            return METADATA_RECORD_SERDE.write(records[-1])
        return None


@contextlib.contextmanager
def seeded_topic_ids(rng: random.Random) -> Iterator[None]:
    """Topic ids from the schedule's seed, so that a seed replays exactly."""
    original = replication_control.new_topic_id
    replication_control.new_topic_id = lambda: uuid.UUID(int=rng.getrandbits(126) + 2)
    try:
        yield
    finally:
        replication_control.new_topic_id = original


def run_controller_schedule(seed: int) -> ControllerSimulation:
    """One schedule, its shape drawn from the seed: 3 or 5 voters, 0-2 observers (brokers)."""
    shape = random.Random(seed ^ 0x5EED)
    sim = ControllerSimulation(
        seed,
        voters=shape.choice((3, 3, 5)),
        observers=shape.randrange(0, 3),
        faults=Faults(
            drop=shape.choice((0.0, 0.02, 0.1)),
            duplicate=shape.choice((0.0, 0.05)),
            max_delay_ms=shape.choice((5, 40, 150)),
            crash_every_ms=shape.choice((1200, 2500)),
            partition_every_ms=shape.choice((1500, 3000)),
            fault_phase_ms=shape.choice((6000, 10_000)),
        ),
        max_fetch_batches=shape.choice((8, 64)),
    )
    with seeded_topic_ids(random.Random(seed ^ 0x7091C)):
        sim.run()
    return sim


def run_deposed_leader_schedule(
    seed: int, pause_at_ms: int = 3000, pause_ms: int = 2600
) -> ControllerSimulation:
    """No random faults: the active controller, with no write in flight, is paused past the
    followers' fetch timeout but not its own check-quorum timeout, so that it resumes as the
    leader of an epoch the others already left, and proposes (invariant 3)."""
    quiet = Faults(
        drop=0.0, duplicate=0.0, max_delay_ms=5, crash_every_ms=10**6, partition_every_ms=10**6
    )
    sim = ControllerSimulation(seed, voters=3, observers=1, faults=quiet)

    def pause_idle_leader() -> None:
        for node in sim.nodes.values():
            c = sim.active(node)
            if c is not None and not c.inflight:
                node.paused_until = sim.now + pause_ms
                sim.log(f"pause node {node.node_id} until {node.paused_until}")
                sim.at(node.paused_until, sim.propose)
                return
        sim.at(sim.now + 1, pause_idle_leader)

    sim.at(pause_at_ms, pause_idle_leader)
    with seeded_topic_ids(random.Random(seed ^ 0x7091C)):
        sim.run()
    return sim
