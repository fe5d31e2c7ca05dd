"""OffsetCommit (API key 8): versions 2-9, flexible from 8+."""

from odradek.protocol.schema import A, Api, F, S

OFFSET_COMMIT = Api(
    api_key=8,
    name="OffsetCommit",
    min_version=2,
    max_version=9,
    flexible_min=8,
    request=[
        F("group_id", "string", "0+"),
        F("generation_id_or_member_epoch", "int32", "1+", default="-1"),
        F("member_id", "string", "1+"),
        F("group_instance_id", "string", "7+", nullable="7+", default="null"),
        F("retention_time_ms", "int64", "2-4", default="-1"),
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
                                F("committed_offset", "int64", "0+"),
                                F("committed_leader_epoch", "int32", "6+", default="-1"),
                                F("commit_timestamp", "int64", "1", default="-1"),
                                F("committed_metadata", "string", "0+", nullable="0+"),
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
        F("throttle_time_ms", "int32", "3+"),
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
