"""The server: KafkaRaftServer starting the roles process.roles names (SharedServer: dir locks,
metadata log, Raft; ControllerServer: QuorumController, ControllerApis on the controller listener;
BrokerServer: KafkaApis, ReplicaManager, delayed operations and their purgatory, MetadataCache), KafkaConfig, and the
controller channel (forwarding, auto topic creation, producer id blocks, registration and
heartbeats) through which the broker reaches the controller."""
