"""The README: its API table is what ApiVersions advertises; its commands and examples work."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from odradek.protocol.messages import ALL_APIS, SECURITY_APIS, advertised_min_version


def test_readme_lists_exactly_the_advertised_apis() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Supported APIs", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (\w+) \| (\d+)–(\d+) \|$", section, re.MULTILINE)
    listed = {(int(k), name, int(lo), int(hi)) for k, name, lo, hi in rows}
    advertised = {(a.api_key, a.name, advertised_min_version(a), a.max_version) for a in [*ALL_APIS, *SECURITY_APIS]}
    assert listed == advertised


README = Path(__file__).resolve().parents[2] / "README.md"


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every ``` block, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S)]


def _opening_commands() -> list[str]:
    text = README.read_text()
    blocks = _fenced_blocks(text.split("\n## ", 1)[0])
    assert blocks, "the README opens with a command block"
    return [line for line in blocks[0][1].splitlines() if line.strip()]


def test_readme_opens_with_exactly_two_commands() -> None:
    commands = _opening_commands()
    assert len(commands) == 2, commands
    assert commands[1] == "bash scripts/test.sh"
    assert commands[0].endswith(".venv/bin/odradek server")


def _stub_python(bin_dir: Path, log: Path) -> None:
    """``python3`` as a stock Debian 12 one behaves towards this line: ``pip install`` refused
    (externally managed, PEP 668); no ``ensurepip`` (so no ``-m venv``) until ``apt-get install
    python3-venv``; ``-m venv DIR`` makes a venv whose pip and odradek only record how they were
    called; anything else runs the real interpreter."""
    real = sys.executable
    bin_dir.mkdir()
    venv_pkg = bin_dir / "python3-venv-installed"
    script = f"""#!/bin/sh
if [ "$1" = "-c" ] && [ "$2" = "import ensurepip" ] && [ ! -e {venv_pkg} ]; then
    echo "ModuleNotFoundError: No module named 'ensurepip'" >&2
    exit 1
fi
if [ "$1" = "-m" ] && [ "$2" = "venv" ] && [ ! -e {venv_pkg} ]; then
    echo "The virtual environment was not created successfully because ensurepip is not available." >&2
    exit 1
fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
    echo "error: externally-managed-environment" >&2
    echo "system-pip $*" >> {log}
    exit 1
fi
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
    dir="$3"
    mkdir -p "$dir/bin"
    for tool in pip odradek python; do
        printf '#!/bin/sh\\necho "venv-%s $*" >> {log}\\n' "$tool" > "$dir/bin/$tool"
        chmod +x "$dir/bin/$tool"
    done
    echo "venv $dir" >> {log}
    exit 0
fi
exec {real} "$@"
"""
    for name in ("python3", "python"):
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    # pip/odradek on the PATH are the system's: refused or absent
    (bin_dir / "pip").write_text(f'#!/bin/sh\necho "system-pip $*" >> {log}\nexit 1\n')
    (bin_dir / "pip").chmod(0o755)
    apt = f"""#!/bin/sh
echo "apt-get $*" >> {log}
case "$*" in *"install -y python3-venv"*) touch {venv_pkg};; esac
"""
    (bin_dir / "apt-get").write_text(apt)
    (bin_dir / "apt-get").chmod(0o755)
    # never the real sudo (its secure_path would find the real apt-get)
    (bin_dir / "sudo").write_text(f'#!/bin/sh\necho "sudo" >> {log}\nexec "$@"\n')
    (bin_dir / "sudo").chmod(0o755)


def _run_under_pep668(command: str, tmp_path: Path) -> tuple[int, list[str]]:
    tmp_path.mkdir()
    log = tmp_path / "calls.log"
    log.touch()
    _stub_python(tmp_path / "bin", log)
    work = tmp_path / "checkout"
    work.mkdir()
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        ["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=60
    )
    return proc.returncode, log.read_text().splitlines()


def test_first_command_works_where_pip_is_externally_managed(tmp_path: Path) -> None:
    """On a PEP 668 Python the first line installs into a virtual environment and starts the
    server from it; it never asks the system interpreter's pip (the old line did)."""
    first = _opening_commands()[0]
    assert "--break-system-packages" not in first and "--user" not in first
    code, calls = _run_under_pep668(first, tmp_path / "new")
    assert code == 0, calls
    assert calls == [
        "sudo", "apt-get update", "sudo", "apt-get install -y python3-venv",
        "venv .venv", "venv-pip install .", "venv-odradek server",
    ]

    old_code, old_calls = _run_under_pep668("python3 -m pip install . && odradek server", tmp_path / "old")
    assert old_code != 0 and old_calls == ["system-pip -m pip install ."]


def test_readme_pytest_example_runs(tmp_path: Path) -> None:
    """The README's pytest example, as a user would save it, passes against the fixtures."""
    text = README.read_text()
    section = text.split("## Embedded use", 1)[1].split("\n## ", 1)[0]
    examples = [body for lang, body in _fenced_blocks(section) if "def test_" in body]
    assert len(examples) == 1
    assert "odradek[testing]" in section
    (tmp_path / "test_example.py").write_text(examples[0])
    from importlib.metadata import entry_points

    registered = any(ep.value == "odradek.pytest_plugin" for ep in entry_points(group="pytest11"))
    plugin = [] if registered else ["-p", "odradek.pytest_plugin"]
    repo = README.parent
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin,
         "--rootdir", str(tmp_path), str(tmp_path / "test_example.py")],
        cwd=repo, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout, proc.stdout


def test_readme_lists_the_known_differences_from_kafka() -> None:
    """The README's table of deliberate differences is the differential tests' list, row for row."""
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    try:
        from tests.integration.test_differential import (
            KNOWN_DIFFERENCES,
            known_differences_markdown,
        )
    finally:
        sys.path.remove(str(root))
    readme = (root / "README.md").read_text()
    assert known_differences_markdown() in readme
    for name in KNOWN_DIFFERENCES:
        assert f"| {name} |" in readme
