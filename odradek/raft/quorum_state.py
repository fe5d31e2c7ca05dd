"""The ``quorum-state`` file beside the metadata log (Kafka's ``FileQuorumStateStore``).

One line of JSON: Kafka's ``QuorumStateData`` with a ``data_version`` field. Version 0 (static
voters, ``controller.quorum.voters``), which this store writes::

    {"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1}],"data_version":0}

Version 1 (Kafka 4 with dynamic voters) is read too: ``leaderId``, ``leaderEpoch``, ``votedId``,
``votedDirectoryId``. Written as Kafka writes it: to ``quorum-state.tmp``, fsynced, renamed.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field

FILE_NAME = "quorum-state"
LOWEST_SUPPORTED_VERSION = 0
HIGHEST_SUPPORTED_VERSION = 1
NO_ID = -1


class QuorumStateError(Exception):
    """A quorum-state file that cannot be read or written."""


@dataclass(frozen=True)
class ElectionState:
    epoch: int
    leader_id: int = NO_ID
    voted_id: int = NO_ID
    voters: frozenset[int] = field(default_factory=frozenset)

    def to_json(self) -> str:
        data = {
            "clusterId": "",
            "leaderId": self.leader_id,
            "leaderEpoch": self.epoch,
            "votedId": self.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in sorted(self.voters)],
            "data_version": 0,
        }
        return json.dumps(data, separators=(",", ":"))

    @staticmethod
    def from_json(line: str, source: str) -> ElectionState:
        try:
            data = json.loads(line)
        except ValueError as e:
            raise QuorumStateError(f"{source}: not JSON ({e})") from e
        if not isinstance(data, dict):
            raise QuorumStateError(f"{source}: {line.strip()!r} is not a JSON object")
        version = data.get("data_version")
        if not isinstance(version, int):
            raise QuorumStateError(f"{source}: {line.strip()!r} does not have data_version field")
        if not LOWEST_SUPPORTED_VERSION <= version <= HIGHEST_SUPPORTED_VERSION:
            raise QuorumStateError(
                f"{source}: data_version ({version}) is not within the min "
                f"({LOWEST_SUPPORTED_VERSION}) and max ({HIGHEST_SUPPORTED_VERSION}) supported version"
            )
        try:
            voters = frozenset(int(v["voterId"]) for v in data.get("currentVoters") or [])
            return ElectionState(
                epoch=int(data.get("leaderEpoch", NO_ID)),
                leader_id=int(data.get("leaderId", NO_ID)),
                voted_id=int(data.get("votedId", NO_ID)),
                voters=voters,
            )
        except (TypeError, ValueError, KeyError) as e:
            raise QuorumStateError(f"{source}: invalid field ({e})") from e


class FileQuorumStateStore:
    def __init__(self, path: str) -> None:
        self.path = path

    def read_election_state(self) -> ElectionState | None:
        """The stored state, or None when there is no file yet. Blocking."""
        try:
            with open(self.path, encoding="utf-8") as f:
                line = f.readline()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise QuorumStateError(f"cannot read {self.path}: {e.strerror}") from e
        if not line:
            raise QuorumStateError(f"{self.path}: file ended prematurely")
        return ElectionState.from_json(line, self.path)

    def write_election_state(self, state: ElectionState) -> None:
        """Replace the file atomically (temporary file, fsync, rename). Blocking."""
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(state.to_json())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:
            raise QuorumStateError(f"cannot write {self.path}: {e.strerror}") from e
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # left only when the write failed
