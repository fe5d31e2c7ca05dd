"""Broker-wide limits of the socket server: request memory and connection counts.

:class:`RequestMemoryPool` is ``queued.max.request.bytes``: it bounds the bytes of requests that
have been received but not yet handed to the request handler, across all connections. Kafka
allocates a request's whole buffer from its pool as soon as the 4-byte size is read; Odradek
never allocates from the declared size (the body is read as it arrives), so the pool counts the
bytes that have actually arrived. When the pool is full, every connection stops reading after
the read that found it full, except one connection holding part of a request (the *finisher*):
it reads on until that request is complete, so the pool overshoots by at most one request
(``socket.request.max.bytes``), as Kafka's non-strict pool can. Reading resumes once handled
requests have brought the total below the limit. A connection not yet paused may overshoot by
one read (at most 64 KiB). What is allocated can exceed what the pool counts by each connection's
64 KiB staging buffer and, for a connection receiving a large request, by at most 1 MiB or what it
has received (its buffer doubles as it fills); ``max.connections`` bounds those.

:class:`ConnectionQuotas` is ``max.connections``, ``max.connections.per.ip`` and
``max.connections.per.ip.overrides``. Over the per-IP limit a new connection is closed at once
and Kafka's "Rejected connection from ..." is logged. Over ``max.connections`` Kafka leaves new
connections waiting in the accept backlog until a slot frees; asyncio's server cannot stop
accepting, so Odradek accepts and closes them at once (the client reconnects after its backoff).
Rejections are logged at most once per :data:`REJECT_LOG_INTERVAL_S` per address (max.connections:
once per interval), with the number suppressed in between.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from collections.abc import Mapping
from typing import Protocol

log = logging.getLogger(__name__)

REJECT_LOG_INTERVAL_S = 10.0
EXHAUSTED_LOG_INTERVAL_S = 60.0
_MAX_LOG_KEYS = 10_000


class OverridesError(ValueError):
    """``max.connections.per.ip.overrides`` cannot be parsed."""


def normalize_ip(host: str) -> str:
    """The canonical text of an IP address (IPv4-mapped IPv6 as IPv4); other text unchanged."""
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def parse_ip_overrides(text: str, *, resolve: bool = True) -> dict[str, int]:
    """``host:count,host:count`` (Kafka's CSV map: the last ``:`` separates the count, so IPv6
    addresses work; ``[...]`` around them is accepted) to {ip: count}.

    Host names are resolved to every address they have (Kafka resolves them once, at start-up).
    Raises :class:`OverridesError` naming the bad entry.
    """
    out: dict[str, int] = {}
    if not text.strip():
        return out
    for raw in text.split(","):
        entry = raw.strip()
        host, sep, count_text = entry.rpartition(":")
        host = host.strip()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not sep or not host:
            raise OverridesError(f"entry {entry!r} is not host:count")
        try:
            count = int(count_text.strip())
        except ValueError:
            raise OverridesError(f"entry {entry!r}: count {count_text.strip()!r} is not an integer") from None
        if count < 0 or count > 2**31 - 1:
            raise OverridesError(f"entry {entry!r}: count must be between 0 and 2147483647")
        try:
            ips = [str(ipaddress.ip_address(host))]
        except ValueError:
            if not resolve:
                ips = [host]
            else:
                try:
                    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
                except OSError as e:
                    raise OverridesError(f"entry {entry!r}: cannot resolve host {host!r}: {e}") from None
                ips = sorted({str(info[4][0]) for info in infos})
        for ip in ips:
            out[normalize_ip(ip)] = count
    return out


class _RateLimitedLog:
    """Logs a message per key at most once per interval, counting what it suppressed."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._last: dict[str, tuple[float, int]] = {}

    def log(self, level: int, key: str, msg: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last[0] < self.interval_s:
            self._last[key] = (last[0], last[1] + 1)
            return
        if len(self._last) >= _MAX_LOG_KEYS:
            self._last.clear()
        suppressed = last[1] if last is not None else 0
        if suppressed:
            msg += " (%d similar rejections in the last %.0f s were not logged)"
            args = (*args, suppressed, self.interval_s)
        self._last[key] = (now, 0)
        log.log(level, msg, *args)


class ConnectionQuotas:
    """Connection counts per IP and in total, for every listener that shares this object."""

    def __init__(
        self,
        max_connections: int = 2**31 - 1,
        max_connections_per_ip: int = 2**31 - 1,
        per_ip_overrides: Mapping[str, int] | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = {normalize_ip(k): v for k, v in (per_ip_overrides or {}).items()}
        self.counts: dict[str, int] = {}
        self.total = 0
        self._log = _RateLimitedLog(REJECT_LOG_INTERVAL_S)

    def max_for(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_connections_per_ip)

    def try_acquire(self, ip: str, listener_name: str) -> bool:
        """Count a new connection from ``ip``; False (and logged) if a limit forbids it."""
        ip = normalize_ip(ip)
        count = self.counts.get(ip, 0)
        limit = self.max_for(ip)
        if count >= limit:
            self._log.log(
                logging.INFO, ip,
                "Rejected connection from /%s, address already has the configured maximum "
                "of %d connections (listener %s)",
                ip, limit, listener_name,
            )
            return False
        if self.total >= self.max_connections:
            self._log.log(
                logging.WARNING, "\0max.connections",
                "max.connections=%d reached: closing new connection from /%s on listener %s "
                "until a connection closes",
                self.max_connections, ip, listener_name,
            )
            return False
        self.counts[ip] = count + 1
        self.total += 1
        return True

    def release(self, ip: str) -> None:
        ip = normalize_ip(ip)
        count = self.counts.get(ip, 0) - 1
        if count > 0:
            self.counts[ip] = count
        else:
            self.counts.pop(ip, None)
        self.total = max(0, self.total - 1)


class PoolMember(Protocol):
    """What the pool needs of a connection."""

    pool_held: int  # bytes of this connection the pool counts
    pool_frames: int  # requests handed to the handler so far

    def pool_pause(self) -> None: ...

    def pool_resume(self) -> None: ...

    def pool_can_progress(self) -> bool: ...


class RequestMemoryPool:
    """``queued.max.request.bytes`` (see the module docstring)."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive (<= 0 means no pool)")
        self.capacity = capacity
        self.used = 0
        self.finisher: PoolMember | None = None
        self._finisher_frames = 0
        self.paused: dict[PoolMember, None] = {}
        self._last_exhausted_log = -EXHAUSTED_LOG_INTERVAL_S

    def update(self, conn: PoolMember, held: int) -> None:
        """``conn`` now holds ``held`` bytes of requests not yet handled."""
        self.used += held - conn.pool_held
        conn.pool_held = held
        if self.used < self.capacity:
            if self.paused or self.finisher is not None:
                self._release_all()
            return
        finisher = self.finisher
        if finisher is conn and (held == 0 or conn.pool_frames != self._finisher_frames):
            finisher = self.finisher = None  # its request is complete: no longer privileged
        if finisher is None:
            self._log_exhausted()
            if held > 0:
                self.paused[conn] = None
            self._pick_finisher()
        elif conn is not finisher and held > 0:
            self.paused[conn] = None
        if conn is not self.finisher and conn in self.paused:
            conn.pool_pause()

    def remove(self, conn: PoolMember) -> None:
        """``conn`` is gone: its bytes are free."""
        self.paused.pop(conn, None)
        if self.finisher is conn:
            self.finisher = None
        self.used -= conn.pool_held
        conn.pool_held = 0
        if self.used < self.capacity:
            if self.paused or self.finisher is not None:
                self._release_all()
        elif self.finisher is None:
            self._pick_finisher()

    def _pick_finisher(self) -> None:
        """The paused connection holding the most (preferring ones that can read) goes on."""
        candidates = [c for c in self.paused if c.pool_held > 0]
        if not candidates:
            return
        best = max(candidates, key=lambda c: (c.pool_can_progress(), c.pool_held))
        del self.paused[best]
        self.finisher = best
        self._finisher_frames = best.pool_frames
        best.pool_resume()

    def _release_all(self) -> None:
        self.finisher = None
        conns = list(self.paused)
        self.paused.clear()
        for conn in conns:
            conn.pool_resume()

    def _log_exhausted(self) -> None:
        now = time.monotonic()
        if now - self._last_exhausted_log >= EXHAUSTED_LOG_INTERVAL_S:
            self._last_exhausted_log = now
            log.warning(
                "queued.max.request.bytes=%d reached (%d bytes of requests received and not yet "
                "handled): reading from connections pauses until requests are handled",
                self.capacity, self.used,
            )
