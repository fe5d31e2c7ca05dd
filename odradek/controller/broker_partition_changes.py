"""The partition changes that follow a broker's state: fenced, unfenced, in controlled shutdown.

Kafka's ``ReplicationControlManager.handleBrokerFenced`` / ``handleBrokerUnfenced`` /
``handleBrokerInControlledShutdown`` and the ``generateLeaderAndIsrUpdates`` they share, over the
controller's image: each returns the ``PartitionChangeRecord`` s that carry the change out, using
the selectors of :mod:`odradek.controller.election`. Pure functions, no I/O.

- fenced: the broker leaves every ISR (an ISR is never emptied: its last member stays, as Kafka
  does without KIP-966); a partition it led gets a leader from the rest of its ISR among the active
  brokers (offline election; unclean only where the topic has ``unclean.leader.election.enable``),
  or none (``leader=-1``).
- controlled shutdown: the same with the controlled-shutdown selector, so that the shutting-down
  broker hands its leaderships to the next live ISR member.
- unfenced: the partitions without a leader that the broker may lead get it as leader.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from odradek.controller.election import (
    NO_LEADER,
    ControlledShutdownLeaderSelector,
    OfflinePartitionLeaderSelector,
    PartitionLeaderSelector,
    PartitionLeadership,
)
from odradek.controller.replication_control import MetadataRecord
from odradek.metadata.image import MetadataImage, PartitionRegistration, TopicImage

log = logging.getLogger(__name__)


def active_brokers(image: MetadataImage) -> set[int]:
    """Brokers that may lead: unfenced and not in controlled shutdown."""
    return {b.broker_id for b in image.brokers.values() if not b.fenced and not b.in_controlled_shutdown}


def _partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    for name in sorted(image.topics_by_name):
        t = image.topics_by_name[name]
        for pid, p in sorted(t.partitions.items()):
            yield t, pid, p


def has_leaderships(image: MetadataImage, broker_id: int) -> bool:
    return any(p.leader == broker_id for _t, _pid, p in _partitions(image))


def _unclean_enabled(image: MetadataImage, topic: str, static_default: bool = False) -> bool:
    """The topic's ``unclean.leader.election.enable``, else the cluster-wide dynamic broker
    default, else the static broker config (``static_default``)."""
    for layer in (image.topic_config(topic), image.broker_config("")):
        value = layer.get("unclean.leader.election.enable")
        if value is not None:
            return value.strip().lower() == "true"
    return static_default


def _remove_broker(
    image: MetadataImage, broker_id: int, shutdown: bool, unclean_default: bool = False
) -> list[MetadataRecord]:
    """The broker leaves every ISR; the partitions it leads get another leader (or none)."""
    records: list[MetadataRecord] = []
    others = active_brokers(image) - {broker_id}
    for t, pid, p in _partitions(image):
        if broker_id not in p.isr and p.leader != broker_id:
            continue
        target_isr = [r for r in p.isr if r != broker_id] or list(p.isr)  # never empty the ISR
        record: dict[str, object] = {"partition_id": pid, "topic_id": t.topic_id}
        if p.leader == broker_id:
            selector: PartitionLeaderSelector
            if shutdown:
                selector = ControlledShutdownLeaderSelector(frozenset({broker_id}))
                live: set[int] = others | {broker_id}
            else:
                selector = OfflinePartitionLeaderSelector(
                    unclean_enabled=_unclean_enabled(image, t.name, unclean_default)
                )
                live = others
            chosen = selector.select(PartitionLeadership(p.replicas, target_isr, p.leader), live)
            record["leader"] = chosen.leader_or_none
            if chosen.leader is not None:
                target_isr = chosen.isr or target_isr
            if chosen.unclean:
                log.warning(
                    "Partition %s-%d: UNCLEAN election of broker %d after broker %d left (ISR was "
                    "%s): records only the old ISR held are lost",
                    t.name, pid, chosen.leader_or_none, broker_id, list(p.isr),
                )
        if target_isr != list(p.isr):
            record["isr"] = target_isr
        if len(record) > 2:
            records.append(("PartitionChangeRecord", record))
    return records


def handle_broker_fenced(image: MetadataImage, broker_id: int, unclean_default: bool = False) -> list[MetadataRecord]:
    """Partition changes for fencing ``broker_id`` (Kafka's ``handleBrokerFenced``), before the
    fencing record itself. ``unclean_default``: the static ``unclean.leader.election.enable``."""
    records = _remove_broker(image, broker_id, shutdown=False, unclean_default=unclean_default)
    if records:
        log.info("handleBrokerFenced: changing %d partition(s) of broker %d", len(records), broker_id)
    return records


def handle_broker_in_controlled_shutdown(image: MetadataImage, broker_id: int) -> list[MetadataRecord]:
    """Partition changes for the controlled shutdown of ``broker_id``: out of every ISR, and its
    leaderships to the next live ISR member (the controlled-shutdown selector)."""
    records = _remove_broker(image, broker_id, shutdown=True)
    if records:
        log.info("enterControlledShutdown[%d]: changing %d partition(s)", broker_id, len(records))
    return records


def handle_broker_unfenced(image: MetadataImage, broker_id: int, unclean_default: bool = False) -> list[MetadataRecord]:
    """Leaders for the partitions without one that ``broker_id``, being unfenced, may lead.

    Apache Kafka's controlled shutdown of its last broker leaves partitions leaderless
    (``leader=-1``, and with KIP-966 ``isr=[]`` with the broker kept in the eligible leader
    replicas); as Kafka's controller does when such a broker is unfenced, it takes over the ones
    where it is in the ISR (or ELR, or the last known ELR once both are empty). Never an unclean
    election, except for a partition whose only replica is this broker or whose topic enables
    unclean election (as Kafka's handleBrokerUnfenced, which elects UNCLEAN for such topics)."""
    records: list[MetadataRecord] = []
    for t, pid, p in _partitions(image):
        if p.leader != NO_LEADER or broker_id not in p.replicas:
            continue
        eligible = list(dict.fromkeys([*p.isr, *p.elr] if p.isr or p.elr else p.last_known_elr))
        unclean = p.replicas == (broker_id,) or _unclean_enabled(image, t.name, unclean_default)
        chosen = OfflinePartitionLeaderSelector(unclean_enabled=unclean).select(
            PartitionLeadership(p.replicas, eligible, p.leader), {broker_id}
        )
        if chosen.leader != broker_id:
            log.warning(
                "Partition %s-%d has no leader and broker %d is neither in its ISR %s nor its "
                "eligible leader replicas %s: left offline", t.name, pid, broker_id, p.isr, p.elr,
            )
            continue
        if chosen.unclean and p.replicas != (broker_id,):
            log.warning(
                "Partition %s-%d: UNCLEAN election of broker %d (ISR was %s): records only the old "
                "ISR held are lost", t.name, pid, broker_id, list(p.isr),
            )
        records.append((
            "PartitionChangeRecord",
            {
                "partition_id": pid,
                "topic_id": t.topic_id,
                "leader": broker_id,
                "isr": chosen.isr,
                "eligible_leader_replicas": [] if p.elr else None,
                "last_known_elr": [] if p.last_known_elr else None,
            },
        ))
    if records:
        log.info("Electing broker %d leader of %d partition(s) that had none", broker_id, len(records))
    return records
