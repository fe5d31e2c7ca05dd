"""Client quotas, sans-I/O: Kafka's Rate windows, throttle times, quota precedence, the
controller's validation and DescribeClientQuotas filters, and ClientQuotaRecords in the image."""

from __future__ import annotations

from typing import Any

import pytest

from odradek.controller.client_quota_control_manager import (
    MATCH_TYPE_DEFAULT,
    MATCH_TYPE_EXACT,
    MATCH_TYPE_SPECIFIED,
    ClientQuotaControlManager,
    describe_client_quotas,
)
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE, MetadataImage
from odradek.metadata.image_writer import write_image
from odradek.metadata.records import decode_metadata_record, encode_metadata_record
from odradek.protocol.errors import Errors, KafkaError
from odradek.security.client_quota_manager import (
    PRODUCER_BYTE_RATE,
    ClientQuotaManager,
    ClientRequestQuotaManager,
    QuotaConfig,
    Rate,
    entity,
)

MB = 1048576


# -- Rate ------------------------------------------------------------------------------------------


def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    r = Rate(11, 1000)
    r.record(10 * MB, 0)
    assert r.window_size(0) == 10_000  # 10 full windows assumed at the start
    assert r.measure(0) == pytest.approx(MB)
    assert r.window_size(500) == 10_500
    # Once a window is complete the elapsed time counts as full windows again.
    assert r.window_size(1000) == 10_000


def test_rate_forgets_samples_older_than_the_whole_window() -> None:
    r = Rate(11, 1000)
    r.record(5 * MB, 0)
    r.record(MB, 5000)
    assert r.measure(5000) == pytest.approx(6 * MB / 10.0)
    # At 11 s the first sample (started at 0) is obsolete: only the second one is left.
    assert r.measure(11_000) == pytest.approx(MB / 10.0)


# -- throttle time ---------------------------------------------------------------------------------


def test_throttle_time_is_the_excess_over_the_window() -> None:
    m = ClientQuotaManager(PRODUCER_BYTE_RATE)
    m.update_quota(entity(client_id="c"), MB)
    # 10 MB within the first 10-second window is within the quota.
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 10 * MB, 0) == 0
    # One more MB: 11 MB over 10 s is 1.1 MB/s, 10% over: throttled 0.1 * 10 s.
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", MB, 0) == 1000
    # Another client id has no quota.
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "other", 100 * MB, 0) == 0


def test_no_quota_records_nothing() -> None:
    m = ClientQuotaManager(PRODUCER_BYTE_RATE)
    assert not m.enabled
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 1e12, 0) == 0
    assert m.throttle_stats() == {}
    assert m.max_value_in_quota_window("ANONYMOUS", "c") == float("inf")


def test_request_quota_throttle_is_capped_at_one_window() -> None:
    m = ClientRequestQuotaManager()
    m.update_quota(entity(user="alice"), 10.0)  # 10% of one thread
    # 5 s of handler time in a 10 s window is 50%: far over, but throttled one window at most.
    assert m.record_nanos("alice", "c", 5e9, 0) == 1000
    assert m.record_nanos("bob", "c", 5e9, 0) == 0


def test_unrecord_takes_bytes_back_and_fetch_size_is_capped() -> None:
    m = ClientQuotaManager("consumer_byte_rate")
    m.update_quota(entity(client_id=None), MB)
    assert m.max_value_in_quota_window("u", "c") == 10 * MB
    assert m.record_and_get_throttle_time_ms("u", "c", 12 * MB, 0) > 0
    m.unrecord("u", "c", 12 * MB, 0)
    assert m.record_and_get_throttle_time_ms("u", "c", MB, 0) == 0


def _saturate(m: ClientQuotaManager, request_bytes: int, duration_ms: int) -> list[tuple[int, int]]:
    """A client that sends again as soon as it is unmuted."""
    t, sent = 0, []
    while t < duration_ms:
        throttle = m.record_and_get_throttle_time_ms("ANONYMOUS", "c", request_bytes, t)
        sent.append((t, request_bytes))
        t += max(throttle, 1)
    return sent


