"""DescribeGroups (API key 15): versions 0-5, flexible from 5+."""

from odradek.protocol.schema import A, Api, F, S

DESCRIBE_GROUPS = Api(
    api_key=15,
    name="DescribeGroups",
    min_version=0,
    max_version=5,
    flexible_min=5,
    request=[
        F("groups", A("string"), "0+"),
        F("include_authorized_operations", "bool", "3+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F(
            "groups",
            A(
                S(
                    F("error_code", "int16", "0+"),
                    F("group_id", "string", "0+"),
                    F("group_state", "string", "0+"),
                    F("protocol_type", "string", "0+"),
                    F("protocol_data", "string", "0+"),
                    F(
                        "members",
                        A(
                            S(
                                F("member_id", "string", "0+"),
                                F(
                                    "group_instance_id",
                                    "string",
                                    "4+",
                                    nullable="4+",
                                    default="null",
                                ),
                                F("client_id", "string", "0+"),
                                F("client_host", "string", "0+"),
                                F("member_metadata", "bytes", "0+"),
                                F("member_assignment", "bytes", "0+"),
                            )
                        ),
                        "0+",
                    ),
                    F("authorized_operations", "int32", "3+", default="-2147483648"),
                )
            ),
            "0+",
        ),
    ],
)
