"""The generated definitions (scripts/generate_protocol.py) against the hand-written ones they
replace: for every served API, both directions, every served version and message variant, the
same bytes and the same decoded message."""

from __future__ import annotations

from typing import Any

import pytest
from schema_values import Gen

from odradek.protocol.messages import ALL_APIS
from odradek.protocol.messages.generated import DEFINITIONS
from odradek.protocol.schema import Api


def plain(value: Any) -> Any:
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _encode(api: Api, which: str, version: int, obj: dict[str, Any]) -> bytes:
    if which == "request":
        return b"".join(api.encode_request(version, obj))
    return b"".join(api.encode_response(version, obj))


def _decode(api: Api, which: str, version: int, data: bytes) -> dict[str, Any]:
    if which == "request":
        got, end = api.decode_request(version, data)
    else:
        got, end = api.decode_response(version, data)
    assert end == len(data)
    return plain(got)  # type: ignore[no-any-return]


CASES = [
    (api, which, v)
    for api in ALL_APIS
    for which in ("request", "response")
    for v in range(api.min_version, api.max_version + 1)
]


@pytest.mark.parametrize(("old", "which", "version"), CASES, ids=[f"{a.name}-{w}-v{v}" for a, w, v in CASES])
def test_generated_encodes_as_hand_written(old: Api, which: str, version: int) -> None:
    new = DEFINITIONS[old.api_key]
    assert new.name == old.name
    assert new.min_version <= version <= new.max_version
    assert new.is_flexible(version) == old.is_flexible(version)
    fields = old.request if which == "request" else old.response
    for variant in ({}, {"nulls": True}, {"records_size": 1500}):
        obj = Gen(version, **variant).struct(fields)
        data = _encode(old, which, version, obj)
        assert _encode(new, which, version, obj) == data, variant
        assert _decode(new, which, version, data) == _decode(old, which, version, data) == obj
    # Missing keys take the same defaults, and absent fields decode to the same values.
    empty = _encode(old, which, version, {})
    assert _encode(new, which, version, {}) == empty
    assert _decode(new, which, version, empty) == _decode(old, which, version, empty)
