#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (Python 3.11) and run every check: ruff, mypy, pytest.
# Run as root or as a user with sudo (for apt-get only). Needs network access to the package
# registries only. Python packages go to a virtual environment (see below), never the system's.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "scripts/test.sh: run as root or install sudo" >&2
    exit 1
fi

PYTHON=${PYTHON:-python3}

java_ok() {
    command -v java >/dev/null 2>&1 || return 1
    local version major
    version=$(java -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n1)
    major=${version%%.*}
    [ "$major" = "1" ] && major=$(echo "$version" | cut -d. -f2)
    [ -n "$major" ] && [ "$major" -ge 17 ] 2>/dev/null
}

if command -v apt-get >/dev/null 2>&1; then
    packages=(kcat redis-server redis-tools zookeeper python3-pip python3-venv curl chromium)
    if ! command -v mvn >/dev/null 2>&1; then
        packages+=(maven)  # fetches Apache Kafka, the reference (scripts/kafka_reference.sh)
    fi
    if ! command -v npm >/dev/null 2>&1; then
        packages+=(nodejs npm)  # kafkajs, a Node.js client the transaction tests run
    fi
    if ! java_ok; then
        packages+=(openjdk-17-jdk-headless)  # a JDK: tests run single-file Java clients
    fi
    export DEBIAN_FRONTEND=noninteractive
    # Never start services while installing (zookeeper, redis): tests start their own.
    policy_rc_d=/usr/sbin/policy-rc.d
    created_policy=0
    if [ ! -e "$policy_rc_d" ]; then
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy_rc_d" >/dev/null
        "${SUDO[@]}" chmod +x "$policy_rc_d"
        created_policy=1
    fi
    cleanup_policy() {
        if [ "$created_policy" = 1 ]; then "${SUDO[@]}" rm -f "$policy_rc_d"; fi
    }
    trap cleanup_policy EXIT
    "${SUDO[@]}" apt-get update
    "${SUDO[@]}" apt-get install -y --no-install-recommends "${packages[@]}"
    cleanup_policy
    trap - EXIT
else
    echo "scripts/test.sh: apt-get not found; skipping system packages" >&2
fi

# Python dependencies go into a virtual environment (Debian 12 marks its Python as externally
# managed, PEP 668): the active one if any, else one at a fixed place outside the checkout that
# later runs (and other clones) reuse, so pyspark (~450 MB) is downloaded once.
if [ -n "${VIRTUAL_ENV:-}" ]; then
    venv=$VIRTUAL_ENV
else
    venv=${ODRADEK_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/odradek-venv}
    want=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    have=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
    if [ "$have" != "$want" ]; then  # missing, broken, or made by another Python
        echo "== creating the virtual environment $venv (Python $want)"
        "$PYTHON" -m venv --clear "$venv"
    fi
fi
PYTHON=$venv/bin/python
export VIRTUAL_ENV=$venv
export PATH="$venv/bin:$PATH"
"$PYTHON" -m pip install -e '.[test]'

status=0
# This command installs everything the tests need, so the tests that skip elsewhere when a tool
# is missing (kcat, Java, Kafka's jars, Spark's connector) must fail here instead: they check CI.
export CI="${CI:-1}"
# Apache Kafka's jars and tools, cached outside the checkout; its tests fail here if this does.
echo "== Apache Kafka (reference)"
bash scripts/kafka_reference.sh || status=1
# Spark's own Kafka connector, resolved once by Spark (Ivy) into ~/.cache/odradek/ivy.
echo "== Spark's Kafka connector (spark-sql-kafka-0-10)"
"$PYTHON" scripts/spark_kafka_connector.py || status=1
# kafkajs (tests/integration/node/package.json), into node_modules there.
echo "== Node.js clients (npm ci in tests/integration/node)"
(cd tests/integration/node && npm ci --no-audit --no-fund) || status=1
echo "== ruff check ." && "$PYTHON" -m ruff check . || status=1
echo "== mypy odradek benchmarks" && "$PYTHON" -m mypy odradek benchmarks || status=1
echo "== pytest"
set +e
"$PYTHON" -m pytest -q
rc=$?
set -e
if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then  # 5 = no tests collected
    status=1
fi
exit "$status"
