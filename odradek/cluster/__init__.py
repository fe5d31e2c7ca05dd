"""Cluster model of one broker's replicas (Kafka's ``kafka.cluster``): :class:`Partition` — one
topic-partition's replica, its leadership state taken from a :class:`PartitionState` (leader,
epochs, ISR, replicas), its log and high watermark. It is a sans-I/O core: the replica manager
hands it the log and decides when."""
