"""Helpers shared by the benchmark scripts in this folder.

The scripts run as ``python3 benchmarks/<name>.py``, so this folder is ``sys.path[0]`` and they
import this module as ``bench_support``. It holds what they all need: a stderr logger, free
loopback ports, the broker under test (``odradek server`` as a subprocess on a temporary data
directory), topic creation, CPU accounting from ``/proc``, a percentile and a plain text table.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

READY_LINE = "Odradek broker ready"
CLK_TCK = os.sysconf("SC_CLK_TCK")

Log = Callable[[str], None]


def make_log(tag: str, clock: bool = True) -> Log:
    """A ``log(msg)`` printing ``[tag HH:MM:SS] msg`` (``[tag] msg`` without clock) on stderr."""

    def log(msg: str) -> None:
        stamp = f" {time.strftime('%H:%M:%S')}" if clock else ""
        print(f"[{tag}{stamp}] {msg}", file=sys.stderr, flush=True)

    return log


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all sockets held open together so they cannot repeat)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


# --------------------------------------------------------------------------------------------
# CPU accounting from /proc


def cpu_times(pid: int | None, tid: int | None = None) -> tuple[float, float]:
    """(utime, stime) in seconds of a whole process (all threads), or of one thread ``tid``.

    ``pid=None`` means this process. A process that is gone counts as (0, 0).
    """
    base = "/proc/self" if pid is None else f"/proc/{pid}"
    path = f"{base}/stat" if tid is None else f"{base}/task/{tid}/stat"
    try:
        with open(path) as f:
            data = f.read()
    except OSError:
        return 0.0, 0.0
    # The command name may contain spaces/parentheses: split after the last ')'.
    fields = data[data.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def run_seconds(pid: int | None, tid: int | None = None) -> float | None:
    """CPU time of a thread, or the sum over a process's current threads, in nanosecond
    resolution from ``/proc/.../schedstat`` (field 1); ``pid=None`` means this process.

    A thread that exits while the threads are read is skipped. None when nothing could be read
    (the process is gone, or the kernel has no schedstat). ``/proc/<pid>/stat`` counts in clock
    ticks (10 ms), too coarse for a phase in which the broker uses 50 ms.
    """
    base = "/proc/self" if pid is None else f"/proc/{pid}"
    try:
        tids = [str(tid)] if tid is not None else os.listdir(f"{base}/task")
    except OSError:
        return None
    total = 0
    read = 0
    for t in tids:
        try:
            with open(f"{base}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
            read += 1
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9 if read else None


def runq_wait_seconds(pid: int | None, tid: int | None) -> float:
    """Time a thread spent runnable but waiting for a CPU (``/proc/.../schedstat``, field 2).

    Only threads (``tid`` set) are measured; 0 when unavailable.
    """
    if tid is None:
        return 0.0
    base = "/proc/self" if pid is None else f"/proc/{pid}"
    try:
        with open(f"{base}/task/{tid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_busy_seconds() -> float:
    """CPU seconds spent by every process on the machine (all CPUs, from ``/proc/stat``)."""
    try:
        with open("/proc/stat") as f:
            first = f.readline().split()
    except OSError:
        return 0.0
    # cpu user nice system idle iowait irq softirq steal guest guest_nice; guest is in user.
    ticks = [int(v) for v in first[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK


def loadavg() -> str:
    """The 1-minute load average from ``/proc/loadavg``, as written there ("?" if unreadable)."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


# --------------------------------------------------------------------------------------------
# The broker under test


class Broker:
    """``odradek server`` on free loopback ports with its data under ``workdir``.

    ``overrides`` are extra ``--override KEY=VALUE`` settings; ``log`` (if given) is told when
    the broker starts and when it is ready. Its output goes to ``workdir/broker.log``.
    """

    def __init__(
        self, workdir: Path, overrides: Sequence[str] = (), log: Log | None = None
    ) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = workdir / "data"
        self.log_path = workdir / "broker.log"
        self.port, self.controller_port = free_ports(2)
        self.overrides = list(overrides)
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 90.0) -> None:
        """Start the broker and wait until its log shows ``READY_LINE``."""
        overrides = [
            f"log.dirs={self.data_dir}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            *self.overrides,
        ]
        cmd = [sys.executable, "-m", "odradek.cli.main", "server"]
        for o in overrides:
            cmd += ["--override", o]
        if self.log:
            self.log(f"starting broker: {' '.join(cmd)}")
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode} before it was ready:\n{self.tail()}"
                )
            if READY_LINE in self.log_path.read_text(errors="replace"):
                if self.log:
                    self.log(f"broker ready on {self.bootstrap} (pid {self.pid})")
                return
            time.sleep(0.05)
        raise RuntimeError(f"broker not ready after {timeout}s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the broker's log ("" if there is none)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s; safe to call when it never started."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` (replication factor 1) and wait until every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no leaders after 30 s")


# --------------------------------------------------------------------------------------------
# Reporting


def percentile(values: list[float], q: float) -> float:
    """The value at rank ``int(q * n)`` of the sorted ``values`` (clamped); 0.0 if empty."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """Print ``rows`` under ``head`` in aligned columns: the first and the last column left-
    aligned, the others right-aligned, with a dashed line under the head."""
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]

    def fmt(row: tuple[str, ...]) -> str:
        return "  ".join(
            v.ljust(w) if i == 0 or i == len(row) - 1 else v.rjust(w)
            for i, (v, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    line = fmt(head)
    print(line)
    print("-" * max(len(line), len(fmt(rows[0])) if rows else 0))
    for row in rows:
        print(fmt(row))
