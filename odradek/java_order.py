"""Java's iteration order, for the tools that print what Kafka's tools print.

Kafka's tools print some reports by iterating a ``java.util.HashMap`` keyed by path (the
directories ``kafka-storage.sh format`` formats, the files ``kafka-dump-log.sh`` reports
mismatches for), so their order is that of the map's buckets. This reproduces it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_hash_map_order(keys: list[str], initial_capacity: int | None = None) -> list[str]:
    """``keys`` (in insertion order) in the order a ``java.util.HashMap`` iterates them: Kafka's
    tool prints its per-file reports from HashMaps, so this is the order it prints them in.
    ``initial_capacity``: the map was made with ``new HashMap<>(initial_capacity)``."""
    capacity = 16
    if initial_capacity is not None:
        capacity = 1
        while capacity < initial_capacity:  # HashMap.tableSizeFor
            capacity *= 2
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return [k for _, _, k in sorted((bucket(k), i, k) for i, k in enumerate(keys))]


def java_long_hash(value: int) -> int:
    """Java's ``Long.hashCode``: ``(int) (value ^ (value >>> 32))`` (``Integer.hashCode`` is the
    value itself, which this gives for any int32)."""
    v = value & 0xFFFFFFFFFFFFFFFF
    h = (v ^ (v >> 32)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_hash_order(keys: list[K], hash_code: Callable[[K], int]) -> list[K]:
    """``keys`` (distinct, in insertion order) in the iteration order of a default-capacity
    ``java.util.HashMap`` (or ``HashSet``) whose keys hash with ``hash_code``."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: K) -> int:
        h = hash_code(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return [k for _, i, k in sorted(((bucket(k), i, k) for i, k in enumerate(keys)), key=lambda e: e[:2])]
