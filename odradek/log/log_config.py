"""Topic-level log configuration (Kafka's LogConfig): typed view of a topic's effective configs.

A topic's effective config is the broker defaults (``log.*`` keys mapped to topic keys) overlaid with
the topic's own overrides. Validation and the key table live in :mod:`odradek.server.config_defs`;
this module only holds the typed, immutable result that the log reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.records.batch import COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_ZSTD
from odradek.records.compression import (
    GZIP_LEVEL_DEFAULT,
    LZ4_LEVEL_DEFAULT,
    ZSTD_LEVEL_DEFAULT,
)
from odradek.records.recompress import target_codec


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1 = unlimited
    retention_bytes: int = -1  # -1 = unlimited
    flush_messages: int = 2**63 - 1
    flush_ms: int = 2**63 - 1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"  # or "LogAppendTime"
    # CreateTime timestamps further behind / ahead of the broker clock are refused. Unbounded
    # here (Kafka 3.x); the broker's default for message.timestamp.after.max.ms is Kafka 4.0's
    # one hour (config_defs), which build_log_config passes in.
    message_timestamp_before_max_ms: int = 2**63 - 1
    message_timestamp_after_max_ms: int = 2**63 - 1
    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    compression_gzip_level: int = GZIP_LEVEL_DEFAULT
    compression_lz4_level: int = LZ4_LEVEL_DEFAULT
    compression_zstd_level: int = ZSTD_LEVEL_DEFAULT
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    file_delete_delay_ms: int = 60000
    min_insync_replicas: int = 1
    preallocate: bool = False
    unclean_leader_election_enable: bool = False
    # Broker-level (producer.id.expiration.ms): idle producers without an ongoing transaction
    # are forgotten after this long.
    producer_id_expiration_ms: int = 86400000
    # The raw effective key/value strings (topic keys), as DescribeConfigs would report them.
    raw: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compression_codec(self) -> int | None:
        """The codec produced batches are stored in; None = as the producer sent them."""
        return target_codec(self.compression_type)

    @property
    def compression_level(self) -> int | None:
        """The configured level of :attr:`compression_codec` (None: the codec has no levels)."""
        codec = self.compression_codec
        if codec == COMPRESSION_GZIP:
            return self.compression_gzip_level
        if codec == COMPRESSION_LZ4:
            return self.compression_lz4_level
        if codec == COMPRESSION_ZSTD:
            return self.compression_zstd_level
        return None

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy
