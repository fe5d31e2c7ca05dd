"""The metadata state machine (the controller's managers, MetadataDelta/MetadataImage) on the
KRaft core under the deterministic simulator (tests/sim/controller_sim.py).

``test_controller_schedules`` runs the seeds from conftest.py (100 by default; the same
``--sim-schedules`` / ``ODRADEK_SIM_SCHEDULES`` and ``--sim-seed`` / ``ODRADEK_SIM_SEED`` options as
test_raft_sim.py); a failure names the seed and the command that replays it.
``test_simulator_catches_broken_controllers`` breaks the controller on purpose and requires the
simulator to find a failing seed, so that the invariants are known to bite.
"""

from __future__ import annotations

import contextlib
import logging
import random
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odradek.controller import replication_control
from odradek.controller.cluster_control_manager import ClusterControlManager
from odradek.controller.producer_id_control_manager import (
    ProducerIdControlManager,
    ProducerIdsBlock,
)
from odradek.metadata.image import MetadataImage
from odradek.raft import epoch_state

from . import controller_sim
from .controller_sim import (
    Controller,
    ControllerSimulation,
    replay,
    run_controller_schedule,
    run_deposed_leader_schedule,
)
from .mutations import assert_a_schedule_catches
from .raft_sim import Violation
from .test_raft_sim import _hw_counts_minority

REPLAY = (
    "ODRADEK_SIM_SEED={seed} python3 -m pytest tests/sim/test_controller_sim.py "
    "-k test_controller_schedules -q"
)


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    logger = logging.getLogger("odradek")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def test_controller_schedules(controller_sim_seeds: list[int]) -> None:
    for seed in controller_sim_seeds:
        try:
            run_controller_schedule(seed)
        except Violation as e:
            pytest.fail(f"seed {seed}: {e}\nreplay with: {REPLAY.format(seed=seed)}", pytrace=False)
        except Exception as e:  # a crash of a manager or of the core fails the schedule too
            raise AssertionError(
                f"seed {seed} crashed; replay with: {REPLAY.format(seed=seed)}"
            ) from e


def test_replay_is_deterministic() -> None:
    first, second = run_controller_schedule(20), run_controller_schedule(20)
    assert first.trace == second.trace
    assert first.committed == second.committed
    assert len(first.acked) > 10


def test_deposed_leader_writes_are_never_committed() -> None:
    """A paused active controller resumes as the leader of an epoch the others left and
    proposes; invariant 3 (checked in every schedule) must see such writes, and none commits."""
    late = 0
    for seed in range(1, 5):
        sim = run_deposed_leader_schedule(seed)
        late += len(sim.late_writes)
        for (offset, epoch), record in sim.late_writes.items():
            assert sim.committed.get(offset) != (epoch, record)
        assert max(sim.leaders) >= 2
    assert late > 0


def test_schedules_exercise_the_managers() -> None:
    """The default schedules fail over between controllers and commit every kind of write."""
    kinds: set[str] = set()
    names: set[str] = set()
    failovers = 0
    for seed in range(25):
        sim = run_controller_schedule(seed)
        kinds.update(w.kind for w in sim.acked)
        names.update(r[0] for r in sim.decoded if r is not None)
        failovers += len({w.epoch for w in sim.acked}) > 1
    assert kinds >= {
        "activate",
        "create",
        "delete",
        "partitions",
        "config",
        "register",
        "heartbeat",
        "pids",
    }
    assert names >= {
        "TopicRecord",
        "PartitionRecord",
        "RemoveTopicRecord",
        "ConfigRecord",
        "RegisterBrokerRecord",
        "BrokerRegistrationChangeRecord",
        "ProducerIdsRecord",
        "FeatureLevelRecord",
    }
    assert failovers >= 5  # acknowledged writes from more than one active controller


def _stale_managers(self: Controller, image: MetadataImage) -> None:
    """Once active, the managers (but the feature levels) keep reading the image of the
    activation: the controller's own image (and write image) moves on."""
    self.write_image = image
    self.features.image = image
    if self.active_epoch is None:
        for m in (self.replication, self.configuration, self.cluster, self.producer_ids):
            m.image = image


