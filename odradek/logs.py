"""Odradek's logging: one line per record, whatever a client sends; levels from the command line.

Client text (topic names, config names and values, group, member, client and transactional
ids, ...) reaches log messages. A newline in it would forge a line of the broker log, so control
characters in the message of every record of an ``odradek.*`` logger are escaped (``\\n``,
``\\r``, ``\\t``, ``\\xNN``, ``\\uNNNN``), whichever handler formats it: the record factory
installed by :func:`install_record_escaping` makes those records escape their formatted message
(``getMessage``), so this holds for the ``odradek server`` handler as well as for an embedded
broker's records in an application's or pytest's handlers. Tracebacks (``exc_info``) and stack
information are left as they are. :class:`EscapingFormatter` (the command-line handler's) escapes
the message of other libraries' records too.

``--log-level`` takes ``LEVEL`` (the root level) or ``LOGGER=LEVEL`` (one logger and its
children), repeatable: ``--log-level INFO --log-level odradek.coordinator=DEBUG``.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(name)s: %(message)s"

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators.
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(m: re.Match[str]) -> str:
    c = m.group()
    short = _SHORT.get(c)
    if short is not None:
        return short
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_control(text: str) -> str:
    """``text`` with every control character written as an escape; printable text unchanged."""
    if text.isprintable():
        return text
    return _CONTROL_RE.sub(_escape_char, text)


def safe(value: object) -> str:
    """``str(value)`` fit for one log line: for messages built before logging (f-strings)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return repr(bytes(value))
    return escape_control(str(value))


# ---- records --------------------------------------------------------------------------------


class EscapedLogRecord(logging.LogRecord):
    """A record whose formatted message has its control characters escaped."""

    def getMessage(self) -> str:  # noqa: N802 - logging's name
        return escape_control(super().getMessage())


def _is_odradek(name: str) -> bool:
    return name == "odradek" or name.startswith("odradek.")


def _escape_args_in_place(record: logging.LogRecord) -> None:
    """For a record of some other class (another library's factory): escape its arguments."""
    record.msg = escape_control(record.msg) if isinstance(record.msg, str) else record.msg
    args = record.args
    if isinstance(args, tuple):
        record.args = tuple(escape_control(a) if isinstance(a, str) else a for a in args)
    elif isinstance(args, Mapping):
        record.args = {k: escape_control(v) if isinstance(v, str) else v for k, v in args.items()}


class _EscapingFactory:
    """Wraps the record factory in place when installed; only odradek's records change."""

    def __init__(self, inner: Callable[..., logging.LogRecord]) -> None:
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.inner(*args, **kwargs)
        if _is_odradek(record.name):
            if type(record) is logging.LogRecord:
                record.__class__ = EscapedLogRecord
            elif not isinstance(record, EscapedLogRecord):
                _escape_args_in_place(record)
        return record


def install_record_escaping() -> None:
    """Make every ``odradek.*`` record escape control characters in its message (idempotent)."""
    current = logging.getLogRecordFactory()
    if not isinstance(current, _EscapingFactory):
        logging.setLogRecordFactory(_EscapingFactory(current))


class EscapingFormatter(logging.Formatter):
    """Escapes control characters in the formatted line of any record, not in its traceback."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return escape_control(super().formatMessage(record))


# ---- levels -----------------------------------------------------------------------------------

LEVEL_NAMES = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL", "TRACE": "DEBUG"}


def parse_level(text: str) -> int:
    name = text.strip().upper()
    name = _ALIASES.get(name, name)
    if name not in LEVEL_NAMES:
        raise ValueError(f"unknown log level {text!r} (one of {', '.join(LEVEL_NAMES)})")
    level: int = getattr(logging, name)
    return level


def parse_log_levels(items: Iterable[str], default: int = logging.INFO) -> tuple[int, dict[str, int]]:
    """``["INFO", "odradek.log=DEBUG"]`` -> (root level, {logger: level}); the last one wins."""
    root = default
    per_logger: dict[str, int] = {}
    for item in items:
        name, sep, level = item.rpartition("=")
        if sep:
            name = name.strip()
            if not name:
                raise ValueError(f"--log-level expects LEVEL or LOGGER=LEVEL, got {item!r}")
            per_logger[name] = parse_level(level)
        else:
            root = parse_level(level)
    return root, per_logger


def _log_level_arg(text: str) -> str:
    try:
        parse_log_levels([text])
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_log_level_argument(parser: argparse.ArgumentParser, default: str = "INFO") -> None:
    parser.add_argument(
        "--log-level",
        metavar="[LOGGER=]LEVEL",
        action="append",
        default=[],
        type=_log_level_arg,
        help=f"log level: DEBUG, INFO, WARNING, ERROR (default {default}); LOGGER=LEVEL sets one "
        "logger and its children, e.g. odradek.coordinator=DEBUG (repeatable)",
    )
    parser.set_defaults(log_level_default=default)


def levels_from_args(args: argparse.Namespace) -> tuple[int, dict[str, int]]:
    default = parse_level(getattr(args, "log_level_default", "INFO"))
    return parse_log_levels(getattr(args, "log_level", None) or [], default)


_configured_loggers: set[str] = set()


def configure_logging(
    level: int = logging.INFO, per_logger: Mapping[str, int] | None = None
) -> None:
    """One stderr handler on the root logger (added once), its level, and per-logger levels.

    Loggers set by an earlier call and not named now go back to inheriting their level.
    """
    install_record_escaping()
    root = logging.getLogger()
    if not any(getattr(h, "_odradek", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(EscapingFormatter(LOG_FORMAT))
        handler._odradek = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level)
    wanted = dict(per_logger or {})
    for name in _configured_loggers - set(wanted):
        logging.getLogger(name).setLevel(logging.NOTSET)
    for name, lvl in wanted.items():
        logging.getLogger(name).setLevel(lvl)
    _configured_loggers.clear()
    _configured_loggers.update(wanted)
