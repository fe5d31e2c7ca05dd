"""A seeded, deterministic simulator for partition replication: leaders, followers, controller.

One partition with 3 replicas on 3-5 brokers, ``min.insync.replicas=2``, clients producing with
``acks=all``. What runs is the product's rules, not a model of them:

* each broker holds a real :class:`odradek.cluster.partition.Partition` (make_leader /
  make_follower from the metadata, the HW over the *maximal* ISR, ``read_records`` with the
  KIP-320 diverging-epoch check, ``update_follower_fetch_state``, ``maybe_expand_isr`` /
  ``maybe_shrink_isr`` with ``replica.lag.time.max.ms``, ``alter_isr_done``,
  ``check_enough_replicas_reach_offset`` for the produce purgatory,
  ``append_records_as_follower``) over an in-memory log (:class:`SimLog`, the real
  :class:`~odradek.log.leader_epoch.LeaderEpochFileCache`); followers truncate with the replica
  fetcher's :func:`~odradek.server.replica_fetcher_thread.truncation_offset`, as its
  ``_process_partition`` does (an OFFSET_OUT_OF_RANGE answer: truncate to the leader's end);
* the controller is one reliable state machine (no quorum: raft_sim.py covers that) running the
  real sans-I/O managers over a :class:`MetadataImage` built with ``MetadataDelta``:
  ``ClusterControlManager`` (registration — a new incarnation waits until the old session ran
  out —, heartbeats, unfencing, fencing after ``broker.session.timeout.ms`` with
  ``handle_broker_fenced`` / ``handle_broker_unfenced`` and the election selectors) and
  ``alter_partition`` (leader epoch, partition epoch, eligible replicas, KIP-903 broker epochs);
* brokers learn the metadata by fetching the controller's record log in order (each its own
  image; from offset 0 after a restart) and act on their partition only once registered.

Faults (seeded; all heal at ``fault_phase_ms``): message drop, delay and reorder between any two
parties (brokers, controller, client); network partitions (half of them cut the leader off from
the controller and the followers); broker crash and restart; SIGSTOP-style pauses (a paused
leader resumes as a zombie of an old epoch); clocks at different rates per broker.

**Durability model (the assumption behind the invariants).** Kafka acknowledges ``acks=all``
once every ISR member holds a record *in memory* (the page cache); it does not fsync before
acknowledging (``flush.messages`` off), and relies on replication. A broker *crash* here is a
process kill (kill -9): the log it wrote survives in the OS page cache; its memory (partition
state, follower positions, pending proposals, purgatory) is lost, and its HW comes back from the
last checkpoint. A *power failure* also loses the log's unflushed suffix (a random part of it
may have reached the disk; logs are flushed now and then). Kafka itself can lose acknowledged
records when every ISR member loses power at once (or the sole ISR member does), so that fault
hits only a broker that is in no ISR of the controller's image, in no ISR a leader proposes, in
no AlterPartition under way, and has no fetch under way (delivered after the failure, it would
report the lost suffix and could add the broker to the ISR at its old broker epoch — what
Kafka's KIP-966 unclean-shutdown handling addresses): a lagging follower, whose recovery
exercises truncation.

Invariants, checked after every event (:class:`Violation`):

1. at most one broker leads a partition in any leader epoch;
2. a leader's HW never goes backwards within its epoch (per process incarnation: a restarted
   broker starts from its HW checkpoint);
3. no two brokers' logs disagree below their HWs: every log below its HW matches one committed
   prefix (what consumers, reading up to the HW, have seen), and a follower never truncates
   below its HW;
4. the log of the controller's current leader and of every ISR member holds the whole committed
   prefix — so no acknowledged record (each is checked to be in it when acknowledged) and no
   record a consumer saw is ever lost;
5. with ``unclean.leader.election.enable=true`` invariants 3-4 cannot hold; the acknowledged
   and consumed records that the new leader lacks are counted (``Result.lost_acked``), not
   asserted.

Liveness: once the faults heal (every broker up, no partition, no drops), a produce is
acknowledged within ``LIVENESS_BOUND_MS``.
"""

from __future__ import annotations

import heapq
import random
import uuid
from collections.abc import Callable
from typing import Any, cast

from odradek.cluster.partition import Partition, PartitionState
from odradek.controller.alter_partition import alter_partition
from odradek.controller.feature_control_manager import METADATA_VERSION
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE, TOPIC_RESOURCE
from odradek.protocol.errors import Errors, KafkaError
from odradek.server.replica_fetcher_thread import truncation_offset

from .replication_parts import (
    CLUSTER_ID,
    Broker,
    Controller,
    Entry,
    Faults,
    FollowerFetch,
    PendingProduce,
    Result,
    Violation,
)

