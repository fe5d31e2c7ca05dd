"""ConsumerGroupDescribe (API key 69): versions 0-0, flexible from 0+."""

from odradek.protocol.schema import A, Api, F, S

CONSUMER_GROUP_DESCRIBE = Api(
    api_key=69,
    name="ConsumerGroupDescribe",
    min_version=0,
    max_version=0,
    flexible_min=0,
    request=[
        F("group_ids", A("string"), "0+"),
        F("include_authorized_operations", "bool", "0+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "0+"),
        F(
            "groups",
            A(
                S(
                    F("error_code", "int16", "0+"),
                    F("error_message", "string", "0+", nullable="0+", default="null"),
                    F("group_id", "string", "0+"),
                    F("group_state", "string", "0+"),
                    F("group_epoch", "int32", "0+"),
                    F("assignment_epoch", "int32", "0+"),
                    F("assignor_name", "string", "0+"),
                    F(
                        "members",
                        A(
                            S(
                                F("member_id", "string", "0+"),
                                F("instance_id", "string", "0+", nullable="0+", default="null"),
                                F("rack_id", "string", "0+", nullable="0+", default="null"),
                                F("member_epoch", "int32", "0+"),
                                F("client_id", "string", "0+"),
                                F("client_host", "string", "0+"),
                                F("subscribed_topic_names", A("string"), "0+"),
                                F(
                                    "subscribed_topic_regex",
                                    "string",
                                    "0+",
                                    nullable="0+",
                                    default="null",
                                ),
                                F(
                                    "assignment",
                                    S(
                                        F(
                                            "topic_partitions",
                                            A(
                                                S(
                                                    F("topic_id", "uuid", "0+"),
                                                    F("topic_name", "string", "0+"),
                                                    F("partitions", A("int32"), "0+"),
                                                )
                                            ),
                                            "0+",
                                        ),
                                    ),
                                    "0+",
                                ),
                                F(
                                    "target_assignment",
                                    S(
                                        F(
                                            "topic_partitions",
                                            A(
                                                S(
                                                    F("topic_id", "uuid", "0+"),
                                                    F("topic_name", "string", "0+"),
                                                    F("partitions", A("int32"), "0+"),
                                                )
                                            ),
                                            "0+",
                                        ),
                                    ),
                                    "0+",
                                ),
                            )
                        ),
                        "0+",
                    ),
                    F("authorized_operations", "int32", "0+", default="-2147483648"),
                )
            ),
            "0+",
        ),
    ],
)
