"""Kafka's coordinators: brokers that own a slice of an internal topic and the state built on it.

* :mod:`odradek.coordinator.group` -- the group coordinator: classic and KIP-848 consumer groups
  and committed offsets, on ``__consumer_offsets``.
* ``odradek.coordinator.transaction`` (issue 13, not here yet) -- the transaction coordinator on
  ``__transaction_state``.
"""
