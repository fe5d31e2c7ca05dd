"""Append origins (Kafka's AppendOrigin): a coordinator's batches for a producer (the group
coordinator's transactional offset commits, each written with sequence 0 as Kafka's coordinator
writes them) are neither answered as duplicates nor refused as out of sequence; only an older
producer epoch is refused. A client's batches keep the idempotence checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.log.append_origin import AppendOrigin
from odradek.log.errors import InvalidProducerEpochError
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.records.builder import build_batch

PID = 7000


def _batch(epoch: int = 0, seq: int = 0) -> bytearray:
    return bytearray(build_batch(
        [(b"k", b"v", [], 1000)], producer_id=PID, producer_epoch=epoch, base_sequence=seq,
        is_transactional=True,
    ))


def test_coordinator_batches_with_sequence_zero_are_all_appended(tmp_path: Path) -> None:
    lg = Log.load(str(tmp_path / "p"), LogConfig(), now_ms=0, clean_shutdown=False)
    first = lg.append_as_leader(_batch(), 0, 0, AppendOrigin.COORDINATOR)
    second = lg.append_as_leader(_batch(), 0, 0, AppendOrigin.COORDINATOR)
    assert (first.first_offset, second.first_offset) == (0, 1)
    assert lg.log_end_offset == 2
    # A client's identical batch is taken for a retry: answered with earlier offsets, not appended.
    dup = lg.append_as_leader(_batch(), 0, 0)
    assert dup.first_offset < 2 and lg.log_end_offset == 2
    # A newer epoch is taken; an older one is fenced for the coordinator too.
    assert lg.append_as_leader(_batch(epoch=1), 0, 0, AppendOrigin.COORDINATOR).first_offset == 2
    with pytest.raises(InvalidProducerEpochError):
        lg.append_as_leader(_batch(epoch=0), 0, 0, AppendOrigin.COORDINATOR)
    assert lg.log_end_offset == 3
