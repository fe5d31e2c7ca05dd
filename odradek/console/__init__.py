"""The web console (``odradek console``): a separate process that shows any Kafka-protocol cluster
in a browser — brokers, controller and KRaft quorum, topics with partitions and configs, a
message browser, consumer groups with lag over time.

It owns only client-side code: :mod:`odradek.console.cluster` asks the cluster over the Kafka
protocol (odradek's :class:`~odradek.network.client.NetworkClient`, nothing of the broker),
:mod:`odradek.console.lag_history` keeps a bounded history of group lag and draws it as SVG,
:mod:`odradek.console.web` serves server-rendered HTML (aiohttp + jinja2, autoescaped).
"""
