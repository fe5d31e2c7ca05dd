"""Client quotas: Kafka's ``ClientQuotaManager`` (produce and fetch byte rates) and
``ClientRequestQuotaManager`` (request handler time as a percentage), with the ``Rate`` over
sampled windows they measure with (``quota.window.num`` samples of
``quota.window.size.seconds``).

Sans-I/O: the current time comes in as an argument (milliseconds).

A quota is set on an entity: a user (the principal's name), a client id, or both, each either
named or ``<default>`` (None here). A request from user U with client id C takes the first quota
set in Kafka's order::

    /config/users/U/clients/C, /config/users/U/clients/<default>, /config/users/U,
    /config/users/<default>/clients/C, /config/users/<default>/clients/<default>,
    /config/users/<default>, /config/clients/C, /config/clients/<default>

and is measured on the sensor of that entity with the defaults filled in (so every client id
under ``/config/clients/<default>`` has its own sensor, and all the client ids of a user with
``/config/users/U`` share one). When a recorded value takes the rate over the quota, the
throttle time is Kafka's ``QuotaUtils.throttleTime``: ``(rate - quota) / quota * window``,
rounded, where the window is the one the rate was computed over.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# A quota entity: sorted (entity type, entity name or None for <default>) pairs.
QuotaEntity = tuple[tuple[str, str | None], ...]

# A sensor unused for this long is dropped (Kafka's InactiveSensorExpirationTimeSeconds).
INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
_EXPIRY_CHECK_INTERVAL_MS = 60 * 1000
# The precedence cache is cleared when it holds this many (user, client id) pairs.
_MAX_RESOLVED = 100_000


def entity(user: str | None | bool = False, client_id: str | None | bool = False) -> QuotaEntity:
    """A quota entity; ``False`` leaves a part out, None is ``<default>``."""
    parts: list[tuple[str, str | None]] = []
    if user is not False:
        parts.append((USER, None if user is None else str(user)))
    if client_id is not False:
        parts.append((CLIENT_ID, None if client_id is None else str(client_id)))
    return tuple(sorted(parts))


def java_round(x: float) -> int:
    """Java's Math.round."""
    return math.floor(x + 0.5)


