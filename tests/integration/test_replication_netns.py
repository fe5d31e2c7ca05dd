"""A partition leader cut off by a network partition is fenced (issue 12's test list), with real
``odradek server`` processes and real confluent-kafka clients.

One controller on the host (on the test bridge's address) and three brokers, each in its own
network namespace joined to the bridge by a veth pair (the helpers of ``test_kraft_netns``).
Topic RF=3, ``min.insync.replicas=2``. After some acknowledged ``acks=all`` records, the
leader's link is cut: it no longer reaches the controller nor the followers. A producer started
*inside the old leader's namespace* (so it still reaches the old leader, and only it) sends
``acks=all`` records: none may be acknowledged (the old leader appends them but its high
watermark cannot move). The controller fences the old leader and elects another replica; more
records are acknowledged through the new leader. Healed, the old leader truncates what it alone
appended, catches up and rejoins the ISR: every acknowledged record is read back exactly once in
order, no record of the cut producer is anywhere, and the three replicas' segment files hold the
same records.

Skip rules as in ``test_kraft_netns`` (``ip`` + CAP_NET_ADMIN; ``ODRADEK_NETNS=1``/``0``; under
CI it fails only where both are present but ``ip netns add`` fails). The namespaces, links and
bridge are removed in a finalizer. Timings are printed, never asserted.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .kraft_support import KraftCluster, KraftNode
from .support import die_with_parent
from .test_kraft_netns import Network, _free_subnet, _require_netns
from .test_replication import _consume_all, _log_values

TOPIC = "netns-fenced"

# Run inside the old leader's namespace: bootstrap = the old leader only.
CUT_PRODUCER = textwrap.dedent("""
    import json, sys
    from confluent_kafka import Producer
    bootstrap, topic, n, timeout_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    acked, errors = [], []
    def report(err, msg):
        if err is None:
            acked.append(msg.value().decode())
        else:
            errors.append(str(err))
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": timeout_ms,
                  "request.timeout.ms": 4000, "retries": 1000000, "retry.backoff.ms": 200,
                  "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=f"cut-{i:05d}".encode(), partition=0, on_delivery=report)
        p.poll(0)
    left = p.flush(timeout_ms / 1000 + 20)
    print(json.dumps({"acked": acked, "errors": errors[:5], "n_errors": len(errors), "left": left}))
""")


@pytest.fixture
def network() -> Iterator[Network]:
    _require_netns()
    net = Network(tag=f"{os.getpid() % 100000:05d}"[-4:] + f"{random.randint(0, 35**2):03d}"[-3:],
                  subnet=_free_subnet())
    try:
        net.up()
        yield net
    finally:
        net.down()


def _state(bootstrap: str) -> tuple[int, list[int]]:
    """(leader, isr) of ``TOPIC``-0 from Metadata through ``bootstrap``."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic=TOPIC, timeout=5).topics[TOPIC]
    if md.error is not None:
        raise KafkaException(md.error)
    pm = md.partitions[0]
    return pm.leader, sorted(pm.isrs)


def _wait_state(bootstrap: str, check: Any, what: str, deadline_s: float, cluster: KraftCluster) -> tuple[int, list[int]]:
    end = time.monotonic() + deadline_s
    state: tuple[int, list[int]] = (-1, [])
    while time.monotonic() < end:
        try:
            state = _state(bootstrap)
            if check(state):
                return state
        except (KafkaException, KeyError):
            pass
        time.sleep(0.3)
    raise AssertionError(f"{TOPIC}-0 never {what} (last leader, isr: {state})\n{cluster.logs()}")


def _produce(bootstrap: str, prefix: str, n: int, cluster: KraftCluster) -> list[bytes]:
    """``n`` acks=all records; all must be acknowledged. Returns them in delivery order."""
    acked: list[bytes] = []
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 60_000})
    for i in range(n):
        producer.produce(TOPIC, value=f"{prefix}-{i:05d}".encode(), partition=0, on_delivery=report)
        producer.poll(0)
    left = producer.flush(90)
    assert left == 0 and not errors, f"{prefix}: {left} undelivered, errors {errors[:5]}\n{cluster.logs()}"
    assert len(acked) == n
    return acked


