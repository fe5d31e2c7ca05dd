"""FeatureControlManager: the finalized feature levels of the cluster (KIP-584), sans-I/O.

``metadata.version`` lives in the metadata log (``FeatureLevelRecord``); a new log gets it from the
bootstrap records the active controller writes first. ``kraft.version`` is not a metadata record:
it is the Raft layer's (``KRaftVersionRecord`` in the quorum's own control records, KIP-853), so
the controller passes the level Raft reports. Together they are the finalized features a
registering broker must support (Kafka's ``FinalizedControllerFeatures``).

``transaction.version`` (KIP-890; levels 0-2, no dependency on metadata.version: Kafka's
``TransactionVersion``) is finalized only when the bootstrap metadata asks for it
(``odradek storage format --feature transaction.version=2``): Kafka's own default at
Odradek's metadata.version (3.9-IV0) is 0, as TV_1/TV_2 bootstrap from 4.0-IV2.

UpdateFeatures is not implemented (nor advertised): the levels change only at bootstrap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from odradek.controller.replication_control import MetadataRecord
from odradek.metadata.image import MetadataImage

log = logging.getLogger(__name__)

METADATA_VERSION_FEATURE = "metadata.version"
KRAFT_VERSION_FEATURE = "kraft.version"
TRANSACTION_VERSION_FEATURE = "transaction.version"
# 1: flexible __transaction_state values (ClientTransactionVersion ...); 2: an epoch bump per
# transaction (EndTxn v5, partitions added by the brokers on the first produce).
MAX_TRANSACTION_VERSION = 2

METADATA_VERSION = 21  # 3.9-IV0: the feature level this controller writes at bootstrap
MIN_METADATA_VERSION = 7  # 3.3-IV3, the oldest metadata.version Kafka 4.x runs
# metadata.version of a broker that sends no range for it (Kafka's MINIMUM_KRAFT_VERSION, 3.0-IV1).
MINIMUM_KRAFT_METADATA_VERSION = 1
# KIP-584 features a node of this version can run: name -> (min, max) level.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    KRAFT_VERSION_FEATURE: (0, 1),  # 1: KIP-853 dynamic quorums
    METADATA_VERSION_FEATURE: (MIN_METADATA_VERSION, METADATA_VERSION),
    TRANSACTION_VERSION_FEATURE: (0, MAX_TRANSACTION_VERSION),
}


def registration_features(finalized: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """The feature ranges a broker of this node registers with, given the levels finalized in
    the metadata log it follows: its own (:data:`SUPPORTED_FEATURES`), widened to the levels of a
    log Apache Kafka finalized beyond them (a newer metadata.version, eligible.leader.replicas,
    group.version...), which Odradek takes over and keeps reporting as finalized — or its
    controller would refuse the registration with UNSUPPORTED_VERSION."""
    features = dict(SUPPORTED_FEATURES)
    for name, level in finalized.items():
        lowest, highest = features.get(name, (0, 0))
        if level > highest:
            features[name] = (lowest, level)
    return features


class FeatureControlManager:
    def __init__(
        self,
        image: MetadataImage,
        *,
        bootstrap_metadata_version: int = METADATA_VERSION,
        kraft_version: Callable[[], int] = lambda: 0,
        bootstrap_features: Mapping[str, int] | None = None,
    ) -> None:
        self.image = image
        self.bootstrap_metadata_version = bootstrap_metadata_version
        # Other features the formatted bootstrap metadata finalizes (name -> level > 0), those
        # this node runs: a directory Apache Kafka formatted at its latest release also asks for
        # features Odradek does not have (eligible.leader.replicas.version, group.version...),
        # which are left at 0 with a warning instead of finalized (no broker could register).
        self.bootstrap_features: dict[str, int] = {}
        for name, level in (bootstrap_features or {}).items():
            if level <= 0 or name in (METADATA_VERSION_FEATURE, KRAFT_VERSION_FEATURE):
                continue
            low, high = SUPPORTED_FEATURES.get(name, (0, 0))
            if low <= level <= high:
                self.bootstrap_features[name] = level
            else:
                log.warning(
                    "The bootstrap metadata finalizes %s=%d, which this node does not run "
                    "(supported: %d-%d): left at level 0", name, level, low, high,
                )
        self._kraft_version = kraft_version

    def metadata_version(self) -> int:
        """The finalized metadata.version; the bootstrap level until that is in the log."""
        return self.image.features.levels.get(METADATA_VERSION_FEATURE, self.bootstrap_metadata_version)

    def kraft_version(self) -> int:
        return self._kraft_version()

    def set_kraft_version_source(self, kraft_version: Callable[[], int]) -> None:
        """Where the finalized kraft.version comes from: the Raft layer's control records."""
        self._kraft_version = kraft_version

    def finalized_features(self) -> Mapping[str, int]:
        """Every finalized feature level, metadata.version and kraft.version included."""
        levels = dict(self.image.features.levels)
        levels[METADATA_VERSION_FEATURE] = self.metadata_version()
        levels[KRAFT_VERSION_FEATURE] = self.kraft_version()
        return levels

    def bootstrap_records(self) -> list[MetadataRecord]:
        """What the first active controller of a new log writes before anything else."""
        if METADATA_VERSION_FEATURE in self.image.features.levels:
            return []
        records: list[MetadataRecord] = [
            (
                "FeatureLevelRecord",
                {"name": METADATA_VERSION_FEATURE, "feature_level": self.bootstrap_metadata_version},
            )
        ]
        for name, level in sorted(self.bootstrap_features.items()):
            records.append(("FeatureLevelRecord", {"name": name, "feature_level": level}))
        return records
