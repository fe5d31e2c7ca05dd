"""Broker role: BrokerServer wiring, KafkaApis, ReplicaManager, delayed operations and their purgatory, MetadataCache, KafkaConfig."""
