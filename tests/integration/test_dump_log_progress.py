"""``odradek dump-log`` on a segment over 64 MiB shows a progress bar (bytes read of the file's
size) when stderr is a terminal, and none with ``--no-progress`` or when stderr is a pipe (so its
output stays byte-for-byte Kafka's, as test_storage_tools compares it)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

from odradek.cli.dump_log import PROGRESS_MIN_BYTES
from odradek.records.builder import build_batch

ROOT = Path(__file__).resolve().parents[2]


def _big_segment(directory: Path) -> tuple[Path, int]:
    """A segment just over the threshold: 1 MiB batches (offsets 0, 1, ...) of one record each."""
    path = directory / "00000000000000000000.log"
    value = b"x" * (1024 * 1024 - 200)
    with path.open("wb") as f:
        written = 0
        offset = 0
        while written <= PROGRESS_MIN_BYTES:
            batch = build_batch([(None, value, [], 1_700_000_000_000 + offset)], base_offset=offset)
            f.write(batch)
            written += len(batch)
            offset += 1
    return path, offset


def _run(args: list[str], stderr_tty: bool) -> tuple[int, bytes, str]:
    """Run ``odradek dump-log`` (stdout a pipe); its exit code, stdout and what stderr showed."""
    cmd = [sys.executable, "-m", "odradek.cli.main", "dump-log", *args]
    if not stderr_tty:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        return r.returncode, r.stdout, r.stderr.decode(errors="replace")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # tqdm needs a width
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the tool has closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        r = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=slave, timeout=120, stdin=subprocess.DEVNULL)
    finally:
        os.close(slave)
        reader.join(10)
        os.close(master)
    return r.returncode, r.stdout, b"".join(chunks).decode(errors="replace")


def test_progress_bar_for_a_large_segment_on_a_terminal_only(tmp_path: Path) -> None:
    segment, batches = _big_segment(tmp_path)
    code, out, terminal = _run(["--files", str(segment)], stderr_tty=True)
    assert code == 0
    # tqdm: percent, bar, bytes read / total in its units (the total is the file's size, ~65 MiB).
    assert re.search(r"\d+%\|.*\| *[\d.]+[kMG]?/6[5-9](\.\d)?MB? \[", terminal), terminal
    assert out.decode().count("baseOffset:") == batches

    quiet_code, quiet_out, quiet_terminal = _run(["--files", str(segment), "--no-progress"], stderr_tty=True)
    assert (quiet_code, quiet_out) == (0, out)
    assert "%|" not in quiet_terminal and quiet_terminal.strip() == ""

    piped_code, piped_out, piped_err = _run(["--files", str(segment)], stderr_tty=False)
    assert (piped_code, piped_out, piped_err) == (0, out, "")  # byte-identical output, no bar


def test_no_bar_for_a_small_segment(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_batch([(b"k", b"v", [], 1)]))
    code, out, terminal = _run(["--files", str(path)], stderr_tty=True)
    assert code == 0 and b"baseOffset: 0" in out
    assert "%|" not in terminal
