"""JoinGroup (API key 11): versions 2-9, flexible from 6+."""

from odradek.protocol.schema import A, Api, F, S

JOIN_GROUP = Api(
    api_key=11,
    name="JoinGroup",
    min_version=2,
    max_version=9,
    flexible_min=6,
    request=[
        F("group_id", "string", "0+"),
        F("session_timeout_ms", "int32", "0+"),
        F("rebalance_timeout_ms", "int32", "1+", default="-1"),
        F("member_id", "string", "0+"),
        F("group_instance_id", "string", "5+", nullable="5+", default="null"),
        F("protocol_type", "string", "0+"),
        F(
            "protocols",
            A(
                S(
                    F("name", "string", "0+"),
                    F("metadata", "bytes", "0+"),
                )
            ),
            "0+",
        ),
        F("reason", "string", "8+", nullable="8+", default="null"),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F("error_code", "int16", "0+"),
        F("generation_id", "int32", "0+", default="-1"),
        F("protocol_type", "string", "7+", nullable="7+", default="null"),
        F("protocol_name", "string", "0+", nullable="7+"),
        F("leader", "string", "0+"),
        F("skip_assignment", "bool", "9+", default="false"),
        F("member_id", "string", "0+"),
        F(
            "members",
            A(
                S(
                    F("member_id", "string", "0+"),
                    F("group_instance_id", "string", "5+", nullable="5+", default="null"),
                    F("metadata", "bytes", "0+"),
                )
            ),
            "0+",
        ),
    ],
)
