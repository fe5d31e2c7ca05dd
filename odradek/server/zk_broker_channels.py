"""A ZooKeeper-mode broker's own requests to the ZooKeeper controller: AlterPartition (the leader's
ISR changes) and ControlledShutdown.

**ISR changes.** Kafka 3.9's KafkaServer builds a ``DefaultAlterPartitionManager`` — the same one a
KRaft broker uses — whenever ``inter.broker.protocol.version`` supports AlterPartition (2.7-IV2 and
later), and the old ``ZkAlterPartitionManager`` (the leader writes the partition state znode itself
and announces it under ``/isr_change_notification``) only below that. Its controller is found by
``MetadataCacheControllerNodeProvider``: the controller id of the last UpdateMetadata, at its
endpoint on ``control.plane.listener.name`` or else the inter-broker listener. Odradek supports
only current protocol versions, so a ZooKeeper-mode broker reuses
:class:`~odradek.server.alter_partition_manager.AlterPartitionManager` unchanged over a
:class:`~odradek.server.node_to_controller_channel.NodeToControllerChannel` that follows the ZooKeeper
controller through the :class:`~odradek.metadata.zk_metadata_cache.ZkMetadataCache`
(:func:`zk_controller_channel`). The ZooKeeper controller checks the request's broker epoch
exactly (the czxid of ``/brokers/ids/<id>``), writes the partition state znode with a zkVersion
condition and answers the committed ISR with the new zkVersion as partition epoch.

**Controlled shutdown** (Kafka's KafkaServer.controlledShutdown): up to
``controlled.shutdown.max.retries`` attempts; each finds the controller in the metadata cache
(an attempt without one is spent), connects again when the controller changed or the last
attempt failed on the connection, and sends ControlledShutdown v3 (broker id and epoch). NONE
with no partitions remaining ends it successfully; an error or remaining partitions (leaders not
yet moved) are logged and retried after ``controlled.shutdown.retry.backoff.ms``. False when every
attempt failed: the broker then shuts down uncleanly, as Kafka does.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from odradek.metadata.zk_metadata_cache import ZkMetadataCache
from odradek.network.client import ConnectionClosed
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.server.alter_partition_manager import AlterPartitionManager
from odradek.server.kafka_config import KafkaConfig
from odradek.server.node_to_controller_channel import (
    CHANNEL_RECONNECT_BACKOFF_MS,
    ConnectionFactory,
    ControllerConnection,
    NetworkControllerConnection,
    NodeToControllerChannel,
)

log = logging.getLogger(__name__)

# Kafka uses ControlledShutdown v3 from inter.broker.protocol.version 2.4-IV1 on.
CONTROLLED_SHUTDOWN_VERSION = 3


def zk_controller_listener(config: KafkaConfig) -> str:
    """The listener the controller is reached on: ``control.plane.listener.name`` or the
    inter-broker listener."""
    name = config.get("control.plane.listener.name")
    return str(name).upper() if name else config.inter_broker_listener_name


def zk_controller_endpoint(cache: ZkMetadataCache, listener: str) -> Callable[[int], tuple[str, int] | None]:
    """Broker id -> its endpoint on ``listener`` while it is alive in the metadata cache."""

    def endpoint(broker_id: int) -> tuple[str, int] | None:
        node = cache.get_alive_broker_node(broker_id, listener)
        return None if node is None else (node.host, node.port)

    return endpoint


def zk_controller_channel(config: KafkaConfig, cache: ZkMetadataCache, name: str = "alter-partition") -> NodeToControllerChannel:
    """A channel to the ZooKeeper controller of the metadata cache (Kafka's
    MetadataCacheControllerNodeProvider)."""
    return NodeToControllerChannel.from_config(
        config, cache.get_controller_id, endpoints=zk_controller_endpoint(cache, zk_controller_listener(config)),
        name=name, listener_name=zk_controller_listener(config),
    )


def zk_alter_partition_manager(
    config: KafkaConfig, cache: ZkMetadataCache, broker_epoch: Callable[[], int],
    channel: NodeToControllerChannel | None = None,
) -> AlterPartitionManager:
    """The AlterPartitionManager of a ZooKeeper-mode broker (Kafka's DefaultAlterPartitionManager
    with the ZooKeeper controller as its destination)."""
    return AlterPartitionManager(
        channel if channel is not None else zk_controller_channel(config, cache),
        config.node_id, broker_epoch,
    )


@dataclass
class ControlledShutdownResult:
    succeeded: bool
    attempts: int
    # What each attempt ended with: an error name, "remaining=N", "no controller", "io: ...".
    outcomes: list[str] = field(default_factory=list)


async def controlled_shutdown(
    cache: ZkMetadataCache,
    broker_id: int,
    broker_epoch: Callable[[], int],
    listener: str,
    *,
    max_retries: int = 3,
    retry_backoff_ms: int = 5000,
    request_timeout_ms: int = 30000,
    connect: ConnectionFactory | None = None,
    client_id: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> ControlledShutdownResult:
    """Ask the ZooKeeper controller to move this broker's leaders away (see the module docstring)."""

    def network(node: int, host: str, port: int) -> ControllerConnection:
        return NetworkControllerConnection(host, port, client_id or str(broker_id),
                                           reconnect_backoff_ms=CHANNEL_RECONNECT_BACKOFF_MS,
                                           reconnect_backoff_max_ms=CHANNEL_RECONNECT_BACKOFF_MS,
                                           ssl_context=ssl_context)

    factory = connect if connect is not None else network
    result = ControlledShutdownResult(False, 0)
    remaining = max_retries
    prev: tuple[int, str, int] | None = None
    conn: ControllerConnection | None = None
    io_error = False
    try:
        while not result.succeeded and remaining > 0:
            remaining -= 1
            result.attempts += 1
            controller = cache.get_controller_id()
            node = None if controller is None else cache.get_alive_broker_node(controller, listener)
            if controller is None:
                log.info("No zk controller present in the metadata cache")
            elif node is None:
                log.info("Broker registration for controller %d is not available in the metadata cache", controller)
            else:
                target = (node.id, node.host, node.port)
                if io_error or target != prev or conn is None:
                    io_error = False
                    if conn is not None:
                        await conn.close()
                    prev, conn = target, factory(*target)
            if conn is None:
                result.outcomes.append("no controller")
            else:
                try:
                    resp = await conn.send(
                        g.CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN_VERSION,
                        {"broker_id": broker_id, "broker_epoch": broker_epoch()}, request_timeout_ms / 1000.0,
                    )
                    error = Errors(resp["error_code"])
                    left = resp.get("remaining_partitions") or []
                    if error != Errors.NONE:
                        log.info("Controlled shutdown request returned with error %s", error.name)
                        result.outcomes.append(error.name)
                    elif not left:
                        log.info("Controlled shutdown request returned successfully")
                        result.outcomes.append("NONE")
                        result.succeeded = True
                    else:
                        log.info("Controlled shutdown request returned with %d partitions remaining to move",
                                 len(left))
                        result.outcomes.append(f"remaining={len(left)}")
                except (ConnectionClosed, OSError, TimeoutError) as e:
                    io_error = True
                    log.warning("Error during controlled shutdown, possibly because leader movement took longer than "
                                "the configured controller.socket.timeout.ms and/or request.timeout.ms: %s", e)
                    result.outcomes.append(f"io: {e}")
            if not result.succeeded and remaining > 0:
                await asyncio.sleep(retry_backoff_ms / 1000.0)
                log.info("Retrying controlled shutdown (%d retries remaining)", remaining)
    finally:
        if conn is not None:
            await conn.close()
    if not result.succeeded:
        log.warning("Proceeding to do an unclean shutdown as all the controlled shutdown attempts failed")
    return result


async def controlled_shutdown_from_config(
    config: KafkaConfig, cache: ZkMetadataCache, broker_epoch: Callable[[], int],
    connect: ConnectionFactory | None = None,
) -> ControlledShutdownResult | None:
    """:func:`controlled_shutdown` with the broker's configs; None when
    ``controlled.shutdown.enable`` is false (nothing is asked)."""
    if not config.controlled_shutdown_enable:
        return None
    from odradek.security.ssl_factory import inter_node_ssl_context

    listener = config.inter_broker_listener_name
    return await controlled_shutdown(
        cache, config.node_id, broker_epoch, listener,
        max_retries=int(config.get("controlled.shutdown.max.retries")),
        retry_backoff_ms=int(config.get("controlled.shutdown.retry.backoff.ms")),
        request_timeout_ms=config.request_timeout_ms,
        connect=connect,
        ssl_context=inter_node_ssl_context(config, listener),
    )
