"""DescribeCluster (API key 60): versions 0-1, flexible from 0+."""

from odradek.protocol.schema import A, Api, F, S

DESCRIBE_CLUSTER = Api(
    api_key=60,
    name="DescribeCluster",
    min_version=0,
    max_version=1,
    flexible_min=0,
    request=[
        F("include_cluster_authorized_operations", "bool", "0+"),
        F("endpoint_type", "int8", "1+", default="1"),
    ],
    response=[
        F("throttle_time_ms", "int32", "0+"),
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default="null"),
        F("endpoint_type", "int8", "1+", default="1"),
        F("cluster_id", "string", "0+"),
        F("controller_id", "int32", "0+", default="-1"),
        F(
            "brokers",
            A(
                S(
                    F("broker_id", "int32", "0+"),
                    F("host", "string", "0+"),
                    F("port", "int32", "0+"),
                    F("rack", "string", "0+", nullable="0+", default="null"),
                )
            ),
            "0+",
        ),
        F("cluster_authorized_operations", "int32", "0+", default="-2147483648"),
    ],
)
