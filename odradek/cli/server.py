"""``odradek server``: run a broker (and, by default, its controller) in this process."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol

from odradek.logs import add_log_level_argument, configure_logging, levels_from_args
from odradek.server.dir_lock import StartupError
from odradek.server.kafka_config import ConfigError, KafkaConfig

log = logging.getLogger("odradek.cli.server")


class ServerLike(Protocol):
    @property
    def bound_ports(self) -> Mapping[str, int]: ...

    @property
    def cluster_id(self) -> str | None: ...

    async def startup(self) -> None: ...

    async def shutdown(self) -> None: ...


ServerFactory = Callable[[KafkaConfig], ServerLike]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "server",
        help="run a broker",
        description="Run an Odradek node. Without arguments: a single-node cluster "
        "(process.roles=broker,controller) on PLAINTEXT://localhost:9092 with the controller "
        "on localhost:9093 and data in ./odradek-data.",
    )
    p.add_argument("--config", "-c", metavar="FILE", help="a Kafka server.properties file")
    p.add_argument(
        "--override",
        "-o",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set a configuration key (repeatable; wins over --config)",
    )
    add_log_level_argument(p)
    p.set_defaults(func=run)


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def load_config(path: str | None, overrides: Mapping[str, str]) -> KafkaConfig:
    config = KafkaConfig.from_file(path, overrides)
    for key in config.unknown_keys:
        log.warning("unknown configuration key %s=%s (ignored)", key, config.originals[key])
    return config


def run(args: argparse.Namespace) -> int:
    configure_logging(*levels_from_args(args))
    try:
        config = load_config(args.config, parse_overrides(args.override))
    except ConfigError as e:
        print(f"odradek: invalid configuration: {e}", file=sys.stderr)
        return 2
    return run_server(config)


def _default_factory(config: KafkaConfig) -> ServerLike:
    if config.is_zk_mode:
        from odradek.server.zk_broker_server import ZkBrokerServer

        zk_server: ServerLike = ZkBrokerServer(config)
        return zk_server
    from odradek.server.kafka_raft_server import KafkaRaftServer

    server: ServerLike = KafkaRaftServer(config)
    return server


def run_with_best_loop(main: Coroutine[Any, Any, int]) -> int:
    """Run ``main`` on uvloop when available, else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def run_server(config: KafkaConfig, server_factory: ServerFactory | None = None) -> int:
    """Start the server, run until SIGTERM/SIGINT, shut down. Returns the process exit code."""
    return run_with_best_loop(serve(config, server_factory or _default_factory))


async def serve(config: KafkaConfig, server_factory: ServerFactory) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        name = signal.Signals(signum).name
        if len(received) == 1:
            log.info("received %s, shutting down (send it again to force exit)", name)
            stop.set()
        else:
            log.warning("received %s again, forcing exit", name)
            logging.shutdown()
            os._exit(1)

    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, on_signal, int(sig))
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or no signals on this platform
    try:
        try:
            server = server_factory(config)
        except ConfigError as e:
            print(f"odradek: invalid configuration: {e}", file=sys.stderr)
            return 2
        except Exception:
            log.exception("cannot create the broker")
            return 1
        try:
            # SIGTERM during start-up (a broker waits there for the metadata quorum) stops it.
            if not await _start_unless_stopped(server, stop):
                log.info("stopped during start-up")
                await _quiet_shutdown(server)
                return 0
        except ConfigError as e:
            print(f"odradek: invalid configuration: {e}", file=sys.stderr)
            await _quiet_shutdown(server)
            return 2
        except StartupError as e:  # a data directory in use, a port taken: one line, exit 2
            print(f"odradek: {e}", file=sys.stderr)
            await _quiet_shutdown(server)
            return 2
        except Exception:
            log.exception("startup failed")
            await _quiet_shutdown(server)
            return 1
        ports = ", ".join(f"{name}={port}" for name, port in server.bound_ports.items())
        # The broker logs the one "ready" line; this one is for debugging port 0 listeners.
        log.debug(
            "Odradek node %d started (cluster id %s; listeners %s)",
            config.node_id, server.cluster_id, ports,
        )
        await stop.wait()
        await server.shutdown()
        log.info("Odradek node %d shut down", config.node_id)
        return 0
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _start_unless_stopped(server: ServerLike, stop: asyncio.Event) -> bool:
    """``server.startup()``, cancelled if ``stop`` is set first (then False); its errors raise."""
    starting = asyncio.ensure_future(server.startup())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if starting.done():
        starting.result()
        return True
    starting.cancel()
    try:
        await starting
    except asyncio.CancelledError:
        pass
    except Exception:
        log.debug("start-up cancelled by a signal raised", exc_info=True)
    return False


async def _quiet_shutdown(server: ServerLike) -> None:
    try:
        await server.shutdown()
    except Exception:
        log.debug("shutdown after failed startup raised", exc_info=True)
