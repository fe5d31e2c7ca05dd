"""Transactions are not implemented yet: how a client that asks for them is told so.

There is no transaction coordinator. FindCoordinator for a transactional id and InitProducerId
with one answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED with
:data:`TRANSACTIONS_UNSUPPORTED` as the message: every client tried (librdkafka, the Java client,
kafka-python, aiokafka, kafkajs) treats that error as fatal and fails ``init_transactions`` at
once, where COORDINATOR_NOT_AVAILABLE made them retry until their timeout. The broker logs one
line per client and transactional id.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

log = logging.getLogger(__name__)

TRANSACTIONS_UNSUPPORTED = "Transactions are not supported by this broker (Odradek) yet"


class TransactionRefusalLog:
    """Logs a refused transactional request once per (client host, client id, transactional
    id); remembers at most ``limit`` of them, forgetting the oldest."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    def refused(self, api: str, transactional_id: str, client_id: str | None, peer: str) -> None:
        host = peer.rsplit(":", 1)[0]
        key = (host, client_id or "", transactional_id)
        if key in self._seen:
            self._seen.move_to_end(key)
            return
        self._seen[key] = None
        if len(self._seen) > self.limit:
            self._seen.popitem(last=False)
        log.warning(
            "%s for transactional id %r from client %r at %s refused: transactions are not "
            "supported yet (answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED)",
            api, transactional_id, client_id, peer,
        )
