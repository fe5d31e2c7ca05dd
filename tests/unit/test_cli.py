"""The odradek command, the embedded broker and the server lifecycle, against a fake BrokerServer."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from odradek.cli.main import main
from odradek.cli.server import parse_overrides, run_server
from odradek.embedded import EmbeddedBroker
from odradek.server.kafka_config import ConfigError, KafkaConfig
from odradek.server.meta_properties import ensure_formatted


class FakeBrokerServer:
    """Binds the configured listeners (port 0 → free port) and formats the log dirs."""

    instances: list[FakeBrokerServer] = []

    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        self.bound_ports: dict[str, int] = {}
        self.cluster_id: str | None = None
        self.servers: list[asyncio.Server] = []
        self.started = False
        self.stopped = False
        FakeBrokerServer.instances.append(self)

    async def startup(self) -> None:
        self.cluster_id = ensure_formatted(self.config.log_dirs, self.config.node_id)
        for lst in self.config.listeners:
            server = await asyncio.start_server(lambda r, w: w.close(), lst.host, lst.port)
            self.servers.append(server)
            self.bound_ports[lst.name] = server.sockets[0].getsockname()[1]
        self.started = True

    async def shutdown(self) -> None:
        for server in self.servers:
            server.close()
            await server.wait_closed()
        self.stopped = True


class FailingServer(FakeBrokerServer):
    async def startup(self) -> None:
        raise ConfigError("stored node.id 2 doesn't match configured node.id=1")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith("odradek ")


def test_no_command_prints_help() -> None:
    assert main([]) == 2


def test_parse_overrides() -> None:
    assert parse_overrides(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(ConfigError):
        parse_overrides(["novalue"])


def test_invalid_config_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["server", "--override", "node.id=-1"]) == 2
    err = capsys.readouterr().err
    assert "odradek: invalid configuration: Invalid value -1 for configuration node.id" in err


def test_invalid_config_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=zero\n")
    assert main(["server", "--config", str(path)]) == 2
    assert "num.partitions" in capsys.readouterr().err


def test_invalid_config_subprocess() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "odradek.cli.main", "server", "-o", "listeners=garbage"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "odradek: invalid configuration:" in proc.stderr
    assert "listeners" in proc.stderr


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["listeners=SASL_SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "inter.broker.listener.name=SASL_SSL"],
         "listener SASL_SSL: SASL mechanism(s) GSSAPI are not supported"),
        (["authorizer.class.name=kafka.security.authorizer.AclAuthorizer"],
         "the only authorizer supported is org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
        (["zookeeper.connect=localhost:2181", "process.roles=broker,controller"],
         "zookeeper.connect cannot be combined with process.roles"),
    ],
)
def test_unsupported_security_and_zookeeper_exit_2(tmp_path: Path, overrides: list[str], needle: str) -> None:
    """Refused before anything is opened: no listener, no data directory written."""
    data = tmp_path / "data"
    args = [sys.executable, "-m", "odradek.cli.main", "server", "-o", f"log.dirs={data}"]
    for o in overrides:
        args += ["-o", o]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "odradek: invalid configuration: not supported" in proc.stderr or "ZooKeeper mode" in proc.stderr
    assert needle in proc.stderr
    assert not data.exists()


def test_run_server_until_sigterm(tmp_path: Path) -> None:
    config = KafkaConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            "log.dirs": str(tmp_path),
        }
    )
    servers: list[FakeBrokerServer] = []

    class SelfStopping(FakeBrokerServer):
        async def startup(self) -> None:
            await super().startup()
            servers.append(self)
            asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGTERM)

    assert run_server(config, SelfStopping) == 0
    assert servers[0].started and servers[0].stopped
    assert (tmp_path / "meta.properties").exists()


@pytest.mark.timeout(30)
def test_sigterm_during_startup_stops_the_server(tmp_path: Path) -> None:
    """A start-up that waits (a broker waiting for its metadata quorum) is cancelled by SIGTERM:
    exit 0 and shut down, not a hang until a second signal forces the exit."""
    config = KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "log.dirs": str(tmp_path)})
    servers: list[FakeBrokerServer] = []

    class Waiting(FakeBrokerServer):
        cancelled = False

        async def startup(self) -> None:
            servers.append(self)
            asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGTERM)
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled = True
                raise

    assert run_server(config, Waiting) == 0
    assert servers[0].cancelled and servers[0].stopped and not servers[0].started


def test_run_server_startup_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = KafkaConfig({"log.dirs": str(tmp_path)})
    assert run_server(config, FailingServer) == 2
    assert "odradek: invalid configuration: stored node.id 2" in capsys.readouterr().err


def _connect(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_embedded_broker_lifecycle() -> None:
    broker = EmbeddedBroker({"num.partitions": "3"}, server_factory=FakeBrokerServer)
    with broker:
        assert broker.running
        assert broker.port > 0 and broker.controller_port not in (None, 0, broker.port)
        assert broker.bootstrap_servers == f"127.0.0.1:{broker.port}"
        assert broker.config is not None and broker.config.num_partitions == 3
        assert broker.config.offsets_topic_replication_factor == 1
        _connect(broker.port)
        log_dir = broker.log_dir
        cluster_id = broker.cluster_id
        assert cluster_id is not None and os.path.exists(os.path.join(log_dir, "meta.properties"))
        port = broker.port
        broker.restart()
        assert broker.port == port
        assert broker.cluster_id == cluster_id
        _connect(broker.port)
    assert not broker.running
    assert not os.path.exists(log_dir)


def test_embedded_broker_given_log_dir_kept(tmp_path: Path) -> None:
    with EmbeddedBroker(log_dir=str(tmp_path / "data"), server_factory=FakeBrokerServer) as b:
        assert b.log_dir == str(tmp_path / "data")
    assert (tmp_path / "data" / "meta.properties").exists()


def test_embedded_broker_startup_error_raised() -> None:
    broker = EmbeddedBroker(server_factory=FailingServer)
    with pytest.raises(ConfigError, match="stored node.id"):
        broker.start()
    assert not broker.running


def test_embedded_broker_invalid_override() -> None:
    with pytest.raises(ConfigError, match="node.id"):
        EmbeddedBroker({"node.id": "x"}, server_factory=FakeBrokerServer).start()


@pytest.mark.odradek_config({"num.partitions": "2"}, message_max_bytes="2000000")
def test_pytest_fixture_real_broker(odradek_broker: EmbeddedBroker) -> None:
    assert odradek_broker.config is not None
    assert odradek_broker.config.num_partitions == 2
    assert odradek_broker.config.message_max_bytes == 2000000
    _connect(odradek_broker.port)
    assert odradek_broker.cluster_id


def test_zookeeper_mode_without_a_zookeeper_exits_2(tmp_path: Path) -> None:
    """ZooKeeper mode is started (no longer refused); a ZooKeeper that cannot be reached within
    zookeeper.connection.timeout.ms ends the start with one line and exit code 2."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    args = [sys.executable, "-m", "odradek.cli.main", "server", "-o", f"log.dirs={tmp_path / 'data'}",
            "-o", f"zookeeper.connect=127.0.0.1:{port}", "-o", "zookeeper.connection.timeout.ms=1000",
            "-o", "broker.id=1", "-o", "listeners=PLAINTEXT://127.0.0.1:0"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Timed out waiting for connection to 127.0.0.1:" in proc.stderr
