"""The README's API table is what ApiVersions advertises."""

from __future__ import annotations

import re
from pathlib import Path

from odradek.protocol.messages import ALL_APIS, advertised_min_version


def test_readme_lists_exactly_the_advertised_apis() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Supported APIs", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (\w+) \| (\d+)–(\d+) \|$", section, re.MULTILINE)
    listed = {(int(k), name, int(lo), int(hi)) for k, name, lo, hi in rows}
    advertised = {(a.api_key, a.name, advertised_min_version(a), a.max_version) for a in ALL_APIS}
    assert listed == advertised
