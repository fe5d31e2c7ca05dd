"""The JVM's hash codes and collection iteration orders.

Kafka's output often follows the iteration order of a Java or Scala hash collection, and its
partitioning follows Java's hash codes, so to match it byte for byte these are reproduced here:

- tools' output: ``kafka-storage.sh format``, ``kafka-dump-log.sh``, ``kafka-topics.sh``,
  ``kafka-transactions.sh`` print reports by iterating ``java.util.HashMap``/``HashSet``;
- the ZooKeeper znode JSON: Kafka 3.9 writes it with ``ObjectMapper.writeValueAsBytes`` over Scala
  and Java maps, so the key order is whatever the map's iterator yields (insertion order for
  Scala's ``Map1`` .. ``Map4``, hash order for the rest); :mod:`odradek.zk.zk_data` orders keys with
  the Scala 2.13 / Java 17 simulations below (checked against the real classes by
  ``tests/unit/test_zk_data.py``'s fixtures);
- the coordinators' partitioning: ``Utils.abs(id.hashCode) % partitions`` picks the
  ``__consumer_offsets`` / ``__transaction_state`` partition of a group / transactional id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")

_MASK32 = 0xFFFFFFFF


def _s32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def _ushr(value: int, bits: int) -> int:
    return (value & _MASK32) >> bits


def java_string_hash(text: str) -> int:
    """``String.hashCode`` (over UTF-16 code units)."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return _s32(h)


def java_topic_partition_hash(tp: tuple[str, int]) -> int:
    """Kafka's ``TopicPartition.hashCode`` (31 * (31 + partition) + topic.hashCode())."""
    return _s32(31 * (31 + tp[1]) + java_string_hash(tp[0]))


