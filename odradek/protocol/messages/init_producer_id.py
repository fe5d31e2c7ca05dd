"""InitProducerId (API key 22): versions 0-5, flexible from 2+."""

from odradek.protocol.schema import Api, F

INIT_PRODUCER_ID = Api(
    api_key=22,
    name="InitProducerId",
    min_version=0,
    max_version=5,
    flexible_min=2,
    request=[
        F("transactional_id", "string", "0+", nullable="0+"),
        F("transaction_timeout_ms", "int32", "0+"),
        F("producer_id", "int64", "3+", default="-1"),
        F("producer_epoch", "int16", "3+", default="-1"),
    ],
    response=[
        F("throttle_time_ms", "int32", "0+"),
        F("error_code", "int16", "0+"),
        F("producer_id", "int64", "0+", default="-1"),
        F("producer_epoch", "int16", "0+"),
    ],
)
