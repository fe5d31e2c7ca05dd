"""The broker's pieces built the same way in both metadata modes: KRaft's ``BrokerServer`` and
ZooKeeper mode's ``ZkBrokerServer`` (Kafka keeps the same split between ``BrokerServer`` and
``KafkaServer``, which build the same managers).

What differs between the modes stays with each server: where the metadata comes from (the Raft
log or the controller's UpdateMetadata), how the controller is reached, registration and the
broker epoch. What is here: binding the broker listeners, loading the partition logs, the
replica fetchers and the replica manager's replication settings, the coordinators' APIs with
KafkaApis and their cross-wiring (KIP-890 transactional produce verification included), the
background log tasks, and stopping the request side in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.log.errors import KafkaStorageError
from odradek.log.log_cleaner import CleanerConfig
from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.network.client import NetworkClient
from odradek.network.socket_server import SocketServer
from odradek.protocol.errors import Errors
from odradek.security.ssl_factory import inter_node_ssl_context
from odradek.server import config_defs
from odradek.server.add_partitions_to_txn_manager import (
    AddPartitionsToTxnManager,
    TransactionVerifier,
)
from odradek.server.group_apis import GroupApis
from odradek.server.kafka_apis import KafkaApis
from odradek.server.kafka_config import KafkaConfig
from odradek.server.producer_id_manager import ProducerIdManager
from odradek.server.replica_fetcher_thread import FetcherConfig
from odradek.server.replica_manager import ReplicaManager
from odradek.server.shared_server import bind_listener, network_limits, now_ms
from odradek.server.txn_apis import TxnApis, build_txn_apis
from odradek.server.txn_partition_apis import TxnPartitionApis

log = logging.getLogger("odradek.server.broker_server")  # the lines the broker always logged


async def bind_broker_listeners(
    cfg: KafkaConfig, servers: list[SocketServer], bound_ports: dict[str, int], skip: Iterable[str] = ()
) -> None:
    """Bind (not yet serve) every listener not named in ``skip``; one set of connection limits
    for them all. Bound before registration, so that port 0 can be advertised."""
    skipped = set(skip)
    limits = network_limits(cfg)
    for lst in cfg.listeners:
        if lst.name in skipped:
            continue
        server = await bind_listener(cfg, lst, limits)
        servers.append(server)
        bound_ports[lst.name] = server.port


def cleaner_config(cfg: KafkaConfig) -> CleanerConfig:
    return CleanerConfig(
        enable=cfg.log_cleaner_enable,
        backoff_ms=cfg.log_cleaner_backoff_ms,
        dedupe_buffer_size=int(cfg.get("log.cleaner.dedupe.buffer.size")),
    )


async def load_log_manager(cfg: KafkaConfig, log_config_for: Callable[[str], LogConfig]) -> LogManager:
    """The partition logs of every log dir, recovered where the last stop was unclean. If the
    load fails, what was loaded is closed without a clean-shutdown marker (the logs not yet
    loaded must still be recovered next time)."""
    lm = LogManager(cfg.log_dirs, config_defs.build_log_config(cfg, {}), now_ms, cleaner_config=cleaner_config(cfg))
    try:
        await asyncio.get_running_loop().run_in_executor(None, lambda: lm.load_logs(log_config_for))
    except BaseException:
        close_logs(lm)
        raise
    return lm


def close_logs(lm: LogManager) -> None:
    for lg in lm.all_logs().values():
        lg.close()


def fetcher_config(cfg: KafkaConfig, node_id: int) -> FetcherConfig:
    return FetcherConfig(
        node_id=node_id,
        fetch_max_bytes=cfg._int("replica.fetch.max.bytes"),
        fetch_response_max_bytes=cfg._int("replica.fetch.response.max.bytes"),
        fetch_wait_max_ms=cfg._int("replica.fetch.wait.max.ms"),
        fetch_min_bytes=cfg._int("replica.fetch.min.bytes"),
        fetch_backoff_ms=cfg._int("replica.fetch.backoff.ms"),
        socket_timeout_ms=cfg._int("replica.socket.timeout.ms"),
    )


def wire_replication(
    rm: ReplicaManager, cfg: KafkaConfig, fetchers: Any, alter_partition_manager: Any,
    broker_epoch: Callable[[], int],
) -> None:
    """The replica manager's follower fetchers, ISR-change channel and settings."""
    rm.replica_fetcher_manager = fetchers
    rm.alter_partition_manager = alter_partition_manager
    rm.inter_broker_listener = cfg.inter_broker_listener_name
    rm.broker_epoch = broker_epoch
    rm.replica_lag_time_max_ms = cfg.replica_lag_time_max_ms


