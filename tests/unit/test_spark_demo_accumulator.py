"""The demo's SparkContext keeps PySpark's accumulator server quiet when the JVM hangs up."""

from __future__ import annotations

import socketserver
from types import SimpleNamespace

import pytest

from odradek.spark.demo import _quiet_accumulator_server


def _server() -> socketserver.TCPServer:
    return socketserver.TCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler)


def test_eof_from_a_stopping_jvm_prints_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    server = _server()
    try:
        _quiet_accumulator_server(SimpleNamespace(_accumulatorServer=server))
        try:
            raise EOFError
        except EOFError:
            server.handle_error(None, ("127.0.0.1", 1))
        assert "Traceback" not in capsys.readouterr().err
    finally:
        server.server_close()


def test_other_errors_still_reach_socketservers_report(capsys: pytest.CaptureFixture[str]) -> None:
    server = _server()
    try:
        _quiet_accumulator_server(SimpleNamespace(_accumulatorServer=server))
        try:
            raise ValueError("bad token")
        except ValueError:
            server.handle_error(None, ("127.0.0.1", 1))
        err = capsys.readouterr().err
        assert "Traceback" in err and "bad token" in err
    finally:
        server.server_close()
