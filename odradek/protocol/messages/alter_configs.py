"""AlterConfigs (API key 33): versions 0-2, flexible from 2+."""

from odradek.protocol.schema import A, Api, F, S

ALTER_CONFIGS = Api(
    api_key=33,
    name="AlterConfigs",
    min_version=0,
    max_version=2,
    flexible_min=2,
    request=[
        F(
            "resources",
            A(
                S(
                    F("resource_type", "int8", "0+"),
                    F("resource_name", "string", "0+"),
                    F(
                        "configs",
                        A(
                            S(
                                F("name", "string", "0+"),
                                F("value", "string", "0+", nullable="0+"),
                            )
                        ),
                        "0+",
                    ),
                )
            ),
            "0+",
        ),
        F("validate_only", "bool", "0+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "0+"),
        F(
            "responses",
            A(
                S(
                    F("error_code", "int16", "0+"),
                    F("error_message", "string", "0+", nullable="0+"),
                    F("resource_type", "int8", "0+"),
                    F("resource_name", "string", "0+"),
                )
            ),
            "0+",
        ),
    ],
)
