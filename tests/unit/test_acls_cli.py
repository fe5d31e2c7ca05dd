"""``odradek acls``: kafka-acls.sh's options turned into resource patterns and ACL entries."""

from __future__ import annotations

import argparse

import pytest

from odradek.cli import acls
from odradek.cli.main import build_parser
from odradek.security.acl import AclPermissionType, PatternType, ResourceType
from odradek.server.acl_operations import AclOperation as Op


def parse(*args: str) -> argparse.Namespace:
    return build_parser().parse_args(["acls", "--bootstrap-server", "127.0.0.1:9092", *args])


def test_plain_options() -> None:
    ns = parse("--add", "--allow-principal", "User:alice", "--allow-principal", "User:bob", "--allow-host", "10.0.0.1",
               "--operation", "Read", "--operation", "describe-configs", "--topic", "t",
               "--resource-pattern-type", "prefixed")
    out = acls.resource_to_acls(ns)
    assert list(out) == [(ResourceType.TOPIC, "t", PatternType.PREFIXED)]
    assert set(out[(ResourceType.TOPIC, "t", PatternType.PREFIXED)]) == {
        (p, "10.0.0.1", op, AclPermissionType.ALLOW)
        for p in ("User:alice", "User:bob") for op in (Op.READ, Op.DESCRIBE_CONFIGS)
    }
    deny = acls.resource_to_acls(parse("--add", "--deny-principal", "User:eve", "--group", "g"))
    assert deny == {(ResourceType.GROUP, "g", PatternType.LITERAL): [("User:eve", "*", Op.ALL, AclPermissionType.DENY)]}


def test_producer_and_consumer_conveniences() -> None:
    ns = parse("--add", "--allow-principal", "User:p", "--producer", "--topic", "t", "--transactional-id", "tx",
               "--idempotent")
    out = acls.resource_to_acls(ns)
    ops = {r[0]: {e[2] for e in entries} for r, entries in out.items()}
    assert ops == {ResourceType.TOPIC: {Op.WRITE, Op.DESCRIBE, Op.CREATE},
                   ResourceType.TRANSACTIONAL_ID: {Op.WRITE, Op.DESCRIBE},
                   ResourceType.CLUSTER: {Op.IDEMPOTENT_WRITE}}
    out = acls.resource_to_acls(parse("--add", "--allow-principal", "User:c", "--consumer", "--topic", "t",
                                      "--group", "g"))
    assert {r[0]: {e[2] for e in entries} for r, entries in out.items()} == {
        ResourceType.TOPIC: {Op.READ, Op.DESCRIBE}, ResourceType.GROUP: {Op.READ}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--add", "--remove", "--topic", "t"], "exactly one action"),
        (["--add", "--allow-principal", "User:a", "--producer"], "With --producer you must specify a --topic"),
        (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"], "With --consumer"),
        (["--add", "--allow-principal", "User:a", "--operation", "Read", "--cluster"], "only supports operations"),
        (["--add", "--allow-principal", "alice", "--topic", "t"], "Invalid principal"),
        (["--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"], "Unknown operation"),
        (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
        (["--add", "--principal", "User:a", "--topic", "t"], "--principal option is only available if --list"),
    ],
)
def test_usage_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert acls.run(parse(*args)) == 1
    assert message in capsys.readouterr().err


def test_output_format() -> None:
    pattern = (ResourceType.TOPIC, "t", PatternType.LITERAL)
    entry = ("User:alice", "*", Op.READ, AclPermissionType.ALLOW)
    assert acls.pattern_str(pattern) == "ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)"
    assert acls.entry_str(entry) == "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
