"""Exactly-once consume-transform-produce (issue 13), with the worker killed at random points.

The worker (txn_ctp_worker.py, confluent-kafka) reads an input topic ``read_committed`` and, per
batch, writes one output record per input record and the consumed offsets to its group in one
transaction (``send_offsets_to_transaction``). It runs as its own process and is killed with
SIGKILL at seeded random moments -- inside a transaction, during a commit, between transactions --
and restarted with the same transactional id, a bounded number of times; the last run finishes the
input. Then the output topic read ``read_committed`` holds every input record exactly once, and
the group's committed offsets are the input's end offsets.

Runs against Odradek, or Apache Kafka with ``ODRADEK_TXN_SERVERS=kafka`` (txn_support.py).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Producer

from .support import unique_name
from .txn_support import (
    Lines,
    Target,
    Watcher,
    committed_offsets,
    create_topic,
    read_all,
    watermarks,
)

PARTITIONS = 3
RECORDS = 3000
BATCH = 10
KILLS = 6
SEED = 1313
PACE_S = 0.02  # inside each of the worker's transactions
WORKER = Path(__file__).parent / "txn_ctp_worker.py"


def test_consume_transform_produce_killed_and_restarted(txn_target: Target, tmp_path: Path) -> None:
    bootstrap = txn_target.bootstrap
    source, sink = unique_name("eos-in"), unique_name("eos-out")
    group, txid = unique_name("eos-group"), unique_name("eos-txid")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, PARTITIONS)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(source, key=f"k{i % 17}", value=f"in-{i}")
    assert p.flush(60) == 0
    input_ends = watermarks(bootstrap, source, PARTITIONS, "read_uncommitted")
    assert sum(input_ends.values()) == RECORDS

    rng = random.Random(SEED)
    log = open(tmp_path / "worker.log", "a")
    cmd = [sys.executable, str(WORKER), bootstrap, source, sink, group, txid, str(PARTITIONS), str(BATCH), str(PACE_S)]
    watcher = Watcher(bootstrap, sink, PARTITIONS)
    kills = 0
    committed_before_kills = 0  # transactions the killed runs committed
    kills_mid_work = 0  # kills with input left to process
    finished = False
    try:
        for _ in range(KILLS):
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
            try:
                out = Lines(proc)
                out.wait_for("READY", 90)
                time.sleep(rng.uniform(0.5, 3.0))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(30)
                    kills += 1
                    out.thread.join(10)
                    committed_before_kills += sum(1 for ln in out.lines if ln.startswith("COMMITTED "))
                    # (Not stable: the killed run's pending offsets stay until the next run's
                    # init_transactions aborts its transaction.)
                    done = committed_offsets(bootstrap, group, source, PARTITIONS, stable=False)
                    kills_mid_work += sum(max(0, o) for o in done.values()) < RECORDS
                else:  # finished (DONE), or failed: then the next run goes on
                    out.thread.join(10)
                    finished = "DONE" in out.lines
            finally:
                proc.kill()
                proc.wait(30)
            if finished:
                break
        if not finished:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
            try:
                out = Lines(proc)
                out.wait_for("READY", 90)
                out.wait_for("DONE", 190)
            finally:
                proc.kill()
                proc.wait(30)
    finally:
        log.close()
    # The kills hit a worker at work (not only before its first transaction or after the last).
    assert kills_mid_work >= 2 and committed_before_kills > 0, (
        f"{kills} kills, {kills_mid_work} with input left, {committed_before_kills} commits before them")

    assert committed_offsets(bootstrap, group, source, PARTITIONS) == input_ends
    out = read_all(bootstrap, sink, PARTITIONS, "read_committed", timeout=90)
    # A read_committed consumer of the output during the kills saw only what is committed.
    final = {(r.partition, r.offset): r.value for r in out}
    seen = watcher.stop()
    assert seen and all(final.get((r.partition, r.offset)) == r.value for r in seen), "an aborted read"
    seen = Counter(((r.value or b"").decode().split(":", 2)[0], (r.value or b"").decode().split(":", 2)[1])
                   for r in out)
    duplicates = {k: n for k, n in seen.items() if n > 1}
    assert not duplicates, f"input records written more than once: {sorted(duplicates)[:20]}"
    expected = {(str(p), str(o)) for p in range(PARTITIONS) for o in range(input_ends[p])}
    assert set(seen) == expected, f"missing {sorted(expected - set(seen))[:20]}, extra {sorted(set(seen) - expected)[:20]}"
    aborted = len(read_all(bootstrap, sink, PARTITIONS, "read_uncommitted", timeout=90)) - len(out)
    print(f"{kills} kills ({kills_mid_work} with input left) after {committed_before_kills} commits; "
          f"{aborted} output records of aborted transactions")
    # Each output record carries its input's value.
    by_input = {(r.partition, r.offset): r.value for r in read_all(bootstrap, source, PARTITIONS, "read_committed")}
    for r in out:
        part, off, value = (r.value or b"").decode().split(":", 2)
        assert by_input[(int(part), int(off))] == value.encode()
