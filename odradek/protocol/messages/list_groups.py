"""ListGroups (API key 16): versions 0-5, flexible from 3+."""

from odradek.protocol.schema import A, Api, F, S

LIST_GROUPS = Api(
    api_key=16,
    name="ListGroups",
    min_version=0,
    max_version=5,
    flexible_min=3,
    request=[
        F("states_filter", A("string"), "4+"),
        F("types_filter", A("string"), "5+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "0+"),
        F(
            "groups",
            A(
                S(
                    F("group_id", "string", "0+"),
                    F("protocol_type", "string", "0+"),
                    F("group_state", "string", "4+"),
                    F("group_type", "string", "5+"),
                )
            ),
            "0+",
        ),
    ],
)
