"""Kafka's on-disk log: LogSegment (.log/.index/.timeindex), Log, LogManager."""

from odradek.log.errors import KafkaStorageError, LogError, OffsetOutOfRangeError
from odradek.log.log import FetchDataInfo, FileRegion, Log
from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.log.segment import LogSegment

__all__ = [
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
