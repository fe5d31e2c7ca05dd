"""Controller role: ControllerApis (the requests brokers and the controller listener send),
QuorumController, which validates topic, partition, config and broker-registration changes and
turns them into metadata records, and its managers."""
