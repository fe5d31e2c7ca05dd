"""``odradek console`` as a child process for the console tests, and plain HTTP GETs to it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ConsoleProcess:
    def __init__(self, bootstrap: str, log_path: Path, *extra: str) -> None:
        self.bootstrap = bootstrap
        self.port = free_port()
        self.log_path = log_path
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "odradek.cli.main", "console", "--bootstrap-server", self.bootstrap,
                "--port", str(self.port), *self.extra]

    def start(self, timeout: float = 30.0) -> ConsoleProcess:
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(self.command(), stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "serving http://" in self.log():
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"odradek console exited with {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"odradek console not serving in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text("utf-8", "replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def get(self, path: str, timeout: float = 30.0) -> tuple[int, str]:
        """The status and body of GET ``path`` (error statuses too)."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, r.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8")

    def page(self, path: str) -> str:
        status, body = self.get(path)
        assert status == 200, f"GET {path}: {status}\n{body}\n--- console log:\n{self.log()[-3000:]}"
        return body

    def wait_for(self, path: str, text: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        body = ""
        while time.monotonic() < deadline:
            status, body = self.get(path)
            if status == 200 and text in body:
                return body
            time.sleep(0.3)
        raise AssertionError(f"{text!r} never appeared on {path}:\n{body[-3000:]}\n--- console log:\n{self.log()[-3000:]}")


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self.row_classes: dict[str, list[str]] = {}
        self._id = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._id = a.get("id") or f"table{len(self.tables)}"
            self._table = self.tables.setdefault(self._id, [])
            self.row_classes[self._id] = []
        elif tag == "tr" and self._table is not None:
            self._table.append([])
            self.row_classes[self._id].append(a.get("class") or "")
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def tables(body: str) -> _Tables:
    """The page's tables by id: rows of cell texts (the header row first), and each row's class."""
    parser = _Tables()
    parser.feed(body)
    return parser


def rows(body: str, table_id: str) -> list[list[str]]:
    """The data rows (header row dropped) of the table ``table_id``."""
    t = tables(body).tables
    assert table_id in t, f"no table {table_id} in:\n{body[-3000:]}"
    return t[table_id][1:]
