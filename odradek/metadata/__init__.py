"""Cluster metadata: the records of ``__cluster_metadata`` (records), the immutable image (image),
the delta that replays records into the next image (delta), the broker's loader that applies
committed records and publishes the changes (loader), and the broker's read API over the current
image (metadata_cache)."""
