"""Log-layer errors carrying Kafka error codes."""

from __future__ import annotations


class LogError(Exception):
    error_code: int = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(LogError):
    """Requested offset is below the log start offset or above the log end offset."""

    error_code = 1


class KafkaStorageError(LogError):
    """An I/O error on the log directory (KAFKA_STORAGE_ERROR)."""

    error_code = 56


class UnexpectedAppendOffsetError(LogError):
    """A follower append whose first offset is below the log end offset."""

    error_code = 2  # surfaced like CORRUPT_MESSAGE; internal to replication


class CorruptIndexError(LogError):
    """An index file is inconsistent with its segment; the segment must be recovered."""

    error_code = -1


class OutOfOrderSequenceError(LogError):
    """An idempotent producer's batch does not follow its last sequence number."""

    error_code = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(LogError):
    """A batch from an older epoch of a producer id than the one already seen."""

    error_code = 47  # INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(LogError):
    """A non-transactional batch from a producer whose transaction is ongoing."""

    error_code = 48  # INVALID_TXN_STATE


class TransactionCoordinatorFencedError(LogError):
    """A transaction marker written with an older coordinator epoch than one already seen for
    that producer (a zombie coordinator)."""

    error_code = 52  # TRANSACTION_COORDINATOR_FENCED
