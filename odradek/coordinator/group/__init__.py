"""The group coordinator (Kafka's group-coordinator module): groups and committed offsets on
``__consumer_offsets``.
"""
