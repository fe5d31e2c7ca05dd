"""The group coordinator: classic consumer groups and committed offsets on ``__consumer_offsets``.

* :mod:`~odradek.coordinator.records` -- the coordinator's record keys and values.
* :mod:`~odradek.coordinator.group_metadata` -- the sans-I/O classic group state machine.
* :mod:`~odradek.coordinator.group_metadata_manager` -- groups and offsets of the partitions this
  node leads: writes, loading (immigration), unloading (emigration), expiry.
* :mod:`~odradek.coordinator.group_coordinator` -- the asyncio shell: delayed responses, timers,
  coordinator lookup and the ``__consumer_offsets`` topic.
"""
