"""OffsetForLeaderEpoch (API key 23): versions 2-4, flexible from 4+."""

from odradek.protocol.schema import A, Api, F, S

OFFSET_FOR_LEADER_EPOCH = Api(
    api_key=23,
    name="OffsetForLeaderEpoch",
    min_version=2,
    max_version=4,
    flexible_min=4,
    request=[
        F("replica_id", "int32", "3+", default="-2"),
        F(
            "topics",
            A(
                S(
                    F("topic", "string", "0+"),
                    F(
                        "partitions",
                        A(
                            S(
                                F("partition", "int32", "0+"),
                                F("current_leader_epoch", "int32", "2+", default="-1"),
                                F("leader_epoch", "int32", "0+"),
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
        F("throttle_time_ms", "int32", "2+"),
        F(
            "topics",
            A(
                S(
                    F("topic", "string", "0+"),
                    F(
                        "partitions",
                        A(
                            S(
                                F("error_code", "int16", "0+"),
                                F("partition", "int32", "0+"),
                                F("leader_epoch", "int32", "1+", default="-1"),
                                F("end_offset", "int64", "0+", default="-1"),
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
