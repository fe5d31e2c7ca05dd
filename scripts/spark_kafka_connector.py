#!/usr/bin/env python3
"""Resolve Spark's own Kafka connector (``spark-sql-kafka-0-10``) once, through Spark itself.

    python3 scripts/spark_kafka_connector.py     # prints the package coordinate; exit 1 if none

Spark resolves ``spark.jars.packages`` with Ivy from Maven Central. This script runs that
resolution once (``spark-submit --packages ... <empty script>``: no SparkContext is started)
with an Ivy directory outside the checkout (``$ODRADEK_IVY``, default ``~/.cache/odradek/ivy``),
so later runs, the Spark tests and ``benchmarks/spark_read.py`` start from the cache.

The connector's version should match the installed pyspark. Maven Central may not have that
version yet (a new pyspark reaches PyPI first): then the newest patch of the same minor line is
tried, then the newest release of the same major line (Ivy's ``X.Y.+`` / ``X.+``; Ivy ranks
``-previewN`` below the release). The version that resolved is recorded in ``connector.json``
in the Ivy directory, keyed by the pyspark version, and reused without asking the registry again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"
# pyspark ships these jars itself (same versions): don't download them again.
EXCLUDES = "org.apache.hadoop:hadoop-client-api,org.apache.hadoop:hadoop-client-runtime"
IVY_DIR = Path(
    os.environ.get("ODRADEK_IVY")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "odradek" / "ivy"
)
STATE = IVY_DIR / "connector.json"


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def spark_conf(package: str) -> dict[str, str]:
    """The Spark settings that load the connector (for SparkSession.builder.config)."""
    return {
        "spark.jars.packages": package,
        "spark.jars.ivy": str(IVY_DIR),
        "spark.jars.excludes": EXCLUDES,
    }


def cached() -> str | None:
    """The coordinate resolved earlier for this pyspark, if its jars are still in the cache."""
    try:
        state = json.loads(STATE.read_text())
    except (OSError, ValueError):
        return None
    if state.get("pyspark") != pyspark_version():
        return None
    package = str(state.get("package", ""))
    version = package.rsplit(":", 1)[-1]
    jar = IVY_DIR / "jars" / f"org.apache.spark_spark-sql-kafka-0-10_2.13-{version}.jar"
    return package if jar.is_file() else None


def _spark_submit() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


def _try(revision: str, log: Path) -> str | None:
    """Let Spark resolve ARTIFACT:revision; the concrete version it got, or None."""
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.py"
        empty.write_text("")
        args = [str(_spark_submit()), "--master", "local[1]"]
        for key, value in spark_conf(f"{ARTIFACT}:{revision}").items():
            args += ["--conf", f"{key}={value}"]
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        with log.open("ab") as out:
            try:
                rc = subprocess.run(
                    [*args, str(empty)], stdout=out, stderr=out, env=env, timeout=900
                ).returncode
            except subprocess.TimeoutExpired:
                return None
    if rc != 0:
        return None
    # Which version Ivy chose: the jar it copied into IVY_DIR/jars (newest one if several).
    prefix = "org.apache.spark_spark-sql-kafka-0-10_2.13-"
    if "+" not in revision:
        found = IVY_DIR / "jars" / f"{prefix}{revision}.jar"
        return revision if found.is_file() else None
    stem = revision.rstrip("+")
    versions = [
        p.name[len(prefix) : -len(".jar")]
        for p in (IVY_DIR / "jars").glob(f"{prefix}{stem}*.jar")
    ]
    if not versions:
        return None
    return max(versions, key=lambda v: [int(x) if x.isdigit() else -1 for x in v.split(".")])


def resolve() -> str | None:
    """The connector's coordinate, resolving it through Spark if not cached; None if it can't."""
    hit = cached()
    if hit is not None:
        return hit
    version = pyspark_version()
    major, minor = version.split(".")[:2]
    log = IVY_DIR / "resolve.log"
    try:
        IVY_DIR.mkdir(parents=True, exist_ok=True)
        log.write_text("")
    except OSError as e:
        print(f"spark_kafka_connector: {IVY_DIR}: {e}", file=sys.stderr)
        return None
    for revision in (version, f"{major}.{minor}.+", f"{major}.+"):
        got = _try(revision, log)
        if got is not None:
            package = f"{ARTIFACT}:{got}"
            STATE.write_text(json.dumps({"pyspark": version, "package": package}) + "\n")
            return package
    return None


def main() -> int:
    package = resolve()
    if package is None:
        print(
            f"spark_kafka_connector: {ARTIFACT} did not resolve for pyspark "
            f"{pyspark_version()} (Spark's Ivy log: {IVY_DIR / 'resolve.log'})",
            file=sys.stderr,
        )
        return 1
    if not package.endswith(":" + pyspark_version()):
        print(
            f"spark_kafka_connector: pyspark {pyspark_version()} but the registry has no such "
            f"connector; using {package}",
            file=sys.stderr,
        )
    print(package)
    return 0


if __name__ == "__main__":
    sys.exit(main())
