"""The SCRAM credential arguments of Kafka's tools.

- ``kafka-storage format --add-scram`` (Kafka's ScramParser):
  ``SCRAM-SHA-256=[name=alice,password=alice-secret]`` or
  ``SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",saltedpassword="YCE="]``.
- ``kafka-configs --entity-type users --add-config``:
  ``SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=...]``.

Values may be double-quoted (then they may hold ``,`` and ``]``). ``iterations`` defaults to
4096 and must be within 4096..16384; the salt is random unless given (base64).
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass

from odradek.security.scram_credential import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISM_NAMES,
    ScramMechanism,
    salted_password,
)


class ScramParseError(ValueError):
    pass


@dataclass(frozen=True)
class ScramCredentialSpec:
    mechanism: ScramMechanism
    name: str | None
    iterations: int
    salt: bytes
    salted_password: bytes


def _split_top(text: str, sep: str) -> list[str]:
    """Split at ``sep`` outside brackets and quotes."""
    out: list[str] = []
    depth = 0
    quoted = False
    cur: list[str] = []
    for c in text:
        if c == '"':
            quoted = not quoted
        elif not quoted and c == "[":
            depth += 1
        elif not quoted and c == "]":
            depth -= 1
        if c == sep and depth == 0 and not quoted:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur))
    return out


def _unquote(v: str) -> str:
    v = v.strip()
    if len(v) >= 2 and v[0] == v[-1] == '"':
        return v[1:-1]
    return v


def parse_mechanism_entry(entry: str, *, require_name: bool, check_max: bool = True) -> ScramCredentialSpec:
    """One ``MECHANISM=[key=value,...]``; ``check_max`` False leaves the upper bound on the
    iterations to the controller (kafka-configs checks only the minimum)."""
    mech_name, eq, rest = entry.strip().partition("=")
    mech = ScramMechanism.by_name(mech_name.strip())
    if mech is None:
        raise ScramParseError(
            f"The add-scram mechanism {mech_name.strip()} is not supported (supported: "
            f"{', '.join(SCRAM_MECHANISM_NAMES)})."
        )
    rest = rest.strip()
    if not eq or not rest.startswith("[") or not rest.endswith("]"):
        raise ScramParseError(f"Expected {mech.mechanism_name}=[key=value,...], got {entry.strip()!r}")
    values: dict[str, str] = {}
    for kv in _split_top(rest[1:-1], ","):
        if not kv.strip():
            continue
        k, eq2, v = kv.partition("=")
        if not eq2:
            raise ScramParseError(f"Expected key=value in {entry.strip()!r}, got {kv.strip()!r}")
        values[k.strip().lower()] = _unquote(v)
    known = {"name", "password", "iterations", "salt", "saltedpassword"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ScramParseError(f"Unknown SCRAM configuration key(s): {', '.join(unknown)}")
    name = values.get("name")
    if require_name and not name:
        raise ScramParseError("You must supply 'name' to add-scram")
    try:
        iterations = int(values.get("iterations", DEFAULT_ITERATIONS))
    except ValueError as e:
        raise ScramParseError(f"iterations must be a number, got {values['iterations']!r}") from e
    if iterations < MIN_ITERATIONS:
        raise ScramParseError(f"The 'iterations' value must be >= {MIN_ITERATIONS} for add-scram")
    if check_max and iterations > MAX_ITERATIONS:
        raise ScramParseError(f"The 'iterations' value must be <= {MAX_ITERATIONS} for add-scram")
    try:
        salt = base64.b64decode(values["salt"], validate=True) if "salt" in values else os.urandom(32)
        if "saltedpassword" in values:
            if "password" in values:
                raise ScramParseError("You must supply one of 'password' or 'saltedpassword', not both")
            if "salt" not in values:
                raise ScramParseError("You must supply 'salt' with 'saltedpassword'")
            salted = base64.b64decode(values["saltedpassword"], validate=True)
        elif "password" in values:
            salted = salted_password(mech, values["password"].encode("utf-8"), salt, iterations)
        else:
            raise ScramParseError("You must supply one of 'password' or 'saltedpassword' to add-scram")
    except binascii.Error as e:
        raise ScramParseError(f"salt and saltedpassword must be base64: {e}") from e
    return ScramCredentialSpec(mech, name, iterations, salt, salted)


def parse_add_scram(text: str) -> ScramCredentialSpec:
    """``kafka-storage format --add-scram`` argument."""
    return parse_mechanism_entry(text, require_name=True)


def parse_add_config(text: str) -> list[ScramCredentialSpec]:
    """``kafka-configs --entity-type users --add-config`` SCRAM entries."""
    return [parse_mechanism_entry(e, require_name=False, check_max=False) for e in _split_top(text, ",") if e.strip()]
