"""The records of ``__transaction_state`` (Kafka's ``TransactionLog``), byte-compatible with Kafka.

Key: int16 version (0) + ``TransactionLogKey`` (the transactional id). Value: int16 version +
``TransactionLogValue`` (version 0, non-flexible, as Kafka writes at transaction.version 0; version 1,
flexible with the tagged PreviousProducerId/NextProducerId/ClientTransactionVersion of KIP-890,
from transaction.version 1: :func:`value_version_for`). A transactional id that died is a tombstone (value None).

The partitions of a transaction are written grouped by topic, sorted; an Empty transactional id
writes a null partition list, as Kafka does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionState,
    TxnTransitMetadata,
)
from odradek.protocol.schema import A, F, S, Schema, SchemaError

TRANSACTION_STATE_TOPIC = "__transaction_state"

KEY_SCHEMA = Schema("TransactionLogKey", 0, 0, 2**15, [F("transactional_id", "string", "0")])
VALUE_SCHEMA = Schema(
    "TransactionLogValue",
    0,
    1,
    1,
    [
        F("producer_id", "int64", "0+"),
        F("previous_producer_id", "int64", "1+", tag=0, tagged="1+", default="-1"),
        F("next_producer_id", "int64", "1+", tag=1, tagged="1+", default="-1"),
        F("producer_epoch", "int16", "0+"),
        F("transaction_timeout_ms", "int32", "0+"),
        F("transaction_status", "int8", "0+"),
        F(
            "transaction_partitions",
            A(S(F("topic", "string", "0+"), F("partition_ids", A("int32"), "0+"))),
            "0+",
            nullable="0+",
        ),
        F("transaction_last_update_timestamp_ms", "int64", "0+"),
        F("transaction_start_timestamp_ms", "int64", "0+"),
        F("client_transaction_version", "int16", "1+", tag=2, tagged="1+", default="0"),
    ],
)
KEY_VERSION = 0
VALUE_VERSION = 0  # what Kafka writes at transaction.version 0


def value_version_for(transaction_version: int) -> int:
    """The value version Kafka writes at a finalized ``transaction.version`` (its
    ``TransactionVersion.transactionLogValueVersion``): flexible version 1 from level 1."""
    return 1 if transaction_version >= 1 else 0

_I16 = struct.Struct(">h")


@dataclass(frozen=True)
class TransactionLogValue:
    """A decoded value: the transit metadata plus the fields only version 1 carries."""

    metadata: TxnTransitMetadata
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0


def key_to_bytes(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + KEY_SCHEMA.encode(0, {"transactional_id": transactional_id})


def value_to_bytes(t: TxnTransitMetadata, version: int = VALUE_VERSION) -> bytes:
    if t.state == TransactionState.EMPTY and t.topic_partitions:
        raise ValueError("an Empty transactional id has no partitions")
    if t.state == TransactionState.DEAD:
        raise ValueError("a Dead transactional id is written as a tombstone")
    partitions: list[dict[str, object]] | None
    if t.state == TransactionState.EMPTY:
        partitions = None
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(t.topic_partitions):
            by_topic.setdefault(topic, []).append(p)
        partitions = [{"topic": k, "partition_ids": v} for k, v in by_topic.items()]
    body = {
        "producer_id": t.producer_id,
        "previous_producer_id": t.last_producer_id,
        "next_producer_id": t.next_producer_id,
        "producer_epoch": t.producer_epoch,
        "transaction_timeout_ms": t.txn_timeout_ms,
        "transaction_status": int(t.state),
        "transaction_partitions": partitions,
        "transaction_last_update_timestamp_ms": t.txn_last_update_timestamp,
        "transaction_start_timestamp_ms": t.txn_start_timestamp,
        "client_transaction_version": t.client_transaction_version,
    }
    return _I16.pack(version) + VALUE_SCHEMA.encode(version, body)


def read_key(data: bytes | bytearray | memoryview) -> str:
    """The transactional id of a key; SchemaError for a key this version cannot read."""
    if len(data) < 2:
        raise SchemaError("key too short")
    (version,) = _I16.unpack_from(data, 0)
    if version != KEY_VERSION:
        raise SchemaError(f"unknown TransactionLogKey version {version}")
    key, _ = KEY_SCHEMA.decode(0, memoryview(data), 2)
    tid = key["transactional_id"]
    if tid is None:
        raise SchemaError("null transactional id")
    return str(tid)


def read_value(data: bytes | bytearray | memoryview) -> TransactionLogValue:
    if len(data) < 2:
        raise SchemaError("value too short")
    (version,) = _I16.unpack_from(data, 0)
    if not 0 <= version <= VALUE_SCHEMA.max_version:
        raise SchemaError(f"unknown TransactionLogValue version {version}")
    v, _ = VALUE_SCHEMA.decode(version, memoryview(data), 2)
    try:
        state = TransactionState(v["transaction_status"])
    except ValueError as e:
        raise SchemaError(f"unknown transaction status {v['transaction_status']}") from e
    parts = frozenset(
        (tp["topic"], p) for tp in (v["transaction_partitions"] or []) for p in tp["partition_ids"]
    )
    meta = TxnTransitMetadata(
        producer_id=v["producer_id"],
        last_producer_id=v.get("previous_producer_id", NO_PRODUCER_ID),
        producer_epoch=v["producer_epoch"],
        last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=v["transaction_timeout_ms"],
        state=state,
        topic_partitions=parts,
        txn_start_timestamp=v["transaction_start_timestamp_ms"],
        txn_last_update_timestamp=v["transaction_last_update_timestamp_ms"],
        next_producer_id=v.get("next_producer_id", NO_PRODUCER_ID),
        client_transaction_version=v.get("client_transaction_version", 0),
    )
    return TransactionLogValue(
        meta, v.get("next_producer_id", NO_PRODUCER_ID), v.get("client_transaction_version", 0)
    )
