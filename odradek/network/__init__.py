"""The network layer: the sans-I/O Kafka connection core (:mod:`.connection`: framing, response
order, correlation ids), the asyncio socket server around it with the broker-wide limits
(:mod:`.socket_server`, :mod:`.limits`), the contract with the request handler
(:mod:`.request_channel`) and the asyncio client nodes and tools use (:mod:`.client`)."""
