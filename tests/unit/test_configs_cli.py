"""``odradek configs``: Kafka's argument checks, --add-config parsing and describe lines."""

from __future__ import annotations

import pytest

from odradek.cli.configs import UsageError, check_args, config_line, parse_add_config
from odradek.cli.main import build_parser


def _opts(*argv: str) -> object:
    return build_parser().parse_args(["configs", *argv])


def test_add_config_parsing_as_kafka() -> None:
    assert parse_add_config("a=1, b = 2,c=[x,y],d=") == {"a": "1", "b": "2", "c": "x,y", "d": ""}
    with pytest.raises(UsageError, match="must be in the format"):
        parse_add_config("a=b=c")


def test_config_line() -> None:
    entry = {"name": "k", "value": None, "is_sensitive": True,
             "synonyms": [{"name": "k", "value": None, "source": 2}, {"name": "k", "value": "1", "source": 5}]}
    assert config_line(entry) == "  k=null sensitive=true synonyms={DYNAMIC_BROKER_CONFIG:k=null, DEFAULT_CONFIG:k=1}"


@pytest.mark.parametrize(("argv", "message"), [
    (["--bootstrap-server", "h:1", "--entity-type", "topics"], "Command must include exactly one action: --describe, --alter"),
    (["--bootstrap-server", "h:1", "--describe", "--entity-type", "foo"],
     "Invalid entity type foo, the entity type must be one of topics, clients, users, brokers, ips, client-metrics, "
     "groups, broker-loggers with a --bootstrap-server or --bootstrap-controller argument"),
    (["--describe", "--entity-type", "topics"], "Either --bootstrap-server or --bootstrap-controller must be specified."),
    (["--bootstrap-server", "h:1", "--describe", "--entity-type", "topics", "--entity-default"],
     "--entity-default must not be specified with --describe of topics"),
    (["--bootstrap-server", "h:1", "--alter", "--entity-type", "topics", "--add-config", "a=b"],
     "An entity name must be specified with --alter of topics"),
    (["--bootstrap-server", "h:1", "--alter", "--entity-type", "brokers", "--add-config", "a=b"],
     "An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"),
    (["--bootstrap-server", "h:1", "--alter", "--entity-type", "topics", "--entity-name", "t"],
     "At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter"),
    (["--bootstrap-server", "h:1", "--describe"], "At least one entity type must be specified"),
    (["--bootstrap-server", "h:1", "--describe", "--entity-type", "topics", "--topic", "t"],
     "Duplicate entity type(s) specified: topics"),
    (["--bootstrap-server", "h:1", "--describe", "--entity-type", "topics", "--entity-type", "brokers"],
     "Only 'users' and 'clients' entity types may be specified together"),
    (["--bootstrap-server", "h:1", "--describe", "--entity-type", "broker-loggers"],
     "An entity name must be specified with --describe of broker-loggers"),
    (["--bootstrap-server", "h:1", "--describe", "--entity-type", "brokers", "--entity-name", "x"],
     "The entity name for brokers must be a valid integer broker id, but it is: x"),
])
def test_argument_errors_are_kafkas(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as e:
        check_args(_opts(*argv))  # type: ignore[arg-type]
    assert str(e.value) == message


def test_entity_names_keep_command_line_order() -> None:
    types, names = check_args(_opts("--bootstrap-server", "h:1", "--alter", "--entity-type", "brokers",  # type: ignore[arg-type]
                                    "--entity-default", "--add-config", "a=b"))
    assert (types, names) == (["brokers"], [""])
    types, names = check_args(_opts("--bootstrap-server", "h:1", "--describe", "--group", "g"))  # type: ignore[arg-type]
    assert (types, names) == (["groups"], ["g"])
