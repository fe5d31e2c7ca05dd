"""SyncGroup (API key 14): versions 0-5, flexible from 4+."""

from odradek.protocol.schema import A, Api, F, S

SYNC_GROUP = Api(
    api_key=14,
    name="SyncGroup",
    min_version=0,
    max_version=5,
    flexible_min=4,
    request=[
        F("group_id", "string", "0+"),
        F("generation_id", "int32", "0+"),
        F("member_id", "string", "0+"),
        F("group_instance_id", "string", "3+", nullable="3+", default="null"),
        F("protocol_type", "string", "5+", nullable="5+", default="null"),
        F("protocol_name", "string", "5+", nullable="5+", default="null"),
        F(
            "assignments",
            A(
                S(
                    F("member_id", "string", "0+"),
                    F("assignment", "bytes", "0+"),
                )
            ),
            "0+",
        ),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "0+"),
        F("protocol_type", "string", "5+", nullable="5+", default="null"),
        F("protocol_name", "string", "5+", nullable="5+", default="null"),
        F("assignment", "bytes", "0+"),
    ],
)
