"""The transaction coordinator (Kafka's ``kafka.coordinator.transaction``): transactional ids in
``__transaction_state``, their state machine, the markers sent to partition leaders."""
