"""Broker role: BrokerServer wiring, KafkaApis, ReplicaManager, Partition, purgatory, MetadataCache, KafkaConfig."""
