"""Kafka's coordinators: brokers that own a slice of an internal topic and the state built on it.

* :mod:`odradek.coordinator.group` -- the group coordinator: classic and KIP-848 consumer groups
  and committed offsets, on ``__consumer_offsets``.
* :mod:`odradek.coordinator.transaction` -- the transaction coordinator: transactional ids,
  producer epochs and transaction states on ``__transaction_state``, and the markers it sends.
"""
