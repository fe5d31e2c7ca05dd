"""What the data-plane tools (``produce``, ``consume``, ``perf``) share: the client flags Kafka's
tools take, bytes as text / hex / base64, the progress bar, and running a tool to an exit code.

Exit codes: 0 a normal end (input exhausted, ``--max-messages`` reached, ``--timeout-ms``
expired, interrupted), 1 a failure (an unknown topic, no reachable broker, a record not
delivered, bad input), 2 bad command-line flags (argparse)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from odradek.clients.cluster import ClusterError
from odradek.clients.config import ConfigError

ENCODINGS = ("text", "hex", "base64")


class ToolFailure(Exception):
    """The tool stops with exit code 1; the message goes to stderr."""


def encode_bytes(data: bytes | None, encoding: str) -> str | None:
    if data is None:
        return None
    if encoding == "hex":
        return data.hex()
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    return data.decode("utf-8", errors="replace")


def decode_bytes(text: Any, encoding: str, what: str) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a string or null, not {type(text).__name__}")
    try:
        if encoding == "hex":
            return bytes.fromhex(text)
        if encoding == "base64":
            return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error) as e:
        raise ValueError(f"{what} is not valid {encoding}: {e}") from None
    return text.encode("utf-8")


def add_encoding_flag(p: argparse.ArgumentParser, direction: str) -> None:
    p.add_argument("--encoding", choices=ENCODINGS, default="text",
                   help=f"how keys, values and header values are {direction} in --format json "
                        "(text: UTF-8; hex; base64). Default: text")


def add_progress_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is none anyway unless stderr is a terminal)")


class Progress:
    """A tqdm bar on stderr when it is a terminal (and not switched off); otherwise nothing."""

    def __init__(self, total: int | None, unit: str, enabled: bool, stream: TextIO | None = None) -> None:
        self._bar: Any = None
        out = stream if stream is not None else sys.stderr
        if enabled and _isatty(out):
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit=unit, unit_scale=True, file=out, dynamic_ncols=True,
                             mininterval=0.25, leave=False)

    def update(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def stdout_is_data_sink() -> bool:
    """Records go to a terminal: a bar on the same terminal would garble them."""
    return _isatty(sys.stdout)


def run_tool(main: Callable[[asyncio.Event], Awaitable[int]]) -> int:
    """Run ``main(stop)`` on an event loop; SIGINT / SIGTERM set ``stop``. Tool failures print
    their message on stderr and give exit code 1."""

    async def runner() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        return await main(stop)

    try:
        return asyncio.run(runner())
    except (ToolFailure, ClusterError, ConfigError) as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 1
    except (OSError, ConnectionError, TimeoutError) as e:  # a broker went away for good
        print(f"ERROR {type(e).__name__}: {e or 'timed out'}", file=sys.stderr)
        return 1
