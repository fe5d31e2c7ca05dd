"""BrokerTopicStats: bytes and messages in and out, per topic and for all topics (Kafka's
``BrokerTopicStats``, the ``kafka.server:type=BrokerTopicMetrics`` MBeans).

Counted per appended batch and per fetched partition, never per record: an append adds its
record count (known from the batch headers) and its size. Bytes out are what consumers fetch;
followers' fetches count as replication bytes, as in Kafka.
"""

from __future__ import annotations


class TopicStats:
    __slots__ = ("messages_in", "bytes_in", "bytes_out", "replication_bytes_out")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.replication_bytes_out = 0


class BrokerTopicStats:
    def __init__(self) -> None:
        self.all_topics = TopicStats()
        self.topics: dict[str, TopicStats] = {}

    def _topic(self, topic: str) -> TopicStats:
        st = self.topics.get(topic)
        if st is None:
            st = self.topics[topic] = TopicStats()
        return st

    def record_append(self, topic: str, size: int, messages: int) -> None:
        st = self._topic(topic)
        st.bytes_in += size
        st.messages_in += messages
        a = self.all_topics
        a.bytes_in += size
        a.messages_in += messages

    def record_bytes_out(self, topic: str, size: int, is_follower: bool) -> None:
        if is_follower:
            self.all_topics.replication_bytes_out += size
            return
        self._topic(topic).bytes_out += size
        self.all_topics.bytes_out += size

    def remove_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