@dataclass
class BrokerApis:
    """KafkaApis and the coordinators' APIs it dispatches to, wired together."""

    apis: KafkaApis
    group_apis: GroupApis
    txn_apis: TxnApis
    add_partitions_to_txn_manager: AddPartitionsToTxnManager


def build_broker_apis(
    *, node_id: int, cluster_id: str, cfg: KafkaConfig, metadata_cache: Any, rm: ReplicaManager, lm: LogManager,
    group_coordinator: GroupCoordinator, controller_channel: Any, producer_ids: ProducerIdManager,
    extensions: Iterable[Any] = (),
) -> BrokerApis:
    """The transaction coordinator (started: it loads the ``__transaction_state`` partitions
    this node leads), the group APIs, the partition side of transactions with KIP-890
    verification of transactional produce (and of TxnOffsetCommit's offsets partition), and
    KafkaApis over them and ``extensions``."""
    txn_apis = build_txn_apis(
        node_id=node_id, config=cfg, replica_manager=rm, metadata_cache=metadata_cache,
        controller_channel=controller_channel, producer_ids=producer_ids,
        offsets_partition_for=group_coordinator.partition_for,
    )
    txn_apis.startup()
    group_apis = GroupApis(group_coordinator)
    group_apis.find_transaction_coordinator = txn_apis.coordinator_for
    adder = AddPartitionsToTxnManager(
        metadata_cache, cfg.inter_broker_listener_name, cfg.request_timeout_ms,
        cfg._int("transaction.state.log.num.partitions"),
        client_factory=lambda source: NetworkClient(
            source.host, source.port, "odradek-add-partitions-to-txn", sasl_role="broker",
            ssl_context=inter_node_ssl_context(cfg, cfg.inter_broker_listener_name),
        ),
    )
    verifier = TransactionVerifier(adder, lambda: cfg._bool("transaction.partition.verification.enable"))
    group_coordinator.offset_manager.txn_verifier = verifier.verify
    apis = KafkaApis(
        producer_id_manager=producer_ids, node_id=node_id, cluster_id=cluster_id, config=cfg,
        metadata_cache=metadata_cache, replica_manager=rm, controller_channel=controller_channel, log_manager=lm,
        extensions=[group_apis, txn_apis, *extensions],
        txn_apis=TxnPartitionApis(rm, lambda: cfg.request_timeout_ms, verifier),
    )
    txn_apis.idempotent_init_producer_id = apis.handle_init_producer_id
    group_apis.transaction_version = txn_apis.transaction_version

    async def add_txn_partitions(tid: str, pid: int, epoch: int, tps: list[tuple[str, int]]) -> dict[tuple[str, int], Errors]:
        return await adder.verify(tid, pid, epoch, tps, add=True)

    group_apis.add_txn_partitions = add_txn_partitions
    return BrokerApis(apis, group_apis, txn_apis, adder)


