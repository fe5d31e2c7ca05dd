"""The transactional producer of test_transactions_faults.py, run as its own process.

    python txn_fault_producer.py BOOTSTRAP TOPIC TRANSACTIONAL_ID PARTITIONS TRANSACTIONS RECORDS PACE_S

Runs TRANSACTIONS transaction attempts, one after the other; attempt ``k`` writes RECORDS records
``"t<k>-<j>"`` to partition ``j % PARTITIONS``. It prints ``COMMITTING k`` before the commit,
``COMMITTED k`` when the commit succeeded, ``ABORTED k`` when an abort succeeded and ``FAILED k
<error>`` for anything else -- then the outcome of ``k`` is unknown to the client. A fatal error
(or an abort that fails) replaces the producer with a new one with the same transactional id,
whose ``init_transactions`` finishes or aborts what the old one left. It sleeps PACE_S seconds
between transactions. Bounded: 240 s at most.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import KafkaError, KafkaException, Producer


def say(line: str) -> None:
    print(line, flush=True)


def new_producer(bootstrap: str, txid: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid,
                  "transaction.timeout.ms": 10000, "linger.ms": 2})
    p.init_transactions(30)
    return p


def main() -> int:
    bootstrap, topic, txid, partitions_arg, transactions_arg, records_arg, pace_arg = sys.argv[1:8]
    partitions, transactions, records = int(partitions_arg), int(transactions_arg), int(records_arg)
    deadline = time.monotonic() + 240
    producer: Producer | None = None
    for k in range(transactions):
        time.sleep(float(pace_arg))
        if time.monotonic() > deadline:
            say("GAVE UP")
            return 1
        try:
            if producer is None:
                producer = new_producer(bootstrap, txid)
            producer.begin_transaction()
            for j in range(records):
                producer.produce(topic, partition=j % partitions, value=f"t{k}-{j}".encode())
            say(f"COMMITTING {k}")
            for attempt in range(5):
                try:
                    producer.commit_transaction(30)
                    break
                except KafkaException as e:
                    err: KafkaError = e.args[0]
                    if not err.retriable() or attempt == 4:
                        raise
            say(f"COMMITTED {k}")
        except KafkaException as e:
            err = e.args[0]
            say(f"FAILED {k} {err.name()} {err.str()}")
            if producer is not None and err.txn_requires_abort():
                try:
                    producer.abort_transaction(30)
                    say(f"ABORTED {k}")
                    continue
                except KafkaException as e2:
                    say(f"ABORT FAILED {k} {e2.args[0].name()}")
            if producer is not None:
                producer.purge()
            producer = None
            time.sleep(0.5)
    say("DONE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
