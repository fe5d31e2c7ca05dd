"""The metadata log (__cluster_metadata) and, later, the Raft quorum that replicates it."""
