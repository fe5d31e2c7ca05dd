"""CreatePartitions (API key 37): versions 0-3, flexible from 2+."""

from odradek.protocol.schema import A, Api, F, S

CREATE_PARTITIONS = Api(
    api_key=37,
    name="CreatePartitions",
    min_version=0,
    max_version=3,
    flexible_min=2,
    request=[
        F(
            "topics",
            A(
                S(
                    F("name", "string", "0+"),
                    F("count", "int32", "0+"),
                    F(
                        "assignments",
                        A(
                            S(
                                F("broker_ids", A("int32"), "0+"),
                            )
                        ),
                        "0+",
                        nullable="0+",
                    ),
                )
            ),
            "0+",
        ),
        F("timeout_ms", "int32", "0+"),
        F("validate_only", "bool", "0+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "0+"),
        F(
            "results",
            A(
                S(
                    F("name", "string", "0+"),
                    F("error_code", "int16", "0+"),
                    F("error_message", "string", "0+", nullable="0+", default="null"),
                )
            ),
            "0+",
        ),
    ],
)
