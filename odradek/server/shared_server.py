"""SharedServer: what the controller and broker roles of one process share (Kafka's
``SharedServer``): the locks on the data directories, the ``__cluster_metadata`` log and the
Raft client that commits it, and how a role's listener is bound.

Start-up is in three steps so that nothing is written before the log proved readable:
:meth:`SharedServer.open_metadata_log` opens the log and reads the snapshot and quorum-state
(writes nothing), the roles register their Raft listeners (which replays the log into them), and
:meth:`SharedServer.start_raft` starts the Raft driver (a quorum of one elects itself there, a
new epoch in quorum-state) and the network channel to the other voters.
:meth:`SharedServer.start_snapshots` then puts Kafka's SnapshotGenerator on the broker's
metadata loader (a controller-only process gets a loader of its own for it, as Kafka's
SharedServer has one in every role); snapshots are written and old ones cleaned in the default
executor, never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time

from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.metadata.delta import MetadataReplayError
from odradek.metadata.image import MetadataImage
from odradek.metadata.image_writer import write_image
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE, MetadataRecord
from odradek.metadata.snapshot_generator import SnapshotGenerator
from odradek.metrics.prometheus import PrometheusEndpoint, prometheus_endpoint
from odradek.network.limits import ConnectionQuotas, RequestMemoryPool
from odradek.network.request_channel import CloseConnection, ConnectionInfo
from odradek.network.socket_server import SocketServer
from odradek.raft.dynamic_quorum import DynamicQuorum
from odradek.raft.kafka_network_channel import KafkaNetworkChannel
from odradek.raft.kafka_raft_client import KafkaRaftClient, KafkaRaftClientDriver
from odradek.raft.metadata_log import TOPIC as METADATA_TOPIC
from odradek.raft.metadata_log import MetadataLog, UnreadableMetadataRecord
from odradek.raft.quorum import QuorumConfig
from odradek.raft.quorum_state import FILE_NAME as QUORUM_STATE_FILE
from odradek.raft.quorum_state import FileQuorumStateStore, QuorumStateError
from odradek.raft.raft_client import Listener
from odradek.raft.record_batches import BatchCodec
from odradek.raft.snapshot import SnapshotId
from odradek.security.ssl_factory import SslConfigError, inter_node_ssl_context, listener_tls
from odradek.server.dir_lock import DirLock, StartupError, lock_dirs
from odradek.server.dynamic_quorum_config import quorum_bootstrap
from odradek.server.kafka_config import KafkaConfig
from odradek.server.kafka_config import Listener as ListenerConfig

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


def network_limits(cfg: KafkaConfig) -> tuple[RequestMemoryPool | None, ConnectionQuotas]:
    """queued.max.request.bytes (<= 0: no pool, as in Kafka) and the connection quotas: one set
    per role (Kafka's controller has its own socket server)."""
    pool_bytes = cfg.queued_max_request_bytes
    quotas = ConnectionQuotas(
        cfg.max_connections, cfg.max_connections_per_ip, cfg.max_connections_per_ip_overrides
    )
    return (RequestMemoryPool(pool_bytes) if pool_bytes > 0 else None), quotas


class _NotServing:
    """The handler of a listener bound before its role can answer (never called: a bound
    listener accepts nothing until it is given its real handler and started)."""

    def handle(self, conn: ConnectionInfo, frame: bytearray) -> None:
        raise CloseConnection("the node is not serving yet")


_NOT_SERVING = _NotServing()


async def bind_listener(
    cfg: KafkaConfig, lst: ListenerConfig, limits: tuple[RequestMemoryPool | None, ConnectionQuotas]
) -> SocketServer:
    """Bind (not yet serve) one listener; a port that cannot be bound raises
    StartupError("cannot listen on host:port (listener NAME): reason")."""
    pool, quotas = limits
    try:
        tls = listener_tls(cfg, lst.name, lst.security_protocol)
    except SslConfigError as e:
        raise StartupError(f"listener {lst.name} ({lst.security_protocol}): {e}") from e
    server = SocketServer(
        lst.host,
        lst.port,
        _NOT_SERVING,
        listener_name=lst.name,
        max_request_bytes=cfg.socket_request_max_bytes,
        memory_pool=pool,
        quotas=quotas,
        connections_max_idle_ms=cfg.connections_max_idle_ms,
        security_protocol=lst.security_protocol,
        tls=tls,
    )
    try:
        await server.bind()
    except OSError as e:
        reason = os.strerror(e.errno) if e.errno else str(e)
        raise StartupError(
            f"cannot listen on {lst.host or '0.0.0.0'}:{lst.port} "
            f"(listener {lst.name}): {reason[:1].lower()}{reason[1:]}"
        ) from e
    return server


def _unreadable(e: UnreadableMetadataRecord | MetadataReplayError) -> StartupError:
    return StartupError(
        f"cannot take over the metadata log {e.source}: the record at offset {e.offset} "
        f"cannot be applied ({e.reason}); nothing was changed, start Apache Kafka on "
        "these directories again or remove what Odradek does not support first"
    )


class SharedServer:
    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self._dir_locks: list[DirLock] = []
        self._metadata_raw_log: Log | None = None
        self.raft_client: KafkaRaftClient[MetadataRecord] | None = None
        self._raft_driver: KafkaRaftClientDriver | None = None
        self.metadata_log: MetadataLog[MetadataRecord] | None = None
        self.snapshot_generator: SnapshotGenerator | None = None
        self._snapshot_loader: MetadataLoader | None = None
        self._snapshot_work: set[asyncio.Future[None]] = set()
        self._snapshot_cleaner: asyncio.Task[None] | None = None
        self._voter_endpoints: dict[int, tuple[str, int]] = {}
        self.dynamic_quorum: DynamicQuorum | None = None
        # The process's /metrics endpoint (metrics.prometheus.listener), shared by its roles.
        self.metrics: PrometheusEndpoint | None = prometheus_endpoint(config)

    def lock_dirs(self) -> None:
        """Lock every data directory (log.dirs and metadata.log.dir) before anything in them
        is read or written."""
        cfg = self.config
        self._dir_locks = lock_dirs([*cfg.log_dirs, cfg.metadata_log_dir])

    def release_locks(self) -> None:
        for lock in self._dir_locks:
            lock.release()
        self._dir_locks = []

    async def open_metadata_log(self, cluster_id: str = "") -> KafkaRaftClient[MetadataRecord]:
        """Open ``__cluster_metadata`` and the Raft client on it (the voters of
        ``controller.quorum.voters``, the ``controller.quorum.*`` timeouts); reads, writes
        nothing."""
        loop = asyncio.get_running_loop()
        meta_dir = os.path.join(os.path.abspath(self.config.metadata_log_dir), f"{METADATA_TOPIC}-0")
        # Kafka's KafkaRaftClient.MAX_BATCH_SIZE_BYTES: the largest batch Raft writes or fetches.
        meta_config = LogConfig(
            segment_bytes=int(self.config.get("metadata.log.segment.bytes")),
            segment_ms=int(self.config.get("metadata.log.segment.ms")),
            retention_ms=-1,
            retention_bytes=-1,
            max_message_bytes=8 * 1024 * 1024,
        )
        self._metadata_raw_log = await loop.run_in_executor(
            None, lambda: Log.load(meta_dir, meta_config, now_ms=now_ms(), clean_shutdown=False)
        )
        self.metadata_log = MetadataLog(self._metadata_raw_log, METADATA_RECORD_SERDE)
        cfg = self.config
        quorum = quorum_bootstrap(cfg, meta_dir)
        quorum_config = QuorumConfig.from_props(
            {name: cfg.get(name) for name in QuorumConfig.CONFIG_NAMES}
        )
        client: KafkaRaftClient[MetadataRecord] = KafkaRaftClient(
            self.node_id,
            self.metadata_log,
            FileQuorumStateStore(os.path.join(meta_dir, QUORUM_STATE_FILE)),
            now_ms,
            voters=frozenset(quorum.static_endpoints),
            cluster_id=cluster_id,
            config=quorum_config,
            dynamic=quorum.dynamic,
            bootstrap_ids=quorum.bootstrap_ids,
        )
        self.dynamic_quorum = quorum.dynamic
        self._voter_endpoints = {**quorum.static_endpoints, **quorum.bootstrap_endpoints}
        try:
            await loop.run_in_executor(None, client.initialize)
        except UnreadableMetadataRecord as e:
            raise _unreadable(e) from e
        except QuorumStateError as e:
            raise StartupError(str(e)) from e
        self.raft_client = client
        return client

    def register(self, listener: Listener[MetadataRecord]) -> None:
        """Register a role's Raft listener, which replays the committed log into it now."""
        assert self.raft_client is not None
        try:
            self.raft_client.register(listener)
        except (UnreadableMetadataRecord, MetadataReplayError) as e:
            raise _unreadable(e) from e

    def _controller_ssl_context(self) -> ssl.SSLContext | None:
        """TLS for Raft to the voters if their listener (the first of controller.listener.names)
        is an SSL one."""
        names = self.config.controller_listener_names
        try:
            return inter_node_ssl_context(self.config, names[0]) if names else None
        except SslConfigError as e:
            raise StartupError(f"controller listener {names[0]} (client side): {e}") from e

    async def start_raft(self) -> KafkaRaftClient[MetadataRecord]:
        """Start the Raft driver and its network channel to the other voters. A quorum of one
        elects itself at once: its new epoch is persisted to quorum-state and the log it holds
        committed and handed to the listeners before this returns."""
        assert self.raft_client is not None
        client = self.raft_client
        others = {n: e for n, e in self._voter_endpoints.items() if n != self.node_id}
        channel = None
        voters = client.core.voters
        assert self.dynamic_quorum is not None
        if others or voters != {self.node_id} or self.dynamic_quorum.kraft_version > 0:
            channel = KafkaNetworkChannel(
                self.node_id,
                self._voter_endpoints,
                BatchCodec(METADATA_RECORD_SERDE),
                request_timeout_ms=client.config.request_timeout_ms,
                resolve=self.dynamic_quorum.endpoint,
                ssl_context=self._controller_ssl_context(),
            )
        driver = KafkaRaftClientDriver(client, channel)
        if voters == {self.node_id}:
            try:
                await driver.process()
            except (UnreadableMetadataRecord, MetadataReplayError) as e:
                raise _unreadable(e) from e
            if client.failed:
                raise StartupError(f"cannot write the metadata log in {self.config.metadata_log_dir}")
        self._raft_driver = driver
        driver.start()
        return client

    # -- snapshots ------------------------------------------------------------------------------

    def start_snapshots(self, loader: MetadataLoader | None) -> None:
        """Generate snapshots from ``loader``'s images (the broker's; None in a controller-only
        process: one is made here) and clean old ones every ``CLEAN_INTERVAL_MS`` as Kafka's
        Raft client does (and after each snapshot). On the event loop, after :meth:`start_raft`."""
        cfg = self.config
        if loader is None:
            loader = self._snapshot_loader = MetadataLoader(KRaftMetadataCache())
            self.register(loader)
        generator = SnapshotGenerator(
            self._emit_snapshot,
            now_ms,
            int(cfg.get("metadata.log.max.record.bytes.between.snapshots")),
            int(cfg.get("metadata.log.max.snapshot.interval.ms")),
        )
        self.snapshot_generator = generator
        loader.manifest_publishers.append(generator.publish)
        self._snapshot_cleaner = asyncio.get_running_loop().create_task(
            self._clean_snapshots_periodically(), name="metadata-snapshot-cleaner"
        )

    CLEAN_INTERVAL_MS = 60_000  # Kafka's KafkaRaftClient snapshot cleaning timer

    def _emit_snapshot(self, image: MetadataImage, epoch: int, last_contained_log_time_ms: int) -> None:
        loop = asyncio.get_running_loop()
        control = None
        if self.dynamic_quorum is not None and self.dynamic_quorum.kraft_version > 0:
            control = self.dynamic_quorum.snapshot_control_records(image.offset + 1)
        fut = loop.run_in_executor(None, self._write_snapshot, image, epoch, last_contained_log_time_ms, control)
        self._snapshot_work.add(fut)

        def done(f: asyncio.Future[None]) -> None:
            self._snapshot_work.discard(f)
            if self.snapshot_generator is not None:
                self.snapshot_generator.emit_finished()
            if self.raft_client is not None:
                self.raft_client.refresh_snapshots()  # FetchSnapshot can serve it
            if not f.cancelled() and f.exception() is not None:
                log.error("Writing the metadata snapshot at offset %d failed: %s", image.offset + 1, f.exception())

        fut.add_done_callback(done)

    def _write_snapshot(
        self,
        image: MetadataImage,
        epoch: int,
        last_contained_log_time_ms: int,
        control: list[tuple[int, dict[str, object]]] | None = None,
    ) -> None:
        """Blocking: in the executor. ``control``: the KRaftVersion and Voters records at the
        snapshot's end offset (a dynamic quorum), else those of the previous snapshot."""
        mlog = self.metadata_log
        if mlog is None:
            return
        mlog.create_snapshot(
            SnapshotId(image.offset + 1, epoch), write_image(image), now_ms(), last_contained_log_time_ms, control
        )
        self._clean(mlog)

    def _clean(self, mlog: MetadataLog[MetadataRecord]) -> None:
        mlog.maybe_clean(
            now_ms(),
            int(self.config.get("metadata.max.retention.ms")),
            int(self.config.get("metadata.max.retention.bytes")),
        )

    async def _clean_snapshots_periodically(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.CLEAN_INTERVAL_MS / 1000)
            mlog = self.metadata_log
            if mlog is None:
                return
            fut = loop.run_in_executor(None, self._clean, mlog)
            self._snapshot_work.add(fut)
            try:
                await fut
            except Exception:
                log.exception("Cleaning old metadata snapshots failed")
            finally:
                self._snapshot_work.discard(fut)
            if self.raft_client is not None:
                self.raft_client.refresh_snapshots()  # the log may start later now

    async def _stop_snapshots(self) -> None:
        if self._snapshot_cleaner is not None:
            self._snapshot_cleaner.cancel()
            try:
                await self._snapshot_cleaner
            except asyncio.CancelledError:
                pass
            self._snapshot_cleaner = None
        if self.snapshot_generator is not None:
            self.snapshot_generator.disable("shutting down")
        if self._snapshot_work:
            await asyncio.gather(*self._snapshot_work, return_exceptions=True)
        if self._snapshot_loader is not None and self.raft_client is not None:
            self.raft_client.unregister(self._snapshot_loader)
            self._snapshot_loader = None

    async def shutdown(self) -> None:
        await self._stop_snapshots()
        if self._raft_driver is not None:
            await self._raft_driver.shutdown()
            self._raft_driver = None
        elif self.raft_client is not None:
            self.raft_client.begin_shutdown()
        if self._metadata_raw_log is not None:
            raw = self._metadata_raw_log
            await asyncio.get_running_loop().run_in_executor(None, raw.flush)
            raw.close()
            self._metadata_raw_log = None
            self.metadata_log = None
        self.raft_client = None
        self.release_locks()
