"""Client properties as Kafka's tools take them: ``k=v`` arguments and ``.properties`` files, the
values the clients here understand (with Kafka's names and defaults), and the rest refused or
warned about the way Kafka's clients do."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TextIO

from odradek.security.client_security import ClientSecurityError, client_security, is_security_key
from odradek.server.kafka_config import parse_properties


class ConfigError(Exception):
    """Bad client configuration (the message is printed as is)."""


def parse_kv_args(args: Iterable[str] | None) -> dict[str, str]:
    """``["a=b", "c=d=e"]`` -> ``{"a": "b", "c": "d=e"}``; an argument without ``=`` is refused
    (Kafka's CommandLineUtils.parseKeyValueArgs message)."""
    out: dict[str, str] = {}
    for arg in args or ():
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise ConfigError(f"Invalid command line properties: {arg}")
        out[key] = value
    return out


def load_properties(path: str | None) -> dict[str, str]:
    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return parse_properties(f.read())
    except OSError as e:
        raise ConfigError(f"Failed to load properties file {path}: {e.strerror or e}") from e


PRODUCER_DEFAULTS: dict[str, str] = {
    "acks": "all",
    "linger.ms": "5",
    "batch.size": "16384",
    "buffer.memory": "33554432",
    "compression.type": "none",
    "max.block.ms": "60000",
    "request.timeout.ms": "30000",
    "delivery.timeout.ms": "120000",
    "retries": "2147483647",
    "retry.backoff.ms": "100",
    "max.in.flight.requests.per.connection": "5",
    "max.request.size": "1048576",
    "client.id": "odradek-producer",
    "allow.auto.create.topics": "true",
    "metadata.max.age.ms": "300000",
}

CONSUMER_DEFAULTS: dict[str, str] = {
    "auto.offset.reset": "latest",
    "enable.auto.commit": "true",
    "auto.commit.interval.ms": "5000",
    "isolation.level": "read_uncommitted",
    "fetch.min.bytes": "1",
    "fetch.max.bytes": "52428800",
    "fetch.max.wait.ms": "500",
    "max.partition.fetch.bytes": "1048576",
    "session.timeout.ms": "45000",
    "heartbeat.interval.ms": "3000",
    "max.poll.interval.ms": "300000",
    "request.timeout.ms": "30000",
    "default.api.timeout.ms": "60000",
    "retry.backoff.ms": "100",
    "client.id": "odradek-consumer",
    "group.id": "",
    "group.instance.id": "",
    "allow.auto.create.topics": "true",
    "metadata.max.age.ms": "300000",
}

# Accepted and without effect on these clients (serializers are bytes here; the tools use them).
_NO_EFFECT = frozenset({
    "bootstrap.servers", "key.serializer", "value.serializer", "key.deserializer",
    "value.deserializer", "client.rack",
    "receive.buffer.bytes", "send.buffer.bytes", "socket.connection.setup.timeout.ms",
    "socket.connection.setup.timeout.max.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms",
    "connections.max.idle.ms", "metadata.max.idle.ms", "check.crcs", "max.poll.records",
    "exclude.internal.topics", "group.protocol", "auto.include.jmx.reporter", "metric.reporters",
})


class ClientConfig:
    """Typed access to a merged property map (defaults, file, command line)."""

    def __init__(self, defaults: dict[str, str], *layers: dict[str, str], warn: TextIO | None = None) -> None:
        self.props = dict(defaults)
        for layer in layers:
            self.props.update(layer)
        try:
            self.security = client_security(self.props)  # TLS / SASL (security.protocol, ssl.*, sasl.*)
        except ClientSecurityError as e:
            raise ConfigError(f"Invalid client configuration: {e}") from e
        for key in [k for k in self.props if is_security_key(k)]:
            del self.props[key]
        if self.props.get("enable.idempotence", "false").strip().lower() != "false":
            raise ConfigError("enable.idempotence=true is not supported by odradek's tools (their producer is not idempotent)")
        if self.props.get("transactional.id"):
            raise ConfigError("transactional.id is not supported by odradek's tools (their producer is not transactional)")
        self.props.pop("enable.idempotence", None)
        out = warn if warn is not None else sys.stderr
        for key in sorted(self.props):
            if key not in defaults and key not in _NO_EFFECT:
                print(f"WARN The configuration '{key}' was supplied but isn't a known config.", file=out)

    def get(self, key: str) -> str:
        return self.props[key]

    def int(self, key: str) -> int:
        value = self.props[key]
        try:
            return int(value.strip())
        except ValueError:
            raise ConfigError(f"Invalid value {value} for configuration {key}: Not a number of type INT") from None

    def bool(self, key: str) -> bool:
        value = self.props[key].strip().lower()
        if value not in ("true", "false"):
            raise ConfigError(f"Invalid value {self.props[key]} for configuration {key}: Expected value to be either true or false")
        return value == "true"

    def choice(self, key: str, choices: Iterable[str]) -> str:
        value = self.props[key].strip().lower()
        allowed = list(choices)
        if value not in allowed:
            raise ConfigError(f"Invalid value {self.props[key]} for configuration {key}: String must be one of: {', '.join(allowed)}")
        return value