@pytest.mark.timeout(420)
def test_leader_cut_off_by_a_partition_is_fenced_and_truncates(network: Network, tmp_path: Path) -> None:
    controller_host = (f"{network.subnet}.1", None)  # on the bridge, in the host namespace
    broker_hosts = [network.add_namespace(i) for i in (1, 2, 3)]
    timing = {"broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "4000"}
    cluster = KraftCluster(
        tmp_path, controllers=1, brokers=3, controller_hosts=[controller_host], broker_hosts=broker_hosts,
        controller_overrides={**timing, "auto.leader.rebalance.enable": "false"},
        broker_overrides={**timing, "replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "200"},
    )
    try:
        cluster.format()
        cluster.start()
        cluster.wait_ready(120)
        everyone = ",".join(b.bootstrap for b in cluster.brokers)
        admin = AdminClient({"bootstrap.servers": everyone})
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[101, 102, 103]],
                                      config={"min.insync.replicas": "2"})],
                            request_timeout=20)[TOPIC].result(timeout=30)
        old_id, _ = _wait_state(everyone, lambda s: s[0] > 0 and len(s[1]) == 3, "led with a full ISR", 60, cluster)
        before = _produce(everyone, "before", 300, cluster)

        old: KraftNode = cluster.broker(old_id)
        assert old.netns is not None
        others = [b for b in cluster.brokers if b is not old]
        via_others = ",".join(b.bootstrap for b in others)
        script = tmp_path / "cut_producer.py"
        script.write_text(CUT_PRODUCER)

        network.cut(old.netns)
        cut_at = time.monotonic()
        try:
            # A producer that reaches only the old leader (from inside its namespace).
            cut_run = subprocess.run(
                ["ip", "netns", "exec", old.netns, sys.executable, str(script), old.bootstrap, TOPIC, "50", "10000"],
                capture_output=True, text=True, timeout=120, preexec_fn=die_with_parent,
            )
            assert cut_run.returncode == 0, f"cut producer: {cut_run.stderr}"
            cut = json.loads(cut_run.stdout.strip().splitlines()[-1])
            print(f"cut producer: {len(cut['acked'])} acknowledged, {cut['n_errors']} failed "
                  f"({cut['errors'][:2]}), {cut['left']} left")
            assert cut["acked"] == [], f"acknowledged by a cut-off leader: {cut['acked'][:5]}\n{cluster.logs()}"
            assert cut["n_errors"] + cut["left"] == 50, cut
            appended_alone = [v for v in _log_values(old, TOPIC) if v.startswith(b"cut-")]
            print(f"old leader {old_id} appended {len(appended_alone)} unreplicated records while cut off")
            # The scenario must exercise the truncation: the old leader took the records in
            # (it still believed it led) and only failed to commit them.
            assert appended_alone, f"the cut-off leader appended nothing\n{cluster.logs([old])}"

            # Fenced: another replica leads, and the old leader has left the ISR.
            new_id, isr = _wait_state(via_others, lambda s: s[0] > 0 and s[0] != old_id and old_id not in s[1],
                                      f"moved off broker {old_id}", 60, cluster)
            print(f"new leader {new_id} (isr {isr}) {time.monotonic() - cut_at:.2f}s after the cut")
            during = _produce(via_others, "during", 200, cluster)
        finally:
            network.heal(old.netns)
        healed_at = time.monotonic()

        # The old leader truncates, catches up and rejoins the ISR.
        _wait_state(everyone, lambda s: s[0] == new_id and len(s[1]) == 3, f"with broker {old_id} back in the ISR",
                    90, cluster)
        print(f"broker {old_id} back in the ISR {time.monotonic() - healed_at:.2f}s after the heal")
        after = _produce(everyone, "after", 100, cluster)

        acked = before + during + after
        got = _consume_all(everyone, TOPIC, len(acked), 60)
        assert len(got) == len(set(got)), f"{len(got) - len(set(got))} duplicates"
        assert not [v for v in got if v.startswith(b"cut-")], "a record of the cut-off leader was kept"
        assert got == acked, (len(got), len(acked), sorted(set(acked) - set(got))[:5])

        # Every replica's segment files hold exactly the acknowledged records (the old leader's
        # unreplicated appends truncated away).
        end = time.monotonic() + 60
        logs: dict[int, list[bytes]] = {}
        while time.monotonic() < end:
            logs = {b.node_id: _log_values(b, TOPIC) for b in cluster.brokers}
            if all(v == acked for v in logs.values()):
                break
            time.sleep(0.5)
        for node_id, values in logs.items():
            assert values == acked, (f"broker {node_id}: {len(values)} records, "
                                     f"{len([v for v in values if v.startswith(b'cut-')])} from the cut producer, "
                                     f"{len(acked)} acknowledged")
    finally:
        cluster.close()
