"""DescribeLogDirs (API key 35): versions 1-4, flexible from 2+."""

from odradek.protocol.schema import A, Api, F, S

DESCRIBE_LOG_DIRS = Api(
    api_key=35,
    name="DescribeLogDirs",
    min_version=1,
    max_version=4,
    flexible_min=2,
    request=[
        F(
            "topics",
            A(
                S(
                    F("topic", "string", "0+"),
                    F("partitions", A("int32"), "0+"),
                )
            ),
            "0+",
            nullable="0+",
        ),
    ],
    response=[
        F("throttle_time_ms", "int32", "0+"),
        F("error_code", "int16", "3+"),
        F(
            "results",
            A(
                S(
                    F("error_code", "int16", "0+"),
                    F("log_dir", "string", "0+"),
                    F(
                        "topics",
                        A(
                            S(
                                F("name", "string", "0+"),
                                F(
                                    "partitions",
                                    A(
                                        S(
                                            F("partition_index", "int32", "0+"),
                                            F("partition_size", "int64", "0+"),
                                            F("offset_lag", "int64", "0+"),
                                            F("is_future_key", "bool", "0+"),
                                        )
                                    ),
                                    "0+",
                                ),
                            )
                        ),
                        "0+",
                    ),
                    F("total_bytes", "int64", "4+", default="-1"),
                    F("usable_bytes", "int64", "4+", default="-1"),
                )
            ),
            "0+",
        ),
    ],
)
