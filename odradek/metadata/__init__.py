"""Cluster metadata: the records of ``__cluster_metadata`` (records) and the serde Raft carries
them with (metadata_record_serde), the immutable image (image), the delta that replays records
into the next image (delta), KIP-868 metadata transactions as a listener replays them
(transactions), the broker's Raft listener that applies committed records and publishes the
changes (loader), and the broker's read API over the current image (metadata_cache)."""