def test_a_saturating_client_is_held_to_its_quota() -> None:
    # Default windows (11 x 1 s): bursts of up to 10 windows' worth, 1 MB/s over whole periods.
    m = ClientQuotaManager(PRODUCER_BYTE_RATE)
    m.update_quota(entity(client_id="c"), MB)
    sent = _saturate(m, 65536, 66_000)
    rate = sum(b for t, b in sent if t < 66_000) / 66 / MB
    assert rate == pytest.approx(1.0, rel=0.1)
    # Two windows: any 20-second stretch is within 10% of the quota.
    m = ClientQuotaManager(PRODUCER_BYTE_RATE, QuotaConfig(2, 1))
    m.update_quota(entity(client_id="c"), MB)
    sent = _saturate(m, 65536, 40_000)
    for start in range(0, 20_001, 500):
        rate = sum(b for t, b in sent if start <= t < start + 20_000) / 20 / MB
        assert rate == pytest.approx(1.0, rel=0.1), start


# -- precedence ------------------------------------------------------------------------------------

# Kafka's order, most specific first, with the sensor tags each is measured under.
LEVELS: list[tuple[Any, tuple[str, str]]] = [
    (entity(user="alice", client_id="c"), ("alice", "c")),
    (entity(user="alice", client_id=None), ("alice", "c")),
    (entity(user="alice"), ("alice", "")),
    (entity(user=None, client_id="c"), ("alice", "c")),
    (entity(user=None, client_id=None), ("alice", "c")),
    (entity(user=None), ("alice", "")),
    (entity(client_id="c"), ("", "c")),
    (entity(client_id=None), ("", "c")),
]


def test_quota_precedence() -> None:
    m = ClientQuotaManager(PRODUCER_BYTE_RATE)
    for i, (ent, _) in enumerate(LEVELS):
        m.update_quota(ent, 1000.0 + i)
    # Remove from the most specific down: each level in turn is the one that applies.
    for i, (ent, tags) in enumerate(LEVELS):
        assert m.quota_for("alice", "c") == (tags, 1000.0 + i)
        m.update_quota(ent, None)
    assert m.quota_for("alice", "c") is None


def test_a_user_quota_is_shared_by_its_client_ids_and_a_default_is_per_client() -> None:
    m = ClientQuotaManager(PRODUCER_BYTE_RATE)
    m.update_quota(entity(user="alice"), MB)
    m.update_quota(entity(client_id=None), MB)
    assert m.record_and_get_throttle_time_ms("alice", "c1", 10 * MB, 0) == 0
    assert m.record_and_get_throttle_time_ms("alice", "c2", MB, 0) > 0  # same sensor as c1
    assert m.record_and_get_throttle_time_ms("bob", "c1", 10 * MB, 0) == 0  # default: per client id
    assert m.record_and_get_throttle_time_ms("bob", "c2", 10 * MB, 0) == 0


# -- the controller's validation -------------------------------------------------------------------


def _entry(ent: list[tuple[str, str | None]], *ops: tuple[str, float, bool]) -> dict[str, Any]:
    return {"entity": [{"entity_type": t, "entity_name": n} for t, n in ent],
            "ops": [{"key": k, "value": v, "remove": r} for k, v, r in ops]}


