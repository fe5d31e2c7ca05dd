"""OffsetFetch (API key 9): versions 1-9, flexible from 6+."""

from odradek.protocol.schema import A, Api, F, S

OFFSET_FETCH = Api(
    api_key=9,
    name="OffsetFetch",
    min_version=1,
    max_version=9,
    flexible_min=6,
    request=[
        F("group_id", "string", "0-7"),
        F(
            "topics",
            A(
                S(
                    F("name", "string", "0-7"),
                    F("partition_indexes", A("int32"), "0-7"),
                )
            ),
            "0-7",
            nullable="2-7",
        ),
        F(
            "groups",
            A(
                S(
                    F("group_id", "string", "8+"),
                    F("member_id", "string", "9+", nullable="9+", default="null"),
                    F("member_epoch", "int32", "9+", default="-1"),
                    F(
                        "topics",
                        A(
                            S(
                                F("name", "string", "8+"),
                                F("partition_indexes", A("int32"), "8+"),
                            )
                        ),
                        "8+",
                        nullable="8+",
                    ),
                )
            ),
            "8+",
        ),
        F("require_stable", "bool", "7+", default="false"),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        F(
            "topics",
            A(
                S(
                    F("name", "string", "0-7"),
                    F(
                        "partitions",
                        A(
                            S(
                                F("partition_index", "int32", "0-7"),
                                F("committed_offset", "int64", "0-7"),
                                F("committed_leader_epoch", "int32", "5-7", default="-1"),
                                F("metadata", "string", "0-7", nullable="0-7"),
                                F("error_code", "int16", "0-7"),
                            )
                        ),
                        "0-7",
                    ),
                )
            ),
            "0-7",
        ),
        F("error_code", "int16", "2-7", default="0"),
        F(
            "groups",
            A(
                S(
                    F("group_id", "string", "8+"),
                    F(
                        "topics",
                        A(
                            S(
                                F("name", "string", "8+"),
                                F(
                                    "partitions",
                                    A(
                                        S(
                                            F("partition_index", "int32", "8+"),
                                            F("committed_offset", "int64", "8+"),
                                            F(
                                                "committed_leader_epoch",
                                                "int32",
                                                "8+",
                                                default="-1",
                                            ),
                                            F("metadata", "string", "8+", nullable="8+"),
                                            F("error_code", "int16", "8+"),
                                        )
                                    ),
                                    "8+",
                                ),
                            )
                        ),
                        "8+",
                    ),
                    F("error_code", "int16", "8+", default="0"),
                )
            ),
            "8+",
        ),
    ],
)
