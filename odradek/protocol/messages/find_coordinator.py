"""FindCoordinator (API key 10): versions 0-6, flexible from 3+."""

from odradek.protocol.schema import A, Api, F, S

FIND_COORDINATOR = Api(
    api_key=10,
    name="FindCoordinator",
    min_version=0,
    max_version=6,
    flexible_min=3,
    request=[
        F("key", "string", "0-3"),
        F("key_type", "int8", "1+", default="0"),
        F("coordinator_keys", A("string"), "4+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "0-3"),
        F("error_message", "string", "1-3", nullable="1-3"),
        F("node_id", "int32", "0-3"),
        F("host", "string", "0-3"),
        F("port", "int32", "0-3"),
        F(
            "coordinators",
            A(
                S(
                    F("key", "string", "4+"),
                    F("node_id", "int32", "4+"),
                    F("host", "string", "4+"),
                    F("port", "int32", "4+"),
                    F("error_code", "int16", "4+"),
                    F("error_message", "string", "4+", nullable="4+"),
                )
            ),
            "4+",
        ),
    ],
)