def _new_epoch_mod_7(
    self: ClusterControlManager, request: dict[str, Any], new_broker_epoch: int, now_ms: int
) -> Any:
    return ORIGINAL_REGISTER(self, request, new_broker_epoch % 7, now_ms)


def _block_below_next(self: ProducerIdControlManager, broker_id: int, broker_epoch: int) -> Any:
    """The block handed out starts 500 ids below the image's next producer id."""
    block, records = ORIGINAL_GENERATE(self, broker_id, broker_epoch)
    first = max(0, block.first_producer_id - 500)
    return ProducerIdsBlock(broker_id, first, block.size), records


def _ack_at_append(
    self: ControllerSimulation, node: Any, c: Controller, *args: Any, **kwargs: Any
) -> Any:
    """The controller answers a CreateTopics once the records are appended, not committed."""
    w = ORIGINAL_PROPOSE_WRITE(self, node, c, *args, **kwargs)
    for i, (name, fields) in enumerate(w.records):
        if name == "TopicRecord":
            self.acked_topics[fields["topic_id"]] = (fields["name"], w.first + i)
    return w


@contextlib.contextmanager
def _few_topic_ids(rng: random.Random) -> Iterator[None]:
    """Topic ids drawn from 8 values (the node's random generator reseeded, say)."""
    original = replication_control.new_topic_id
    replication_control.new_topic_id = lambda: uuid.UUID(int=rng.randrange(2, 10))
    try:
        yield
    finally:
        replication_control.new_topic_id = original


def _apply_at_append(
    self: ControllerSimulation, node: Any, c: Controller, *args: Any, **kwargs: Any
) -> Any:
    """The active controller applies its records to its image when it proposes them."""
    w = ORIGINAL_PROPOSE_WRITE(self, node, c, *args, **kwargs)
    c.set_image(replay(c.image, list(enumerate(w.records, w.first)), "mutation"))
    return w


ORIGINAL_REGISTER = ClusterControlManager.register_broker
ORIGINAL_GENERATE = ProducerIdControlManager.generate_next_producer_id
ORIGINAL_PROPOSE_WRITE = ControllerSimulation.propose_write

MUTATIONS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], list[int]]] = {
    # name: (how to break the controller, seeds to try first)
    "active controller writes before its image caught up with its epoch": (
        lambda mp: mp.setattr(ControllerSimulation, "wait_for_catch_up", False),
        [80, 102, 158, 36],
    ),
    "managers propose from a stale image": (
        lambda mp: mp.setattr(Controller, "set_write_image", _stale_managers),
        [0],
    ),
    "leader applies its records when appended, not when committed": (
        lambda mp: mp.setattr(ControllerSimulation, "propose_write", _apply_at_append),
        [0],
    ),
    "broker epochs reused": (
        lambda mp: mp.setattr(ClusterControlManager, "register_broker", _new_epoch_mod_7),
        [21],
    ),
    "producer-id block below the next producer id": (
        lambda mp: mp.setattr(
            ProducerIdControlManager, "generate_next_producer_id", _block_below_next
        ),
        [0],
    ),
    "write acknowledged when appended": (
        lambda mp: mp.setattr(ControllerSimulation, "propose_write", _ack_at_append),
        [15],
    ),
    "topic ids from a tiny space": (
        lambda mp: mp.setattr(controller_sim, "seeded_topic_ids", _few_topic_ids),
        [0],
    ),
    "raft: high watermark from the best replica": (
        lambda mp: mp.setattr(
            epoch_state.LeaderState, "_maybe_update_high_watermark", _hw_counts_minority
        ),
        [0],
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_simulator_catches_broken_controllers(
    mutation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    breaks, first_seeds = MUTATIONS[mutation]
    breaks(monkeypatch)
    assert_a_schedule_catches(mutation, run_controller_schedule, Violation, first_seeds, 60)
