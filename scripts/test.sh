#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (Python 3.11) and run every check: ruff, mypy, pytest.
# Run as root or as a user with sudo. Needs network access to the package registries only.
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
    packages=(kcat redis-server redis-tools zookeeper python3-pip python3-venv curl)
    if ! command -v mvn >/dev/null 2>&1; then
        packages+=(maven)  # fetches Apache Kafka, the reference (scripts/kafka_reference.sh)
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

# Debian 12 marks the system Python as externally managed (PEP 668).
pip_flags=()
if "$PYTHON" -m pip install --help 2>/dev/null | grep -q -- '--break-system-packages'; then
    if [ -z "${VIRTUAL_ENV:-}" ] && "$PYTHON" -c 'import sys, sysconfig, os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
        pip_flags+=(--break-system-packages)
    fi
fi
if [ "$(id -u)" -ne 0 ] && [ -z "${VIRTUAL_ENV:-}" ]; then
    pip_flags+=(--user)
    export PATH="$HOME/.local/bin:$PATH"
fi
"$PYTHON" -m pip install "${pip_flags[@]}" -e '.[test]'

status=0
# Apache Kafka's jars and tools, cached outside the checkout; its tests fail here if this does.
echo "== Apache Kafka (reference)"
bash scripts/kafka_reference.sh || status=1
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
