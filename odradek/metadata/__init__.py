"""Cluster metadata: the records of __cluster_metadata, the metadata image and delta, and the loader that applies them."""
