"""KafkaZkClient (Kafka 3.9's ``kafka.zk.KafkaZkClient``) over a real ZooKeeper session (kazoo).

Every method blocks (a ZooKeeper round trip); the controller calls them from its event thread.
Async callers use :meth:`KafkaZkClient.call_async`, which runs the call on the client's own
worker thread, never on the event loop.

Watches and session events are delivered to handlers (:class:`ZNodeChangeHandler`,
:class:`ZNodeChildChangeHandler`, :class:`StateChangeHandler`) on one dispatcher thread, in
order, so a handler may call back into the client (ZooKeeper watches are one-shot: as in Kafka, a
handler's path is watched again by the next ``exists``/``get_data``/``get_children`` of it).
Writes a controller makes are conditional on ``/controller_epoch``'s znode version, as Kafka's
are: a deposed controller's write fails with :class:`ControllerMovedError` and lands nowhere.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

from . import zk_data as z

log = logging.getLogger(__name__)
T = TypeVar("T")
TopicPartition = tuple[str, int]


class ZkClientError(Exception):
    """A ZooKeeper call failed (connection, timeout, unexpected error)."""


class ControllerMovedError(ZkClientError):
    """``/controller`` or ``/controller_epoch`` changed under us (Kafka's ControllerMovedException)."""


class BrokerIdRegisteredError(ZkClientError):
    """``/brokers/ids/<id>`` exists and belongs to another session (Kafka: NodeExistsException,
    "Error while creating ephemeral at ... node already exists and owner ... does not match")."""


class ZooKeeperClientTimeoutError(ZkClientError):
    """Not connected within ``zookeeper.connection.timeout.ms``."""


@dataclass(frozen=True)
class ZkConfig:
    """The ``zookeeper.*`` settings Kafka's broker reads (names and defaults of Kafka 3.9)."""

    connect: str  # zookeeper.connect: "host:port[,host:port...][/chroot]"
    session_timeout_ms: int = 18000  # zookeeper.session.timeout.ms
    connection_timeout_ms: int | None = None  # zookeeper.connection.timeout.ms (default: session)

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> ZkConfig:
        session = int(props.get("zookeeper.session.timeout.ms", "18000"))
        conn = props.get("zookeeper.connection.timeout.ms")
        return cls(props["zookeeper.connect"], session, int(conn) if conn else None)

    @property
    def hosts(self) -> str:
        slash = self.connect.find("/")
        return self.connect if slash < 0 else self.connect[:slash]

    @property
    def chroot(self) -> str | None:
        slash = self.connect.find("/")
        if slash < 0:
            return None
        path = self.connect[slash:].rstrip("/")
        return path or None


class ZNodeChangeHandler:
    """Creation / deletion / data change of one path (Kafka's ZNodeChangeHandler)."""

    path: str

    def handle_creation(self) -> None:  # noqa: B027 (optional hooks)
        pass

    def handle_deletion(self) -> None:  # noqa: B027
        pass

    def handle_data_change(self) -> None:  # noqa: B027
        pass


class ZNodeChildChangeHandler:
    path: str

    def handle_child_change(self) -> None:  # noqa: B027
        pass


class StateChangeHandler:
    """Session events (Kafka's StateChangeHandler): ``before_initializing_session`` when the
    session expired, ``after_initializing_session`` once a new session is established."""

    name: str = "state-change-handler"

    def before_initializing_session(self) -> None:  # noqa: B027
        pass

    def after_initializing_session(self) -> None:  # noqa: B027
        pass

    def on_auth_failure(self) -> None:  # noqa: B027
        pass


@dataclass
class UpdateLeaderAndIsrResult:
    """Kafka's UpdateLeaderAndIsrResult: per partition the new state (its ``zk_version`` the znode's
    new version) or the exception; partitions whose znode version was stale are to be retried."""

    finished: dict[TopicPartition, PartitionStateOrError] = field(default_factory=dict)
    partitions_to_retry: list[TopicPartition] = field(default_factory=list)


PartitionStateOrError = z.PartitionState | Exception


class KafkaZkClient:
    def __init__(self, config: ZkConfig, *, client_id: tuple[int, bytes] | None = None) -> None:
        self.config = config
        # Reconnect forever (Kafka's client does): after an outage longer than the session, a
        # new session follows the expiry, and the state handlers hear of both.
        self._kazoo = KazooClient(
            hosts=config.hosts + (config.chroot or ""), timeout=config.session_timeout_ms / 1000.0,
            client_id=client_id,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0))
        self._dispatcher = ThreadPoolExecutor(1, thread_name_prefix="zk-event")
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="zk-call")
        self._lock = threading.Lock()
        self._data_handlers: dict[str, ZNodeChangeHandler] = {}
        self._child_handlers: dict[str, ZNodeChildChangeHandler] = {}
        self._state_handlers: dict[str, StateChangeHandler] = {}
        self._session_lost = False
        self._closed = False
        self._kazoo.add_listener(self._on_state)

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> KafkaZkClient:
        """Connect (creating the chroot path first, as Kafka does) within
        ``zookeeper.connection.timeout.ms``."""
        timeout = (self.config.connection_timeout_ms or self.config.session_timeout_ms) / 1000.0
        if self.config.chroot:
            bare = KazooClient(hosts=self.config.hosts, timeout=self.config.session_timeout_ms / 1000.0)
            try:
                bare.start(timeout=timeout)
                bare.ensure_path(self.config.chroot)
            except KazooException as e:
                raise ZooKeeperClientTimeoutError(f"creating chroot {self.config.chroot}: {e!r}") from e
            except Exception as e:  # kazoo raises a bare timeout_exception
                raise ZooKeeperClientTimeoutError(
                    f"Timed out waiting for connection to {self.config.hosts}: {e}") from e
            finally:
                bare.stop()
                bare.close()
        try:
            self._kazoo.start(timeout=timeout)
        except Exception as e:
            self._kazoo.stop()
            raise ZooKeeperClientTimeoutError(
                f"Timed out waiting for connection to {self.config.connect}: {e}") from e
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._kazoo.stop()
            self._kazoo.close()
        finally:
            self._dispatcher.shutdown(wait=False, cancel_futures=True)
            self._worker.shutdown(wait=False, cancel_futures=True)

    @property
    def session_id(self) -> int:
        return int(self._kazoo.client_id[0]) if self._kazoo.client_id else 0

    @property
    def session_credentials(self) -> tuple[int, bytes] | None:
        return self._kazoo.client_id  # type: ignore[no-any-return]

    @property
    def connected(self) -> bool:
        return bool(self._kazoo.connected)

    async def call_async(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one of this client's blocking methods on its worker thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, lambda: fn(*args, **kwargs))

    # --- handlers ---------------------------------------------------------------------

    def register_znode_change_handler(self, handler: ZNodeChangeHandler) -> None:
        with self._lock:
            self._data_handlers[handler.path] = handler

    def unregister_znode_change_handler(self, path: str) -> None:
        with self._lock:
            self._data_handlers.pop(path, None)

    def register_znode_child_change_handler(self, handler: ZNodeChildChangeHandler) -> None:
        with self._lock:
            self._child_handlers[handler.path] = handler

    def unregister_znode_child_change_handler(self, path: str) -> None:
        with self._lock:
            self._child_handlers.pop(path, None)

    def register_state_change_handler(self, handler: StateChangeHandler) -> None:
        with self._lock:
            self._state_handlers[handler.name] = handler

    def unregister_state_change_handler(self, name: str) -> None:
        with self._lock:
            self._state_handlers.pop(name, None)

    def register_znode_change_handler_and_check_existence(self, handler: ZNodeChangeHandler) -> bool:
        self.register_znode_change_handler(handler)
        return self.exists(handler.path)

    def _dispatch(self, fn: Callable[[], None], what: str) -> None:
        def run() -> None:
            try:
                fn()
            except Exception:
                log.exception("ZooKeeper handler for %s failed", what)
        if not self._closed:
            try:
                self._dispatcher.submit(run)
            except RuntimeError:  # shut down meanwhile
                pass

    def _on_watch(self, event: WatchedEvent) -> None:
        path = event.path
        with self._lock:
            data = self._data_handlers.get(path)
            child = self._child_handlers.get(path)
        if event.type == EventType.CHILD and child is not None:
            self._dispatch(child.handle_child_change, path)
        elif data is not None:
            if event.type == EventType.CREATED:
                self._dispatch(data.handle_creation, path)
            elif event.type == EventType.DELETED:
                self._dispatch(data.handle_deletion, path)
            elif event.type == EventType.CHANGED:
                self._dispatch(data.handle_data_change, path)

    def _on_state(self, state: str) -> None:
        # kazoo calls this on its own thread and forbids blocking here: hand over.
        if self._closed:
            return
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("ZooKeeper session expired")
            for h in self._handlers():
                self._dispatch(h.before_initializing_session, h.name)
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            log.info("ZooKeeper session re-established (session 0x%x)", self.session_id)
            for h in self._handlers():
                self._dispatch(h.after_initializing_session, h.name)

    def _handlers(self) -> list[StateChangeHandler]:
        with self._lock:
            return list(self._state_handlers.values())

    def _watch_data(self, path: str) -> Callable[[WatchedEvent], None] | None:
        with self._lock:
            return self._on_watch if path in self._data_handlers else None

    def _watch_children(self, path: str) -> Callable[[WatchedEvent], None] | None:
        with self._lock:
            return self._on_watch if path in self._child_handlers else None

    # --- raw reads (watched when a handler is registered for the path) -----------------

    def exists(self, path: str) -> bool:
        return self.exists_stat(path) is not None

    def exists_stat(self, path: str) -> ZnodeStat | None:
        return self._call(lambda: self._kazoo.exists(path, watch=self._watch_data(path)), path)

    def get_data(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            data, stat = self._call(lambda: self._kazoo.get(path, watch=self._watch_data(path)), path)
        except NoNodeError:
            if self._watch_data(path) is not None:  # watch its creation, as Kafka's getData does
                self.exists_stat(path)
            return None
        return data, stat

    def get_children(self, path: str) -> list[str]:
        try:
            return sorted(self._call(
                lambda: self._kazoo.get_children(path, watch=self._watch_children(path)), path))
        except NoNodeError:
            return []

    def _call(self, fn: Callable[[], T], what: str) -> T:
        """Run one request, retried for as long as the connection is lost (Kafka's
        retryRequestsUntilConnected waits until connected, with no deadline: a ZooKeeper restart
        slower than the session timeout still answers in the same session) and across a session
        expiry (the request runs again in the new session). Closing the client ends the wait. A
        request that fails for any other reason raises ZkClientError (NoNode / NodeExists /
        BadVersion pass through)."""
        delay = 0.05
        while True:
            try:
                return fn()
            except (NoNodeError, NodeExistsError, BadVersionError):
                raise
            except (ConnectionLoss, OperationTimeoutError, SessionExpiredError) as e:
                if self._closed:
                    raise ZkClientError(f"ZooKeeper request on {what} failed: client closed "
                                        f"while the connection was lost ({e!r})") from e
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            except KazooException as e:
                raise ZkClientError(f"ZooKeeper request on {what} failed: {e!r}") from e

    def _commit(self, build: Callable[[Any], None], what: str) -> list[Any]:
        """Build and commit a multi (a fresh one per attempt: a kazoo transaction commits once)."""
        def attempt() -> list[Any]:
            tx = self._kazoo.transaction()
            build(tx)
            return list(tx.commit())
        return self._call(attempt, what)

    def create_recursive(self, path: str, data: bytes = b"", *, throw_if_exists: bool = True) -> None:
        try:
            self._call(lambda: self._kazoo.create(path, data, makepath=True), path)
        except NodeExistsError:
            if throw_if_exists:
                raise

    def make_sure_persistent_path_exists(self, path: str) -> None:
        self.create_recursive(path, b"", throw_if_exists=False)

    def create_top_level_paths(self) -> None:
        for path in z.PERSISTENT_PATHS:
            self.make_sure_persistent_path_exists(path)

    def _epoch_checked(self, ops: Callable[[Any], None], expected_epoch_zk_version: int,
                       what: str) -> list[Any]:
        """Commit ``ops`` in one multi; with an ``expected_epoch_zk_version`` other than
        MATCH_ANY_VERSION, a check of ``/controller_epoch``'s version goes first."""
        checked = expected_epoch_zk_version != z.MATCH_ANY_VERSION

        def build(tx: Any) -> None:
            if checked:
                tx.check(z.CONTROLLER_EPOCH_PATH, expected_epoch_zk_version)
            ops(tx)
        return self._epoch_results(self._commit(build, what), checked, expected_epoch_zk_version)

    def _epoch_checked_many(
        self, ops: Mapping[Any, Callable[[Any], None]], expected_epoch_zk_version: int,
    ) -> dict[Any, Any]:
        """One multi per key, all sent before any answer is awaited (Kafka pipelines its batches
        the same way); per key the op's result or exception. A lost connection retries that
        key's multi on its own; a failed epoch check raises ControllerMovedError."""
        checked = expected_epoch_zk_version != z.MATCH_ANY_VERSION
        pending = []
        for key, op in ops.items():
            tx = self._kazoo.transaction()
            if checked:
                tx.check(z.CONTROLLER_EPOCH_PATH, expected_epoch_zk_version)
            op(tx)
            pending.append((key, op, tx.commit_async()))
        out: dict[Any, Any] = {}
        for key, op, answer in pending:
            try:
                results = list(answer.get(timeout=self.config.session_timeout_ms / 1000.0))
            except (ConnectionLoss, OperationTimeoutError, KazooTimeoutError):
                try:
                    out[key] = self._epoch_checked(op, expected_epoch_zk_version, str(key))[0]
                except ZkClientError as e:
                    if isinstance(e, ControllerMovedError):
                        raise
                    out[key] = e
                continue
            except KazooException as e:
                out[key] = ZkClientError(f"ZooKeeper multi for {key} failed: {e!r}")
                continue
            out[key] = self._epoch_results(results, checked, expected_epoch_zk_version)[0]
        return out

    @staticmethod
    def _epoch_results(results: list[Any], checked: bool, expected_epoch_zk_version: int) -> list[Any]:
        if checked:
            head, results = results[0], results[1:]
            if isinstance(head, (BadVersionError, NoNodeError)):
                raise ControllerMovedError(
                    f"Controller epoch zkVersion check fails. Expected zkVersion = "
                    f"{expected_epoch_zk_version}")
        return list(results)

    # --- cluster id, brokers ------------------------------------------------------------

    def get_cluster_id(self) -> str | None:
        got = self.get_data(z.CLUSTER_ID_PATH)
        return z.decode_cluster_id(got[0]) if got else None

    def create_or_get_cluster_id(self, proposed: str) -> str:
        try:
            self.create_recursive(z.CLUSTER_ID_PATH, z.encode_cluster_id(proposed))
            return proposed
        except NodeExistsError:
            existing = self.get_cluster_id()
            if existing is None:
                raise ZkClientError("Failed to get cluster id from ZooKeeper") from None
            return existing

    def register_broker(self, info: z.BrokerInfo) -> int:
        """Create ``/brokers/ids/<id>`` (ephemeral); returns the broker epoch, its czxid.
        A znode left by this same session is accepted (Kafka's checkedEphemeralCreate)."""
        path = z.broker_id_path(info.broker_id)
        data = z.encode_broker(info)
        try:
            _, stat = self._call(lambda: self._kazoo.create(
                path, data, ephemeral=True, makepath=True, include_data=True), path)
        except NodeExistsError:
            stat = self.exists_stat(path)
            if stat is None or stat.ephemeralOwner != self.session_id:
                owner = f"0x{stat.ephemeralOwner:x}" if stat else "none"
                raise BrokerIdRegisteredError(
                    f"Error while creating ephemeral at {path}, node already exists and owner "
                    f"'{owner}' does not match current session '0x{self.session_id:x}'") from None
        log.info("Registered broker %d at path %s with czxid %d", info.broker_id, path, stat.czxid)
        return int(stat.czxid)

    def update_broker_info(self, info: z.BrokerInfo) -> None:
        path = z.broker_id_path(info.broker_id)
        self._call(lambda: self._kazoo.set(path, z.encode_broker(info)), path)

    def get_all_broker_and_epochs(self) -> dict[int, tuple[z.BrokerInfo, int]]:
        out: dict[int, tuple[z.BrokerInfo, int]] = {}
        for child in self.get_children(z.BROKER_IDS_PATH):
            if not child.isdigit():
                continue
            got = self.get_data(z.broker_id_path(int(child)))
            if got is None:
                continue
            try:
                out[int(child)] = (z.decode_broker(int(child), got[0]), int(got[1].czxid))
            except z.ZkDataError as e:
                log.error("Skipping broker %s: %s", child, e)
        return out

    def get_broker(self, broker_id: int) -> z.BrokerInfo | None:
        got = self.get_data(z.broker_id_path(broker_id))
        return z.decode_broker(broker_id, got[0]) if got else None

    def get_sorted_broker_list(self) -> list[int]:
        return sorted(int(c) for c in self.get_children(z.BROKER_IDS_PATH) if c.isdigit())

    # --- controller ------------------------------------------------------------------

    def get_controller_id(self) -> int | None:
        got = self.get_data(z.CONTROLLER_PATH)
        return z.decode_controller(got[0]).broker_id if got else None

    def get_controller_epoch(self) -> tuple[int, int] | None:
        """``(epoch, znode version)`` of ``/controller_epoch``."""
        got = self.get_data(z.CONTROLLER_EPOCH_PATH)
        return (z.decode_controller_epoch(got[0]), int(got[1].version)) if got else None

    def _maybe_create_controller_epoch(self) -> tuple[int, int]:
        try:
            self.create_recursive(z.CONTROLLER_EPOCH_PATH, z.encode_controller_epoch(0))
            return 0, 0
        except NodeExistsError:
            got = self.get_controller_epoch()
            if got is None:
                raise ZkClientError("/controller_epoch vanished after NodeExists") from None
            return got

    def register_controller_and_increment_controller_epoch(self, controller_id: int) -> tuple[int, int]:
        """Kafka's registerControllerAndIncrementControllerEpoch: one multi creating the ephemeral
        ``/controller`` and setting ``/controller_epoch`` to epoch + 1 on its read version.
        Returns ``(new epoch, new epoch znode version)``; raises ControllerMovedError when another
        broker is (or just became) the controller."""
        epoch, epoch_version = self._maybe_create_controller_epoch()
        new_epoch = epoch + 1
        data = z.encode_controller(controller_id, int(time.time() * 1000))

        def build(tx: Any) -> None:
            tx.create(z.CONTROLLER_PATH, data, ephemeral=True)
            tx.set_data(z.CONTROLLER_EPOCH_PATH, z.encode_controller_epoch(new_epoch), epoch_version)
        results = self._commit(build, z.CONTROLLER_PATH)
        create_res, set_res = results[0], results[1]
        if isinstance(create_res, NodeExistsError) or isinstance(set_res, BadVersionError):
            # Maybe our own earlier attempt succeeded before a connection loss (Kafka's check).
            got = self.get_data(z.CONTROLLER_PATH)
            cur = self.get_controller_epoch()
            if got is not None and cur is not None and got[1].ephemeralOwner == self.session_id \
                    and z.decode_controller(got[0]).broker_id == controller_id and cur[0] == new_epoch:
                return cur
            raise ControllerMovedError("Controller moved to another broker. Aborting controller startup procedure")
        if isinstance(create_res, Exception) or isinstance(set_res, Exception):
            raise ZkClientError(f"registering controller failed: {create_res!r} {set_res!r}")
        stat: ZnodeStat = set_res
        log.info("%d successfully elected as the controller. Epoch incremented to %d and epoch zk "
                 "version is now %d", controller_id, new_epoch, stat.version)
        return new_epoch, int(stat.version)

    def delete_controller(self, expected_epoch_zk_version: int) -> None:
        try:
            self._epoch_checked(lambda tx: tx.delete(z.CONTROLLER_PATH), expected_epoch_zk_version,
                                z.CONTROLLER_PATH)
        except NoNodeError:
            pass

    # --- topics and partition state -----------------------------------------------------

    def get_all_topics(self) -> set[str]:
        return set(self.get_children(z.TOPICS_PATH))

    def get_replica_assignment_and_topic_ids(self, topics: Iterable[str]) -> dict[str, z.TopicAssignment]:
        out: dict[str, z.TopicAssignment] = {}
        for topic in topics:
            got = self.get_data(z.topic_path(topic))
            if got is not None:
                out[topic] = z.decode_topic(topic, got[0])
        return out

    def create_topic_assignment(self, topic: str, topic_id: str | None,
                                assignment: Mapping[int, z.ReplicaAssignment]) -> None:
        self.create_recursive(z.topic_path(topic), z.encode_topic(topic_id, assignment))

    def set_topic_assignment(self, topic: str, topic_id: str | None,
                             assignment: Mapping[int, z.ReplicaAssignment],
                             expected_epoch_zk_version: int = z.MATCH_ANY_VERSION) -> None:
        data = z.encode_topic(topic_id, assignment)
        res = self._epoch_checked(lambda tx: tx.set_data(z.topic_path(topic), data, -1),
                                  expected_epoch_zk_version, topic)
        if isinstance(res[0], Exception):
            raise res[0]

    def get_all_partitions(self) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for topic in self.get_all_topics():
            out.update((topic, int(p)) for p in self.get_children(z.topic_partitions_path(topic))
                       if p.isdigit())
        return out

    def get_topic_partition_states(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, z.PartitionState]:
        out: dict[TopicPartition, z.PartitionState] = {}
        paths = {tp: z.partition_state_path(*tp) for tp in partitions}
        answers = {tp: self._kazoo.get_async(path, watch=self._watch_data(path))
                   for tp, path in paths.items()}  # pipelined, as Kafka's getDataRequests
        for tp, answer in answers.items():
            try:
                data, stat = answer.get(timeout=self.config.session_timeout_ms / 1000.0)
            except NoNodeError:
                continue
            except (ConnectionLoss, OperationTimeoutError, KazooTimeoutError):
                got = self.get_data(paths[tp])
                if got is None:
                    continue
                data, stat = got
            except KazooException as e:
                raise ZkClientError(f"reading {paths[tp]} failed: {e!r}") from e
            out[tp] = z.decode_partition_state(data, int(stat.version), paths[tp])
        return out

    def create_topic_partition_states(
        self, states: Mapping[TopicPartition, z.PartitionState], expected_epoch_zk_version: int,
    ) -> dict[TopicPartition, Exception | None]:
        """Create ``.../partitions/<p>`` and its ``state`` per partition (None: created)."""
        out: dict[TopicPartition, Exception | None] = {}
        for (topic, p), state in states.items():
            self.make_sure_persistent_path_exists(z.topic_partition_path(topic, p))
            path = z.partition_state_path(topic, p)
            data = z.encode_partition_state(state)
            res = self._epoch_checked(_op("create", path, data), expected_epoch_zk_version, path)
            out[(topic, p)] = res[0] if isinstance(res[0], Exception) else None
        return out

    def update_leader_and_isr(
        self, states: Mapping[TopicPartition, z.PartitionState], expected_epoch_zk_version: int,
    ) -> UpdateLeaderAndIsrResult:
        """Conditional set of each partition's state znode on its ``zk_version``; a stale version
        puts the partition in ``partitions_to_retry``; the new state's ``zk_version`` is the
        znode's new version. ``states`` carry the controller epoch to write."""
        result = UpdateLeaderAndIsrResult()
        ops = {tp: _op("set_data", z.partition_state_path(*tp), z.encode_partition_state(state),
                       state.zk_version) for tp, state in states.items()}
        for tp, res in self._epoch_checked_many(ops, expected_epoch_zk_version).items():
            state = states[tp]
            if isinstance(res, BadVersionError):
                result.partitions_to_retry.append(tp)
            elif isinstance(res, Exception):
                result.finished[tp] = res
            else:
                result.finished[tp] = z.PartitionState(
                    state.leader, state.leader_epoch, state.isr, state.controller_epoch,
                    state.leader_recovery_state, int(res.version))
        return result

    # --- admin znodes -----------------------------------------------------------------

    def create_delete_topic_path(self, topic: str) -> None:
        self.create_recursive(z.delete_topic_path(topic))

    def get_topic_deletions(self) -> list[str]:
        return self.get_children(z.DELETE_TOPICS_PATH)

    def delete_topic_deletions(self, topics: Iterable[str], expected_epoch_zk_version: int) -> None:
        for topic in topics:
            self._delete_checked(z.delete_topic_path(topic), expected_epoch_zk_version)

    def delete_topic_znode(self, topic: str, expected_epoch_zk_version: int) -> None:
        """Delete ``/brokers/topics/<t>`` recursively (children first, each epoch-checked)."""
        self._delete_recursive(z.topic_path(topic), expected_epoch_zk_version)

    def _delete_recursive(self, path: str, expected_epoch_zk_version: int) -> None:
        for child in self.get_children(path):
            self._delete_recursive(f"{path}/{child}", expected_epoch_zk_version)
        self._delete_checked(path, expected_epoch_zk_version)

    def _delete_checked(self, path: str, expected_epoch_zk_version: int) -> None:
        res = self._epoch_checked(lambda tx: tx.delete(path), expected_epoch_zk_version, path)
        if isinstance(res[0], Exception) and not isinstance(res[0], (NoNodeError, RolledBackError)):
            raise res[0]

    def create_partition_reassignment(self, reassignment: Iterable[tuple[str, int, list[int]]]) -> None:
        self.create_recursive(z.REASSIGN_PARTITIONS_PATH, z.encode_reassign_partitions(reassignment))

    def get_partition_reassignment(self) -> dict[TopicPartition, list[int]]:
        got = self.get_data(z.REASSIGN_PARTITIONS_PATH)
        return z.decode_reassign_partitions(got[0]) if got else {}

    def delete_partition_reassignment(self, expected_epoch_zk_version: int) -> None:
        self._delete_checked(z.REASSIGN_PARTITIONS_PATH, expected_epoch_zk_version)

    def create_preferred_replica_election(self, partitions: Iterable[TopicPartition]) -> None:
        self.create_recursive(z.PREFERRED_REPLICA_ELECTION_PATH,
                              z.encode_preferred_replica_election(partitions))

    def get_preferred_replica_election(self) -> set[TopicPartition]:
        got = self.get_data(z.PREFERRED_REPLICA_ELECTION_PATH)
        return z.decode_preferred_replica_election(got[0]) if got else set()

    def delete_preferred_replica_election(self, expected_epoch_zk_version: int) -> None:
        self._delete_checked(z.PREFERRED_REPLICA_ELECTION_PATH, expected_epoch_zk_version)

    # --- notifications ----------------------------------------------------------------

    def propagate_isr_changes(self, partitions: Iterable[TopicPartition]) -> str:
        """Create a sequential ``/isr_change_notification/isr_change_<n>``; returns its name."""
        path = f"{z.ISR_CHANGE_NOTIFICATION_PATH}/{z.ISR_CHANGE_PREFIX}"
        created = self._call(lambda: self._kazoo.create(
            path, z.encode_isr_change_notification(partitions), sequence=True, makepath=True), path)
        return str(created).rsplit("/", 1)[1]

    def get_all_isr_change_notifications(self) -> list[str]:
        """Sequence numbers of the pending notifications, in order."""
        return [z.sequence_number(c, z.ISR_CHANGE_PREFIX)
                for c in self.get_children(z.ISR_CHANGE_NOTIFICATION_PATH)]

    def get_partitions_from_isr_change_notifications(self, seqs: Iterable[str]) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for seq in seqs:
            got = self.get_data(f"{z.ISR_CHANGE_NOTIFICATION_PATH}/{z.ISR_CHANGE_PREFIX}{seq}")
            if got is None:
                continue
            try:
                out |= z.decode_isr_change_notification(got[0])
            except z.ZkDataError as e:
                log.error("Ignoring isr change notification %s: %s", seq, e)
        return out

    def delete_isr_change_notifications(self, seqs: Iterable[str], expected_epoch_zk_version: int) -> None:
        for seq in seqs:
            self._delete_checked(f"{z.ISR_CHANGE_NOTIFICATION_PATH}/{z.ISR_CHANGE_PREFIX}{seq}",
                                 expected_epoch_zk_version)

    def propagate_log_dir_event(self, broker_id: int) -> str:
        path = f"{z.LOG_DIR_EVENT_NOTIFICATION_PATH}/{z.LOG_DIR_EVENT_PREFIX}"
        created = self._call(lambda: self._kazoo.create(
            path, z.encode_log_dir_event_notification(broker_id), sequence=True, makepath=True), path)
        return str(created).rsplit("/", 1)[1]

    def get_all_log_dir_event_notifications(self) -> list[str]:
        return [z.sequence_number(c, z.LOG_DIR_EVENT_PREFIX)
                for c in self.get_children(z.LOG_DIR_EVENT_NOTIFICATION_PATH)]

    def get_broker_ids_from_log_dir_events(self, seqs: Iterable[str]) -> list[int]:
        out = []
        for seq in seqs:
            got = self.get_data(f"{z.LOG_DIR_EVENT_NOTIFICATION_PATH}/{z.LOG_DIR_EVENT_PREFIX}{seq}")
            if got is not None:
                out.append(z.decode_log_dir_event_notification(got[0]))
        return out

    def delete_log_dir_event_notifications(self, seqs: Iterable[str], expected_epoch_zk_version: int) -> None:
        for seq in seqs:
            self._delete_checked(f"{z.LOG_DIR_EVENT_NOTIFICATION_PATH}/{z.LOG_DIR_EVENT_PREFIX}{seq}",
                                 expected_epoch_zk_version)

    # --- configs and features -------------------------------------------------------------

    def get_entity_configs(self, entity_type: str, entity_name: str) -> dict[str, str]:
        path = z.config_entity_path(entity_type, entity_name)
        got = self.get_data(path)
        return z.decode_config_entity(got[0], path) if got else {}

    def set_or_create_entity_configs(self, entity_type: str, entity_name: str,
                                     config: Mapping[str, str]) -> None:
        path = z.config_entity_path(entity_type, entity_name)
        data = z.encode_config_entity(config)
        try:
            self._call(lambda: self._kazoo.set(path, data), path)
        except NoNodeError:
            self.create_recursive(path, data)

    def delete_path(self, path: str) -> None:
        """Delete one znode (no children), fine when it is already gone."""
        try:
            self._call(lambda: self._kazoo.delete(path), path)
        except NoNodeError:
            pass

    def create_config_change_notification(self, entity_path: str) -> str:
        """``/config/changes/config_change_<n>`` announcing a change of ``topics/<t>`` etc."""
        path = f"{z.CONFIG_CHANGES_PATH}/{z.CONFIG_CHANGE_PREFIX}"
        created = self._call(lambda: self._kazoo.create(
            path, z.encode_config_change_notification(entity_path), sequence=True, makepath=True), path)
        return str(created).rsplit("/", 1)[1]

    def get_feature(self) -> tuple[z.FeatureZNodeData, int] | None:
        got = self.get_data(z.FEATURE_PATH)
        return (z.decode_feature(got[0]), int(got[1].version)) if got else None

    def create_feature(self, node: z.FeatureZNodeData) -> None:
        self.create_recursive(z.FEATURE_PATH, z.encode_feature(node))


def _op(name: str, *args: Any) -> Callable[[Any], None]:
    """One operation of a kazoo transaction, bound now (not in a loop's late-binding lambda)."""
    def add(tx: Any) -> None:
        getattr(tx, name)(*args)
    return add
