"""The README's first command, for real, with a Debian-style externally managed ``python3``."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import time
from pathlib import Path

import pytest

from tests.unit.test_readme import README, _opening_commands

SYSTEM_PYTHON = Path("/usr/bin/python3")


def _externally_managed_with_venv() -> bool:
    if not SYSTEM_PYTHON.exists():
        return False
    probe = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import ensurepip, sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True, text=True, timeout=60,
    )
    return probe.returncode == 0 and (Path(probe.stdout.strip()) / "EXTERNALLY-MANAGED").exists()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.skipif(
    not _externally_managed_with_venv(),
    reason="needs a system /usr/bin/python3 marked EXTERNALLY-MANAGED (PEP 668) with venv support",
)
def test_readme_first_command_on_an_externally_managed_python(tmp_path: Path) -> None:
    """The system Python refuses ``pip install .``; the README's line installs into .venv and
    the server it starts says it is ready. Runs in a copy of the checkout."""
    if not (_port_free(9092) and _port_free(9093)):
        pytest.skip("ports 9092/9093 are in use; the README's server needs them")
    assert sysconfig.get_path("stdlib")  # (the test's own interpreter may be anything)
    checkout = tmp_path / "odradek"
    shutil.copytree(
        README.parent, checkout,
        ignore=shutil.ignore_patterns(".git", ".venv", "odradek-data", "__pycache__", "*.egg-info",
                                      ".mypy_cache", ".ruff_cache", ".pytest_cache", "build"),
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(SYSTEM_PYTHON)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"

    old = subprocess.run(
        ["bash", "-c", "python3 -m pip install ."], cwd=checkout, env=env,
        capture_output=True, text=True, timeout=120,
    )
    assert old.returncode != 0 and "externally-managed-environment" in old.stderr, old.stderr

    log_path = tmp_path / "first-command.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["bash", "-c", _opening_commands()[0]], cwd=checkout, env=env, stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 480  # pip downloads the dependencies and builds a wheel
        while time.monotonic() < deadline and proc.poll() is None:
            if "Odradek broker ready" in log_path.read_text("utf-8", "replace"):
                break
            time.sleep(0.5)
        text = log_path.read_text("utf-8", "replace")
        assert "Odradek broker ready" in text and "PLAINTEXT://localhost:9092" in text, text[-4000:]
    finally:
        if proc.poll() is None:  # Ctrl-C, as a terminal sends it: the server stops cleanly
            os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(60)
    assert code == 0, log_path.read_text("utf-8", "replace")[-4000:]
    installed = subprocess.run(
        [str(checkout / ".venv" / "bin" / "python"), "-c", "import odradek; print(odradek.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert f"{checkout}/.venv/" in installed.stdout, installed.stdout + installed.stderr
    assert (checkout / "odradek-data" / "meta.properties").exists()
