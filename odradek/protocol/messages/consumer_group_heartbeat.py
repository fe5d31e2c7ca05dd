"""ConsumerGroupHeartbeat (API key 68): versions 0-1, flexible from 0+."""

from odradek.protocol.schema import A, Api, F, S

CONSUMER_GROUP_HEARTBEAT = Api(
    api_key=68,
    name="ConsumerGroupHeartbeat",
    min_version=0,
    max_version=1,
    flexible_min=0,
    request=[
        F("group_id", "string", "0+"),
        F("member_id", "string", "0+"),
        F("member_epoch", "int32", "0+"),
        F("instance_id", "string", "0+", nullable="0+", default="null"),
        F("rack_id", "string", "0+", nullable="0+", default="null"),
        F("rebalance_timeout_ms", "int32", "0+", default="-1"),
        F("subscribed_topic_names", A("string"), "0+", nullable="0+", default="null"),
        F("subscribed_topic_regex", "string", "1+", nullable="1+", default="null"),
        F("server_assignor", "string", "0+", nullable="0+", default="null"),
        F(
            "topic_partitions",
            A(
                S(
                    F("topic_id", "uuid", "0+"),
                    F("partitions", A("int32"), "0+"),
                )
            ),
            "0+",
            nullable="0+",
            default="null",
        ),
    ],
    response=[
        F("throttle_time_ms", "int32", "0+"),
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default="null"),
        F("member_id", "string", "0+", nullable="0+", default="null"),
        F("member_epoch", "int32", "0+"),
        F("heartbeat_interval_ms", "int32", "0+"),
        F(
            "assignment",
            S(
                F(
                    "topic_partitions",
                    A(
                        S(
                            F("topic_id", "uuid", "0+"),
                            F("partitions", A("int32"), "0+"),
                        )
                    ),
                    "0+",
                ),
            ),
            "0+",
            nullable="0+",
            default="null",
        ),
    ],
)
