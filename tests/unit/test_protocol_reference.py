"""Our declarative definitions (served and generated) against Kafka's own message JSON (validVersions, flexibleVersions,
and for every version we declare: field order, names, types, nullability and tags, recursively).

The reference lives next to the repository, in ``<repo>/../shared/reference/kafka-protocol``; the
tests skip when it is not there.
"""

from __future__ import annotations

import json
import os
import re
import sys
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from odradek.metadata.records import RECORD_TYPES
from odradek.protocol.messages import ALL_APIS
from odradek.protocol.messages.generated import DEFINITIONS
from odradek.protocol.schema import INF, Api, Array, Field, Schema, parse_versions

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "kafka-protocol"

Shape = list[tuple[str, Any, bool, int | None]]


def _require_reference() -> Path:
    if not (REFERENCE / "messages").is_dir():
        pytest.skip(f"Kafka reference schemas not found in {REFERENCE}")
    return REFERENCE


def load_json(path: Path) -> dict[str, Any]:
    """Kafka's schema files are JSON with ``//`` comment lines."""
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("//")]
    result: dict[str, Any] = json.loads("\n".join(lines))
    return result


@cache
@cache
def _generator_additions() -> Any:
    """scripts/generate_protocol.py's ``apply_addition``: the versions Odradek speaks beyond an
    older reference (Vote v2, KIP-996), written from the KIP; the reference is compared as the
    generator extends it."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "generate_protocol.py"
    spec = importlib.util.spec_from_file_location("generate_protocol_for_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.apply_addition


def reference_messages() -> dict[tuple[int, str], dict[str, Any]]:
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for path in sorted((_require_reference() / "messages").glob("*.json")):
        doc = load_json(path)
        if "apiKey" in doc and doc.get("type") in ("request", "response"):
            _generator_additions()(doc)
            out[(doc["apiKey"], doc["type"])] = doc
    return out


def _parse_schema_text(text: str) -> dict[str, Any]:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("//")]
    result: dict[str, Any] = json.loads("\n".join(lines))
    return result


def fetched_kafka_records() -> dict[str, dict[str, Any]]:
    """Metadata-record schemas of the Apache Kafka 4.x that scripts/kafka_reference.sh fetched
    (its kafka-metadata jar carries them), read in place; {} when it is not fetched."""
    home = Path(os.environ.get("ODRADEK_KAFKA_HOME") or Path.home() / ".cache" / "odradek" / "kafka")
    out: dict[str, dict[str, Any]] = {}
    for jar in sorted((home / "4" / "lib").glob("kafka-metadata-*.jar")):
        with zipfile.ZipFile(jar) as z:
            for name in z.namelist():
                if name.startswith("common/metadata/") and name.endswith("Record.json"):
                    doc = _parse_schema_text(z.read(name).decode())
                    out[doc["name"]] = doc
    return out


@cache
def reference_records() -> dict[str, dict[str, Any]]:
    """The shared reference, where a newer Kafka (the fetched 4.x) defines a record with more
    versions or the reference lacks it, that newer schema: Odradek reads what Kafka 4.x writes."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted((_require_reference() / "metadata-records").glob("*.json")):
        doc = load_json(path)
        out[doc["name"]] = doc
    for name, doc in fetched_kafka_records().items():
        known = out.get(name)
        newer = parse_versions(doc["validVersions"])
        if known is None or (newer is not None and newer[1] > (parse_versions(known["validVersions"]) or (0, -1))[1]):
            out[name] = doc
    return out


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def test_snake() -> None:
    assert snake("ThrottleTimeMs") == "throttle_time_ms"
    assert snake("TopicId") == "topic_id"
    assert snake("IsrNodes") == "isr_nodes"
    assert snake("LastKnownElr") == "last_known_elr"


def _vin(spec: str | None, v: int) -> bool:
    rng = parse_versions(spec)
    return rng is not None and rng[0] <= v <= rng[1]


def ref_shape(
    fields: list[dict[str, Any]], version: int, flexible: bool, common: dict[str, Any]
) -> Shape:
    """(name, type, nullable, tag) of the reference fields present in ``version``."""
    out: Shape = []
    for f in fields:
        if not _vin(f["versions"], version):
            continue
        tag: int | None = None
        if "tag" in f:
            if not (flexible and _vin(f.get("taggedVersions"), version)):
                continue
            tag = int(f["tag"])
        t: str = f["type"]
        is_array = t.startswith("[]")
        elem = t[2:] if is_array else t
        typ: Any
        if elem[:1].isupper():  # a struct: inline "fields" or a commonStruct
            sub = f.get("fields")
            if sub is None:
                sub = common[elem]
            typ = ref_shape(sub, version, flexible, common)
        else:
            typ = elem
        if is_array:
            typ = ("array", typ)
        elif isinstance(typ, list):
            typ = ("struct", typ)
        out.append((snake(f["name"]), typ, _vin(f.get("nullableVersions"), version), tag))
    return out


