"""Record-layer errors, each carrying the Kafka error code a client should see."""

from __future__ import annotations


class RecordError(Exception):
    """Base class for errors raised while validating or decoding record batches."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR


class CorruptRecordError(RecordError):
    """Bad CRC, impossible sizes, truncated data (CORRUPT_MESSAGE)."""

    error_code = 2


class RecordTooLargeError(RecordError):
    """A batch is larger than max.message.bytes (MESSAGE_TOO_LARGE)."""

    error_code = 10


class RecordBatchTooLargeError(RecordError):
    """The whole append is larger than segment.bytes (RECORD_LIST_TOO_LARGE)."""

    error_code = 18


class UnsupportedMagicError(RecordError):
    """Message format v0/v1. Kafka 4 refuses them in produce requests (ProduceRequest's record
    validation) with INVALID_RECORD."""

    error_code = 87


class InvalidRecordError(RecordError):
    """Structurally valid but semantically invalid batch (INVALID_RECORD)."""

    error_code = 87


class InvalidTimestampError(RecordError):
    """A CreateTime timestamp outside message.timestamp.before/after.max.ms (INVALID_TIMESTAMP)."""

    error_code = 32


class UnsupportedCompressionTypeError(RecordError):
    """Unknown compression codec id (UNSUPPORTED_COMPRESSION_TYPE)."""

    error_code = 76


class RecordValidationError(RecordError):
    """Some records of a batch are invalid and the batch is refused (Kafka's
    RecordValidationException, KIP-467): ``record_errors`` names them, (batch index, message),
    and the response carries them so that clients fail those records alone."""

    def __init__(self, message: str, record_errors: list[tuple[int, str | None]]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class InvalidRecordsError(RecordValidationError, InvalidRecordError):
    """Records of the batch break a record-level rule, e.g. no key on a compacted topic
    (INVALID_RECORD)."""


class InvalidTimestampsError(RecordValidationError, InvalidTimestampError):
    """At least one record's timestamp is out of range (INVALID_TIMESTAMP); ``record_errors``
    may also name records that broke other rules, as Kafka's do."""
