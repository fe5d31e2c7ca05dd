"""The iteration order of a Java ``HashMap``, for tools whose output Kafka prints in that order.

Kafka's tools often print what they gathered in a ``HashMap`` (group listings, reset plans), so the
order of their lines is the map's: by bucket (the key's ``hashCode`` spread over the table), then
by insertion within a bucket. :func:`hash_order` gives the same order for the same keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

K = TypeVar("K")


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def topic_partition_hash(tp: tuple[str, int]) -> int:
    """Kafka's ``TopicPartition.hashCode``."""
    return _int32(31 * (31 + tp[1]) + string_hash(tp[0]))


def hash_order(keys: Iterable[K], hash_fn: Callable[[K], int]) -> list[K]:
    """``keys`` (in insertion order) as a default-sized Java HashMap iterates them."""
    items = list(dict.fromkeys(keys))
    capacity = 16
    while len(items) > capacity * 3 // 4:
        capacity *= 2

    def bucket(k: K) -> int:
        h = hash_fn(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(items, key=bucket)  # sorted() is stable: insertion order within a bucket
