"""A small Kafka-protocol producer and consumer for the ``odradek`` data-plane tools.

``produce``, ``consume`` and ``perf`` run on these, over
:class:`~odradek.network.client.NetworkClient`, against any Kafka-protocol cluster (Odradek or
Kafka): :mod:`.cluster` (bootstrap, metadata, per-broker connections and version negotiation),
:mod:`.producer` (record batches per partition, linger / batch.size, acks, compression, retries),
:mod:`.consumer` (Fetch with decoding, positions from ListOffsets, read_committed filtering) and
:mod:`.group` (the classic consumer-group protocol: JoinGroup / SyncGroup / Heartbeat /
OffsetCommit with the range assignor). :mod:`.config` reads client properties the way Kafka's
tools take them, with TLS and SASL from Kafka's client security keys
(:mod:`odradek.security.client_security`).
"""
