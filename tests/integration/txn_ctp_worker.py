"""A consume-transform-produce worker for test_transactions_eos.py, run as its own process.

    python txn_ctp_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID PARTITIONS BATCH PACE_S

Reads INPUT ``read_committed`` from the group's committed offsets (assigned every partition; the
offsets are fetched stable, KIP-447), and for each batch of up to BATCH records writes
``"<partition>:<offset>:<value>"`` to OUTPUT and the consumed positions to the group in one
transaction (``send_offsets_to_transaction``), pausing PACE_S seconds inside each transaction
(so that a kill lands inside one more often than between two). Prints READY after ``init_transactions`` (which
aborts what a killed predecessor with the same transactional id left open), COMMITTED <records>
after each transaction, and DONE when every
input partition is read to its end and nothing came for 2 s; any error ends it with a traceback
(the test restarts it). Bounded: it gives up after 180 s.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


def main() -> int:
    bootstrap, input_topic, output_topic, group, txid, partitions_arg, batch_arg, pace_arg = sys.argv[1:9]
    partitions, batch, pace = int(partitions_arg), int(batch_arg), float(pace_arg)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    })
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid, "linger.ms": 2})
    producer.init_transactions(60)
    consumer.assign([TopicPartition(input_topic, p) for p in range(partitions)])
    print("READY", flush=True)
    at_end: set[int] = set()
    idle_since = time.monotonic()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        msgs = consumer.consume(batch, timeout=0.5)
        records = []
        for m in msgs:
            err = m.error()
            if err is None:
                records.append(m)
                at_end.discard(m.partition())
            elif err.code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
            else:
                raise RuntimeError(f"consume: {err}")
        if not records:
            if len(at_end) == partitions and time.monotonic() - idle_since > 2:
                print("DONE", flush=True)
                return 0
            continue
        idle_since = time.monotonic()
        producer.begin_transaction()
        for m in records:
            value = f"{m.partition()}:{m.offset()}:{(m.value() or b'').decode()}"
            producer.produce(output_topic, key=m.key(), value=value)
        producer.poll(0)
        time.sleep(pace)
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        print(f"COMMITTED {len(records)}", flush=True)
    print("GAVE UP", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
