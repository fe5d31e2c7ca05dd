"""Kafka wire protocol, sans-I/O: primitives, headers, the codec, one declarative definition per
API (generated from Kafka's message schemas into ``messages/generated``), error codes."""
