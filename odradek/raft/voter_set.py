"""The set of voters of a dynamic KRaft quorum (KIP-853; Kafka's ``VoterSet``).

A voter is a replica key (node id and the directory id of its metadata log directory), its
endpoints by listener name and the range of ``kraft.version`` it supports. The set is what a
VotersRecord control record holds (``raft-records/VotersRecord.json``); with ``kraft.version``
0 it is the static ``controller.quorum.voters`` (no directory ids, one endpoint each).

Immutable: :meth:`VoterSet.add_voter`, :meth:`~VoterSet.remove_voter` and
:meth:`~VoterSet.update_voter` return a new set, or None when the change is not allowed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

ZERO_UUID = uuid.UUID(int=0)

Endpoint = tuple[str, str, int]  # listener name, host, port


def _directory(value: Any) -> uuid.UUID | None:
    """A directory id from a record or request (None for Kafka's zero Uuid)."""
    if value is None:
        return None
    if isinstance(value, uuid.UUID):
        return None if value == ZERO_UUID else value
    if isinstance(value, bytes) and len(value) == 16:
        return _directory(uuid.UUID(bytes=value))
    raise ValueError(f"invalid directory id {value!r}")


@dataclass(frozen=True)
class VoterNode:
    """One voter (Kafka's ``VoterSet.VoterNode``)."""

    voter_id: int
    directory_id: uuid.UUID | None = None
    endpoints: tuple[Endpoint, ...] = ()
    min_kraft_version: int = 0
    max_kraft_version: int = 1

    def endpoint(self, listener: str | None = None) -> tuple[str, int] | None:
        """The endpoint on ``listener`` (None: the first one)."""
        for name, host, port in self.endpoints:
            if listener is None or name == listener:
                return host, port
        return None

    def is_key(self, voter_id: int, directory_id: uuid.UUID | None) -> bool:
        """Kafka's ReplicaKey match: the ids equal, and the directory ids when both are known."""
        if voter_id != self.voter_id:
            return False
        return directory_id is None or self.directory_id is None or directory_id == self.directory_id

    def to_record(self) -> dict[str, Any]:
        return {
            "voter_id": self.voter_id,
            "voter_directory_id": self.directory_id or ZERO_UUID,
            "endpoints": [{"name": n, "host": h, "port": p} for n, h, p in self.endpoints],
            "k_raft_version_feature": {
                "min_supported_version": self.min_kraft_version,
                "max_supported_version": self.max_kraft_version,
            },
        }

    @classmethod
    def from_record(cls, voter: Mapping[str, Any]) -> VoterNode:
        feature = voter.get("k_raft_version_feature") or {}
        endpoints = tuple(
            (str(e["name"]), str(e["host"]), int(e["port"])) for e in voter.get("endpoints") or []
        )
        node = cls(
            int(voter["voter_id"]),
            _directory(voter.get("voter_directory_id")),
            endpoints,
            int(feature.get("min_supported_version", 0)),
            int(feature.get("max_supported_version", 0)),
        )
        if node.voter_id < 0:
            raise ValueError(f"invalid voter id {node.voter_id}")
        if node.min_kraft_version > node.max_kraft_version:
            raise ValueError(f"invalid kraft.version range of voter {node.voter_id}")
        return node

    @classmethod
    def from_listeners(
        cls,
        voter_id: int,
        directory_id: Any,
        listeners: Iterable[Mapping[str, Any]],
        min_version: int = 0,
        max_version: int = 1,
    ) -> VoterNode:
        """From AddRaftVoter's / UpdateRaftVoter's ``listeners``."""
        endpoints = tuple((str(x["name"]), str(x["host"]), int(x["port"])) for x in listeners)
        return cls(voter_id, _directory(directory_id), endpoints, min_version, max_version)


@dataclass(frozen=True)
class VoterSet:
    voters: Mapping[int, VoterNode] = field(default_factory=dict)

    @classmethod
    def of(cls, nodes: Iterable[VoterNode]) -> VoterSet:
        out: dict[int, VoterNode] = {}
        for node in nodes:
            if node.voter_id in out:
                raise ValueError(f"voter {node.voter_id} appears twice")
            out[node.voter_id] = node
        return cls(out)

    @classmethod
    def static(cls, endpoints: Mapping[int, tuple[str, int]], listener: str) -> VoterSet:
        """``controller.quorum.voters`` (kraft.version 0: no directory ids)."""
        return cls.of(
            VoterNode(i, None, ((listener, h, p),), 0, 0) for i, (h, p) in sorted(endpoints.items())
        )

    @classmethod
    def from_voters_record(cls, record: Mapping[str, Any]) -> VoterSet:
        """A VotersRecord's fields; ValueError when they do not make a voter set."""
        voters = cls.of(VoterNode.from_record(v) for v in record.get("voters") or [])
        if not voters.voters:
            raise ValueError("a VotersRecord without voters")
        return voters

    def to_voters_record(self) -> dict[str, Any]:
        return {"version": 0, "voters": [self.voters[i].to_record() for i in sorted(self.voters)]}

    # -- queries --------------------------------------------------------------------------------

    @cached_property
    def ids(self) -> frozenset[int]:
        return frozenset(self.voters)

    def get(self, voter_id: int) -> VoterNode | None:
        return self.voters.get(voter_id)

    def is_voter(self, voter_id: int, directory_id: uuid.UUID | None = None) -> bool:
        node = self.voters.get(voter_id)
        return node is not None and node.is_key(voter_id, directory_id)

    def endpoint(self, voter_id: int, listener: str | None = None) -> tuple[str, int] | None:
        node = self.voters.get(voter_id)
        return None if node is None else node.endpoint(listener)

    def supports_kraft_version(self, version: int) -> bool:
        return all(n.min_kraft_version <= version <= n.max_kraft_version for n in self.voters.values())

    def has_overlapping_majority(self, other: VoterSet) -> bool:
        """Kafka's ``hasOverlappingMajority``: the two sets differ by at most one voter."""
        a, b = self.ids, other.ids
        return len(a ^ b) <= 1

    # -- changes --------------------------------------------------------------------------------

    def add_voter(self, node: VoterNode) -> VoterSet | None:
        if node.voter_id in self.voters:
            return None
        return VoterSet({**self.voters, node.voter_id: node})

    def remove_voter(self, voter_id: int, directory_id: uuid.UUID | None) -> VoterSet | None:
        """None when the voter is not in the set (or its directory id differs) or it is the
        last one."""
        node = self.voters.get(voter_id)
        if node is None or node.directory_id != directory_id or len(self.voters) == 1:
            return None
        return VoterSet({i: n for i, n in self.voters.items() if i != voter_id})

    def update_voter(self, node: VoterNode) -> VoterSet | None:
        """Replace the endpoints and supported versions of the voter with ``node``'s key."""
        old = self.voters.get(node.voter_id)
        if old is None or old.directory_id != node.directory_id:
            return None
        return VoterSet({**self.voters, node.voter_id: replace(node)})

    def __repr__(self) -> str:
        return "VoterSet(" + ", ".join(
            f"{i}:{self.voters[i].directory_id}" for i in sorted(self.voters)
        ) + ")"
