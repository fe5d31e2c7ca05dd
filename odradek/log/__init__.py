"""Kafka's on-disk log: LogSegment (.log/.index/.timeindex), LogSegments (a log's segment
list), LogLoader (opening and recovery), Log (Kafka's UnifiedLog), LogCleaner (compaction) and
LogManager (the log directories, retention, flushes, checkpoints)."""

from odradek.log.append_origin import AppendOrigin
from odradek.log.errors import KafkaStorageError, LogError, OffsetOutOfRangeError
from odradek.log.fetch_data_info import FetchDataInfo, FileRegion
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.log.segment import LogSegment

__all__ = [
    "AppendOrigin",
    "FetchDataInfo",
    "FileRegion",
    "KafkaStorageError",
    "Log",
    "LogConfig",
    "LogError",
    "LogManager",
    "LogSegment",
    "OffsetOutOfRangeError",
]
