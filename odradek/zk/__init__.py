"""ZooKeeper mode's data layer (issue 14), after Kafka 3.9's ``kafka.zk`` and ``kafka.server``'s
ZooKeeper clients. ``odradek server`` with ``zookeeper.connect`` (and no ``process.roles``) runs
on it: :mod:`odradek.server.zk_broker_server`.

* :mod:`~odradek.zk.zk_data` (``ZkData``): the znode paths and their JSON payloads, written byte
  for byte as Kafka 3.9 writes them (key orders from :mod:`~odradek.java_order`) and read back
  with a :class:`~odradek.zk.zk_data.ZkDataError` for anything malformed: ``/brokers/ids/<id>``,
  ``/brokers/topics/<topic>`` and its partitions' ``state``, ``/controller``,
  ``/controller_epoch``, ``/cluster/id``, ``/config/...`` and ``/config/changes``,
  ``/admin/delete_topics``, ``/admin/reassign_partitions``, ``/admin/preferred_replica_election``,
  ``/isr_change_notification``, ``/log_dir_event_notification``, ``/feature``;
* :mod:`~odradek.zk.kafka_zk_client` (``KafkaZkClient``): a real ZooKeeper session (kazoo) with
  ``zookeeper.connect`` (chroot included), conditional updates by znode version, writes checked
  against the controller epoch's znode version, and watches and session expiry delivered to
  handlers;
* :mod:`~odradek.zk.admin_zk_client` (``AdminZkClient``): topics created, extended and marked for
  deletion, configs changed with their ``/config/changes`` notifications, as Kafka's admin path
  writes them;
* :mod:`~odradek.zk.zk_config_manager` (``ZkConfigManager``): the ``/config/changes`` listener that
  applies topic and broker config changes.

The ZooKeeper-mode controller itself (``KafkaController``, the partition and replica state
machines, the controller channel manager sending LeaderAndIsr / UpdateMetadata / StopReplica)
belongs in :mod:`odradek.controller`, beside the KRaft ``QuorumController``, and shares its leader
election and replica placement functions.
"""
