"""Odradek: Kafka's server side rebuilt in Python.

The package owns a Kafka-compatible broker (wire protocol, durable partitioned log, request
handling), its controller, and the tooling around it. Existing Kafka clients work unchanged.
"""

__version__ = "0.1.0"

# Client text in odradek's log records (topic names, config values, ids) can never forge a log
# line: every odradek.* record escapes control characters in its message (odradek.logs).
from odradek.logs import install_record_escaping as _install_record_escaping  # noqa: E402

_install_record_escaping()
