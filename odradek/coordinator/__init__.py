"""Kafka's coordinators: brokers that own a slice of an internal topic and the state built on it.

* :mod:`odradek.coordinator.group` -- the group coordinator: classic and KIP-848 consumer groups
  and committed offsets, on ``__consumer_offsets``.
* :mod:`odradek.coordinator.transaction` -- the transaction coordinator: transactional ids,
  producer epochs and transaction states on ``__transaction_state``, and the markers it sends.
* :mod:`odradek.coordinator.internal_topic` -- what both share about their internal topic: its
  creation through the controller (configured replication factor, 1 on a single-node cluster),
  the partition count of an existing topic taken up, FindCoordinator's partition leader, and the
  loading of the partitions this node leads (:class:`~.internal_topic.CoordinatorPartitions`).
"""
