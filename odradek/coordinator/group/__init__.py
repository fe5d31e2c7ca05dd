"""The group coordinator (Kafka's group-coordinator module): consumer groups and committed offsets
on the ``__consumer_offsets`` partitions this node leads.

Sans-I/O cores (no clock, no asyncio, no files; time comes in as ``now_ms``):

* :mod:`.classic_group`, :mod:`.classic_group_member` -- Kafka's ``ClassicGroup`` /
  ``ClassicGroupMember``: the JoinGroup/SyncGroup/Heartbeat/LeaveGroup state machine.
* :mod:`.consumer_group`, :mod:`.consumer_group_member` -- Kafka's ``ConsumerGroup`` /
  ``ConsumerGroupMember``: a KIP-848 group (``group.protocol=consumer``) rebuilt from its records.
* :mod:`.consumer_group_heartbeat` -- ``GroupMetadataManager.consumerGroupHeartbeat``: joins,
  heartbeats, leaves, session and rebalance timeouts, as records.
* :mod:`.target_assignment_builder`, :mod:`.current_assignment_builder` -- Kafka's
  ``TargetAssignmentBuilder`` (the group's target for a new epoch) and ``CurrentAssignmentBuilder``
  (one member's convergence to it); :mod:`.assignors` -- the ``uniform`` and ``range`` assignors.
* :mod:`.records`, :mod:`.consumer_group_records` -- the ``__consumer_offsets`` records (offset
  commits and classic groups; KIP-848 groups); :mod:`.consumer_protocol` -- the consumer's
  embedded subscription/assignment bytes of classic groups.
* :mod:`.group_coordinator_config` -- ``GroupCoordinatorConfig``: the ``group.*`` settings;
  :mod:`.dynamic_group_config` -- ``GroupConfig``: a group's own session timeout and heartbeat
  interval (resource type GROUP), validated, described and laid over them.
* :mod:`.txn_offsets` -- transactional offset commits pending until their transaction's COMMIT or
  ABORT marker (Kafka's ``pendingTransactionalOffsets``).

The shell (asyncio):

* :mod:`.group_coordinator` -- ``GroupCoordinator``: the group APIs, waiters, per-group locks,
  timers (:mod:`.coordinator_timer`); ``__consumer_offsets`` creation and FindCoordinator go
  through :mod:`odradek.coordinator.internal_topic`.
* :mod:`.group_metadata_manager` -- loading (immigration), unloading (emigration), writes and
  expiry of the groups and offsets of each partition; :mod:`.offset_metadata_manager` --
  OffsetCommit/OffsetFetch/OffsetDelete.
* :mod:`.group_events` -- the INFO lines an operator reads about classic groups.
"""
