"""Broker role: BrokerServer wiring, KafkaApis, ReplicaManager, delayed operations and their
purgatory, MetadataCache, KafkaConfig, and the controller channel (forwarding, auto topic creation,
producer id blocks, registration and heartbeats) through which the broker reaches the controller."""
