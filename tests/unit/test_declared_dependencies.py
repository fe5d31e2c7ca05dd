"""Every third-party package the product imports is declared in pyproject.toml.

A fresh ``pip install .`` installs only the main ``dependencies`` (plus the extras a user asks
for), so a module importing something that arrives only with the test environment, or only as
another package's dependency, works here and breaks on a user's machine. Each module under
``odradek/`` is imported (``pkgutil.walk_packages``), its source parsed, and every absolute
import of a top-level name outside the standard library and ``odradek`` (at module level or
inside a function: a lazy import runs too) mapped to its distribution, which must be a main
dependency, or one of the extras ``OPTIONAL`` allows for that module.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import pkgutil
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import odradek

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

# Modules (and their submodules) that may import what an extra brings.
OPTIONAL: dict[str, tuple[str, ...]] = {
    "odradek.spark": ("spark",),
    "odradek.cli.pipeline": ("spark",),  # `odradek pipeline`: imports the Spark side lazily
    "odradek.pytest_plugin": ("testing",),
}
# Import names whose distribution is named otherwise, for when it is not installed here.
DISTRIBUTION_OF: dict[str, str] = {
    "PIL": "Pillow",
    "yaml": "PyYAML",
    "confluent_kafka": "confluent-kafka",
    "kafka": "kafka-python",
    "snappy": "python-snappy",
}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements: list[str]) -> set[str]:
    names = set()
    for req in requirements:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
        assert match, req
        names.add(_normalize(match[1]))
    return names


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads(PYPROJECT.read_text("utf-8"))["project"]
    extras = {k: _requirement_names(v) for k, v in project.get("optional-dependencies", {}).items()}
    return _requirement_names(project["dependencies"]), extras


def _distribution(import_name: str, installed: Mapping[str, list[str]]) -> str:
    if import_name in installed:
        return _normalize(installed[import_name][0])
    return _normalize(DISTRIBUTION_OF.get(import_name, import_name))


def _third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("odradek", "__future__")}


def _all_modules() -> list[str]:
    errors: list[str] = []
    names = [odradek.__name__] + [
        info.name for info in pkgutil.walk_packages(odradek.__path__, "odradek.", onerror=errors.append)
    ]
    assert not errors, f"packages that failed to import: {errors}"
    return names


def test_every_module_imports() -> None:
    failed = {}
    for name in _all_modules():
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - reported below, all at once
            failed[name] = f"{type(e).__name__}: {e}"
    assert not failed, failed


def test_third_party_imports_are_declared_dependencies() -> None:
    main, extras = _declared()
    installed = importlib.metadata.packages_distributions()
    missing: dict[str, list[str]] = {}
    checked = 0
    for name in _all_modules():
        module = importlib.import_module(name)
        assert module.__file__, name
        allowed = set(main)
        for prefix, names in OPTIONAL.items():
            if name == prefix or name.startswith(prefix + "."):
                for extra in names:
                    allowed |= extras[extra]
        for imported in sorted(_third_party_imports(Path(module.__file__))):
            checked += 1
            dist = _distribution(imported, installed)
            if dist not in allowed:
                missing.setdefault(name, []).append(f"{imported} (distribution {dist})")
    assert checked > 10  # the walk found the product's modules and their imports
    assert not missing, f"imports not declared in pyproject.toml for these modules: {missing}"


def test_the_mapping_sees_an_undeclared_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom odradek import x\n\ndef f():\n    import PIL.Image\n    from yaml import safe_load\n")
    imports = _third_party_imports(module)
    assert imports == {"PIL", "yaml"}
    main, _ = _declared()
    assert {_distribution(n, {}) for n in imports} == {"pillow", "pyyaml"}
    assert not {"pillow", "pyyaml"} & main


def test_every_data_file_is_package_data() -> None:
    """Files under odradek/ other than Python sources (the console's templates) reach a
    non-editable install only through ``[tool.setuptools.package-data]``."""
    import fnmatch

    root = Path(odradek.__file__).resolve().parent
    patterns = tomllib.loads(PYPROJECT.read_text("utf-8"))["tool"]["setuptools"].get("package-data", {})
    data = [p for p in root.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc", ".pyi")
            and "__pycache__" not in p.parts]
    assert any(p.parent.name == "templates" for p in data)
    unshipped = []
    for path in data:
        rel = path.relative_to(root.parent)
        shipped = False
        for package, globs in patterns.items():
            pkg_dir = Path(*package.split("."))
            if pkg_dir in rel.parents:
                inner = rel.relative_to(pkg_dir).as_posix()
                shipped = shipped or any(fnmatch.fnmatch(inner, g) for g in globs)
        if not shipped:
            unshipped.append(str(rel))
    assert not unshipped, f"not in [tool.setuptools.package-data]: {unshipped}"