def java_long_hash(value: int) -> int:
    """Java's ``Long.hashCode``: ``(int) (value ^ (value >>> 32))`` (``Integer.hashCode`` is the
    value itself, which this gives for any int32)."""
    v = value & 0xFFFFFFFFFFFFFFFF
    return _s32(v ^ (v >> 32))


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: the absolute value, with Integer.MIN_VALUE mapped to 0 (not
    ``n & 0x7fffffff``, the Kafka 0.8 definition, which differs for every negative n)."""
    return 0 if n == -(2**31) else abs(n)


def java_map_entry_hash(pairs: Iterable[tuple[str, str | int]]) -> int:
    """``AbstractMap.hashCode`` of a map of string keys to strings / ``Integer`` values."""
    total = 0
    for key, value in pairs:
        vh = java_string_hash(value) if isinstance(value, str) else _s32(value)
        total += java_string_hash(key) ^ vh
    return _s32(total)


# --- scala.collection.mutable.HashMap / HashSet (2.13) --------------------------------------

def _scala_mutable_improve(h: int) -> int:
    return _s32(h ^ _ushr(h, 16))


def _scala_table_size_for(capacity: int) -> int:
    highest = 1 << (max(capacity - 1, 4).bit_length() - 1)
    return min(highest * 2, 1 << 30)


def scala_mutable_hash_order(
    items: Sequence[T], hash_of: Callable[[T], int], initial_capacity: int | None = None
) -> list[T]:
    """Order of a ``mutable.HashMap``/``HashSet`` built by adding ``items`` one by one.

    ``initial_capacity`` is the constructor's (``from(xs)`` passes ``(xs.size + 1) / 0.75``);
    ``None`` means the default 16. Within a bucket nodes are sorted by hash; the table doubles
    when ``size + 1 >= 0.75 * length`` before an insertion.
    """
    length = _scala_table_size_for(16 if initial_capacity is None else initial_capacity)
    seen: dict[object, int] = {}
    size = 0
    for item in items:
        key = item
        if key in seen:
            continue
        if size + 1 >= int(length * 0.75):
            length *= 2
        seen[key] = _scala_mutable_improve(hash_of(item))
        size += 1
    return sorted(seen, key=lambda k: (seen[k] & (length - 1), seen[k]))  # type: ignore[arg-type]


def scala_mutable_map_from(keys: Sequence[str]) -> list[str]:
    """``mutable.Map(k1 -> v1, ...)``: the keys given at construction (``HashMap.from``)."""
    return scala_mutable_hash_order(keys, java_string_hash, int((len(keys) + 1) / 0.75))


def scala_mutable_map_extended(initial: Sequence[str], added: Sequence[str]) -> list[str]:
    """``mutable.Map(initial...)`` then ``+=`` of each of ``added``."""
    return scala_mutable_hash_order(
        [*initial, *added], java_string_hash, int((len(initial) + 1) / 0.75)
    )


# --- scala.collection.immutable.Map / Set (2.13) ---------------------------------------------

def _scala_champ_improve(hcode: int) -> int:
    h = _s32(hcode + ~_s32(hcode << 9))
    h = _s32(h ^ _ushr(h, 14))
    h = _s32(h + _s32(h << 4))
    return _s32(h ^ _ushr(h, 10))


def scala_immutable_order(items: Sequence[T], hash_of: Callable[[T], int]) -> list[T]:
    """Order of an immutable ``Map``/``Set`` built from ``items``: insertion order up to four
    entries (``Map1``..``Map4``), else the CHAMP trie's (payload of a node by 5-bit hash fragment,
    then its sub-nodes depth first)."""
    unique: list[T] = list(dict.fromkeys(items))
    if len(unique) <= 4:
        return unique
    hashed = [(item, _ushr(_scala_champ_improve(hash_of(item)), 0)) for item in unique]

    def walk(group: list[tuple[T, int]], shift: int) -> list[T]:
        if shift >= 32:  # full hash collision: insertion order
            return [item for item, _ in group]
        buckets: dict[int, list[tuple[T, int]]] = {}
        for entry in group:
            buckets.setdefault((entry[1] >> shift) & 31, []).append(entry)
        payload = [b[0][0] for _, b in sorted(buckets.items()) if len(b) == 1]
        nodes = [b for _, b in sorted(buckets.items()) if len(b) > 1]
        out = list(payload)
        for node in nodes:
            out.extend(walk(node, shift + 5))
        return out

    return walk(hashed, 0)


def scala_immutable_map_keys(keys: Sequence[str]) -> list[str]:
    return scala_immutable_order(keys, java_string_hash)


# --- java.util.HashMap / ConcurrentHashMap (17) ---------------------------------------------

def _java_spread(h: int) -> int:
    return _s32(h ^ _ushr(h, 16))


def java_hash_order(
    keys: Iterable[T], hash_code: Callable[[T], int], initial_capacity: int | None = None
) -> list[T]:
    """``keys`` (in insertion order; a repeated key keeps its first place) in the iteration order
    of a ``java.util.HashMap`` (or ``HashSet``) whose keys hash with ``hash_code``: buckets
    ascending, insertion order within a bucket (a resize keeps the relative order).
    ``initial_capacity``: the map was made with ``new HashMap<>(initial_capacity)``."""
    unique: list[T] = list(dict.fromkeys(keys))
    capacity = 16
    if initial_capacity is not None:
        capacity = 1
        while capacity < initial_capacity:  # HashMap.tableSizeFor
            capacity *= 2
    while len(unique) > capacity * 3 // 4:
        capacity *= 2
    buckets = [_java_spread(hash_code(k)) & (capacity - 1) for k in unique]
    return [unique[i] for i in sorted(range(len(unique)), key=lambda i: (buckets[i], i))]


def java_hash_map_order(keys: Sequence[str], initial_capacity: int | None = None) -> list[str]:
    """:func:`java_hash_order` of a ``HashMap`` keyed by strings (Kafka's tools print per-file and
    per-directory reports from such maps; ZkData writes the ``features`` znode from one)."""
    return java_hash_order(keys, java_string_hash, initial_capacity)


def java_concurrent_hashmap_order(keys: Sequence[str], initial_capacity: int = 8) -> list[str]:
    """``new ConcurrentHashMap<>(initial_capacity)`` (what ``Properties`` wraps) with ``put`` of
    each key, including the order a resize's transfer leaves in a bin."""
    length = 1 << max(int(1.0 + initial_capacity / 0.75) - 1, 1).bit_length()
    table: list[list[tuple[str, int]]] = [[] for _ in range(length)]
    count = 0
    for key in dict.fromkeys(keys):
        h = java_string_hash(key)
        spread = (h ^ _ushr(h, 16)) & 0x7FFFFFFF
        table[spread & (length - 1)].append((key, spread))
        count += 1
        if count >= length - (length >> 2):
            table = _chm_transfer(table, length)
            length *= 2
    return [key for bin_ in table for key, _ in bin_]


def _chm_transfer(table: list[list[tuple[str, int]]], n: int) -> list[list[tuple[str, int]]]:
    new: list[list[tuple[str, int]]] = [[] for _ in range(2 * n)]
    for i in range(n - 1, -1, -1):
        bin_ = table[i]
        if not bin_:
            continue
        run_bit = bin_[0][1] & n
        last_run = 0
        for j in range(1, len(bin_)):
            b = bin_[j][1] & n
            if b != run_bit:
                run_bit = b
                last_run = j
        low: list[tuple[str, int]] = []
        high: list[tuple[str, int]] = []
        if run_bit == 0:
            low = list(bin_[last_run:])
        else:
            high = list(bin_[last_run:])
        for j in range(last_run):
            if bin_[j][1] & n == 0:
                low.insert(0, bin_[j])
            else:
                high.insert(0, bin_[j])
        new[i] = low
        new[i + n] = high
    return new
