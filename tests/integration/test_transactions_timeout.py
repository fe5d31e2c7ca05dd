"""Transaction timeout (issue 13): a producer that begins a transaction and disappears.

A producer process with ``transaction.timeout.ms=5000`` begins a transaction, writes 10 records
(acknowledged: in the log) and is killed with SIGKILL. Its open transaction holds the last
stable offset at its first record, so a ``read_committed`` consumer sees nothing past it; another
producer then commits records after it. The coordinator aborts the transaction once it has timed
out (the broker checks every 500 ms:
``transaction.abort.timed.out.transaction.cleanup.interval.ms``), the abort marker moves the last
stable offset on, and a ``read_committed`` consumer gets the later committed records -- never the
dead producer's -- within a bounded wait.

Runs against Odradek, or Apache Kafka with ``ODRADEK_TXN_SERVERS=kafka`` (txn_support.py).
"""

from __future__ import annotations

import subprocess
import sys
import time

from confluent_kafka import Producer

from .support import unique_name, wait_until
from .txn_support import Target, create_topic, read_all, values, watermarks

N = 10
TIMEOUT_MS = 5000

# The producer that disappears: begins a transaction, writes, says READY and waits to be killed.
DOOMED = """
import sys, time
from confluent_kafka import Producer
bootstrap, topic, txid, n, timeout_ms = sys.argv[1:6]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid,
              "transaction.timeout.ms": int(timeout_ms), "linger.ms": 5})
p.init_transactions(60)
p.begin_transaction()
for i in range(int(n)):
    p.produce(topic, key=b"k", value=f"lost-{i}".encode())
assert p.flush(60) == 0
print("READY", flush=True)
time.sleep(300)
"""


def test_timed_out_transaction_is_aborted_and_lso_moves_on(txn_target: Target) -> None:
    bootstrap = txn_target.bootstrap
    topic = unique_name("txn-timeout")
    create_topic(bootstrap, topic, 1)
    proc = subprocess.Popen(
        [sys.executable, "-c", DOOMED, bootstrap, topic, unique_name("txid-doomed"), str(N), str(TIMEOUT_MS)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the child's own timeouts bound this (60 s)
        assert line.strip() == "READY", f"the producer did not start its transaction: {line!r}"
        killed_at = time.monotonic()
    finally:
        proc.kill()
        proc.wait(30)

    # The open transaction holds the last stable offset at its first record.
    assert watermarks(bootstrap, topic, 1, "read_committed") == {0: 0}
    assert watermarks(bootstrap, topic, 1, "read_uncommitted") == {0: N}

    later = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("txid-later")})
    later.init_transactions(60)
    later.begin_transaction()
    for i in range(N):
        later.produce(topic, key=b"k", value=f"after-{i}".encode())
    later.commit_transaction(60)
    if time.monotonic() - killed_at < TIMEOUT_MS / 1000 - 1:  # (not on a very slow machine)
        assert watermarks(bootstrap, topic, 1, "read_committed") == {0: 0}, "the later commit passed the open one"

    # Aborted after its timeout: the LSO passes both transactions (bounded wait).
    wait_until(lambda: watermarks(bootstrap, topic, 1, "read_committed")
               == watermarks(bootstrap, topic, 1, "read_uncommitted"),
               timeout=60, interval=0.5, what="the timed-out transaction to be aborted")
    committed = read_all(bootstrap, topic, 1, "read_committed")
    assert values(committed) == sorted(f"after-{i}" for i in range(N))
    everything = read_all(bootstrap, topic, 1, "read_uncommitted")
    assert values(everything) == sorted([f"lost-{i}" for i in range(N)] + [f"after-{i}" for i in range(N)])
    # Two markers: the later commit's and the coordinator's abort of the dead transaction.
    assert watermarks(bootstrap, topic, 1, "read_uncommitted") == {0: 2 * N + 2}
