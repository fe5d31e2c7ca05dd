"""Metadata (API key 3): versions 0-12, flexible from 9+."""

from odradek.protocol.schema import A, Api, F, S

METADATA = Api(
    api_key=3,
    name="Metadata",
    min_version=0,
    max_version=12,
    flexible_min=9,
    request=[
        F(
            "topics",
            A(
                S(
                    F("topic_id", "uuid", "10+"),
                    F("name", "string", "0+", nullable="10+"),
                )
            ),
            "0+",
            nullable="1+",
        ),
        F("allow_auto_topic_creation", "bool", "4+", default="true"),
        F("include_cluster_authorized_operations", "bool", "8-10"),
        F("include_topic_authorized_operations", "bool", "8+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        F(
            "brokers",
            A(
                S(
                    F("node_id", "int32", "0+"),
                    F("host", "string", "0+"),
                    F("port", "int32", "0+"),
                    F("rack", "string", "1+", nullable="1+", default="null"),
                )
            ),
            "0+",
        ),
        F("cluster_id", "string", "2+", nullable="2+", default="null"),
        F("controller_id", "int32", "1+", default="-1"),
        F(
            "topics",
            A(
                S(
                    F("error_code", "int16", "0+"),
                    F("name", "string", "0+", nullable="12+"),
                    F("topic_id", "uuid", "10+"),
                    F("is_internal", "bool", "1+", default="false"),
                    F(
                        "partitions",
                        A(
                            S(
                                F("error_code", "int16", "0+"),
                                F("partition_index", "int32", "0+"),
                                F("leader_id", "int32", "0+"),
                                F("leader_epoch", "int32", "7+", default="-1"),
                                F("replica_nodes", A("int32"), "0+"),
                                F("isr_nodes", A("int32"), "0+"),
                                F("offline_replicas", A("int32"), "5+"),
                            )
                        ),
                        "0+",
                    ),
                    F("topic_authorized_operations", "int32", "8+", default="-2147483648"),
                )
            ),
            "0+",
        ),
        F("cluster_authorized_operations", "int32", "8-10", default="-2147483648"),
    ],
)
