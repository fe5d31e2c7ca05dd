"""PySpark data source for Odradek topics: batch and streaming, read and write.

```python
from odradek.spark import OdradekDataSource
spark.dataSource.register(OdradekDataSource)
df = (spark.readStream.format("odradek")
      .option("kafka.bootstrap.servers", "localhost:9092")
      .option("subscribe", "clicks")
      .load())
```

The schema and the options are spark-sql-kafka's (see :mod:`odradek.spark.options`). Executors
read through Odradek's own fetch path by default (:mod:`odradek.spark.fetcher`: Metadata,
ListOffsets and Fetch v12 over a blocking socket; :mod:`odradek.spark.arrow_decode`: record batches
decoded to Arrow columns with numpy). The source option ``odradek.reader`` picks the path:
``odradek`` (default) or ``librdkafka`` (confluent-kafka consumers, as before). ``kafka.*``
settings the own path cannot honour (``security.protocol`` other than PLAINTEXT, ``sasl.*``,
``ssl.*``, ``isolation.level=read_committed``) make the default librdkafka; asking for
``odradek`` with them is an error. Writing goes through librdkafka; Arrow batches to/from Spark.
Needs ``pip install 'odradek[spark]'`` (pyspark >= 4.2, pyarrow, pandas) and Java 17.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["OdradekDataSource", "OdradekOptionError", "kafka_schema"]

if TYPE_CHECKING:
    from odradek.spark.options import OdradekOptionError
    from odradek.spark.source import OdradekDataSource, kafka_schema


def __getattr__(name: str) -> Any:
    # Lazy, so that `odradek.spark.options` can be imported without pyspark installed.
    if name in ("OdradekDataSource", "kafka_schema"):
        from odradek.spark import source

        return getattr(source, name)
    if name == "OdradekOptionError":
        from odradek.spark.options import OdradekOptionError

        return OdradekOptionError
    raise AttributeError(f"module 'odradek.spark' has no attribute {name!r}")
