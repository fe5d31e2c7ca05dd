"""EmbeddedBroker: a real Odradek node on loopback, in a background thread, for tests and scripts.

```python
with EmbeddedBroker({"num.partitions": "3"}) as broker:
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
```

The node runs on its own event loop in a daemon thread; both listeners bind free loopback ports
(port 0) and the actual ports are read back from the server. Data goes to a temporary directory
(removed by ``stop()``) unless ``log_dir`` is given. A few defaults suit a one-node test cluster
(internal topics with replication factor 1, no initial rebalance delay); ``overrides`` win.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from odradek.logs import install_record_escaping
from odradek.server.kafka_config import KafkaConfig

TEST_DEFAULTS: dict[str, str] = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class EmbeddedBroker:
    def __init__(
        self,
        overrides: Mapping[str, str] | None = None,
        *,
        log_dir: str | None = None,
        server_factory: Callable[[KafkaConfig], Any] | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        self._overrides = dict(overrides or {})
        self._given_log_dir = log_dir
        self._temp_dir: str | None = None
        self._server_factory = server_factory
        self._startup_timeout = startup_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._bound_ports: dict[str, int] = {}
        self._pinned_listeners: str | None = None  # keep the same ports across restart()
        self.server: Any = None
        self.config: KafkaConfig | None = None

    # ---- properties --------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def log_dir(self) -> str:
        if self._given_log_dir is not None:
            return self._given_log_dir
        if self._temp_dir is None:
            self._temp_dir = tempfile.mkdtemp(prefix="odradek-")
        return self._temp_dir

    @property
    def bound_ports(self) -> dict[str, int]:
        return dict(self._bound_ports)

    @property
    def port(self) -> int:
        """Port of the client listener (the first non-controller listener)."""
        config = self._require_config()
        ctrl = set(config.controller_listener_names)
        for lst in config.listeners:
            if lst.name not in ctrl:
                return self._bound_ports.get(lst.name, lst.port)
        raise RuntimeError("the embedded broker has no client listener")

    @property
    def controller_port(self) -> int | None:
        config = self._require_config()
        for lst in config.controller_listeners:
            return self._bound_ports.get(lst.name, lst.port)
        return None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def cluster_id(self) -> str | None:
        return getattr(self.server, "cluster_id", None)

    def _require_config(self) -> KafkaConfig:
        if self.config is None:
            raise RuntimeError("the embedded broker has not been started")
        return self.config

    # ---- lifecycle ---------------------------------------------------------------------

    def _build_config(self) -> KafkaConfig:
        props = dict(TEST_DEFAULTS)
        props["listeners"] = self._pinned_listeners or "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"
        props["log.dirs"] = self.log_dir
        props.update(self._overrides)
        return KafkaConfig(props)

    def _factory(self) -> Callable[[KafkaConfig], Any]:
        if self._server_factory is not None:
            return self._server_factory
        from odradek.server.kafka_raft_server import KafkaRaftServer

        return KafkaRaftServer

    def start(self) -> EmbeddedBroker:
        """Start the node and block until it serves requests; raises its startup error."""
        if self._thread is not None:
            raise RuntimeError("the embedded broker is already running")
        # Its records go to the application's handlers: client text in them stays on one line.
        install_record_escaping()
        try:
            self.config = config = self._build_config()
            factory = self._factory()
        except BaseException:
            self._cleanup_temp()
            raise
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = _new_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                self.server = factory(config)
                loop.run_until_complete(self.server.startup())
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                failure.append(e)
                if self.server is not None:
                    try:
                        loop.run_until_complete(self.server.shutdown())
                    except BaseException:  # noqa: BLE001
                        pass
                _close_loop(loop)
                ready.set()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                _close_loop(loop)

        thread = threading.Thread(target=run, name="odradek-embedded-broker", daemon=True)
        thread.start()
        if not ready.wait(self._startup_timeout):
            raise TimeoutError(
                f"embedded broker did not start within {self._startup_timeout} seconds"
            )
        if failure:
            thread.join()
            self.server = None
            self._cleanup_temp()
            raise failure[0]
        self._loop = loop
        self._thread = thread
        self._bound_ports = dict(getattr(self.server, "bound_ports", {}) or {})
        if "listeners" not in self._overrides and self._bound_ports:
            self._pinned_listeners = ",".join(
                f"{lst.name}://127.0.0.1:{self._bound_ports.get(lst.name, lst.port)}"
                for lst in config.listeners
            )
        return self

    def run_coroutine(self, coro: Any, timeout: float | None = 60.0) -> Any:
        """Run a coroutine on the broker's event loop and return its result."""
        if self._loop is None:
            raise RuntimeError("the embedded broker is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _shutdown_thread(self, timeout: float) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            if self.server is not None:
                asyncio.run_coroutine_threadsafe(self.server.shutdown(), loop).result(timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            self._loop = None
            self._thread = None

    def stop(self, timeout: float = 60.0) -> None:
        """Shut the node down, join its thread and remove the temporary data directory."""
        try:
            self._shutdown_thread(timeout)
        finally:
            self._cleanup_temp()
            self._pinned_listeners = None

    def restart(self, timeout: float = 60.0) -> EmbeddedBroker:
        """Stop and start again on the same ports and the same data."""
        self._shutdown_thread(timeout)
        return self.start()

    def _cleanup_temp(self) -> None:
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"bootstrap_servers={self.bootstrap_servers}" if self.running else "stopped"
        return f"EmbeddedBroker({state})"


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
