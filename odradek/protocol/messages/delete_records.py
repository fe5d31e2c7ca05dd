"""DeleteRecords (API key 21): versions 0-2, flexible from 2+."""

from odradek.protocol.schema import A, Api, F, S

DELETE_RECORDS = Api(
    api_key=21,
    name="DeleteRecords",
    min_version=0,
    max_version=2,
    flexible_min=2,
    request=[
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
                                F("offset", "int64", "0+"),
                            )
                        ),
                        "0+",
                    ),
                )
            ),
            "0+",
        ),
        F("timeout_ms", "int32", "0+"),
    ],
    response=[
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
                                F("low_watermark", "int64", "0+"),
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
