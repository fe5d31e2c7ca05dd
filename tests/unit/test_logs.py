"""odradek.logs: control characters escaped in odradek's records, --log-level parsing."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from odradek.cli.main import build_parser
from odradek.logs import (
    EscapingFormatter,
    configure_logging,
    escape_control,
    levels_from_args,
    parse_log_levels,
    safe,
)

FORGED = "bad\n[2026-01-01 00:00:00,000] INFO odradek.fake: forged"


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """A plain handler on the root logger, as an application embedding Odradek would have."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield buf
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def test_escape_control() -> None:
    assert escape_control("topic-1 café ✓") == "topic-1 café ✓"
    assert escape_control("a\nb\rc\td\x00e\x1bf\x7fg\x85h\u2028i") == (
        "a\\nb\\rc\\td\\x00e\\x1bf\\x7fg\\x85h\\u2028i"
    )
    assert safe(b"x\ny") == "b'x\\ny'" and safe(FORGED).count("\n") == 0


def test_odradek_records_escape_client_text_in_any_handler(stream: io.StringIO) -> None:
    log = logging.getLogger("odradek.server.kafka_apis")
    log.info("AlterConfigs of topic %s refused: %s=%r", "t\r1", FORGED, FORGED)
    log.info(f"pre-formatted {FORGED}")  # noqa: G004 - an f-string is escaped as well
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed for %s", FORGED)
    lines = stream.getvalue().splitlines()
    assert lines[0] == (
        "INFO odradek.server.kafka_apis: AlterConfigs of topic t\\r1 refused: "
        f"{FORGED.replace(chr(10), chr(92) + 'n')}={FORGED!r}"
    )
    assert lines[1].endswith("pre-formatted bad\\n[2026-01-01 00:00:00,000] INFO odradek.fake: forged")
    assert lines[2].startswith("ERROR odradek.server.kafka_apis: failed for bad\\n[2026")
    # the traceback keeps its lines
    assert lines[3] == "Traceback (most recent call last):" and lines[-1] == "ValueError: boom"
    assert not [line for line in lines if line.startswith("[2026")]


def test_other_libraries_records_only_in_the_cli_formatter(stream: io.StringIO) -> None:
    other = logging.getLogger("somelib")
    other.warning("x %s", FORGED)
    assert "\n[2026" in stream.getvalue()  # not ours to change in an application's handler
    record = other.makeRecord("somelib", logging.WARNING, __file__, 1, "x %s", (FORGED,), None)
    line = EscapingFormatter("%(levelname)s %(message)s").format(record)
    assert line == "WARNING x bad\\n[2026-01-01 00:00:00,000] INFO odradek.fake: forged"


def test_parse_log_levels() -> None:
    assert parse_log_levels([]) == (logging.INFO, {})
    assert parse_log_levels(["debug"]) == (logging.DEBUG, {})
    assert parse_log_levels(["INFO", "odradek.log=DEBUG", "odradek.coordinator=warn"]) == (
        logging.INFO, {"odradek.log": logging.DEBUG, "odradek.coordinator": logging.WARNING}
    )
    for bad in ("LOUD", "=DEBUG", "odradek.log=", "odradek.log=5"):
        with pytest.raises(ValueError):
            parse_log_levels([bad])


def test_cli_log_level_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["server", "--log-level", "WARNING", "--log-level", "odradek.coordinator=DEBUG"])
    assert levels_from_args(args) == (logging.WARNING, {"odradek.coordinator": logging.DEBUG})
    assert levels_from_args(parser.parse_args(["server"])) == (logging.INFO, {})
    # the demo is quieter by default: its own progress lines are what a user reads
    assert levels_from_args(parser.parse_args(["pipeline", "demo"])) == (logging.WARNING, {})
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["server", "--log-level", "odradek.log=LOUD"])
    assert e.value.code == 2
    assert "unknown log level 'LOUD'" in capsys.readouterr().err


def test_configure_logging_levels() -> None:
    root = logging.getLogger()
    old_level, old_handlers = root.level, list(root.handlers)
    try:
        configure_logging(logging.WARNING, {"odradek.coordinator": logging.DEBUG})
        configure_logging(logging.WARNING, {"odradek.coordinator": logging.DEBUG})
        ours = [h for h in root.handlers if getattr(h, "_odradek", False)]
        assert len(ours) == 1 and isinstance(ours[0].formatter, EscapingFormatter)
        assert root.level == logging.WARNING
        assert logging.getLogger("odradek.coordinator.group.group_coordinator").getEffectiveLevel() == logging.DEBUG
        assert logging.getLogger("odradek.log").getEffectiveLevel() == logging.WARNING
        configure_logging(logging.INFO)  # a logger not named again inherits again
        assert logging.getLogger("odradek.coordinator").level == logging.NOTSET
        assert logging.getLogger("odradek.coordinator.x").getEffectiveLevel() == logging.INFO
    finally:
        for h in root.handlers[:]:
            if h not in old_handlers:
                root.removeHandler(h)
        root.setLevel(old_level)
