"""The durable partitioned log: segments with offset and time indexes, Log, LogManager (recovery, retention, checkpoints)."""