__all__ = ["Faults", "Result", "Simulation", "Violation", "run_schedule"]

TOPIC = "sim"
CONTROLLER = 0
CLIENT = 100
TICK_MS = 50
LAG_TIME_MAX_MS = 600  # replica.lag.time.max.ms
REQUEST_TIMEOUT_MS = 1200  # a produce waiting in the purgatory
ALTER_RETRY_MS = 500
FETCH_RETRY_MS = 400  # a fetch (replica or metadata) without an answer is sent again
LIVENESS_BOUND_MS = 15_000
FEATURES = [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": METADATA_VERSION}]

class Simulation:
    def __init__(
        self, seed: int, brokers: int = 3, unclean: bool = False, faults: Faults | None = None
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = faults or Faults()
        self.unclean = unclean
        self.now = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.brokers = {
            b: Broker(b, rate=self.rng.uniform(0.9, 1.1), clock_offset=self.rng.randrange(10_000))
            for b in range(1, brokers + 1)
        }
        self.controller = Controller(seed)
        self.partition_sides: frozenset[int] | None = None  # one side of a network partition
        self.healed = False
        self.result = Result(seed, unclean)
        self.committed: list[Entry] = []  # the prefix below some HW: what consumers may see
        self.acked: dict[str, int] = {}  # value -> offset
        self.consumed_values: set[str] = set()
        self.epoch_leaders: dict[int, int] = {}  # leader epoch -> broker
        self.leader_hw: dict[tuple[int, int, int], int] = {}  # (broker, incarnation, epoch) -> HW
        # Fetches not yet delivered nor lost, by follower: one may add it to the ISR.
        self.fetches_in_flight: dict[int, set[int]] = {}
        self.alter_named: dict[int, tuple[int, set[int]]] = {}  # request id -> (sent at, ISR)
        self._ids = 0
        self._produced = 0
        self.replicas = tuple(self.rng.sample(sorted(self.brokers), 3))
        self._bootstrap()

    # -- scheduling ------------------------------------------------------------------------------

    def at(self, time_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time_ms, self._seq, action))

    def log(self, text: str) -> None:
        trace = self.result.trace
        trace.append(f"{self.now:>6} {text}")
        if len(trace) > 300:
            del trace[:150]

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    # -- the controller --------------------------------------------------------------------------

    def _bootstrap(self) -> None:
        c = self.controller
        c.write(c.features.bootstrap_records())
        for b in self.brokers.values():
            b.incarnation_id = uuid.UUID(int=self.rng.getrandbits(128))
            _epoch, records = c.cluster.register_broker(self._registration(b), len(c.records), 0)
            c.write(records)
        for b in self.brokers.values():
            reg = c.image.brokers[b.broker_id]
            _reply, records = c.cluster.process_broker_heartbeat(
                self._heartbeat(b.broker_id, reg.epoch, len(c.records)), 0
            )
            c.write(records)
        topic: list[tuple[str, dict[str, Any]]] = [
            ("TopicRecord", {"name": TOPIC, "topic_id": c.topic_id}),
            ("PartitionRecord", {
                "partition_id": 0, "topic_id": c.topic_id, "replicas": list(self.replicas),
                "isr": list(self.replicas), "leader": self.replicas[0], "leader_epoch": 0,
                "partition_epoch": 0,
            }),
        ]
        if self.unclean:
            topic.append(("ConfigRecord", {
                "resource_type": TOPIC_RESOURCE, "resource_name": TOPIC,
                "name": "unclean.leader.election.enable", "value": "true",
            }))
        c.write(topic)

    def _registration(self, b: Broker) -> dict[str, Any]:
        return {
            "cluster_id": CLUSTER_ID, "broker_id": b.broker_id, "incarnation_id": b.incarnation_id,
            "listeners": [{"name": "PLAINTEXT", "host": "localhost", "port": 9000 + b.broker_id,
                           "security_protocol": 0}],
            "features": FEATURES, "rack": None,
        }

    @staticmethod
    def _heartbeat(broker_id: int, epoch: int, offset: int, shut_down: bool = False) -> dict[str, Any]:
        return {"broker_id": broker_id, "broker_epoch": epoch, "want_fence": False,
                "want_shut_down": shut_down, "current_metadata_offset": offset}

    def controller_tick(self) -> None:
        c = self.controller
        for _ in range(len(self.brokers)):
            records = c.cluster.maybe_fence_one_stale_broker(self.now)
            if not records:
                break
            self.log(f"controller fences {records[-1][1]['broker_id']}: {self._records_text(records)}")
            c.write(records)
        self.at(self.now + TICK_MS, self.controller_tick)

    @staticmethod
    def _records_text(records: list[tuple[str, dict[str, Any]]]) -> str:
        out = []
        for name, r in records:
            if name == "PartitionChangeRecord":
                out.append(f"leader={r.get('leader', '=')} isr={r.get('isr', '=')}")
        return "; ".join(out)

    def on_controller(self, sender: Broker, incarnation: int, kind: str, req: dict[str, Any]) -> None:
        c = self.controller
        reply: Any = None
        if kind == "register":
            try:
                epoch, records = c.cluster.register_broker(req, len(c.records), self.now)
                c.write(records)
                reply = (Errors.NONE, epoch)
            except KafkaError as e:
                reply = (e.code, -1)
        elif kind == "heartbeat":
            try:
                hb, records = c.cluster.process_broker_heartbeat(req, self.now)
            except KafkaError:
                return
            if records:
                self.log(f"controller on heartbeat of {req['broker_id']}: {self._records_text(records)}")
            c.write(records)
            c.cluster.process_batch_end_offset(req["broker_id"], hb, len(c.records) - 1)
            if not hb.should_shut_down:
                return
            reply = hb
        elif kind == "metadata":
            start = req["offset"]
            reply = (start, c.records[start : start + 200])
        elif kind == "alter":
            self.alter_named.pop(req["request_id"], None)
            proposed = tuple(m["broker_id"] for m in req["topics"][0]["partitions"][0]["new_isr_with_epochs"])
            try:
                c.cluster.check_broker_epoch(req["broker_id"], req["broker_epoch"])
                data, records = alter_partition(c.image, req, 3)
                part = data["topics"][0]["partitions"][0]
                if records:
                    self.log(f"controller AlterPartition from {req['broker_id']}: {part['isr']}")
                c.write(records)
                reply = (Errors(part["error_code"]), part, proposed)
            except KafkaError as e:
                reply = (e.code, None, proposed)
        self.send(CONTROLLER, sender.broker_id, lambda: self.on_controller_reply(sender, incarnation, kind, reply),
                  incarnation)

    # -- the network -----------------------------------------------------------------------------

    def _cut(self, a: int, b: int) -> bool:
        side = self.partition_sides
        if side is None or CLIENT in (a, b):
            return False
        return (a in side) != (b in side)

    def send(
        self, src: int, dst: int, deliver: Callable[[], None], dst_incarnation: int = -1,
        lost: Callable[[], None] | None = None,
    ) -> None:
        """A message from ``src`` to ``dst`` (broker ids, CONTROLLER or CLIENT): lost, or
        delivered after a random delay (so reordered); lost if ``dst`` restarted meanwhile."""
        if not self.healed and (self.rng.random() < self.faults.drop or self._cut(src, dst)):
            if lost is not None:
                lost()
            return
        delay = self.rng.randrange(1, self.faults.max_delay_ms + 1)
        self.at(self.now + delay, lambda: self._deliver(dst, deliver, dst_incarnation, lost))

    def _deliver(
        self, dst: int, deliver: Callable[[], None], incarnation: int, lost: Callable[[], None] | None = None
    ) -> None:
        b = self.brokers.get(dst)
        if b is not None:
            if not b.up or (incarnation >= 0 and b.incarnation != incarnation):
                if lost is not None:
                    lost()
                return
            if b.paused_until > self.now:
                self.at(b.paused_until + self.rng.randrange(1, 5),
                        lambda: self._deliver(dst, deliver, incarnation, lost))
                return
        deliver()
        if b is not None:
            self.after_broker_event(b)

    # -- brokers ---------------------------------------------------------------------------------

    def start(self, b: Broker) -> None:
        b.up = True
        b.incarnation += 1
        if b.incarnation > 1:
            b.incarnation_id = uuid.UUID(int=self.rng.getrandbits(128))
        b.log.restart()
        b.log.on_truncate = lambda offset: self._on_truncate(b, offset)
        b.broker_epoch = -1
        b.shutting_down = False
        b.registering_since = -1
        b.image = EMPTY_IMAGE
        b.metadata_offset = 0
        b.metadata_sent = -1
        b.partition = None
        b.applied_reg = None
        b.fetch = None
        b.purgatory = []
        b.alter_sent = {}
        b.verified = min(b.verified, b.log.log_end_offset)
        self.log(f"start broker {b.broker_id} #{b.incarnation} leo={b.log.log_end_offset} hw={b.log.high_watermark}")
        inc = b.incarnation
        self.at(self.now + self.rng.randrange(1, TICK_MS), lambda: self.tick(b, inc))

    def crash(self, b: Broker, power: bool = False) -> None:
        if not b.up:
            return
        b.up = False
        if power:
            b.log.power_failure(self.rng)
            b.verified = min(b.verified, b.log.log_end_offset)
        self.log(f"{'power failure' if power else 'crash'} broker {b.broker_id} leo={b.log.log_end_offset}")

    def tick(self, b: Broker, incarnation: int) -> None:
        if not b.up or b.incarnation != incarnation:
            return
        if b.paused_until > self.now:
            self.at(b.paused_until, lambda: self.tick(b, incarnation))
            return
        now, local = self.now, b.local_ms(self.now)
        bid = b.broker_id
        if b.broker_epoch < 0:
            if b.registering_since < 0 or now - b.registering_since > FETCH_RETRY_MS:
                b.registering_since = now
                req = self._registration(b)
                self.send(bid, CONTROLLER, lambda: self.on_controller(b, incarnation, "register", req))
        else:
            req = self._heartbeat(bid, b.broker_epoch, b.metadata_offset - 1, b.shutting_down)
            self.send(bid, CONTROLLER, lambda: self.on_controller(b, incarnation, "heartbeat", req))
        if b.metadata_sent < 0 or now - b.metadata_sent > FETCH_RETRY_MS:
            self._fetch_metadata(b)
        p = b.partition
        if p is not None and p.is_leader:
            if len(p.isr) > 1:
                proposed = p.maybe_shrink_isr(local, LAG_TIME_MAX_MS)
                if proposed is not None:
                    self.propose_isr(b, proposed)
            pending = p.pending_isr
            if pending is not None and now - b.alter_sent.get(pending, now) > ALTER_RETRY_MS:
                self.propose_isr(b, pending, retry=True)
        f = b.fetch
        if f is not None and (f.sent_ms < 0 or now - f.sent_ms > FETCH_RETRY_MS) and now >= f.not_before:
            self.send_fetch(b)
        for op in list(b.purgatory):
            if now >= op.deadline:
                b.purgatory.remove(op)  # REQUEST_TIMED_OUT: not acknowledged
        if now >= b.next_flush:
            b.log.flush()
            b.next_flush = now + self.rng.randrange(200, 1500)
        self.after_broker_event(b)
        self.at(now + max(1, int(TICK_MS / b.rate)), lambda: self.tick(b, incarnation))

    def _fetch_metadata(self, b: Broker) -> None:
        b.metadata_sent = self.now
        req = {"offset": b.metadata_offset}
        self.send(b.broker_id, CONTROLLER, lambda: self.on_controller(b, b.incarnation, "metadata", req))

    def on_controller_reply(self, b: Broker, incarnation: int, kind: str, reply: Any) -> None:
        if kind == "heartbeat":  # should_shut_down: the controlled shutdown is complete
            if b.shutting_down:
                b.log.flush()  # a clean stop
                self.log(f"broker {b.broker_id} stops: controlled shutdown complete")
                self.crash(b)
                when = self.now + self.rng.randrange(50, 1500)
                self.at(when if self.healed else min(when, self.faults.fault_phase_ms), lambda: self._restart(b))
        elif kind == "register":
            error, epoch = reply
            if error == Errors.NONE and b.broker_epoch < 0:
                b.broker_epoch = epoch
                self.log(f"broker {b.broker_id} registered with epoch {epoch}")
                self.apply_partition_state(b)
        elif kind == "metadata":
            start, records = reply
            if start != b.metadata_offset:
                return  # an old answer
            b.metadata_sent = -1
            if records:
                delta = MetadataDelta(b.image)
                for i, (name, r) in enumerate(records):
                    delta.replay(name, r, start + i)
                b.image = delta.apply()
                b.metadata_offset = start + len(records)
                self.apply_partition_state(b)
                self._fetch_metadata(b)
        elif kind == "alter":
            error, part, proposed = reply
            p = b.partition
            if p is None or not p.is_leader or part is None:
                return  # a request-level error: the retry sends it again
            self.log(f"broker {b.broker_id} AlterPartition {list(proposed)} answered {error.name} "
                     f"{part['isr']} at {part['partition_epoch']} (pending {p.pending_isr})")
            p.alter_isr_done(proposed, error, part["leader_epoch"], part["partition_epoch"], tuple(part["isr"]))
            b.alter_sent.pop(proposed, None)

    def apply_partition_state(self, b: Broker) -> None:
        """make_leader / make_follower from this broker's image, once it is registered."""
        reg_b = b.image.brokers.get(b.broker_id)
        if b.broker_epoch < 0 or reg_b is None or reg_b.epoch != b.broker_epoch:
            return
        t = b.image.topics.by_id.get(self.controller.topic_id)
        if t is None or 0 not in t.partitions:
            return
        reg = t.partitions[0]
        if reg == b.applied_reg or b.broker_id not in reg.replicas:
            return
        b.applied_reg = reg
        state = PartitionState(TOPIC, 0, self.controller.topic_id, reg.leader, reg.leader_epoch, reg.isr,
                               reg.replicas, reg.partition_epoch)
        if b.partition is None:
            b.partition = Partition(TOPIC, 0, self.controller.topic_id, b.broker_id)
        p = b.partition
        log_ = cast(Any, b.log)
        if reg.leader == b.broker_id:
            if p.make_leader(state, log_, b.local_ms(self.now)):
                self.log(f"broker {b.broker_id} leads epoch {reg.leader_epoch} isr={list(reg.isr)} "
                         f"leo={b.log.log_end_offset} hw={b.log.high_watermark}")
            b.fetch = None
        else:
            p.make_follower(state, log_)
            f = b.fetch
            if reg.leader < 0:
                b.fetch = None
            elif f is None or f.leader != reg.leader or f.leader_epoch != reg.leader_epoch:
                b.fetch = FollowerFetch(reg.leader, reg.leader_epoch, b.log.log_end_offset, b.log.latest_epoch)
                self.send_fetch(b)

    # -- replication -----------------------------------------------------------------------------

    def send_fetch(self, b: Broker) -> None:
        f = b.fetch
        assert f is not None
        f.sent_ms = self.now
        f.request_id = self.next_id()
        req = {
            "replica_id": b.broker_id, "broker_epoch": b.broker_epoch, "fetch_offset": f.fetch_offset,
            "last_fetched_epoch": f.last_fetched_epoch, "current_leader_epoch": f.leader_epoch,
            "request_id": f.request_id,
        }
        leader = self.brokers[f.leader]
        inc = b.incarnation
        in_flight = self.fetches_in_flight.setdefault(b.broker_id, set())
        in_flight.add(f.request_id)

        def deliver() -> None:
            in_flight.discard(req["request_id"])
            self.on_fetch(leader, b, inc, req)

        self.send(b.broker_id, f.leader, deliver, leader.incarnation, lambda: in_flight.discard(req["request_id"]))

    def on_fetch(self, leader: Broker, follower: Broker, inc: int, req: dict[str, Any]) -> None:
        """The leader side of a follower's fetch (ReplicaManager.fetch_messages + its
        _update_follower_fetch_state)."""
        p = leader.partition
        reply: dict[str, Any] = {"request_id": req["request_id"], "error": Errors.NOT_LEADER_OR_FOLLOWER}
        if p is not None and p.is_leader:
            try:
                res = p.read_records(req["fetch_offset"], 50, 0, True, req["current_leader_epoch"],
                                     req["last_fetched_epoch"], for_follower=True)
            except KafkaError as e:
                reply["error"] = e.code
            else:
                reply.update(error=res.error, hw=res.high_watermark, leo=res.log_end_offset,
                             diverging=res.diverging_epoch,
                             records=list(res.records.regions) if res.records else [])
                if res.error == Errors.NONE and res.diverging_epoch is None:
                    self._update_follower(leader, p, req, reply)
        self.send(leader.broker_id, follower.broker_id, lambda: self.on_fetch_reply(follower, reply), inc)

    def _update_follower(self, leader: Broker, p: Partition, req: dict[str, Any], reply: dict[str, Any]) -> None:
        rid = req["replica_id"]
        try:
            moved = p.update_follower_fetch_state(rid, req["fetch_offset"], 0, leader.local_ms(self.now),
                                                  req["broker_epoch"])
        except KafkaError as e:
            reply.update(error=e.code, records=[])
            return
        if moved:
            assert p.log is not None
            reply["hw"] = p.log.high_watermark
        if rid not in p.isr:
            reg = leader.image.brokers.get(rid)
            eligible = reg is not None and not reg.fenced and not reg.in_controlled_shutdown and (
                req["broker_epoch"] < 0 or reg.epoch == req["broker_epoch"])
            if eligible:
                proposed = p.maybe_expand_isr(rid)
                if proposed is not None:
                    self.propose_isr(leader, proposed)

    def on_fetch_reply(self, b: Broker, reply: dict[str, Any]) -> None:
        """The follower side (ReplicaFetcherThread._process_partition)."""
        f, p = b.fetch, b.partition
        if f is None or p is None or f.request_id != reply["request_id"] or p.log is None:
            return
        f.sent_ms = -1
        error = reply["error"]
        log_ = b.log
        if error == Errors.NONE and reply["diverging"] is not None:
            epoch, end = reply["diverging"]
            offset, _complete = truncation_offset(epoch, end, log_.end_offset_for_epoch(epoch), log_.log_end_offset)
            self.log(f"broker {b.broker_id} diverges at epoch {epoch} (leader end {end}): truncates "
                     f"{log_.log_end_offset} -> {offset}")
            log_.truncate_to(offset)
        elif error == Errors.NONE:
            records = reply["records"]
            if records and records[0][0] != f.fetch_offset:
                return
            p.append_records_as_follower(records, reply["hw"], 0, b.local_ms(self.now))
        elif error == Errors.OFFSET_OUT_OF_RANGE:
            leader_end = reply["leo"]
            if 0 <= leader_end < log_.log_end_offset:
                self.log(f"broker {b.broker_id} out of range: truncates {log_.log_end_offset} -> {leader_end}")
                log_.truncate_to(leader_end)
        else:
            f.not_before = self.now + 100  # back off
            return
        f.fetch_offset = log_.log_end_offset
        f.last_fetched_epoch = log_.latest_epoch
        if error == Errors.NONE and (reply["diverging"] is not None or reply["records"]):
            self.send_fetch(b)
        else:
            f.not_before = self.now + 20  # the fetch's max wait

    def propose_isr(self, b: Broker, proposed: tuple[int, ...], retry: bool = False) -> None:
        """An AlterPartition (v3: each member's broker epoch, KIP-903), as ReplicaManager._propose_isr."""
        p = b.partition
        assert p is not None
        epochs = [
            b.broker_epoch if r == b.broker_id else (b.image.brokers[r].epoch if r in b.image.brokers else -1)
            for r in proposed
        ]
        rid = self.next_id()
        req = {
            "broker_id": b.broker_id, "broker_epoch": b.broker_epoch, "request_id": rid,
            "topics": [{"topic_id": self.controller.topic_id, "partitions": [{
                "partition_index": 0, "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                "new_isr_with_epochs": [{"broker_id": r, "broker_epoch": e} for r, e in zip(proposed, epochs, strict=True)],
                "leader_recovery_state": 0,
            }]}],
        }
        b.alter_sent[proposed] = self.now
        self.log(f"broker {b.broker_id} proposes ISR {list(proposed)} at partition epoch {p.partition_epoch}"
                 f"{' (again)' if retry else ''}")
        self.alter_named[rid] = (self.now, set(proposed))
        inc = b.incarnation

        def deliver() -> None:
            self.on_controller(b, inc, "alter", req)

        self.send(b.broker_id, CONTROLLER, deliver)

    # -- clients ---------------------------------------------------------------------------------

    def produce(self, value: str | None = None) -> None:
        """A client sends a record with acks=all to the leader in some broker's (possibly stale)
        metadata."""
        if value is None:
            self._produced += 1
            value = f"v{self._produced}"
        views = [b.image for b in self.brokers.values() if b.up] + [self.controller.image]
        image = self.rng.choice(views)
        t = image.topics.by_id.get(self.controller.topic_id)
        if t is None or t.partitions[0].leader not in self.brokers:
            return
        target = self.brokers[t.partitions[0].leader]
        v = value
        self.send(CLIENT, target.broker_id, lambda: self.on_produce(target, v), target.incarnation)

    def on_produce(self, b: Broker, value: str) -> None:
        p = b.partition
        if p is None:
            return
        try:
            info = p.append_records_to_leader(cast(Any, [value]), -1, b.local_ms(self.now))
        except KafkaError:
            return  # NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS: not appended
        b.purgatory.append(PendingProduce(value, info.last_offset, p.leader_epoch, self.now + REQUEST_TIMEOUT_MS))

    def complete_produces(self, b: Broker) -> None:
        """The purgatory: acks=all completes once the HW passed the record (or fails)."""
        p = b.partition
        for op in list(b.purgatory):
            if p is None:
                done, error = True, Errors.NOT_LEADER_OR_FOLLOWER
            else:
                done, error = p.check_enough_replicas_reach_offset(op.offset + 1)
            if not done:
                continue
            b.purgatory.remove(op)
            if error == Errors.NONE:
                self.acknowledge(b, op)

    def acknowledge(self, b: Broker, op: PendingProduce) -> None:
        if b.log.entries[op.offset][1] != op.value:
            raise Violation(f"broker {b.broker_id} acknowledges {op.value} at {op.offset}, its log has "
                            f"{b.log.entries[op.offset]}")
        self.acked[op.value] = op.offset
        self.result.acked += 1
        self.extend_committed(b)
        if not self.unclean and (op.offset >= len(self.committed) or self.committed[op.offset][1] != op.value):
            raise Violation(f"acknowledged {op.value} at {op.offset} is not in the committed prefix")

    # -- invariants ------------------------------------------------------------------------------

    def _on_truncate(self, b: Broker, offset: int) -> None:
        self.result.truncations += 1
        if not self.unclean and offset < b.log.high_watermark:
            raise Violation(f"broker {b.broker_id} truncates to {offset}, below its HW {b.log.high_watermark}")
        b.verified = min(b.verified, offset)

    def _verify(self, b: Broker) -> int:
        """Extend b.verified over the log's entries that equal the committed prefix; returns the
        first offset that differs (or the verified length)."""
        entries, committed = b.log.entries, self.committed
        end = min(len(entries), len(committed))
        i = b.verified
        while i < end and entries[i] == committed[i]:
            i += 1
        b.verified = i
        return i

    def extend_committed(self, b: Broker) -> None:
        """Whatever this log holds below its HW is visible to consumers: it must match the
        committed prefix, and extends it."""
        hw = b.log.high_watermark
        first = self._verify(b)
        if first < min(hw, len(self.committed)):
            if not self.unclean:
                raise Violation(
                    f"broker {b.broker_id} has {b.log.entries[first]} at {first} below its HW {hw}; "
                    f"committed {self.committed[first]}"
                )
            self._count_loss(first)
            self._verify(b)
        if hw > len(self.committed):
            self.committed.extend(b.log.entries[len(self.committed) : hw])
            b.verified = hw

    def _count_loss(self, offset: int) -> None:
        lost = self.committed[offset:]
        self.result.lost_consumed += len(lost)
        self.result.lost_acked += sum(1 for _e, v in lost if self.acked.get(v) is not None)
        for _e, v in lost:
            self.acked.pop(v, None)
        self.log(f"unclean election: {len(lost)} committed records lost from offset {offset}")
        del self.committed[offset:]
        for other in self.brokers.values():
            other.verified = min(other.verified, offset)

    def after_broker_event(self, b: Broker) -> None:
        if b.up:
            self.complete_produces(b)

    def check_step(self) -> None:
        leaders: list[Broker] = []
        for b in self.brokers.values():
            p = b.partition
            if not b.up or p is None or not p.is_leader:
                continue
            leaders.append(b)
            epoch = p.leader_epoch
            other = self.epoch_leaders.setdefault(epoch, b.broker_id)
            if other != b.broker_id:
                raise Violation(f"brokers {other} and {b.broker_id} both lead epoch {epoch}")
            key = (b.broker_id, b.incarnation, epoch)
            hw = b.log.high_watermark
            if hw < self.leader_hw.get(key, -1):
                raise Violation(f"leader {b.broker_id} HW went back from {self.leader_hw[key]} to {hw} in epoch {epoch}")
            self.leader_hw[key] = hw
        if self.unclean:
            # Only the newest leader's log is the truth; an unclean election may rewrite it.
            if leaders:
                self.extend_committed(max(leaders, key=lambda b: b.partition.leader_epoch))  # type: ignore[union-attr]
            return
        for b in self.brokers.values():
            if b.up:
                self.extend_committed(b)
        reg = self.controller.partition()
        for r in dict.fromkeys([reg.leader, *reg.isr]):
            if r < 0:
                continue
            b = self.brokers[r]
            if self._verify(b) < len(self.committed):
                raise Violation(
                    f"broker {r} ({'leader' if r == reg.leader else 'ISR member'} in the controller's image, "
                    f"isr {list(reg.isr)}) lacks committed offset {b.verified} of {len(self.committed)}: "
                    f"has {b.log.entries[b.verified] if b.verified < len(b.log.entries) else 'nothing'}, "
                    f"committed {self.committed[b.verified]}"
                )

    # -- faults ----------------------------------------------------------------------------------

    def _leader(self) -> int:
        return int(self.controller.partition().leader)

    def schedule_faults(self) -> None:
        f = self.faults

        def every(mean: int, action: Callable[[], None]) -> None:
            t = 0
            while True:
                t += self.rng.randrange(mean // 2, mean * 3 // 2)
                if t >= f.fault_phase_ms:
                    return
                self.at(t, action)

        every(f.crash_every_ms, self._crash_someone)
        every(f.partition_every_ms, self._partition_someone)
        every(f.pause_every_ms, self._pause_someone)
        every(f.power_every_ms, self._power_failure)
        every(f.shutdown_every_ms, self._controlled_shutdown)
        for t in range(0, f.fault_phase_ms, 15):
            self.at(t + self.rng.randrange(15), self.produce)

    def _victim(self) -> Broker:
        leader = self._leader()
        if leader in self.brokers and self.rng.random() < 0.5:
            return self.brokers[leader]
        return self.brokers[self.rng.choice(sorted(self.brokers))]

    def _crash_someone(self) -> None:
        b = self._victim()
        self.crash(b)
        self.at(min(self.now + self.rng.randrange(50, 3000), self.faults.fault_phase_ms), lambda: self._restart(b))

    def _restart(self, b: Broker) -> None:
        if not b.up:
            self.start(b)

    def _pause_someone(self) -> None:
        b = self._victim()
        b.paused_until = min(self.now + self.rng.randrange(300, 4000), self.faults.fault_phase_ms)
        self.log(f"pause broker {b.broker_id} until {b.paused_until}")

    def _partition_someone(self) -> None:
        ids = [CONTROLLER, *sorted(self.brokers)]
        leader = self._leader()
        if leader in self.brokers and self.rng.random() < 0.5:
            side = frozenset([leader])  # the leader alone: cut from the controller and followers
        else:
            side = frozenset(self.rng.sample(ids, self.rng.randrange(1, len(ids))))
        self.partition_sides = side
        self.log(f"partition {sorted(side)} | {sorted(set(ids) - side)}")
        self.at(self.now + self.rng.randrange(200, 3000), self._heal_partition)

    def _heal_partition(self) -> None:
        if self.partition_sides is not None:
            self.partition_sides = None
            self.log("partition healed")

    def _controlled_shutdown(self) -> None:
        """A broker (the leader half of the time) asks to shut down: the controller moves its
        leaderships and takes it out of the ISR, then tells it to stop; it restarts later."""
        b = self._victim()
        if b.up and b.broker_epoch >= 0 and not b.shutting_down:
            b.shutting_down = True
            self.log(f"controlled shutdown of broker {b.broker_id}")

    def _power_failure(self) -> None:
        """Only a broker outside every ISR (see the module docstring)."""
        reg = self.controller.partition()
        named: set[int] = set()
        for sent, isr in self.alter_named.values():
            if sent >= self.now - self.faults.max_delay_ms - 1:  # may still reach the controller
                named |= isr
        for b in self.brokers.values():
            p = b.partition
            if b.up and p is not None and p.is_leader and p.pending_isr is not None:
                named |= set(p.pending_isr)
        candidates = [
            r for r in sorted(self.brokers)
            if r not in reg.isr and r != reg.leader and r not in named and not self.fetches_in_flight.get(r)
        ]
        if not candidates:
            return
        b = self.brokers[self.rng.choice(candidates)]
        self.crash(b, power=True)
        self.at(min(self.now + self.rng.randrange(50, 2000), self.faults.fault_phase_ms), lambda: self._restart(b))

    def heal(self) -> None:
        self.healed = True
        self.partition_sides = None
        self.log("heal")
        for b in self.brokers.values():
            b.paused_until = 0
            if not b.up:
                self.start(b)

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> Result:
        for b in self.brokers.values():
            self.start(b)
        self.at(TICK_MS, self.controller_tick)
        self.schedule_faults()
        heal_at = self.faults.fault_phase_ms
        self.at(heal_at, self.heal)
        deadline = heal_at + LIVENESS_BOUND_MS
        probes: list[str] = []
        next_probe = heal_at + 1
        while self._queue:
            time_ms, _, action = heapq.heappop(self._queue)
            if time_ms > deadline:
                break
            self.now = time_ms
            action()
            self.result.steps += 1
            self.check_step()
            if not self.healed:
                continue
            if any(v in self.acked for v in probes):
                self.result.leader_epochs = len(self.epoch_leaders)
                return self.result
            if self.now >= next_probe:
                next_probe = self.now + 200
                probe = f"probe{len(probes)}"
                probes.append(probe)
                self.produce(probe)
        raise Violation(
            f"liveness: no produce acknowledged within {LIVENESS_BOUND_MS} ms after the faults healed; "
            f"controller's partition {self.controller.partition()}; brokers "
            f"{ {b.broker_id: (b.up, b.broker_epoch, b.log.log_end_offset, b.log.high_watermark) for b in self.brokers.values()} }"
        )


def run_schedule(seed: int, unclean: bool = False) -> Result:
    """One schedule, its shape drawn from the seed: 3-5 brokers, the fault rates."""
    shape = random.Random(seed ^ 0x5EED)
    sim = Simulation(
        seed,
        brokers=shape.choice((3, 3, 4, 5)),
        unclean=unclean,
        faults=Faults(
            drop=shape.choice((0.0, 0.02, 0.1)),
            max_delay_ms=shape.choice((5, 40, 150)),
        ),
    )
    try:
        return sim.run()
    except Violation as e:
        raise Violation(f"{e}\ntrace (last events):\n" + "\n".join(sim.result.trace[-40:])) from None
