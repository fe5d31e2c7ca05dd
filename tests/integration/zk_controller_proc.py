"""A ZooKeeper-mode controller alone in a process (for the SIGSTOP / kill -9 tests):
``python -m tests.integration.zk_controller_proc <zookeeper.connect> <controller id> <listener>``."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from odradek.controller.kafka_controller import KafkaControllerConfig
from odradek.controller.kafka_controller_driver import ZkControllerRuntime
from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig


async def main(connect: str, controller_id: int, listener: str) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    client = KafkaZkClient(ZkConfig(connect, 6000, 20000)).start()
    client.create_top_level_paths()
    runtime = ZkControllerRuntime(KafkaControllerConfig(broker_id=controller_id, auto_leader_rebalance_enable=False,
                                                        inter_broker_listener_name=listener), client, loop)
    runtime.start()
    await stop.wait()
    await runtime.close()
    client.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
