"""RecordBatch v2 bytes -> Arrow columns, without a Python object per record.

The package owns the Spark data source's decoding hot path: :mod:`.decoder`
(:func:`decode_records`: batch selection, decompression, the pass over the records),
:mod:`.boundaries` (batch headers and record positions), :mod:`.runs` (column-wise decoding of
runs of same-size records), :mod:`.general` (every other record, field by field),
:mod:`.columns` (the Arrow arrays and Spark's row layout) and :mod:`.views` (the numpy views and
tables they all read through).

The executors of the data source read raw record batches (see :mod:`odradek.spark.fetcher`) and
turn them into spark-sql-kafka's columns here:

1. :func:`scan_batches` walks the 61-byte batch headers (one Python step per *batch*).
2. The records sections of the data batches in the wanted offset range are decompressed (C codecs)
   and concatenated into one buffer, so that one pass decodes every record of a fetch response.
   The decoding works on that buffer through numpy views: the bytes, and overlapping views of
   the 2, 4 and 8 bytes starting at every byte (``Views``).
3. Record start positions: records follow each other, so each start depends on the previous
   record's length varint. A scalar loop reads the record sizes (a table lookup on 2 bytes)
   until it has seen three records of the same size, then *guesses* that a run of records has
   that size and checks the guess for the whole run at once with numpy (each record's length
   varint must be the same bytes). Fixed-size records, the common case, cost a handful of numpy
   passes; records of varying size fall back to the scalar loop, one table lookup per record.
4. Runs of same-size records are decoded column-wise when every record of the run has its
   fields at the same place: one record is parsed in Python (``runs._layout``), and every record of
   the run is checked to have the same length bytes, the same continuation bits in its timestamp
   and offset deltas (so the same varint widths), the same key and value length bytes and a zero
   header count in its last byte. A run splits where that stops holding. Then each field is a
   column: long runs (``runs._MIN_FAST_RUN`` records) are read through strided views of the batch
   while it is in the CPU's caches, one run at a time; short runs are gathered, all the runs of a
   record size at once. Varints of one or two bytes are decoded by a table lookup on 16 bits.
5. Every other record (varying sizes, headers, anything the checks refused) goes through the
   general path: each field is decoded for all those records at once, gathering 2 bytes per
   record per field (a table gives value and width; longer varints take more passes, for the
   records that have them).
6. Keys and values: for the records decoded column-wise, one strided copy per long run and one
   gather per group of short runs into the ``binary`` array's data buffer. When there are others,
   every row's bytes are copied by Arrow's C++ ``take`` from a zero-copy binary array over the
   buffer whose rows are the keys (or values) and the gaps between them. Null keys/values
   (length -1) go into a validity bitmap.
7. Headers (only when asked for) are read per record, but only for records that have any.

Control batches and records outside ``[start, end)`` are skipped. LogAppendTime batches give
every record the batch's max timestamp, as :func:`odradek.records.records.decode_records` does.
Malformed records raise :class:`~odradek.records.errors.CorruptRecordError` whichever path
decodes them (the column-wise paths leave anything unusual to the general path, which reports
it).
"""

from odradek.spark.arrow_decode.boundaries import BatchScan, scan_batches
from odradek.spark.arrow_decode.columns import (
    HEADERS_TYPE,
    DecodedRecords,
    split_batch,
    to_record_batch,
)
from odradek.spark.arrow_decode.decoder import MAX_OFFSET, decode_records

__all__ = [
    "HEADERS_TYPE",
    "MAX_OFFSET",
    "BatchScan",
    "DecodedRecords",
    "decode_records",
    "scan_batches",
    "split_batch",
    "to_record_batch",
]
