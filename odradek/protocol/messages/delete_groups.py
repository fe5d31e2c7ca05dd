"""DeleteGroups (API key 42): versions 0-2, flexible from 2+."""

from odradek.protocol.schema import A, Api, F, S

DELETE_GROUPS = Api(
    api_key=42,
    name="DeleteGroups",
    min_version=0,
    max_version=2,
    flexible_min=2,
    request=[
        F("groups_names", A("string"), "0+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "0+"),
        F(
            "results",
            A(
                S(
                    F("group_id", "string", "0+"),
                    F("error_code", "int16", "0+"),
                )
            ),
            "0+",
        ),
    ],
)
