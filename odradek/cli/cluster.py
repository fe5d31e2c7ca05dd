"""``odradek cluster up``: a local multi-process KRaft cluster on loopback, and
:class:`LocalCluster`, the same thing as a library for tests and benchmarks.

``odradek cluster up --controllers 3 --brokers 3 [--dir D] [--override KEY=VALUE ...]`` starts
controller-only processes (``process.roles=controller``, node ids 1..C) and broker-only processes
(``process.roles=broker``, node ids 101..100+B) as ``odradek server`` children on free loopback
ports, formats every node's directories with one cluster id (as ``odradek storage format
--ignore-formatted`` does), waits until every broker is registered and unfenced (each broker's
Metadata lists all of them), then prints on stdout, one ``key=value`` per line::

    bootstrap.servers=127.0.0.1:40101,127.0.0.1:40102,127.0.0.1:40103
    controller.quorum.voters=1@127.0.0.1:40001,2@127.0.0.1:40002,3@127.0.0.1:40003
    controller.quorum.bootstrap.servers=127.0.0.1:40001,127.0.0.1:40002,127.0.0.1:40003
    cluster.id=...

and runs until SIGINT or SIGTERM: then the brokers shut down first (SIGTERM: their controlled
shutdown needs the controllers), then the controllers. The children run in their own session
(a Ctrl-C in the terminal reaches only this process, which stops them in that order) and die
with it if it is killed (``PR_SET_PDEATHSIG``). A child that exits on its own stops the whole
cluster (exit code 1). Without ``--dir`` the data live in a temporary directory removed at exit;
with ``--dir`` they stay, with the layout and ports in ``D/cluster.properties``, so a second
``cluster up --dir D`` restarts the same cluster from disk on the same ports.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.server.kafka_config import ConfigError

STATE_FILE = "cluster.properties"
FIRST_BROKER_ID = 101
METADATA_TOPIC = "__cluster_metadata"
# Broker-side defaults: partition data are not replicated yet, so the internal topics get one
# replica (an --override wins).
BROKER_DEFAULTS: dict[str, str] = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


class ClusterError(Exception):
    """The cluster could not be started (a node exited, a timeout, an inconsistent --dir)."""


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (the sockets are held together so none repeats)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def port_is_free(port: int) -> bool:
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent dies (PR_SET_PDEATHSIG), so that a
    ``cluster up`` killed with -9 leaves no server behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


@dataclass
class Node:
    """One ``odradek server`` child: its role, id, port and files."""

    node_id: int
    role: str  # "controller" or "broker"
    port: int
    base: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.node_id}"

    @property
    def data_dir(self) -> Path:
        return self.base / self.name

    @property
    def config_path(self) -> Path:
        return self.base / f"{self.name}.properties"

    @property
    def log_path(self) -> Path:
        return self.base / f"{self.name}.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            text = self.log_path.read_text("utf-8", "replace")[-chars:]
        except OSError:
            text = ""
        return f"--- {self.name} ({self.log_path}) ---\n{text}"


class LocalCluster:
    """C controller-only and B broker-only ``odradek server`` processes on loopback.

    ``start()`` formats and starts them and waits until every broker is registered and
    unfenced; ``stop()`` shuts the brokers down, then the controllers. ``kill``, ``terminate``,
    ``pause``/``resume`` and ``restart`` act on one node; ``active_controller()`` asks the
    controllers (DescribeQuorum) which one leads. Usable as a context manager.

    ``die_with_parent``: the children get SIGKILL when the thread that started them ends
    (``PR_SET_PDEATHSIG`` follows the thread, not the process): start nodes from the main
    thread, or pass False and rely on :meth:`stop`.
    """

    def __init__(
        self,
        controllers: int = 3,
        brokers: int = 3,
        directory: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, str] | None = None,
        *,
        cluster_id: str | None = None,
        die_with_parent: bool = True,
    ) -> None:
        if controllers < 1:
            raise ClusterError("a cluster needs at least one controller")
        if brokers < 0:
            raise ClusterError("the number of brokers cannot be negative")
        self.overrides = dict(overrides or {})
        self.die_with_parent = die_with_parent
        self._temporary = directory is None
        self.base = Path(tempfile.mkdtemp(prefix="odradek-cluster-") if directory is None else directory)
        self.base.mkdir(parents=True, exist_ok=True)
        state = self._read_state()
        if state:
            if (int(state["controllers"]), int(state["brokers"])) != (controllers, brokers):
                raise ClusterError(
                    f"{self.base} holds a cluster of {state['controllers']} controllers and "
                    f"{state['brokers']} brokers, not {controllers} and {brokers}"
                )
            if cluster_id is not None and cluster_id != state["cluster.id"]:
                raise ClusterError(f"{self.base} holds cluster {state['cluster.id']}, not {cluster_id}")
            self.cluster_id = state["cluster.id"]
            ports = [int(p) for p in state["ports"].split(",")]
            busy = [p for p in ports if not port_is_free(p)]
            if busy:
                raise ClusterError(f"the ports of the cluster in {self.base} are in use: {busy}")
        else:
            from odradek.server.meta_properties import random_uuid_base64

            self.cluster_id = cluster_id or random_uuid_base64()
            ports = free_ports(controllers + brokers)
        self.controllers = [Node(i + 1, "controller", ports[i], self.base) for i in range(controllers)]
        self.brokers = [
            Node(FIRST_BROKER_ID + i, "broker", ports[controllers + i], self.base) for i in range(brokers)
        ]
        self._write_state()

    # ---- layout -----------------------------------------------------------------------------

    @property
    def nodes(self) -> list[Node]:
        return [*self.controllers, *self.brokers]

    def node(self, node_id: int) -> Node:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def quorum_voters(self) -> str:
        return ",".join(f"{c.node_id}@{c.address}" for c in self.controllers)

    @property
    def controller_bootstrap_servers(self) -> str:
        return ",".join(c.address for c in self.controllers)

    def summary_lines(self) -> list[str]:
        """The ``key=value`` lines ``cluster up`` prints."""
        return [
            f"bootstrap.servers={self.bootstrap_servers}",
            f"controller.quorum.voters={self.quorum_voters}",
            f"controller.quorum.bootstrap.servers={self.controller_bootstrap_servers}",
            f"cluster.id={self.cluster_id}",
        ]

    def _read_state(self) -> dict[str, str]:
        path = self.base / STATE_FILE
        if not path.exists():
            return {}
        out: dict[str, str] = {}
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#"):
                out[key.strip()] = value.strip()
        missing = {"cluster.id", "controllers", "brokers", "ports"} - set(out)
        if missing:
            raise ClusterError(f"{path} lacks {', '.join(sorted(missing))}")
        return out

    def _write_state(self) -> None:
        (self.base / STATE_FILE).write_text(
            "# odradek cluster up: the layout of this cluster (do not edit)\n"
            f"cluster.id={self.cluster_id}\n"
            f"controllers={len(self.controllers)}\n"
            f"brokers={len(self.brokers)}\n"
            f"ports={','.join(str(n.port) for n in self.nodes)}\n"
        )

    def _properties(self, node: Node) -> dict[str, str]:
        props = {
            "process.roles": node.role,
            "node.id": str(node.node_id),
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": self.quorum_voters,
            "log.dirs": str(node.data_dir),
        }
        if node.role == "controller":
            props["listeners"] = f"CONTROLLER://{node.address}"
        else:
            props["listeners"] = f"PLAINTEXT://{node.address}"
            props.update(BROKER_DEFAULTS)
        props.update(self.overrides)
        return props

    # ---- life cycle -------------------------------------------------------------------------

    def format(self) -> None:
        """Write each node's configuration and format its directories with the cluster id
        (``odradek storage format --ignore-formatted``: a restart from --dir keeps what is there)."""
        from odradek.cli.storage import run_format

        for node in self.nodes:
            node.config_path.write_text(
                "".join(f"{k}={v}\n" for k, v in self._properties(node).items())
            )
            out = io.StringIO()
            args = argparse.Namespace(
                config=str(node.config_path), cluster_id=self.cluster_id, ignore_formatted=True,
                release_version=None, standalone=False, no_initial_controllers=False,
                initial_controllers=None, feature=[], add_scram=[],
            )
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = run_format(args)
            if code != 0:
                raise ClusterError(f"formatting {node.name} failed: {out.getvalue().strip()}")

    def start_node(self, node: Node) -> None:
        """Start one (stopped) node's process, its output appended to its log file."""
        if node.running():
            raise ClusterError(f"{node.name} is already running")
        # The children run the same odradek as this process, whatever their working directory.
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        with open(node.log_path, "ab") as logf:
            node.proc = subprocess.Popen(
                [sys.executable, "-m", "odradek.cli.main", "server", "--config", str(node.config_path)],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )

    def start(self, timeout: float = 120.0, should_stop: Callable[[], bool] | None = None) -> LocalCluster:
        """Format, start every node, and wait until every broker is registered and unfenced."""
        self.format()
        for node in self.nodes:
            self.start_node(node)
        self.wait_ready(timeout, should_stop)
        return self

    def wait_ready(self, timeout: float = 120.0, should_stop: Callable[[], bool] | None = None) -> None:
        """Until every broker's Metadata lists all running brokers (registered and unfenced) —
        with no broker, until a controller leads. Raises ClusterError when a node exits first."""
        expected = {b.node_id for b in self.brokers if b.proc is not None}
        end = time.monotonic() + timeout
        while True:
            for node in self.nodes:
                if node.proc is not None and node.proc.poll() is not None:
                    raise ClusterError(
                        f"{node.name} exited with code {node.proc.returncode}\n{node.log_tail()}"
                    )
            if expected:
                seen = [self.registered_brokers(b) for b in self.brokers if b.proc is not None]
                if all(s == expected for s in seen):
                    return
            elif self.active_controller() is not None:
                return
            if should_stop is not None and should_stop():
                raise ClusterError("interrupted")
            if time.monotonic() > end:
                raise ClusterError(
                    f"the cluster was not ready within {timeout:.0f}s\n"
                    + "\n".join(n.log_tail() for n in self.nodes)
                )
            time.sleep(0.2)

    def registered_brokers(self, broker: Node, timeout: float = 2.0) -> set[int]:
        """The broker ids a broker's Metadata lists (empty when it does not answer)."""
        from odradek.protocol import messages as m

        body: dict[str, Any] = {
            "topics": [], "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
        }
        resp = _request(broker.port, m.METADATA, 12, body, timeout)
        return set() if resp is None else {int(b["node_id"]) for b in resp["brokers"]}

    def describe_quorum(self, node: Node, timeout: float = 2.0) -> dict[str, Any] | None:
        """The ``__cluster_metadata``-0 partition of a DescribeQuorum answer from ``node``
        (None when it does not answer)."""
        from odradek.protocol.messages import generated as g

        body = {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}
        resp = _request(node.port, g.DESCRIBE_QUORUM, 2, body, timeout)
        if resp is None or not resp["topics"] or not resp["topics"][0]["partitions"]:
            return None
        return dict(resp["topics"][0]["partitions"][0])

    def active_controller(self) -> Node | None:
        """The running controller that answers DescribeQuorum as leader (None if none does)."""
        for node in self.controllers:
            if not node.running():
                continue
            part = self.describe_quorum(node)
            if part is not None and part["error_code"] == 0 and part["leader_id"] == node.node_id:
                return node
        return None

    def wait_active_controller(self, timeout: float = 30.0, other_than: Node | None = None) -> Node:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            node = self.active_controller()
            if node is not None and node is not other_than:
                return node
            time.sleep(0.05)
        raise ClusterError(f"no active controller within {timeout}s\n"
                           + "\n".join(n.log_tail() for n in self.controllers))

    def kill(self, node: Node) -> None:
        """``kill -9`` one node (no shutdown)."""
        self._signal(node, signal.SIGKILL)

    def terminate(self, node: Node, timeout: float = 60.0) -> int | None:
        """SIGTERM one node and wait for it (SIGKILL after ``timeout``); its exit code."""
        return self._signal(node, signal.SIGTERM, timeout)

    def pause(self, node: Node) -> None:
        if node.running():
            os.kill(node.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]

    def resume(self, node: Node) -> None:
        if node.running():
            os.kill(node.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]

    def restart(self, node: Node, sig: int = signal.SIGTERM) -> None:
        self._signal(node, sig)
        self.start_node(node)

    def _signal(self, node: Node, sig: int, timeout: float = 60.0) -> int | None:
        proc = node.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)  # a paused node must run to handle SIGTERM
                proc.send_signal(sig)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(10)
        node.proc = None
        return code

    def stop(self, timeout: float = 60.0) -> dict[str, int]:
        """Brokers first (SIGTERM, controlled shutdown, all at once), then the controllers;
        SIGKILL for a node still running after ``timeout``. The exit code of each node that was
        running; the temporary directory is removed."""
        codes: dict[str, int] = {}
        try:
            for group in (self.brokers, self.controllers):
                for node in group:
                    if node.proc is not None and node.proc.poll() is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(node.proc.pid, signal.SIGCONT)
                            node.proc.terminate()
                end = time.monotonic() + timeout
                for node in group:
                    proc = node.proc
                    if proc is None:
                        continue
                    try:
                        codes[node.name] = proc.wait(max(0.1, end - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(10)
                        codes[node.name] = -int(signal.SIGKILL)
                    node.proc = None
        finally:
            for node in self.nodes:  # whatever happened above, no child outlives stop()
                if node.proc is not None:
                    with contextlib.suppress(ProcessLookupError):
                        node.proc.kill()
                    node.proc.wait(10)
                    node.proc = None
            if self._temporary:
                shutil.rmtree(self.base, ignore_errors=True)
        return codes

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _request(port: int, api: Any, version: int, body: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """One request to 127.0.0.1:port on a fresh connection (None when it fails)."""
    from odradek.network.client import NetworkClient

    async def go() -> dict[str, Any] | None:
        client = NetworkClient("127.0.0.1", port, "odradek-cluster")
        try:
            return await asyncio.wait_for(client.send(api, version, body), timeout)
        except (OSError, TimeoutError):
            return None
        finally:
            await client.close()

    return asyncio.run(go())


# ---- the command -----------------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "cluster",
        help="run a local multi-process KRaft cluster (cluster up); describe one (cluster info, cluster id)",
        description="Run a local KRaft cluster of separate odradek server processes on loopback.",
    )
    commands = p.add_subparsers(dest="cluster_command", metavar="{up,info,id}")
    up = commands.add_parser(
        "up",
        help="start controllers and brokers, print the bootstrap servers, stop on Ctrl-C",
        description="Start C controller-only and B broker-only processes on free loopback ports, "
        "wait until every broker is registered and unfenced, print bootstrap.servers=... (and the "
        "controller quorum) on stdout, and run until SIGINT/SIGTERM: then stop the brokers, then "
        "the controllers. Node logs are in the data directory.",
    )
    up.add_argument("--controllers", type=int, default=3, help="controller-only nodes, ids 1..C (default 3)")
    up.add_argument("--brokers", type=int, default=3, help="broker-only nodes, ids 101.. (default 3)")
    up.add_argument("--dir", metavar="D", help="keep the data in D (a later `cluster up --dir D` "
                    "restarts from it); default: a temporary directory removed at exit")
    up.add_argument("--override", "-o", metavar="KEY=VALUE", action="append", default=[],
                    help="a configuration key for every node (repeatable)")
    up.add_argument("--timeout", type=float, default=120.0, metavar="S",
                    help="seconds to wait for the cluster to be ready (default 120)")
    up.set_defaults(func=run_up)
    from odradek.cli import cluster_info

    cluster_info.add_commands(commands)
    p.set_defaults(func=lambda _args: _usage(p))


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


class _Interrupted(Exception):
    pass


class _StopSignals:
    """SIGINT/SIGTERM raise _Interrupted while armed (during start-up and the wait); once the
    shutdown has begun they are noted and ignored (the shutdown under way is bounded)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.armed = True
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, _frame: object) -> None:
        self.received.append(signum)
        if self.armed:
            self.armed = False
            raise _Interrupted
        print(f"odradek cluster: {signal.Signals(signum).name} received; already stopping", file=sys.stderr)

    def __enter__(self) -> _StopSignals:
        self._old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def run_up(args: argparse.Namespace) -> int:
    def say(msg: str) -> None:
        print(f"odradek cluster: {msg}", file=sys.stderr, flush=True)

    from odradek.cli.server import parse_overrides

    try:
        overrides = parse_overrides(args.override)
    except ConfigError as e:
        say(str(e))
        return 2
    if args.controllers < 1 or args.brokers < 0:
        say("--controllers must be at least 1 and --brokers at least 0")
        return 2
    try:
        cluster = LocalCluster(args.controllers, args.brokers, args.dir, overrides)
    except (ClusterError, OSError) as e:
        say(str(e))
        return 2
    code = 0
    with _StopSignals() as signals:
        try:
            say(f"starting {args.controllers} controllers and {args.brokers} brokers in {cluster.base}")
            cluster.start(args.timeout)
            for line in cluster.summary_lines():
                print(line, flush=True)
            say("ready; Ctrl-C stops the cluster")
            while True:
                dead = [n for n in cluster.nodes if n.proc is not None and n.proc.poll() is not None]
                if dead:
                    signals.armed = False
                    for n in dead:
                        say(f"{n.name} exited with code {n.proc.returncode}; stopping the cluster\n"  # type: ignore[union-attr]
                            f"{n.log_tail()}")
                    code = 1
                    break
                time.sleep(0.2)
        except _Interrupted:
            say(f"received {signal.Signals(signals.received[0]).name}, stopping the brokers, then the controllers")
        except ClusterError as e:
            say(str(e))
            code = 1
        finally:
            signals.armed = False
            codes = cluster.stop()
            bad = {name: c for name, c in codes.items() if c != 0}
            if bad:
                say(f"nodes that did not exit cleanly (exit codes): {bad}")
                code = 1
            say("stopped" + ("" if args.dir is None else f"; data kept in {cluster.base}"))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    from odradek.cli.main import main as odradek_main

    return odradek_main(["cluster", *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    sys.exit(main())
