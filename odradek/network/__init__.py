"""asyncio socket server: framing, per-connection in-order pipelining, size limits; the inter-node client."""
