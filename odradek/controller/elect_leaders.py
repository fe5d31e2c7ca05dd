"""ElectLeaders on the controller (Kafka's ``ReplicationControlManager.electLeaders``), sans-I/O.

PREFERRED moves leadership to the first replica of the assignment when it is active and in the
ISR; UNCLEAN elects a leader for a partition that has none, from the ISR if any member may lead,
else from any active replica (the data only the old ISR held is lost: logged at WARN). Per
partition, as Kafka answers:

- ELECTION_NOT_NEEDED: PREFERRED and the preferred replica already leads; UNCLEAN and the
  partition has a leader. With ``topic_partitions`` null (every partition) these are left out of
  the response, as Kafka does;
- PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE: nothing would change;
- UNKNOWN_TOPIC_OR_PARTITION: no such topic or partition.

Also here: the unclean election of leaderless partitions that follows enabling
``unclean.leader.election.enable`` (Kafka 3.x+ elects them when the config changes), and the
question whether unclean election is enabled for a topic (topic config, else the cluster-wide
dynamic broker default, else the controller's static config).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from odradek.controller.broker_partition_changes import active_brokers
from odradek.controller.partition_change_builder import NO_LEADER, Election, PartitionChangeBuilder
from odradek.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from odradek.protocol.errors import Errors

log = logging.getLogger(__name__)

MetadataRecord = tuple[str, dict[str, Any]]

ELECTION_TYPE_PREFERRED = 0
ELECTION_TYPE_UNCLEAN = 1

# Kafka's default messages of the errors ElectLeaders answers (Errors.java).
ERROR_MESSAGES: Mapping[Errors, str] = {
    Errors.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    Errors.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
}

UNCLEAN_KEY = "unclean.leader.election.enable"


def unclean_enabled(image: MetadataImage, topic: str, static_default: bool) -> bool:
    """``unclean.leader.election.enable`` for ``topic``: its own config, else the cluster-wide
    dynamic default, else the static broker config."""
    for layer in (image.topic_config(topic), image.broker_config("")):
        value = layer.get(UNCLEAN_KEY)
        if value is not None:
            return value.strip().lower() == "true"
    return static_default


def _has_leader(p: PartitionRegistration) -> bool:
    return p.leader != NO_LEADER


def elect_leader(
    image: MetadataImage,
    topic: str,
    partition_id: int,
    election_type: int,
    *,
    acceptable: Callable[[int], bool],
) -> tuple[Errors, str | None, MetadataRecord | None]:
    """One partition's election: (error, message, record or None)."""
    t = image.topics_by_name.get(topic)
    if t is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}", None
    p = t.partitions.get(partition_id)
    if p is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{partition_id}", None
    preferred = election_type == ELECTION_TYPE_PREFERRED
    if (preferred and p.replicas and p.leader == p.replicas[0]) or (not preferred and _has_leader(p)):
        return Errors.ELECTION_NOT_NEEDED, ERROR_MESSAGES[Errors.ELECTION_NOT_NEEDED], None
    builder = PartitionChangeBuilder(p, t.topic_id, partition_id, acceptable).set_election(
        Election.PREFERRED if preferred else Election.UNCLEAN
    )
    record = builder.build()
    if record is None:
        err = Errors.PREFERRED_LEADER_NOT_AVAILABLE if preferred else Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
        return err, ERROR_MESSAGES[err], None
    outcome = builder.outcome
    if outcome is not None and outcome.unclean:
        log.warning(
            "UNCLEAN election of broker %d as leader of %s-%d (ISR was %s): records only the "
            "old ISR held are lost", outcome.leader, topic, partition_id, list(p.isr),
        )
    elif outcome is not None:
        log.info(
            "%s election of broker %d as leader of %s-%d (was %d)",
            "Preferred" if preferred else "Clean (UNCLEAN requested, an ISR member could lead)",
            outcome.leader, topic, partition_id, p.leader,
        )
    return Errors.NONE, None, ("PartitionChangeRecord", record)


def elect_leaders(
    image: MetadataImage, request: dict[str, Any]
) -> tuple[dict[str, Any], list[MetadataRecord]]:
    """ElectLeaders: the response body and the records. ``request``: the decoded request."""
    election_type = request.get("election_type", ELECTION_TYPE_PREFERRED)
    body: dict[str, Any] = {"throttle_time_ms": 0, "error_code": Errors.NONE, "replica_election_results": []}
    if election_type not in (ELECTION_TYPE_PREFERRED, ELECTION_TYPE_UNCLEAN):
        body["error_code"] = Errors.INVALID_REQUEST
        return body, []
    live = active_brokers(image)
    acceptable = live.__contains__
    records: list[MetadataRecord] = []
    results: list[dict[str, Any]] = []
    wanted = request.get("topic_partitions")
    if wanted is None:
        for name in sorted(image.topics_by_name):
            t = image.topics_by_name[name]
            parts = []
            for pid in sorted(t.partitions):
                err, msg, rec = elect_leader(image, name, pid, election_type, acceptable=acceptable)
                if rec is not None:
                    records.append(rec)
                if err != Errors.ELECTION_NOT_NEEDED:
                    parts.append({"partition_id": pid, "error_code": err, "error_message": msg})
            if parts:
                results.append({"topic": name, "partition_result": parts})
    else:
        for tp in wanted:
            parts = []
            for pid in tp["partitions"]:
                err, msg, rec = elect_leader(image, tp["topic"], pid, election_type, acceptable=acceptable)
                if rec is not None:
                    records.append(rec)
                parts.append({"partition_id": pid, "error_code": err, "error_message": msg})
            results.append({"topic": tp["topic"], "partition_result": parts})
    body["replica_election_results"] = results
    return body, records


def elect_unclean_leaderless(image: MetadataImage, topics: Iterable[TopicImage]) -> list[MetadataRecord]:
    """UNCLEAN elections of the leaderless partitions of ``topics`` (after unclean election was
    enabled for them): a clean choice from the ISR where possible."""
    acceptable = active_brokers(image).__contains__
    records: list[MetadataRecord] = []
    for t in topics:
        for pid in sorted(t.partitions):
            if _has_leader(t.partitions[pid]):
                continue
            err, _msg, rec = elect_leader(image, t.name, pid, ELECTION_TYPE_UNCLEAN, acceptable=acceptable)
            if rec is not None:
                records.append(rec)
            elif err == Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE:
                log.info("%s-%d stays without a leader: none of its replicas is live", t.name, pid)
    return records
