"""ApiVersions (API key 18): versions 0-4, flexible from 3+."""

from odradek.protocol.schema import A, Api, F, S

API_VERSIONS = Api(
    api_key=18,
    name="ApiVersions",
    min_version=0,
    max_version=4,
    flexible_min=3,
    request=[
        F("client_software_name", "string", "3+"),
        F("client_software_version", "string", "3+"),
    ],
    response=[
        F("error_code", "int16", "0+"),
        F(
            "api_keys",
            A(
                S(
                    F("api_key", "int16", "0+"),
                    F("min_version", "int16", "0+"),
                    F("max_version", "int16", "0+"),
                )
            ),
            "0+",
        ),
        F("throttle_time_ms", "int32", "1+"),
        F(
            "supported_features",
            A(
                S(
                    F("name", "string", "3+"),
                    F("min_version", "int16", "3+"),
                    F("max_version", "int16", "3+"),
                )
            ),
            "3+",
            tag=0,
            tagged="3+",
        ),
        F("finalized_features_epoch", "int64", "3+", tag=1, tagged="3+", default="-1"),
        F(
            "finalized_features",
            A(
                S(
                    F("name", "string", "3+"),
                    F("max_version_level", "int16", "3+"),
                    F("min_version_level", "int16", "3+"),
                )
            ),
            "3+",
            tag=2,
            tagged="3+",
        ),
        F("zk_migration_ready", "bool", "3+", tag=3, tagged="3+", default="false"),
    ],
)
