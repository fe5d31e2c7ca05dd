"""Fetch (API key 1): versions 4-17, flexible from 12+."""

from odradek.protocol.schema import A, Api, F, S

FETCH = Api(
    api_key=1,
    name="Fetch",
    min_version=4,
    max_version=17,
    flexible_min=12,
    request=[
        F("cluster_id", "string", "12+", nullable="12+", tag=0, tagged="12+", default="null"),
        F("replica_id", "int32", "0-14", default="-1"),
        F(
            "replica_state",
            S(
                F("replica_id", "int32", "15+", default="-1"),
                F("replica_epoch", "int64", "15+", default="-1"),
            ),
            "15+",
            tag=1,
            tagged="15+",
        ),
        F("max_wait_ms", "int32", "0+"),
        F("min_bytes", "int32", "0+"),
        F("max_bytes", "int32", "3+", default="0x7fffffff"),
        F("isolation_level", "int8", "4+", default="0"),
        F("session_id", "int32", "7+", default="0"),
        F("session_epoch", "int32", "7+", default="-1"),
        F(
            "topics",
            A(
                S(
                    F("topic", "string", "0-12"),
                    F("topic_id", "uuid", "13+"),
                    F(
                        "partitions",
                        A(
                            S(
                                F("partition", "int32", "0+"),
                                F("current_leader_epoch", "int32", "9+", default="-1"),
                                F("fetch_offset", "int64", "0+"),
                                F("last_fetched_epoch", "int32", "12+", default="-1"),
                                F("log_start_offset", "int64", "5+", default="-1"),
                                F("partition_max_bytes", "int32", "0+"),
                                F("replica_directory_id", "uuid", "17+", tag=0, tagged="17+"),
                            )
                        ),
                        "0+",
                    ),
                )
            ),
            "0+",
        ),
        F(
            "forgotten_topics_data",
            A(
                S(
                    F("topic", "string", "7-12"),
                    F("topic_id", "uuid", "13+"),
                    F("partitions", A("int32"), "7+"),
                )
            ),
            "7+",
        ),
        F("rack_id", "string", "11+", default=""),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "7+"),
        F("session_id", "int32", "7+", default="0"),
        F(
            "responses",
            A(
                S(
                    F("topic", "string", "0-12"),
                    F("topic_id", "uuid", "13+"),
                    F(
                        "partitions",
                        A(
                            S(
                                F("partition_index", "int32", "0+"),
                                F("error_code", "int16", "0+"),
                                F("high_watermark", "int64", "0+"),
                                F("last_stable_offset", "int64", "4+", default="-1"),
                                F("log_start_offset", "int64", "5+", default="-1"),
                                F(
                                    "diverging_epoch",
                                    S(
                                        F("epoch", "int32", "12+", default="-1"),
                                        F("end_offset", "int64", "12+", default="-1"),
                                    ),
                                    "12+",
                                    tag=0,
                                    tagged="12+",
                                ),
                                F(
                                    "current_leader",
                                    S(
                                        F("leader_id", "int32", "12+", default="-1"),
                                        F("leader_epoch", "int32", "12+", default="-1"),
                                    ),
                                    "12+",
                                    tag=1,
                                    tagged="12+",
                                ),
                                F(
                                    "snapshot_id",
                                    S(
                                        F("end_offset", "int64", "0+", default="-1"),
                                        F("epoch", "int32", "0+", default="-1"),
                                    ),
                                    "12+",
                                    tag=2,
                                    tagged="12+",
                                ),
                                F(
                                    "aborted_transactions",
                                    A(
                                        S(
                                            F("producer_id", "int64", "4+"),
                                            F("first_offset", "int64", "4+"),
                                        )
                                    ),
                                    "4+",
                                    nullable="4+",
                                ),
                                F("preferred_read_replica", "int32", "11+", default="-1"),
                                F("records", "records", "0+", nullable="0+"),
                            )
                        ),
                        "0+",
                    ),
                )
            ),
            "0+",
        ),
        F(
            "node_endpoints",
            A(
                S(
                    F("node_id", "int32", "16+"),
                    F("host", "string", "16+"),
                    F("port", "int32", "16+"),
                    F("rack", "string", "16+", nullable="16+", default="null"),
                )
            ),
            "16+",
            tag=0,
            tagged="16+",
        ),
    ],
)
