#!/usr/bin/env bash
# Fetch Apache Kafka (the reference implementation) from Maven Central with mvn, outside the
# checkout, and write a launcher that runs any Kafka class with `java -cp`.
#
#   bash scripts/kafka_reference.sh            # newest 4.x that resolves, and 3.9.x
#   $ODRADEK_KAFKA_HOME/bin/kafka-run [--line 3.9] CLASS [ARGS...]
#
# Layout under ODRADEK_KAFKA_HOME (default ~/.cache/odradek/kafka):
#   <version>/lib/*.jar     kafka_2.13, kafka-tools, kafka-shell and kafka-streams with their
#                           dependencies
#   4 -> <version>, 3.9 -> <version>    the version each line resolved to
#   log4j2.properties       warnings and errors to stderr
#   bin/kafka-run           the launcher
# Nothing of Kafka is written into the project. Re-running is cheap: a line already fetched is kept
# (delete the directory to refresh). Exit status is non-zero only if no 4.x version resolves.
set -euo pipefail

HOME_DIR=${ODRADEK_KAFKA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/odradek/kafka}
CENTRAL=${MAVEN_CENTRAL:-https://repo.maven.apache.org/maven2}
mkdir -p "$HOME_DIR/bin"

log() { echo "kafka_reference: $*" >&2; }

if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
    log "java and mvn are needed (apt-get install maven openjdk-17-jdk-headless)"
    exit 1
fi

# Versions of an artifact published on Maven Central, newest first, from its maven-metadata.xml.
published_versions() {
    local artifact=$1 prefix=$2
    curl -fsSL --max-time 30 "$CENTRAL/org/apache/kafka/$artifact/maven-metadata.xml" 2>/dev/null |
        sed -n 's:.*<version>\([0-9][0-9.]*\)</version>.*:\1:p' |
        grep -E "^${prefix//./\\.}\." | sort -t. -k1,1nr -k2,2nr -k3,3nr || true
}

# Every jar a fetched version must hold (added artifacts make older fetches incomplete).
has_all_jars() {
    local dir=$1
    compgen -G "$dir/lib/kafka-shell-*.jar" >/dev/null &&
        compgen -G "$dir/lib/kafka-streams-[0-9]*.jar" >/dev/null
}

# Fetch kafka_2.13 + kafka-tools + kafka-shell + kafka-streams at one version into
# $HOME_DIR/<version>/lib. 0 if it resolved.
fetch_version() {
    local version=$1 dir="$HOME_DIR/$1"
    if [ -f "$dir/.complete" ] && has_all_jars "$dir"; then
        return 0
    fi
    if [ -f "$dir/.complete" ]; then
        # Fetched before kafka-shell (the metadata shell) or kafka-streams was added: add the
        # missing jars only (copy-dependencies leaves the jars already there alone).
        rm -f "$dir/.complete"
    else
        rm -rf "$dir"
        mkdir -p "$dir"
    fi
    cat >"$dir/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.odradek</groupId>
  <artifactId>kafka-reference</artifactId>
  <version>$version</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-shell</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-nop</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
EOF
    if (cd "$dir" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$dir/lib" >"$dir/mvn.log" 2>&1); then
        touch "$dir/.complete"
        log "Kafka $version in $dir"
        return 0
    fi
    log "Kafka $version did not resolve (see $dir/mvn.log)"
    return 1
}

# The newest version of a line ("4", "3.9") whose jars resolve; links $HOME_DIR/<line> to it.
fetch_line() {
    local line=$1 candidates version
    if [ -L "$HOME_DIR/$line" ] && [ -f "$HOME_DIR/$line/.complete" ] &&
        has_all_jars "$HOME_DIR/$line"; then
        log "Kafka line $line: $(basename "$(readlink "$HOME_DIR/$line")") (cached)"
        return 0
    fi
    candidates=$(published_versions kafka-tools "$line")
    if [ -z "$candidates" ]; then
        log "could not list Kafka $line.x versions from $CENTRAL"
        return 1
    fi
    for version in $candidates; do
        if fetch_version "$version"; then
            ln -sfn "$version" "$HOME_DIR/$line"
            return 0
        fi
    done
    return 1
}

cat >"$HOME_DIR/log4j2.properties" <<'EOF'
status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = STDERR
EOF

cat >"$HOME_DIR/bin/kafka-run" <<'EOF'
#!/usr/bin/env bash
# kafka-run [--line 4|3.9] CLASS [ARGS...]: run a class of the fetched Apache Kafka.
set -euo pipefail
home=$(cd "$(dirname "$0")/.." && pwd)
line=4
if [ "${1:-}" = "--line" ]; then line=$2; shift 2; fi
[ -d "$home/$line/lib" ] || { echo "kafka-run: Kafka line $line is not fetched under $home" >&2; exit 1; }
# KAFKA_JVM_OPTS: quick start-up for short-lived tools by default; benchmarks pass their own.
exec java ${KAFKA_HEAP_OPTS:--Xmx512m} ${KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1} \
    -Dlog4j2.configurationFile="$home/log4j2.properties" -cp "$home/$line/lib/*" "$@"
EOF
chmod +x "$HOME_DIR/bin/kafka-run"

status=0
fetch_line 4 || status=1
fetch_line 3.9 || log "Kafka 3.9.x unavailable; ZooKeeper-mode comparisons will skip"
echo "$HOME_DIR"
exit "$status"
