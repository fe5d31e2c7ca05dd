"""Offset arithmetic for the data source: ranges, splitting, rate limiting, the JSON offset form.

Pure functions: offsets in, offsets out. The streaming offset is spark-sql-kafka's
``{"topic": {"0": 23, "1": 7}}`` where each number is the next offset to read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from odradek.spark.options import TopicPartition

PartitionOffsets = dict[TopicPartition, int]


def to_json_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json_offsets(data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    return {
        (topic, int(p)): int(offset)
        for topic, partitions in data.items()
        for p, offset in partitions.items()
    }


@dataclass(frozen=True)
class OffsetRange:
    """Records ``[from_offset, until_offset)`` of one topic-partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split ranges so there are at least ``min_partitions`` of them, like spark-sql-kafka.

    Empty ranges are dropped. Without ``min_partitions``, or when there are already enough
    ranges, there is one range per topic-partition. Otherwise each range gets a number of parts
    proportional to its size (at least one), and is cut into parts of near-equal size.
    """
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, min(r.size, math.ceil(r.size / total * min_partitions)))
        step, extra = divmod(r.size, parts)
        start = r.from_offset
        for i in range(parts):
            end = start + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out


def rate_limit(
    limit: int,
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> PartitionOffsets:
    """At most ``limit`` records past ``start``, shared in proportion to what each partition has.

    ``start`` must hold every partition of ``latest`` (new partitions at their earliest offset).

    spark-sql-kafka's rule: a partition with a share below one record gets one (ceil), others
    get the floor of their share; so the total may exceed ``limit`` by a few records at most
    when many partitions have tiny shares, and it always advances when data is available.
    """
    sizes = {tp: max(0, end - start.get(tp, end)) for tp, end in latest.items()}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        size = sizes[tp]
        if size <= 0:
            out[tp] = end
            continue
        share = limit * (size / total)
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + take)
    return out


def available(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> int:
    return sum(max(0, end - start.get(tp, end)) for tp, end in latest.items())