class _Sample:
    __slots__ = ("last_window_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.last_window_ms = now_ms
        self.value = 0.0

    def reset(self, now_ms: int) -> None:
        self.last_window_ms = now_ms
        self.value = 0.0


class Rate:
    """Kafka's ``Rate`` over a ``SampledTotal`` (``samples`` windows of ``window_ms``): the sum of
    the live samples over the time since the oldest began, counted as at least ``samples - 1``
    full windows (so a burst at the start is spread over the whole window)."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = max(1, samples)
        self.window_ms = max(1, window_ms)
        self._ring: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._ring:
            self._ring.append(_Sample(now_ms))
        sample = self._ring[self._current]
        if now_ms - sample.last_window_ms >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._ring):
                sample = _Sample(now_ms)
                self._ring.append(sample)
            else:
                sample = self._ring[self._current]
                sample.reset(now_ms)
        sample.value += value

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for s in self._ring:
            if now_ms - s.last_window_ms >= expire:
                s.reset(now_ms)

    def window_size(self, now_ms: int) -> int:
        """The window (ms) the rate is measured over at ``now_ms``."""
        self._purge(now_ms)
        if not self._ring:
            self._ring.append(_Sample(now_ms))
        oldest = min(s.last_window_ms for s in self._ring)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Per second."""
        self._purge(now_ms)
        total = sum(s.value for s in self._ring)
        return total / (self.window_size(now_ms) / 1000.0)


@dataclass
class _Sensor:
    rate: Rate
    last_record_ms: int
    throttle_time_ms_total: int = 0
    throttled: int = 0


@dataclass(frozen=True)
class QuotaConfig:
    """``quota.window.num`` and ``quota.window.size.seconds``."""

    num_quota_samples: int = 11
    quota_window_size_seconds: int = 1


def _precedence(user: str, client_id: str) -> list[tuple[QuotaEntity, tuple[str, str]]]:
    """The entities a request of (user, client_id) may take its quota from, in Kafka's order,
    each with the sensor tags it is measured under."""
    u, c = (USER, user), (CLIENT_ID, client_id)
    du, dc = (USER, None), (CLIENT_ID, None)
    return [
        ((c, u), (user, client_id)),
        ((dc, u), (user, client_id)),
        ((u,), (user, "")),
        ((c, du), (user, client_id)),
        ((dc, du), (user, client_id)),
        ((du,), (user, "")),
        ((c,), ("", client_id)),
        ((dc,), ("", client_id)),
    ]


class ClientQuotaManager:
    """One quota type (``producer_byte_rate`` or ``consumer_byte_rate``): the quotas set for it,
    and a sensor per quota entity in use."""

    def __init__(self, quota_key: str, config: QuotaConfig | None = None) -> None:
        self.quota_key = quota_key
        self.config = config or QuotaConfig()
        self._quotas: dict[QuotaEntity, float] = {}
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float] | None] = {}
        self._sensors: dict[tuple[str, str], _Sensor] = {}
        self._next_expiry_ms = 0

    # -- configuration ----------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """True when any quota of this type is set (otherwise nothing is recorded)."""
        return bool(self._quotas)

    def update_quota(self, quota_entity: QuotaEntity, value: float | None) -> None:
        """Set (or with None remove) the quota of an entity."""
        if value is None:
            self._quotas.pop(quota_entity, None)
        else:
            self._quotas[quota_entity] = float(value)
        self._resolved.clear()

    def set_quotas(self, quotas: Mapping[QuotaEntity, float]) -> None:
        self._quotas = dict(quotas)
        self._resolved.clear()

    def quotas(self) -> Mapping[QuotaEntity, float]:
        return dict(self._quotas)

    def quota_for(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """The sensor tags and the quota a request of (user, client id) is held to (None: none)."""
        key = (user, client_id)
        if key in self._resolved:
            return self._resolved[key]
        found: tuple[tuple[str, str], float] | None = None
        for ent, tags in _precedence(user, client_id):
            bound = self._quotas.get(tuple(sorted(ent)))
            if bound is not None:
                found = (tags, bound)
                break
        if len(self._resolved) >= _MAX_RESOLVED:
            self._resolved.clear()
        self._resolved[key] = found
        return found

    # -- recording ----------------------------------------------------------------------------

    def _sensor(self, tags: tuple[str, str], now_ms: int) -> _Sensor:
        sensor = self._sensors.get(tags)
        if sensor is None:
            cfg = self.config
            sensor = self._sensors[tags] = _Sensor(
                Rate(cfg.num_quota_samples, cfg.quota_window_size_seconds * 1000), now_ms
            )
        sensor.last_record_ms = now_ms
        if now_ms >= self._next_expiry_ms:
            self._next_expiry_ms = now_ms + _EXPIRY_CHECK_INTERVAL_MS
            horizon = now_ms - INACTIVE_SENSOR_EXPIRATION_MS
            for t in [t for t, s in self._sensors.items() if s.last_record_ms < horizon]:
                del self._sensors[t]
        return sensor

    def throttle_time(self, value: float, bound: float, window_ms: int) -> int:
        """Kafka's QuotaUtils.throttleTime."""
        return java_round((value - bound) / bound * window_ms)

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` (bytes, or a percentage of a thread for request quotas); the time the
        client must now be throttled for (0: within its quota, or no quota applies)."""
        if not self._quotas:
            return 0
        found = self.quota_for(user, client_id)
        if found is None:
            return 0
        tags, bound = found
        sensor = self._sensor(tags, now_ms)
        rate = sensor.rate
        rate.record(value, now_ms)
        measured = rate.measure(now_ms)
        if measured <= bound:
            return 0
        throttle = max(0, self.throttle_time(measured, bound, rate.window_size(now_ms)))
        sensor.throttled += 1
        sensor.throttle_time_ms_total += throttle
        return throttle

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch whose data is not sent)."""
        found = self.quota_for(user, client_id) if self._quotas else None
        if found is not None and found[0] in self._sensors:
            self._sensors[found[0]].rate.record(-value, now_ms)

    def max_value_in_quota_window(self, user: str, client_id: str) -> float:
        """The most one request may use: the quota over ``quota.window.num - 1`` windows
        (Kafka's getMaxValueInQuotaWindow; a fetch's max bytes are capped to it)."""
        found = self.quota_for(user, client_id) if self._quotas else None
        if found is None:
            return math.inf
        cfg = self.config
        return found[1] * (cfg.num_quota_samples - 1) * cfg.quota_window_size_seconds

    def throttle_stats(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(user tag, client-id tag) -> (throttled responses, total throttle time ms)."""
        return {t: (s.throttled, s.throttle_time_ms_total) for t, s in self._sensors.items()}


# Request handler time recorded as a percentage of one thread over a second.
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9


class ClientRequestQuotaManager(ClientQuotaManager):
    """``request_percentage``: the time spent handling a client's requests, as a percentage of
    one request handler thread. A throttle is at most one quota window (Kafka's
    ClientRequestQuotaManager.throttleTime)."""

    def __init__(self, config: QuotaConfig | None = None) -> None:
        super().__init__(REQUEST_PERCENTAGE, config)

    def throttle_time(self, value: float, bound: float, window_ms: int) -> int:
        return min(super().throttle_time(value, bound, window_ms), self.config.quota_window_size_seconds * 1000)

    def record_nanos(self, user: str, client_id: str, nanos: float, now_ms: int) -> int:
        return self.record_and_get_throttle_time_ms(user, client_id, nanos * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms)
