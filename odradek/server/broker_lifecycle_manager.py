"""BrokerLifecycleManager: the broker's registration with the controller and its heartbeats
(Kafka's ``BrokerLifecycleManager``).

The broker registers through the controller channel (BrokerRegistration, retried until the
controller accepts it) and gets its broker epoch; it is registered fenced. It then sends a
BrokerHeartbeat at once and every ``broker.heartbeat.interval.ms``, carrying the metadata offset
it has applied; the controller unfences it once it has caught up with its own registration.
``wait_for_unfence`` returns then. A heartbeat the controller refuses as stale (it no longer
knows this registration) makes the broker register again. On shutdown, ``controlled_shutdown``
heartbeats with ``want_shut_down`` (the first at once, then every 50 ms) until the controller,
having moved this broker's leaderships away and fenced it, answers ``should_shut_down``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.server.controller_channel import (
    ControllerChannel,
    ControllerRequest,
    ControllerRequestTimeout,
)

log = logging.getLogger(__name__)

# Kafka's SecurityProtocol ids.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}

# Kafka's BrokerLifecycleManager backs off 100 ms (doubling up to the heartbeat interval)
# after a failed registration.
_INITIAL_BACKOFF_MS = 100
_FENCED_HEARTBEAT_MS = 10
_REGISTRATION_HINTS = {
    Errors.UNSUPPORTED_VERSION: "(a feature level the controller finalized is outside what this broker "
    "runs: typically an Apache Kafka controller's metadata.version above 3.9-IV0; format the controller with "
    "--release-version 3.9-IV0). This broker runs:",
    Errors.INVALID_REGISTRATION: "(the controller refused this broker's log directories or listeners)",
    Errors.INCONSISTENT_CLUSTER_ID: "(the controller belongs to another cluster id)",
}
_CONTROLLED_SHUTDOWN_HEARTBEAT_MS = 50


class BrokerLifecycleManager:
    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        channel: ControllerChannel,
        heartbeat_interval_ms: Callable[[], int],
        metadata_offset: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.channel = channel
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.is_fenced = True
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._metadata_offset = metadata_offset
        self._registration: dict[str, Any] = {}
        self._unfenced: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def start(
        self,
        listeners: list[tuple[str, str, int]],
        features: dict[str, tuple[int, int]],
        rack: str | None,
        log_dirs: list[uuid.UUID] | None = None,
        security_protocols: Mapping[str, str] | None = None,
    ) -> None:
        """Register and heartbeat in the background; ``listeners``: (name, host, port);
        ``security_protocols``: listener name -> PLAINTEXT/SSL/SASL_PLAINTEXT/SASL_SSL (PLAINTEXT
        for a name not in it), registered as Kafka's SecurityProtocol ids;
        ``log_dirs``: the ``directory.id`` of each log directory (KIP-858: a controller at
        metadata.version 3.7-IV2 or later refuses a registration without them, as Kafka's does)."""
        self._registration = {
            "broker_id": self.node_id,
            "cluster_id": self.cluster_id,
            "incarnation_id": self.incarnation_id,
            "listeners": [
                {"name": n, "host": h, "port": p,
                 "security_protocol": SECURITY_PROTOCOL_IDS.get((security_protocols or {}).get(n, "PLAINTEXT"), 0)}
                for n, h, p in listeners
            ],
            "features": [
                {"name": name, "min_supported_version": lo, "max_supported_version": hi}
                for name, (lo, hi) in sorted(features.items())
            ],
            "rack": rack,
            "is_migrating_zk_broker": False,
            "log_dirs": list(log_dirs or []),
            "previous_broker_epoch": self.broker_epoch,
        }
        self._unfenced = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-lifecycle")

    async def wait_for_unfence(self) -> None:
        """Until the controller has unfenced this broker (or the lifecycle loop ended)."""
        assert self._unfenced is not None and self._task is not None
        waiter = asyncio.ensure_future(self._unfenced.wait())
        try:
            await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if self._task.done() and not self._unfenced.is_set():
            self._task.result()  # re-raise what stopped the loop
            raise RuntimeError("the broker lifecycle loop ended before the broker was unfenced")

    async def _run(self) -> None:
        await self._register()
        while True:
            if await self._heartbeat():
                # While fenced, as Kafka's starting broker does, the next one follows shortly.
                interval = _FENCED_HEARTBEAT_MS if self.is_fenced else max(1, self._heartbeat_interval_ms())
                await asyncio.sleep(interval / 1000.0)
            else:
                await self._register()

    async def _register(self) -> None:
        backoff = _INITIAL_BACKOFF_MS
        while True:
            self._registration["previous_broker_epoch"] = self.broker_epoch
            try:
                resp = await self.channel.send(ControllerRequest(g.BROKER_REGISTRATION.api_key, 4, dict(self._registration)))
                code = Errors(resp["error_code"])
            except ControllerRequestTimeout as e:
                code, resp = Errors.REQUEST_TIMED_OUT, {"error_message": str(e)}
            if code == Errors.NONE:
                self.broker_epoch = resp["broker_epoch"]
                self.is_fenced = True
                log.debug("Broker %d registered with the controller: broker epoch %d", self.node_id, self.broker_epoch)
                return
            # BrokerRegistrationResponse carries no message: say what the common refusals mean.
            hint = resp.get("error_message") or _REGISTRATION_HINTS.get(code, "")
            if code == Errors.UNSUPPORTED_VERSION:
                hint = hint + " " + ", ".join(
                    f"{f['name']} {f['min_supported_version']}-{f['max_supported_version']}"
                    for f in self._registration.get("features", [])
                )
            log.warning(
                "Registration of broker %d failed: %s %s; retrying in %d ms",
                self.node_id, code.name, hint, backoff,
            )
            await asyncio.sleep(backoff / 1000.0)
            backoff = min(backoff * 2, max(_INITIAL_BACKOFF_MS, self._heartbeat_interval_ms()))

    async def _heartbeat(self) -> bool:
        """One heartbeat; False when the broker must register again."""
        data = {
            "broker_id": self.node_id,
            "broker_epoch": self.broker_epoch,
            "current_metadata_offset": self._metadata_offset(),
            "want_fence": False,
            "want_shut_down": False,
        }
        try:
            resp = await self.channel.send(ControllerRequest(g.BROKER_HEARTBEAT.api_key, 1, data))
        except ControllerRequestTimeout as e:
            log.warning("Broker %d heartbeat timed out: %s", self.node_id, e)
            return True
        code = Errors(resp["error_code"])
        if code in (Errors.STALE_BROKER_EPOCH, Errors.BROKER_ID_NOT_REGISTERED):
            log.warning("Broker %d heartbeat refused (%s): registering again", self.node_id, code.name)
            return False
        if code != Errors.NONE:
            log.warning("Broker %d heartbeat failed: %s", self.node_id, code.name)
            return True
        if self.is_fenced and not resp["is_fenced"]:
            log.debug("Broker %d is unfenced at broker epoch %d", self.node_id, self.broker_epoch)
        self.is_fenced = resp["is_fenced"]
        if not self.is_fenced and self._unfenced is not None:
            self._unfenced.set()
        return True

    async def controlled_shutdown(self, timeout_ms: int) -> bool:
        """Kafka's beginControlledShutdown: True once the controller answered should_shut_down,
        False when it did not within ``timeout_ms`` (or no longer knows this registration)."""
        if self._task is None or self.broker_epoch < 0:
            return False
        await self.close()  # the periodic heartbeats stop: these carry want_shut_down
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000.0
        attempts = 1
        start = loop.time()
        while True:
            data = {
                "broker_id": self.node_id,
                "broker_epoch": self.broker_epoch,
                "current_metadata_offset": self._metadata_offset(),
                "want_fence": False,
                "want_shut_down": True,
            }
            try:
                resp = await self.channel.send(ControllerRequest(g.BROKER_HEARTBEAT.api_key, 1, data))
                code = Errors(resp["error_code"])
            except ControllerRequestTimeout as e:
                resp, code = {}, Errors.REQUEST_TIMED_OUT
                log.warning("Broker %d controlled shutdown heartbeat timed out: %s", self.node_id, e)
            if code == Errors.NONE and resp["should_shut_down"]:
                log.info("Broker %d: the controller has asked us to exit controlled shutdown (after %d "
                         "heartbeats, %d ms).", self.node_id, attempts, (loop.time() - start) * 1000)
                self.is_fenced = True
                return True
            if code in (Errors.STALE_BROKER_EPOCH, Errors.BROKER_ID_NOT_REGISTERED):
                log.warning("Broker %d controlled shutdown refused (%s)", self.node_id, code.name)
                return False
            # Kafka retries 50 ms after the first answer, then at the heartbeat interval; here
            # every 50 ms (at most the interval) until the controller agrees, so the broker
            # exits as soon as the other brokers' metadata has the leaders moved, not up to a
            # heartbeat interval later (a few small requests for a second at most).
            wait = min(_CONTROLLED_SHUTDOWN_HEARTBEAT_MS, max(1, self._heartbeat_interval_ms())) / 1000.0
            attempts += 1
            if loop.time() + wait > deadline:
                log.error("Broker %d timed out waiting for the controller to approve controlled shutdown", self.node_id)
                return False
            await asyncio.sleep(wait)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
