"""DescribeConfigs (API key 32): versions 1-4, flexible from 4+."""

from odradek.protocol.schema import A, Api, F, S

DESCRIBE_CONFIGS = Api(
    api_key=32,
    name="DescribeConfigs",
    min_version=1,
    max_version=4,
    flexible_min=4,
    request=[
        F(
            "resources",
            A(
                S(
                    F("resource_type", "int8", "0+"),
                    F("resource_name", "string", "0+"),
                    F("configuration_keys", A("string"), "0+", nullable="0+"),
                )
            ),
            "0+",
        ),
        F("include_synonyms", "bool", "1+", default="false"),
        F("include_documentation", "bool", "3+", default="false"),
    ],
    response=[
        F("throttle_time_ms", "int32", "0+"),
        F(
            "results",
            A(
                S(
                    F("error_code", "int16", "0+"),
                    F("error_message", "string", "0+", nullable="0+"),
                    F("resource_type", "int8", "0+"),
                    F("resource_name", "string", "0+"),
                    F(
                        "configs",
                        A(
                            S(
                                F("name", "string", "0+"),
                                F("value", "string", "0+", nullable="0+"),
                                F("read_only", "bool", "0+"),
                                F("is_default", "bool", "0"),
                                F("config_source", "int8", "1+", default="-1"),
                                F("is_sensitive", "bool", "0+"),
                                F(
                                    "synonyms",
                                    A(
                                        S(
                                            F("name", "string", "1+"),
                                            F("value", "string", "1+", nullable="0+"),
                                            F("source", "int8", "1+"),
                                        )
                                    ),
                                    "1+",
                                ),
                                F("config_type", "int8", "3+", default="0"),
                                F("documentation", "string", "3+", nullable="0+"),
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
