"""LogManager: the broker's log directories, their checkpoints, recovery, retention, flushes and
log compaction.

Everything is synchronous; the broker calls these from a thread executor. Time comes from the
``clock_ms`` passed in (the broker's wall clock; a test's fake one), read at each call and
handed to the clock-free :class:`~odradek.log.log.Log` and
:class:`~odradek.log.log_cleaner.LogCleaner`. Periodic work the broker schedules (each from a
worker thread, never the event loop):

* :meth:`LogManager.cleanup_logs` every ``log.retention.check.interval.ms`` (retention);
* :meth:`LogManager.flush_dirty_logs` (``flush.ms``, flushing rolled segments);
* :meth:`LogManager.checkpoint_logs` / :meth:`LogManager.checkpoint_high_watermarks`;
* :meth:`LogManager.remove_expired_producers` every ``producer.id.expiration.check.interval.ms``;
* :meth:`LogManager.clean_logs` every ``log.cleaner.backoff.ms`` (15000) when
  ``log.cleaner.enable`` (true): compacts every log whose ``cleanup.policy`` contains
  ``compact`` and is dirty enough (see :mod:`odradek.log.log_cleaner`). A call may take long (it
  rewrites segments); run the next one ``backoff_ms`` after it returns, one at a time. Cleaner
  settings come in as ``LogManager(..., cleaner_config=CleanerConfig(enable, backoff_ms,
  dedupe_buffer_size))``. :meth:`delete_log` and :meth:`shutdown` stop a cleaning in progress
  and wait for it.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable

from odradek.log.checkpoint import OffsetCheckpointFile, fsync_dir
from odradek.log.errors import KafkaStorageError
from odradek.log.log import Log, parse_topic_partition_dir
from odradek.log.log_cleaner import CleanerConfig, LogCleaner
from odradek.log.log_config import LogConfig

logger = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
METADATA_TOPIC = "__cluster_metadata"
MAX_FILE_NAME_BYTES = 255  # NAME_MAX of the usual Linux file systems

TopicPartition = tuple[str, int]


class LogManager:
    def __init__(
        self,
        log_dirs: list[str],
        default_config: LogConfig,
        clock_ms: Callable[[], int],
        *,
        skip_topics: frozenset[str] = frozenset({METADATA_TOPIC}),
        cleaner_config: CleanerConfig | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_config = default_config
        self.skip_topics = skip_topics
        self._clock_ms = clock_ms
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, str] = {}
        # Deleted logs whose files are closed at the first retention pass after the deadline.
        self._retired: list[tuple[int, Log]] = []
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
        self.cleaner = LogCleaner(self.all_logs, cleaner_config)

    # ============================================================================ loading
    def load_logs(self, configs_for_topic: Callable[[str], LogConfig] | None = None) -> None:
        """Discover `<topic>-<partition>` directories and load (recovering if unclean) each log."""
        now = self._clock_ms()
        config_for = configs_for_topic or (lambda _t: self.default_config)
        for log_dir in self.log_dirs:
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
            clean = os.path.exists(marker)
            recovery_points = _read_checkpoint_quietly(
                os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT_FILE)
            )
            log_starts = _read_checkpoint_quietly(
                os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT_FILE)
            )
            high_watermarks = _read_checkpoint_quietly(
                os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE)
            )
            for name in sorted(os.listdir(log_dir)):
                path = os.path.join(log_dir, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):
                    # Left over from a deletion interrupted by a crash: finish it.
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                if name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
                    continue
                tp = parse_topic_partition_dir(name)
                if tp is None or tp[0] in self.skip_topics:
                    continue
                if tp in self._logs:
                    raise RuntimeError(
                        f"duplicate log directories for {tp[0]}-{tp[1]}: "
                        f"{self._log_dir_of[tp]} and {log_dir}"
                    )
                log = Log.load(
                    path,
                    config_for(tp[0]),
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=log_starts.get(tp, 0),
                    now_ms=now,
                    clean_shutdown=clean,
                    high_watermark=high_watermarks.get(tp),
                )
                with self._lock:
                    self._logs[tp] = log
                    self._log_dir_of[tp] = log_dir
            if clean:
                os.unlink(marker)
                fsync_dir(log_dir)

    # ============================================================================ lookup
    def get_log(self, topic: str, partition: int) -> Log | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def all_logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def get_or_create_log(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        topic_id: bytes | None = None,
    ) -> Log:
        with self._lock:
            tp = (topic, partition)
            log = self._logs.get(tp)
            if log is not None:
                if topic_id is not None and log.topic_id != topic_id:
                    log.assign_topic_id(topic_id)
                return log
            log_dir = self._next_log_dir()
            path = os.path.join(log_dir, f"{topic}-{partition}")
            log = Log.load(
                path,
                config or self.default_config,
                now_ms=self._clock_ms(),
                clean_shutdown=True,
                topic_id=topic_id,
            )
            fsync_dir(log_dir)
            self._logs[tp] = log
            self._log_dir_of[tp] = log_dir
            return log

    def _next_log_dir(self) -> str:
        counts = dict.fromkeys(self.log_dirs, 0)
        for d in self._log_dir_of.values():
            counts[d] = counts.get(d, 0) + 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def delete_log(self, topic: str, partition: int) -> None:
        """Rename the partition dir to `<topic>-<partition>.<uuid>-delete` (see
        :func:`delete_dir_name`), then remove it.

        The files are unlinked now but their descriptors are closed ``file.delete.delay.ms``
        later (at a retention pass), so reads already handed to the network stay valid.
        """
        now_ms = self._clock_ms()
        with self._lock:
            tp = (topic, partition)
            log = self._logs.pop(tp, None)
            log_dir = self._log_dir_of.pop(tp, None)
        if log is None or log_dir is None:
            return
        self.cleaner.abort_and_wait(log)
        try:
            self.cleaner.forget(tp, log_dir)
        except OSError as e:  # disk full: a stale entry is dropped at the next cleaner update
            logger.warning("could not update the cleaner checkpoint of %s: %s", log_dir, e)
        log.retire()
        with self._lock:
            self._retired.append((now_ms + log.config.file_delete_delay_ms, log))
        target = os.path.join(log_dir, delete_dir_name(topic, partition))
        try:
            log.rename_dir(target)
            fsync_dir(log_dir)
        except OSError as e:
            logger.warning("could not rename %s for deletion (%s); deleting it in place", log.dir, e)
        shutil.rmtree(log.dir, ignore_errors=True)
        try:
            self._checkpoint_dir(log_dir)
        except OSError as e:  # disk full: the periodic checkpoint writes it later
            logger.warning("could not rewrite the checkpoints of %s after deleting %s-%d: %s",
                           log_dir, topic, partition, e)

    # ======================================================================= checkpoints
    def checkpoint_logs(self) -> None:
        """Write recovery points, log start offsets and high watermarks of every directory."""
        for log_dir in self.log_dirs:
            self._checkpoint_dir(log_dir)

    def checkpoint_high_watermarks(self) -> None:
        for log_dir in self.log_dirs:
            logs = self._logs_in(log_dir)
            OffsetCheckpointFile(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE)).write(
                {tp: log.high_watermark for tp, log in logs.items()}
            )

    def _logs_in(self, log_dir: str) -> dict[TopicPartition, Log]:
        with self._lock:
            return {
                tp: log for tp, log in self._logs.items() if self._log_dir_of.get(tp) == log_dir
            }

    def _checkpoint_dir(self, log_dir: str) -> None:
        logs = self._logs_in(log_dir)
        OffsetCheckpointFile(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT_FILE)).write(
            {tp: log.recovery_point for tp, log in logs.items()}
        )
        OffsetCheckpointFile(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT_FILE)).write(
            {tp: log.log_start_offset for tp, log in logs.items()}
        )
        OffsetCheckpointFile(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE)).write(
            {tp: log.high_watermark for tp, log in logs.items()}
        )

    # ================================================================ periodic maintenance
    def cleanup_logs(self) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        now_ms = self._clock_ms()
        self._close_retired(now_ms)
        total = 0
        for tp, log in self.all_logs().items():
            if self.cleaner.is_cleaning(log):
                continue  # Kafka pauses retention of a log while it is cleaned: next pass
            try:
                total += log.delete_old_segments(now_ms)
            except OSError:
                logger.exception("retention failed for %s-%s", tp[0], tp[1])
        return total

    def remove_expired_producers(self) -> int:
        """Forget idle producers (``producer.id.expiration.ms``, no ongoing transaction) of
        every log; call every ``producer.id.expiration.check.interval.ms``."""
        now_ms = self._clock_ms()
        return sum(
            log.remove_expired_producers(now_ms)
            for log in self.all_logs().values()
            if not log.closed
        )

    def _close_retired(self, now_ms: int | None) -> None:
        """Close the files of deleted logs whose delay has passed (all of them if None)."""
        due: list[Log] = []
        keep: list[tuple[int, Log]] = []
        with self._lock:
            for deadline, log in self._retired:
                if now_ms is None or now_ms >= deadline:
                    due.append(log)
                else:
                    keep.append((deadline, log))
            self._retired = keep
        for log in due:
            log.close_files()

    def flush_dirty_logs(self) -> None:
        """Flush logs whose flush.ms has elapsed since their last flush, and logs with rolled
        segments not yet flushed (Kafka flushes a segment asynchronously when it rolls)."""
        now_ms = self._clock_ms()
        failure: Exception | None = None
        for log in self.all_logs().values():
            if log.closed:
                continue
            try:
                if now_ms - log.last_flush_ms >= log.config.flush_ms:
                    log.flush(now_ms=now_ms)
                elif log.recovery_point < log.active_segment.base_offset:
                    log.flush(log.active_segment.base_offset)
            except (OSError, KafkaStorageError) as e:  # the others are still flushed
                failure = failure or e
        if failure is not None:
            raise failure

    def clean_logs(self) -> int:
        """Compact every eligible compacted log once, dirtiest first (the log cleaner's work;
        call every ``cleaner_backoff_ms`` from a worker thread). Returns the logs cleaned."""
        if not self.cleaner.config.enable:
            return 0
        return self.cleaner.clean_logs(self._clock_ms())

    @property
    def cleaner_backoff_ms(self) -> int:
        return self.cleaner.config.backoff_ms

    def shutdown(self) -> None:
        """Stop the cleaner, flush and close every log, checkpoint, then write the
        clean-shutdown marker. If a flush or checkpoint fails (disk full, I/O error), no
        marker is written: the next start recovers the logs instead of trusting them."""
        self.cleaner.shutdown()
        logs = self.all_logs()
        failure: OSError | None = None
        for tp, log in logs.items():
            try:
                log.close()
            except OSError as e:
                logger.error("could not flush %s-%d at shutdown: %s", tp[0], tp[1], e)
                failure = failure or e
        self._close_retired(None)
        try:
            self.checkpoint_logs()
        except OSError as e:
            logger.error("could not write the checkpoints at shutdown: %s", e)
            failure = failure or e
        if failure is not None:
            logger.warning("not marking the shutdown clean: the next start recovers the logs")
            return
        for log_dir in self.log_dirs:
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
            with open(marker, "wb") as f:
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(log_dir)


def delete_dir_name(topic: str, partition: int) -> str:
    """`<topic>-<partition>.<uuid>-delete`, the topic cut short so that the whole name fits in
    255 bytes (Kafka's LocalLog.logDeleteDirName): a 249-character topic would not fit whole.

    Only the ``-delete`` suffix is ever parsed back (start-up removes such directories), so the
    shortened topic needs no decoding."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    room = MAX_FILE_NAME_BYTES - len(suffix.encode())
    prefix = topic.encode()[:room].decode("utf-8", "ignore")
    return prefix + suffix


def _read_checkpoint_quietly(path: str) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(path).read()
    except (ValueError, OSError):
        logger.warning("ignoring unreadable checkpoint file %s", path)
        return {}