async def run_periodically(name: str, interval_ms: int | Callable[[], int], fn: Callable[[], Any]) -> None:
    """Run ``fn`` in a worker thread every ``interval_ms`` (a callable is read before each wait,
    so a dynamic config change takes effect) until cancelled. A failure is logged
    once (a disk-full or I/O error as one line, anything else with its traceback), then quietly
    until a run succeeds again, which is logged once too: a checkpoint that cannot be written
    on a full disk does not log a traceback every few seconds."""
    loop = asyncio.get_running_loop()
    failing = 0  # consecutive failed runs
    interval = interval_ms if callable(interval_ms) else (lambda: interval_ms)
    while True:
        await asyncio.sleep(min(max(interval(), 1), 2**31) / 1000.0)
        try:
            await loop.run_in_executor(None, fn)
        except Exception as e:
            failing += 1
            if failing > 1:
                log.debug("Background task %s failed again: %s", name, e)
            elif isinstance(e, (OSError, KafkaStorageError)):
                log.error(
                    "Background task %s failed: %s; retrying every %d ms (logged again when it "
                    "succeeds)", name, e, interval_ms,
                )
            else:
                log.exception("Background task %s failed (logged once until it succeeds)", name)
            continue
        if failing:
            log.info("Background task %s succeeds again after %d failed runs", name, failing)
            failing = 0


def schedule(tasks: list[asyncio.Task[None]], name: str, interval_ms: int | Callable[[], int],
             fn: Callable[[], Any]) -> None:
    """Run ``fn`` in a worker thread every ``interval_ms`` (a callable: read before each wait);
    not at all for an interval of 0 or less, or "never" (2**62 and above)."""
    interval = interval_ms if callable(interval_ms) else (lambda: interval_ms)
    if not 0 < interval() < 2**62:
        return
    tasks.append(asyncio.get_running_loop().create_task(run_periodically(name, interval, fn), name=name))


def schedule_on_loop(tasks: list[asyncio.Task[None]], name: str, interval_ms: int, fn: Callable[[], Any]) -> None:
    """Run ``fn`` on the event loop every ``interval_ms`` (work on in-memory state)."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                fn()
            except Exception:
                log.exception("Task %s failed", name)

    tasks.append(asyncio.get_running_loop().create_task(loop(), name=name))


def schedule_log_tasks(tasks: list[asyncio.Task[None]], cfg: KafkaConfig, lm: LogManager, rm: ReplicaManager) -> None:
    """The background work of a broker: compaction (one pass at a time, off the request path),
    retention, flushing, the recovery-point and high-watermark checkpoints, producer-id
    expiration, and ISR expiration (every half ``replica.lag.time.max.ms``)."""
    if lm.cleaner.config.enable:
        schedule(tasks, "log-cleaner", lambda: lm.cleaner_backoff_ms, lm.clean_logs)
    schedule(tasks, "log-retention", cfg.log_retention_check_interval_ms, lm.cleanup_logs)
    schedule(tasks, "log-flusher", min(cfg.log_flush_scheduler_interval_ms, 1000), lm.flush_dirty_logs)
    schedule(tasks, "recovery-point-checkpoint", cfg.log_flush_offset_checkpoint_interval_ms, lm.checkpoint_logs)
    schedule(tasks, "producer-expiration", cfg._int("producer.id.expiration.check.interval.ms"),
             lm.remove_expired_producers)
    schedule_on_loop(tasks, "isr-expiration", max(1, cfg.replica_lag_time_max_ms // 2), rm.maybe_shrink_isrs)
    schedule(tasks, "high-watermark-checkpoint", cfg.replica_high_watermark_checkpoint_interval_ms,
             lm.checkpoint_high_watermarks)


async def stop_request_side(
    txn_apis: TxnApis | None, group_coordinator: GroupCoordinator | None,
    adder: AddPartitionsToTxnManager | None, fetchers: Any, alter_partition_manager: Any, rm: ReplicaManager | None,
) -> None:
    """After the listeners stopped taking requests: the coordinators, the transaction
    verifier's connections, the follower fetchers, the ISR-change channel, the replica manager."""
    if txn_apis is not None:
        await txn_apis.shutdown()
    if group_coordinator is not None:
        await group_coordinator.shutdown()
    if adder is not None:
        await adder.close()
    if fetchers is not None:
        await fetchers.shutdown()
    if alter_partition_manager is not None:
        await alter_partition_manager.close()
    if rm is not None:
        rm.shutdown()


async def cancel_tasks(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass
    tasks.clear()