def test_alter_validation() -> None:
    mgr = ClientQuotaControlManager(EMPTY_IMAGE)
    cases = [
        (_entry([], ("producer_byte_rate", 1, False)), "Invalid empty client quota entity"),
        (_entry([("group", "g")], ("producer_byte_rate", 1, False)), "Unhandled client quota entity type: group"),
        (_entry([("user", "")], ("producer_byte_rate", 1, False)), "Empty user not supported"),
        (_entry([("user", "a")], ("nope", 1, False)), "Invalid configuration key nope"),
        (_entry([("user", "a2")], ("producer_byte_rate", 0, False)), "Quota producer_byte_rate must be greater than 0"),
        (_entry([("ip", "1.2.3.4"), ("user", "a")], ("producer_byte_rate", 1, False)),
         "Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
        (_entry([("ip", "not an ip")], ("connection_creation_rate", 1, False)), "Invalid IP address: not an ip"),
        (_entry([("ip", None)], ("connection_creation_rate", 1, False)),
         "Client quotas on ip entities (connection_creation_rate) are not supported by Odradek"),
        (_entry([("client-id", "c")], ("controller_mutation_rate", 1, False)),
         "controller_mutation_rate quotas are not supported by Odradek"),
    ]
    outcomes, records = mgr.alter_client_quotas([e for e, _ in cases])
    assert records == []
    assert outcomes == [(Errors.INVALID_REQUEST, msg) for _, msg in cases]
    # A key or an entity given twice (Kafka reports both as a duplicate entity).
    twice = _entry([("user", "a")], ("producer_byte_rate", 1, False), ("producer_byte_rate", 2, False))
    ok = _entry([("user", "b"), ("client-id", None)], ("producer_byte_rate", 1, False))
    outcomes, records = mgr.alter_client_quotas([twice, ok, ok])
    assert outcomes == [
        (Errors.INVALID_REQUEST, "Ignoring duplicate entity ClientQuotaEntity(entries={user=a})"),
        (Errors.NONE, None),
        (Errors.INVALID_REQUEST, "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=null, user=b})"),
    ]
    assert len(records) == 1


def _image(*records: tuple[str, dict[str, Any]]) -> MetadataImage:
    delta = MetadataDelta(EMPTY_IMAGE)
    for i, (name, rec) in enumerate(records):
        delta.replay(name, rec, i)
    return delta.apply()


def test_records_build_the_image_and_round_trip() -> None:
    mgr = ClientQuotaControlManager(EMPTY_IMAGE)
    outcomes, records = mgr.alter_client_quotas([
        _entry([("user", "alice"), ("client-id", None)], ("producer_byte_rate", 1024, False),
               ("request_percentage", 50, False)),
        _entry([("client-id", "c")], ("consumer_byte_rate", 2048, False), ("producer_byte_rate", 0, True)),
    ])
    assert outcomes == [(Errors.NONE, None), (Errors.NONE, None)]
    assert len(records) == 3  # removing a quota that is not set writes nothing
    for name, rec in records:
        assert decode_metadata_record(encode_metadata_record(name, rec)) == (name, 0, rec)
    image = _image(*records)
    alice = (("client-id", None), ("user", "alice"))
    assert dict(image.client_quotas.entities[alice]) == {"producer_byte_rate": 1024.0, "request_percentage": 50.0}
    assert _image(*write_image(image)).client_quotas == image.client_quotas
    # Removing every quota of an entity removes the entity.
    mgr.image = image
    _, removal = mgr.alter_client_quotas([_entry([("client-id", "c")], ("consumer_byte_rate", 0, True))])
    delta = MetadataDelta(image)
    for name, rec in removal:
        delta.replay(name, rec, 10)
    assert delta.changed_client_quotas == {(("client-id", "c"),)}
    assert (("client-id", "c"),) not in delta.apply().client_quotas.entities


def test_describe_filters() -> None:
    q = {"producer_byte_rate": 1.0}
    entities: dict[Any, Any] = {
        (("user", "alice"),): q,
        (("user", None),): q,
        (("client-id", "c"), ("user", "alice")): q,
        (("client-id", "c"),): q,
    }

    def match(strict: bool, *components: tuple[str, int, str | None]) -> set[Any]:
        comps = [{"entity_type": t, "match_type": mt, "match": n} for t, mt, n in components]
        return {e for e, _ in describe_client_quotas(entities, comps, strict)}

    assert match(True, ("user", MATCH_TYPE_SPECIFIED, None)) == {(("user", "alice"),), (("user", None),)}
    assert match(False, ("user", MATCH_TYPE_EXACT, "alice")) == {
        (("user", "alice"),), (("client-id", "c"), ("user", "alice"))}
    assert match(True, ("user", MATCH_TYPE_DEFAULT, None)) == {(("user", None),)}
    assert match(True, ("user", MATCH_TYPE_EXACT, "alice"), ("client-id", MATCH_TYPE_SPECIFIED, None)) == {
        (("client-id", "c"), ("user", "alice"))}
    assert match(False) == set(entities)
    with pytest.raises(KafkaError) as e:
        match(False, ("user", MATCH_TYPE_EXACT, None))
    assert e.value.code == Errors.INVALID_REQUEST
    with pytest.raises(KafkaError) as e:
        match(False, ("group", MATCH_TYPE_SPECIFIED, None))
    assert e.value.code == Errors.UNSUPPORTED_VERSION
