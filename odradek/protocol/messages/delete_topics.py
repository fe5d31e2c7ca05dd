"""DeleteTopics (API key 20): versions 1-6, flexible from 4+."""

from odradek.protocol.schema import A, Api, F, S

DELETE_TOPICS = Api(
    api_key=20,
    name="DeleteTopics",
    min_version=1,
    max_version=6,
    flexible_min=4,
    request=[
        F(
            "topics",
            A(
                S(
                    F("name", "string", "6+", nullable="6+", default="null"),
                    F("topic_id", "uuid", "6+"),
                )
            ),
            "6+",
        ),
        F("topic_names", A("string"), "0-5"),
        F("timeout_ms", "int32", "0+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F(
            "responses",
            A(
                S(
                    F("name", "string", "0+", nullable="6+"),
                    F("topic_id", "uuid", "6+"),
                    F("error_code", "int16", "0+"),
                    F("error_message", "string", "5+", nullable="5+", default="null"),
                )
            ),
            "0+",
        ),
    ],
)
