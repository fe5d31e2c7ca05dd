"""Produce (API key 0): versions 3-11, flexible from 9+."""

from odradek.protocol.schema import A, Api, F, S

PRODUCE = Api(
    api_key=0,
    name="Produce",
    min_version=3,
    max_version=11,
    flexible_min=9,
    request=[
        F("transactional_id", "string", "3+", nullable="3+", default="null"),
        F("acks", "int16", "0+"),
        F("timeout_ms", "int32", "0+"),
        F(
            "topic_data",
            A(
                S(
                    F("name", "string", "0+"),
                    F(
                        "partition_data",
                        A(
                            S(
                                F("index", "int32", "0+"),
                                F("records", "records", "0+", nullable="0+"),
                            )
                        ),
                        "0+",
                    ),
                )
            ),
            "0+",
        ),
    ],
    response=[
        F(
            "responses",
            A(
                S(
                    F("name", "string", "0+"),
                    F(
                        "partition_responses",
                        A(
                            S(
                                F("index", "int32", "0+"),
                                F("error_code", "int16", "0+"),
                                F("base_offset", "int64", "0+"),
                                F("log_append_time_ms", "int64", "2+", default="-1"),
                                F("log_start_offset", "int64", "5+", default="-1"),
                                F(
                                    "record_errors",
                                    A(
                                        S(
                                            F("batch_index", "int32", "8+"),
                                            F(
                                                "batch_index_error_message",
                                                "string",
                                                "8+",
                                                nullable="8+",
                                                default="null",
                                            ),
                                        )
                                    ),
                                    "8+",
                                ),
                                F("error_message", "string", "8+", nullable="8+", default="null"),
                                F(
                                    "current_leader",
                                    S(
                                        F("leader_id", "int32", "10+", default="-1"),
                                        F("leader_epoch", "int32", "10+", default="-1"),
                                    ),
                                    "10+",
                                    tag=0,
                                    tagged="10+",
                                ),
                            )
                        ),
                        "0+",
                    ),
                )
            ),
            "0+",
        ),
        F("throttle_time_ms", "int32", "1+", default="0"),
        F(
            "node_endpoints",
            A(
                S(
                    F("node_id", "int32", "10+"),
                    F("host", "string", "10+"),
                    F("port", "int32", "10+"),
                    F("rack", "string", "10+", nullable="10+", default="null"),
                )
            ),
            "10+",
            tag=0,
            tagged="10+",
        ),
    ],
)
