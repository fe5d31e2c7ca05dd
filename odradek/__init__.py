"""Odradek: Kafka's server side rebuilt in Python.

The package owns a Kafka-compatible broker (wire protocol, durable partitioned log, request
handling), its controller, and the tooling around it. Existing Kafka clients work unchanged.
"""

__version__ = "0.1.0"
