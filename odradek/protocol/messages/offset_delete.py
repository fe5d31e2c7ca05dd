"""OffsetDelete (API key 47): versions 0-0, flexible from never."""

from odradek.protocol.schema import A, Api, F, S

OFFSET_DELETE = Api(
    api_key=47,
    name="OffsetDelete",
    min_version=0,
    max_version=0,
    flexible_min=10000,
    request=[
        F("group_id", "string", "0+"),
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
        F("error_code", "int16", "0+"),
        F("throttle_time_ms", "int32", "0+"),
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
