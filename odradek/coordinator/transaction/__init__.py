"""The transaction coordinator: transactional ids on ``__transaction_state``.

* :mod:`.transaction_metadata` -- one transactional id's state machine (Empty, Ongoing,
  PrepareCommit/PrepareAbort, CompleteCommit/CompleteAbort, Dead, PrepareEpochFence); sans-I/O.
* :mod:`.transaction_log` -- the ``__transaction_state`` record key and value, as Kafka writes them.
* :mod:`.transaction_state_manager` -- which partitions this broker coordinates, loading them on
  leadership, appending state changes, timed-out and expired transactional ids.
* :mod:`.transaction_marker_channel_manager` -- WriteTxnMarkers to the partition leaders, retried
  until every one has answered, then the transaction's completion.
* :mod:`.transaction_coordinator` -- InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
  and the describe/list answers, on top of the above.
"""
