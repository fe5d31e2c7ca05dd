"""The ZooKeeper-mode controller's LeaderAndIsr v7 / UpdateMetadata v8 / StopReplica v4, as
ControllerBrokerRequestBatch builds them for a broker-down round and a topic deletion, parsed by
Kafka 3.9's own message classes (kafka-clients 3.9): every byte consumed, every field as sent."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.controller.controller_broker_request_batch import ControllerBrokerRequestBatch
from odradek.controller.controller_context import (
    Broker,
    ControllerContext,
    EndPoint,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
)
from odradek.protocol.messages.generated import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA

from .kafka_reference import find_kafka_tools

JAVA = """
import java.nio.ByteBuffer;
import java.nio.file.*;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.message.*;

public class ParseControlRequests {
    public static void main(String[] args) throws Exception {
        for (int i = 0; i < args.length; i += 3) {
            int key = Integer.parseInt(args[i]);
            short version = Short.parseShort(args[i + 1]);
            ByteBuffer buf = ByteBuffer.wrap(Files.readAllBytes(Paths.get(args[i + 2])));
            ByteBufferAccessor acc = new ByteBufferAccessor(buf);
            Object data;
            if (key == 4) data = new LeaderAndIsrRequestData(acc, version);
            else if (key == 5) data = new StopReplicaRequestData(acc, version);
            else data = new UpdateMetadataRequestData(acc, version);
            if (buf.remaining() != 0) throw new RuntimeException("trailing bytes: " + buf.remaining());
            System.out.println(data);
        }
    }
}
"""

APIS = {4: LEADER_AND_ISR, 5: STOP_REPLICA, 6: UPDATE_METADATA}


class ListSender:
    def __init__(self) -> None:
        self.sent: list[tuple[int, int, int, dict[str, Any]]] = []

    def send_request(self, broker_id: int, api_key: int, version: int, body: dict[str, Any], callback: Any) -> None:
        self.sent.append((broker_id, api_key, version, body))


class NoResponses:
    def leader_and_isr_response(self, broker_id: int, response: dict[str, Any]) -> None: ...

    def update_metadata_response(self, broker_id: int, response: dict[str, Any]) -> None: ...

    def stop_replica_response(self, broker_id: int, response: dict[str, Any], d: set[tuple[str, int]]) -> None: ...


def test_kafka_3_9_parses_the_controllers_requests(tmp_path: Path) -> None:
    tools = find_kafka_tools("3.9")
    jars = sorted((tools.home / "3.9" / "lib").glob("kafka-clients-*.jar"))
    if shutil.which("javac") is None or not jars:
        pytest.skip("javac or kafka-clients 3.9 is missing")
    ctx = ControllerContext(epoch=5, epoch_zk_version=4)
    ctx.set_live_brokers({Broker(b, (EndPoint("127.0.0.1", 9090 + b, "PLAINTEXT", 0),), rack="r1"): 100 + b
                          for b in (2, 3)})
    ctx.set_all_topics({"t", "gone"})
    ctx.add_topic_id("t", uuid.UUID("00000000-0000-0000-0000-000000001111"))
    ctx.update_partition_full_replica_assignment(("t", 0), ReplicaAssignment.of([1, 2, 3]).reassign_to([2, 3, 4]))
    ctx.update_partition_full_replica_assignment(("gone", 0), ReplicaAssignment.of([2, 3]))
    lai = LeaderIsrAndControllerEpoch(LeaderAndIsr(2, (2, 3), 4, 1, 9), 5)
    ctx.put_partition_leadership_info(("t", 0), lai)
    ctx.put_partition_leadership_info(("gone", 0), LeaderIsrAndControllerEpoch(LeaderAndIsr(3, (3,), 1), 5))
    ctx.queue_topic_deletion({"gone"})
    sender = ListSender()
    batch = ControllerBrokerRequestBatch(1, ctx, sender, NoResponses())
    batch.new_batch()
    batch.add_leader_and_isr_request_for_brokers([2, 3], ("t", 0), lai, ctx.partition_full_replica_assignment(("t", 0)),
                                                 is_new=True)
    batch.add_update_metadata_request_for_brokers([2, 3], [("gone", 0)])
    batch.add_stop_replica_request_for_brokers([3], ("gone", 0), delete_partition=True)
    batch.send_requests_to_brokers(5)

    (tmp_path / "ParseControlRequests.java").write_text(JAVA)
    cp = ":".join(str(j) for j in jars)
    subprocess.run(["javac", "-cp", cp, "-d", str(tmp_path), str(tmp_path / "ParseControlRequests.java")],
                   check=True, timeout=120)
    args = []
    for i, (_, key, version, body) in enumerate(sender.sent):
        path = tmp_path / f"req{i}.bin"
        path.write_bytes(b"".join(bytes(b) for b in APIS[key].encode_request(version, body)))
        args += [str(key), str(version), str(path)]
    out = subprocess.run(["java", "-cp", f"{tmp_path}:{cp}", "ParseControlRequests", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert [(k, v) for _, k, v, _ in sender.sent] == [(4, 7), (4, 7), (6, 8), (6, 8), (5, 4)]
    assert len(lines) == 5
    assert ("LeaderAndIsrRequestData(controllerId=1, isKRaftController=false, controllerEpoch=5, brokerEpoch=102, "
            "type=0") in lines[0]
    assert ("partitionIndex=0, controllerEpoch=5, leader=2, leaderEpoch=4, isr=[2, 3], partitionEpoch=9, "
            "replicas=[2, 3, 4, 1], addingReplicas=[4], removingReplicas=[1], isNew=true, leaderRecoveryState=1"
            ) in lines[0]
    assert "liveLeaders=[LeaderAndIsrLiveLeader(brokerId=2, hostName='127.0.0.1', port=9092)]" in lines[0]
    assert "brokerEpoch=103" in lines[1]
    assert "UpdateMetadataRequestData(controllerId=1, isKRaftController=false, type=0, controllerEpoch=5" in lines[2]
    assert "topicName='gone', topicId=AAAAAAAAAAAAAAAAAAAAAA" in lines[2]
    assert "leader=-2, leaderEpoch=0, isr=[3], zkVersion=0, replicas=[2, 3], offlineReplicas=[]" in lines[2]
    assert ("endpoints=[UpdateMetadataEndpoint(port=9093, host='127.0.0.1', listener='PLAINTEXT', "
            "securityProtocol=0)], rack='r1'") in lines[2]
    assert ("StopReplicaRequestData(controllerId=1, isKRaftController=false, controllerEpoch=5, brokerEpoch=103"
            ) in lines[4]
    assert "partitionStates=[StopReplicaPartitionState(partitionIndex=0, leaderEpoch=-2, deletePartition=true)]" in lines[4]
