"""ZooKeeper mode's future home (issue 14). Nothing lives here yet, and ZooKeeper mode stays
refused at start-up (``process.roles`` empty, or ``zookeeper.connect`` set: see
:class:`~odradek.server.kafka_config.KafkaConfig`).

What will live here, after Kafka's ``kafka.zk`` (``KafkaZkClient``, ``ZkData``):

* the znode paths and their JSON payloads: ``/brokers/ids/<id>`` (a broker's ephemeral
  registration), ``/brokers/topics/<topic>`` and its partitions' ``state`` (leader, leader epoch,
  ISR, controller epoch), ``/controller`` (the ephemeral znode whose creator is the controller)
  and ``/controller_epoch``, ``/admin/delete_topics``, ``/admin/reassign_partitions``,
  ``/admin/preferred_replica_election``, ``/isr_change_notification`` and ``/config/...``;
* the client wrapper over a real ZooKeeper session (kazoo): conditional updates by znode version,
  watches turned into controller events, session expiry handling.

The ZooKeeper-mode controller itself (``KafkaController``, the partition and replica state
machines, the controller channel manager sending LeaderAndIsr / UpdateMetadata / StopReplica)
belongs in :mod:`odradek.controller`, beside the KRaft ``QuorumController``, and shares its leader
election and replica placement functions.
"""
