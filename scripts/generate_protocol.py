"""Generate Odradek's declarative protocol definitions from Kafka's message schemas.

    python3 scripts/generate_protocol.py [REFERENCE] [--out DIR] [--check]

REFERENCE is the directory of Kafka's protocol schemas (``messages/*.json`` inside it); it
defaults to ``../shared/reference/kafka-protocol`` next to the project root. For every
request/response pair (same ``apiKey``) the script writes one module to
``odradek/protocol/messages/generated/<api>.py`` declaring an :class:`~odradek.protocol.schema.Api`
with Kafka's valid versions, flexible versions and, per field, versions, nullable versions, tag
and tagged versions and default; named and common structs become module-level constants. The
package ``__init__`` lists every generated API by key. Only the wire format is carried over: the
JSON itself, its prose (``about``) and what only Kafka's Java code uses (entity types, map keys,
listeners) are not. ``--check`` writes nothing and exits 1 when a committed file differs.

Which of these APIs the broker serves, and from which version, is decided by hand in
:mod:`odradek.protocol.messages`.

Where the reference is older than a version Odradek speaks, :data:`ADDITIONS` extends its schema
before translation: written here from Kafka's published protocol (the KIP), never copied from
Kafka's JSON, and applied only while the reference stops below that version (a newer reference
that has it is used as it is). Today: Vote v2, whose request carries ``PreVote`` (KIP-996, Kafka
4.0); its response is v1's. Produce v12 and TxnOffsetCommit v5 (KIP-890 part 2, Kafka 4.0): the
previous version on the wire, sent by producers of transactions version 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = ROOT.parent / "shared" / "reference" / "kafka-protocol"
DEFAULT_OUT = ROOT / "odradek" / "protocol" / "messages" / "generated"
COMMAND = "python3 scripts/generate_protocol.py"
LINE_LENGTH = 100
PRIMITIVES = {
    "bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
    "string", "bytes", "records", "uuid",
}  # fmt: skip


class GeneratorError(ValueError):
    """A schema this generator cannot translate faithfully."""


@dataclass(frozen=True)
class Addition:
    """Versions Odradek speaks beyond the reference's schema ``name``: the new top version,
    the fields it adds (by struct name, ``""`` for the top level), and a note for the header."""

    max_version: int
    fields: dict[str, list[dict[str, Any]]]
    note: str


ADDITIONS: dict[str, Addition] = {
    "VoteRequest": Addition(
        2,
        {"PartitionData": [{"name": "PreVote", "type": "bool", "versions": "2+"}]},
        "VoteRequest v2 adds PreVote (KIP-996)",
    ),
    "VoteResponse": Addition(2, {}, "VoteResponse v2 is v1 (KIP-996)"),
    "ProduceRequest": Addition(12, {}, "ProduceRequest v12 is v11 (KIP-890: transactions version 2)"),
    "ProduceResponse": Addition(12, {}, "ProduceResponse v12 is v11 (KIP-890)"),
    "TxnOffsetCommitRequest": Addition(
        5, {}, "TxnOffsetCommitRequest v5 is v4 (KIP-890: transactions version 2)"
    ),
    "TxnOffsetCommitResponse": Addition(5, {}, "TxnOffsetCommitResponse v5 is v4 (KIP-890)"),
}


def _max_version(valid: str) -> int:
    return int(valid.partition("-")[2] or valid)


def apply_addition(doc: dict[str, Any]) -> str | None:
    """Extend ``doc`` in place with its :data:`ADDITIONS` entry when the reference stops below
    it; returns the note for the generated header (None: nothing added)."""
    addition = ADDITIONS.get(doc.get("name", ""))
    if addition is None or _max_version(doc["validVersions"]) >= addition.max_version:
        return None
    lo = doc["validVersions"].partition("-")[0]
    doc["validVersions"] = f"{lo}-{addition.max_version}"
    for struct, extra in addition.fields.items():
        target = doc["fields"] if struct == "" else _struct_fields(doc, struct)
        names = {f["name"] for f in target}
        for f in extra:
            if f["name"] in names:
                raise GeneratorError(f"{doc['name']}.{struct}: {f['name']} is already there")
            target.append(dict(f))
    return addition.note


def _struct_fields(doc: dict[str, Any], struct: str) -> list[dict[str, Any]]:
    def find(fields: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        for f in fields:
            if "fields" in f:
                if _elem(f["type"]) == struct:
                    found: list[dict[str, Any]] = f["fields"]
                    return found
                inner = find(f["fields"])
                if inner is not None:
                    return inner
        return None

    for common in doc.get("commonStructs", []):
        if common["name"] == struct:
            fields: list[dict[str, Any]] = common["fields"]
            return fields
    found = find(doc["fields"])
    if found is None:
        raise GeneratorError(f"{doc['name']}: no struct {struct} to extend")
    return found


def load_schema(path: Path) -> dict[str, Any]:
    """Kafka's schema files are JSON with whole-line ``//`` comments."""
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("//")]
    doc: dict[str, Any] = json.loads("\n".join(lines))
    return doc


