"""Test helper: a message value for any declarative schema, every field set to a non-default value."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from odradek.protocol.schema import Array, Field, default_value


def _in(rng: tuple[int, int] | None, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


class Gen:
    """A message for one version with every present field set to a non-default value."""

    def __init__(self, version: int, *, nulls: bool = False, records_size: int = 9) -> None:
        self.version = version
        self.nulls = nulls
        self.records_size = records_size
        self.counter = itertools.count(1)

    def struct(self, fields: list[Field]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields:
            if f.present(self.version):
                out[f.name] = self.value(f)
            else:
                out[f.name] = default_value(f, self.version)
        return out

    def value(self, f: Field) -> Any:
        if self.nulls and _in(f.nullable, self.version):
            return None
        t = f.type
        if isinstance(t, Array):
            elem = t.elem
            if isinstance(elem, str):
                return [self.prim(elem, None) for _ in range(2)]
            return [self.struct(elem) for _ in range(2)]
        if isinstance(t, list):
            return self.struct(t)
        return self.prim(t, default_value(f, self.version))

    def prim(self, t: str, dflt: Any) -> Any:
        n = next(self.counter)
        if t == "bool":
            return not dflt if dflt is not None else True
        if t == "int8":
            return 10 + n % 100
        if t == "int16":
            return 1000 + n
        if t == "int32":
            return 100_000 + n
        if t == "int64":
            return (1 << 40) + n
        if t == "uint16":
            return 65535 - n
        if t == "uint32":
            return 0xFFFFFFFF - n
        if t == "float64":
            return 0.25 + n
        if t == "uuid":
            return uuid.UUID(int=(n << 64) | 0x5EED)
        if t == "string":
            return f"s{n}-é"
        if t == "bytes":
            return bytes([n % 256, 0, 255])
        if t == "records":
            return bytes([n % 256]) * self.records_size
        raise AssertionError(f"unknown type {t}")
