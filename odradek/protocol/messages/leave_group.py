"""LeaveGroup (API key 13): versions 0-5, flexible from 4+."""

from odradek.protocol.schema import A, Api, F, S

LEAVE_GROUP = Api(
    api_key=13,
    name="LeaveGroup",
    min_version=0,
    max_version=5,
    flexible_min=4,
    request=[
        F("group_id", "string", "0+"),
        F("member_id", "string", "0-2"),
        F(
            "members",
            A(
                S(
                    F("member_id", "string", "3+"),
                    F("group_instance_id", "string", "3+", nullable="3+", default="null"),
                    F("reason", "string", "5+", nullable="5+", default="null"),
                )
            ),
            "3+",
        ),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "0+"),
        F(
            "members",
            A(
                S(
                    F("member_id", "string", "3+"),
                    F("group_instance_id", "string", "3+", nullable="3+"),
                    F("error_code", "int16", "3+"),
                )
            ),
            "3+",
        ),
    ],
)
