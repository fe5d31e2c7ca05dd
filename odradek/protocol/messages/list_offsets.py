"""ListOffsets (API key 2): versions 1-10, flexible from 6+."""

from odradek.protocol.schema import A, Api, F, S

LIST_OFFSETS = Api(
    api_key=2,
    name="ListOffsets",
    min_version=1,
    max_version=10,
    flexible_min=6,
    request=[
        F("replica_id", "int32", "0+"),
        F("isolation_level", "int8", "2+"),
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
                                F("current_leader_epoch", "int32", "4+", default="-1"),
                                F("timestamp", "int64", "0+"),
                                F("max_num_offsets", "int32", "0", default="1"),
                            )
                        ),
                        "0+",
                    ),
                )
            ),
            "0+",
        ),
        F("timeout_ms", "int32", "10+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
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
                                F("error_code", "int16", "0+"),
                                F("old_style_offsets", A("int64"), "0"),
                                F("timestamp", "int64", "1+", default="-1"),
                                F("offset", "int64", "1+", default="-1"),
                                F("leader_epoch", "int32", "4+", default="-1"),
                            )
                        ),
                        "0+",
                    ),
                )
            ),
            "0+",
        ),
    ],
)
