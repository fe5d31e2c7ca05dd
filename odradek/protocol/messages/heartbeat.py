"""Heartbeat (API key 12): versions 0-4, flexible from 4+."""

from odradek.protocol.schema import Api, F

HEARTBEAT = Api(
    api_key=12,
    name="Heartbeat",
    min_version=0,
    max_version=4,
    flexible_min=4,
    request=[
        F("group_id", "string", "0+"),
        F("generation_id", "int32", "0+"),
        F("member_id", "string", "0+"),
        F("group_instance_id", "string", "3+", nullable="3+", default="null"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "0+"),
    ],
)
