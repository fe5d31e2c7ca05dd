"""Kafka's generated ``*JsonConverter.write``: a decoded message as the JSON Kafka's tools print.

Kafka's tools (``kafka-dump-log.sh --cluster-metadata-decoder``, the metadata shell) print a
message with the converter its message generator writes for every schema. This renders the dicts
the schemas of :mod:`odradek.protocol.schema` decode to in the same shape:

* fields in declaration order, under their camelCase names (``topic_id`` → ``topicId``);
* every field the version has, except a tagged field holding its default, which is left out;
* UUIDs as Kafka prints them (URL-safe base64 without padding), bytes as standard base64,
  structs as objects, arrays as lists, null as null.

``dumps`` serialises as Jackson's ``JsonNode.toString`` does: no spaces, non-ASCII unescaped.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from typing import Any

from odradek.protocol.schema import Array, Field, default_value


def camel_case(snake: str) -> str:
    """``voter_directory_id`` → ``voterDirectoryId`` (the JSON name of a schema field)."""
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def uuid_to_kafka(value: uuid.UUID) -> str:
    """A UUID as Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def _in(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


def _value(type_: Any, value: Any, version: int) -> Any:
    if value is None:
        return None
    if isinstance(type_, Array):
        return [_value(type_.elem, v, version) for v in value]
    if isinstance(type_, list):
        return to_json(type_, version, value)
    if type_ == "uuid":
        return uuid_to_kafka(value) if isinstance(value, uuid.UUID) else str(value)
    if type_ in ("bytes", "records"):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def to_json(fields: Sequence[Field], version: int, obj: dict[str, Any]) -> dict[str, Any]:
    """The JSON object Kafka's converter writes for ``obj`` decoded at ``version``."""
    out: dict[str, Any] = {}
    for f in fields:
        if not f.present(version):
            continue
        value = obj.get(f.name, default_value(f, version))
        if _in(f.tagged, version) and value == default_value(f, version):
            continue
        out[camel_case(f.name)] = _value(f.type, value, version)
    return out


def dumps(node: Any) -> str:
    """Serialise as Jackson's ``JsonNode.toString``: compact, UTF-8 characters unescaped."""
    return json.dumps(node, separators=(",", ":"), ensure_ascii=False)
