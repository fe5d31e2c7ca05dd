"""RecordBatch v2 (magic 2): header view, CRC32C validation, in-place offset assignment, builders, compression."""
