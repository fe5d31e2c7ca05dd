"""The server: KafkaRaftServer starting the roles process.roles names (SharedServer: dir locks,
metadata log, Raft; ControllerServer: QuorumController, controller listener; BrokerServer:
KafkaApis, ReplicaManager, Partition, purgatory), KafkaConfig."""
