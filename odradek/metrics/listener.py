"""``metrics.prometheus.listener``: where the ``/metrics`` endpoint listens (``http://HOST:PORT``)."""

from __future__ import annotations

from urllib.parse import urlsplit


def parse_http_listener(value: str) -> tuple[str, int]:
    """``http://HOST:PORT`` (IPv6 hosts in brackets, port 0 for any free one) -> (host, port);
    ValueError saying what is wrong otherwise."""
    try:
        url = urlsplit(value.strip())
        port = url.port
    except ValueError as e:
        raise ValueError(f"expected http://HOST:PORT, got {value!r} ({e})") from None
    if "://" not in value:
        raise ValueError(f"expected http://HOST:PORT, got {value!r} (no http:// scheme)")
    if url.scheme != "http":
        raise ValueError(f"expected http://HOST:PORT, got {value!r} (only http is served)")
    if not url.hostname or port is None:
        raise ValueError(f"expected http://HOST:PORT, got {value!r} (a host and a port are required)")
    if url.path not in ("", "/") or url.query or url.fragment or url.username or url.password:
        raise ValueError(f"expected http://HOST:PORT, got {value!r} (the path is always /metrics)")
    return url.hostname, port
