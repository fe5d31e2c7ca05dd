"""RecordBatch v2: header view, CRC32C validation, in-place offset assignment, builders, codecs."""

from odradek.records.batch import (
    AppendInfo,
    BatchInfo,
    RecordBatchHeader,
    iter_batches,
    parse_header,
    validate,
    validate_and_assign,
)
from odradek.records.builder import build_batch
from odradek.records.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordBatchTooLargeError,
    RecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedMagicError,
)
from odradek.records.records import Record, decode_batch

__all__ = [
    "AppendInfo",
    "BatchInfo",
    "CorruptRecordError",
    "InvalidRecordError",
    "Record",
    "RecordBatchHeader",
    "RecordBatchTooLargeError",
    "RecordError",
    "RecordTooLargeError",
    "UnsupportedCompressionTypeError",
    "UnsupportedMagicError",
    "build_batch",
    "decode_batch",
    "iter_batches",
    "parse_header",
    "validate",
    "validate_and_assign",
]