def _in(rng: tuple[int, int] | None, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


def our_shape(fields: list[Field], version: int, flexible: bool) -> Shape:
    out: Shape = []
    for f in fields:
        if not f.present(version):
            continue
        tag: int | None = None
        if f.tag is not None:
            if not (flexible and _in(f.tagged, version)):
                continue
            tag = f.tag
        t = f.type
        typ: Any
        if isinstance(t, Array):
            elem = t.elem
            typ = ("array", elem if isinstance(elem, str) else our_shape(elem, version, flexible))
        elif isinstance(t, list):
            typ = ("struct", our_shape(t, version, flexible))
        else:
            typ = t
        out.append((f.name, typ, _in(f.nullable, version), tag))
    return out


def _check_versions(
    name: str, ours: tuple[int, int, int], ref: dict[str, Any]
) -> tuple[int, int] | None:
    lo, hi, flex = ours
    valid = parse_versions(ref["validVersions"])
    assert valid is not None
    assert valid[0] <= lo <= valid[1], f"{name}: min version {lo} outside {valid}"
    assert hi == valid[1], f"{name}: max version {hi}, reference {valid[1]}"
    flexible = parse_versions(ref["flexibleVersions"])
    expected_flex = INF if flexible is None else flexible[0]
    if expected_flex > hi:
        # Never flexible in the versions we declare: any flexible_min above hi is equivalent.
        assert flex > hi, f"{name}: flexible from {flex}, reference {ref['flexibleVersions']}"
    else:
        assert flex == expected_flex, f"{name}: flexible from {flex}, reference {expected_flex}"
    return valid


def _compare_fields(name: str, ours: Shape, ref: Shape, version: int) -> None:
    if ours == ref:
        return
    ours_names = [f[0] for f in ours]
    ref_names = [f[0] for f in ref]
    assert ours_names == ref_names, f"{name} v{version}: fields {ours_names} != {ref_names}"
    for a, b in zip(ours, ref, strict=True):
        assert a == b, f"{name} v{version}: field {a[0]}:\n ours {a}\n  ref {b}"


# Every generated definition (served APIs may serve fewer versions: test_protocol_generated
# checks that they are these definitions).
CHECKED_APIS = list(DEFINITIONS.values())


@pytest.mark.parametrize("which", ["request", "response"])
@pytest.mark.parametrize("api", CHECKED_APIS, ids=[a.name for a in CHECKED_APIS])
def test_api_matches_reference(api: Api, which: str) -> None:
    ref = reference_messages().get((api.api_key, which))
    assert ref is not None, f"no reference {which} for API key {api.api_key}"
    assert ref["name"] == f"{api.name}{which.capitalize()}"
    _check_versions(
        f"{api.name}{which.capitalize()}", (api.min_version, api.max_version, api.flexible_min), ref
    )
    common = {s["name"]: s["fields"] for s in ref.get("commonStructs", [])}
    fields = api.request if which == "request" else api.response
    for v in range(api.min_version, api.max_version + 1):
        flexible = api.is_flexible(v)
        _compare_fields(
            ref["name"],
            our_shape(fields, v, flexible),
            ref_shape(ref["fields"], v, flexible, common),
            v,
        )


@pytest.mark.parametrize("name", list(RECORD_TYPES))
def test_metadata_record_matches_reference(name: str) -> None:
    api_key, schema = RECORD_TYPES[name]
    assert isinstance(schema, Schema)
    ref = reference_records().get(name)
    ref_max = (parse_versions(ref["validVersions"]) or (0, -1))[1] if ref is not None else -1
    if schema.max_version > ref_max and not fetched_kafka_records() and not os.environ.get("CI"):
        pytest.skip(f"{name} v{schema.max_version} is newer than the shared reference; fetch Kafka 4.x")
    assert ref is not None, f"no reference for {name}"
    assert ref["apiKey"] == api_key
    assert ref["type"] == "metadata"
    assert isinstance(schema, Schema)
    assert schema.name == name
    _check_versions(name, (schema.min_version, schema.max_version, schema.flexible_min), ref)
    common = {s["name"]: s["fields"] for s in ref.get("commonStructs", [])}
    for v in range(schema.min_version, schema.max_version + 1):
        flexible = v >= schema.flexible_min
        _compare_fields(
            name,
            our_shape(schema.fields, v, flexible),
            ref_shape(ref["fields"], v, flexible, common),
            v,
        )


def test_every_api_key_is_declared_once() -> None:
    keys = [api.api_key for api in ALL_APIS]
    assert len(keys) == len(set(keys))
