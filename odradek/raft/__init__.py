"""Raft for ``__cluster_metadata``: the RaftClient interface and its Listener, the replicated log,
the quorum-state file, snapshots, the sans-I/O Raft core, and the KafkaRaftClient (with its driver
and network channel) that puts the core behind that interface.

Generic over the record type: a :class:`~odradek.raft.serde.RecordSerde` is injected, and nothing
here imports ``odradek.metadata``.
"""
