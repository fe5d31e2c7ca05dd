"""Kafka wire protocol, sans-I/O: primitives, headers, one declarative definition per API, error codes."""
