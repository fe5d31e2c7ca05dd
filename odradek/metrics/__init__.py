"""Odradek's metrics: the cheap counters and histograms the request path feeds
(:mod:`odradek.metrics.histogram`), the Prometheus collectors that read the broker's and the
controller's state at scrape time (:mod:`odradek.metrics.collectors`), and the ``/metrics``
endpoint served when ``metrics.prometheus.listener`` is set (:mod:`odradek.metrics.prometheus`)."""