def snake(name: str) -> str:
    """``ThrottleTimeMs`` → ``throttle_time_ms``; ``ISRNodes`` → ``isr_nodes``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _default(value: Any) -> str:
    """A JSON default as the string the declarative definitions carry (``"-1"``, ``"null"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    raise GeneratorError(f"unsupported default {value!r}")


# ---------------------------------------------------------------------------------------------
# Layout: calls rendered on one line when they fit, else one argument per line (as ruff formats)


def call(func: str, args: list[str], indent: int, suffix: str = "") -> list[str]:
    pad = " " * indent
    flat = f"{pad}{func}({', '.join(args)}){suffix}"
    if len(flat) <= LINE_LENGTH or not args:
        return [flat]
    inner = " " * (indent + 4)
    return [f"{pad}{func}(", *(f"{inner}{a}," for a in args), f"{pad}){suffix}"]


def q(text: str) -> str:
    return json.dumps(text)


# ---------------------------------------------------------------------------------------------
# One message (a request or a response)


@dataclass
class Message:
    doc: dict[str, Any]
    prefix: str  # constant-name prefix for its structs, "" unless request and response clash
    structs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for s in self.doc.get("commonStructs", []):
            self._register(s["name"], s["fields"])
        self._collect(self.doc["fields"])

    def _register(self, name: str, fields: list[dict[str, Any]]) -> None:
        if name in self.structs and self.structs[name] != fields:
            raise GeneratorError(f"{self.doc['name']}: struct {name} is defined twice")
        self.structs[name] = fields

    def _collect(self, fields: list[dict[str, Any]]) -> None:
        for f in fields:
            if "fields" in f:
                self._register(_elem(f["type"]), f["fields"])
                self._collect(f["fields"])

    def constant(self, struct: str) -> str:
        if struct not in self.structs:
            raise GeneratorError(f"{self.doc['name']}: unknown struct {struct}")
        return f"_{self.prefix}{snake(struct).upper()}"

    def type_expr(self, json_type: str) -> str:
        elem = _elem(json_type)
        if elem in PRIMITIVES:
            inner = q(elem)
        elif elem[:1].isupper():
            inner = self.constant(elem)
        else:
            raise GeneratorError(f"{self.doc['name']}: unknown type {json_type}")
        return f"A({inner})" if json_type.startswith("[]") else inner

    def field_lines(self, f: dict[str, Any], indent: int) -> list[str]:
        if "flexibleVersions" in f:
            raise GeneratorError(f"{self.doc['name']}.{f['name']}: per-field flexibleVersions")
        args = [q(snake(f["name"])), self.type_expr(f["type"]), q(f["versions"])]
        if "nullableVersions" in f:
            args.append(f"nullable={q(f['nullableVersions'])}")
        if "tag" in f:
            args.append(f"tag={int(f['tag'])}")
            args.append(f"tagged={q(f['taggedVersions'])}")
        elif "taggedVersions" in f:
            raise GeneratorError(f"{self.doc['name']}.{f['name']}: taggedVersions without tag")
        if "default" in f:
            args.append(f"default={q(_default(f['default']))}")
        return call("F", args, indent, ",")

    def struct_order(self) -> Iterator[str]:
        """Every struct, each after the structs its fields use."""
        done: set[str] = set()

        def visit(name: str, path: tuple[str, ...]) -> Iterator[str]:
            if name in done:
                return
            if name in path:
                raise GeneratorError(f"{self.doc['name']}: struct {name} contains itself")
            for f in self.structs[name]:
                elem = _elem(f["type"])
                if elem not in PRIMITIVES:
                    yield from visit(elem, (*path, name))
            done.add(name)
            yield name

        for f in self.doc["fields"]:
            elem = _elem(f["type"])
            if elem not in PRIMITIVES:
                yield from visit(elem, ())

    def struct_blocks(self) -> list[list[str]]:
        blocks = []
        for name in self.struct_order():
            lines = [f"{self.constant(name)} = S("]
            for f in self.structs[name]:
                lines += self.field_lines(f, 4)
            lines.append(")")
            blocks.append(lines)
        return blocks


def _elem(json_type: str) -> str:
    return json_type[2:] if json_type.startswith("[]") else json_type


# ---------------------------------------------------------------------------------------------
# One API module


@dataclass
class ApiPair:
    api_key: int
    name: str  # "Produce"
    request: dict[str, Any]
    response: dict[str, Any]
    request_file: str
    response_file: str
    additions: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return snake(self.name)

    @property
    def constant(self) -> str:
        return self.module.upper()

    def versions(self) -> tuple[int, int, int | None]:
        valid = self.request["validVersions"]
        flexible = self.request["flexibleVersions"]
        if self.response["validVersions"] != valid or self.response["flexibleVersions"] != flexible:
            raise GeneratorError(f"{self.name}: request and response versions differ")
        lo, _, hi = valid.partition("-")
        flex_min = None if flexible == "none" else int(flexible.rstrip("+"))
        if flexible != "none" and not flexible.endswith("+"):
            raise GeneratorError(f"{self.name}: flexible versions {flexible} are not open-ended")
        return int(lo), int(hi or lo), flex_min

    def render(self) -> str:
        lo, hi, flex = self.versions()
        req = Message(self.request, "")
        resp = Message(self.response, "")
        if set(req.structs) & set(resp.structs):
            req.prefix, resp.prefix = "REQUEST_", "RESPONSE_"
        flex_text = "never flexible" if flex is None else f"flexible from v{flex}"
        out = [
            f'"""{self.name} (API key {self.api_key}): v{lo}-v{hi}, {flex_text}.',
            "",
            f"Generated by ``{COMMAND}`` from Kafka's {self.request_file} and",
            f"{self.response_file}; do not edit.",
            *(
                ["", f"With Odradek's additions beyond the reference: {'; '.join(self.additions)}."]
                if self.additions
                else []
            ),
            '"""',
            "",
        ]
        body: list[str] = []
        for block in req.struct_blocks() + resp.struct_blocks():
            body += [*block, "", ""]
        body.append(f"{self.constant} = Api(")
        body += [
            f"    api_key={self.api_key},",
            f"    name={q(self.name)},",
            f"    min_version={lo},",
            f"    max_version={hi},",
            f"    flexible_min={'INF' if flex is None else flex},",
        ]
        for which, msg in (("request", req), ("response", resp)):
            fields = msg.doc["fields"]
            if not fields:
                body.append(f"    {which}=[],")
                continue
            body.append(f"    {which}=[")
            for f in fields:
                body += msg.field_lines(f, 8)
            body.append("    ],")
        body.append(")")
        text = "\n".join(body)
        names = ["INF"] if flex is None else []
        for name in ("A", "Api", "F", "S"):
            if re.search(rf"\b{name}\(", text):
                names.append(name)
        out += ["from odradek.protocol.schema import " + ", ".join(names), "", ""]
        return "\n".join(out) + text + "\n"


def api_pairs(reference: Path) -> list[ApiPair]:
    messages = reference / "messages"
    if not messages.is_dir():
        raise GeneratorError(f"no Kafka message schemas in {messages}")
    found: dict[int, dict[str, tuple[dict[str, Any], str]]] = {}
    for path in sorted(messages.glob("*.json")):
        doc = load_schema(path)
        note = apply_addition(doc)
        if note is not None:
            doc["_addition"] = note
        if doc.get("type") in ("request", "response") and "apiKey" in doc:
            found.setdefault(int(doc["apiKey"]), {})[doc["type"]] = (doc, path.name)
    pairs = []
    for key in sorted(found):
        both = found[key]
        if set(both) != {"request", "response"}:
            raise GeneratorError(f"API key {key} has only a {', '.join(both)}")
        (req, req_file), (resp, resp_file) = both["request"], both["response"]
        name = req["name"].removesuffix("Request")
        if resp["name"] != f"{name}Response":
            raise GeneratorError(f"API key {key}: {req['name']} answered by {resp['name']}")
        notes = tuple(d.pop("_addition") for d in (req, resp) if "_addition" in d)
        pairs.append(ApiPair(key, name, req, resp, req_file, resp_file, notes))
    return pairs


def render_index(pairs: list[ApiPair]) -> str:
    lines = [
        '"""Every request/response pair in Kafka\'s message schemas, one module per API.',
        "",
        f"Generated by ``{COMMAND}``; do not edit.",
        "",
        ":data:`DEFINITIONS` maps each API key to its definition. A definition is not an API the",
        "broker serves: :mod:`odradek.protocol.messages` chooses those (and their lowest version),",
        "and KafkaApis' handlers decide what ApiVersions advertises.",
        '"""',
        "",
    ]
    for p in sorted(pairs, key=lambda p: p.module):
        line = f"from odradek.protocol.messages.generated.{p.module} import {p.constant}"
        if len(line) > LINE_LENGTH:
            line = f"from odradek.protocol.messages.generated.{p.module} import (\n    {p.constant},\n)"
        lines.append(line)
    lines += ["from odradek.protocol.schema import Api", "", "DEFINITIONS: dict[int, Api] = {"]
    lines += [f"    {p.constant}.api_key: {p.constant}," for p in pairs]
    lines += ["}", "", "__all__ = ["]
    lines += [f"    {q(name)}," for name in sorted(["DEFINITIONS", *(p.constant for p in pairs)])]
    lines += ["]", ""]
    return "\n".join(lines)


def generate(reference: Path) -> dict[str, str]:
    """File name → content of every generated module."""
    pairs = api_pairs(reference)
    files = {f"{p.module}.py": p.render() for p in pairs}
    files["__init__.py"] = render_index(pairs)
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reference", nargs="?", type=Path, default=DEFAULT_REFERENCE)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="only report files that are out of date")
    args = ap.parse_args(argv)
    try:
        files = generate(args.reference)
    except GeneratorError as e:
        print(f"generate_protocol: {e}", file=sys.stderr)
        return 2
    stale = sorted(
        name for name, text in files.items()
        if not (args.out / name).is_file() or (args.out / name).read_text() != text
    )
    extra = sorted(
        p.name for p in args.out.glob("*.py") if p.name not in files
    ) if args.out.is_dir() else []
    if args.check:
        for name in stale:
            print(f"out of date: {args.out / name}")
        for name in extra:
            print(f"not generated: {args.out / name}")
        return 1 if stale or extra else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (args.out / name).write_text(files[name])
    for name in extra:
        (args.out / name).unlink()
    print(f"{len(files)} modules in {args.out}: {len(stale)} written, {len(extra)} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
