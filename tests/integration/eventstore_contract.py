"""The ``EventStore`` contract (port.py's docstring) as one abstract suite.

A subclass provides a ``store`` fixture (an empty store of its adapter) and inherits every test:
the PostgreSQL adapter, the in-memory fake and the container-backed PostgreSQL all run it.
"""

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import orjson
import pytest

from memledger_platform.eventstore import (
    Committed,
    EventStore,
    IdempotencyKeyTaken,
    IdempotencyRecord,
    RecordedEvent,
    StreamConflict,
)
from memledger_platform.eventstore.port import NewEvent
from memledger_schemas.subjects import partition_of
from tests.integration.events_support import envelope, read_everything

OTHER_TENANT = "wayne"
"""A tenant whose partition of two is not acme's."""


def key_record(tenant: str, key: str, stream_id: UUID, first: int, last: int,
               response: dict[str, Any] | None = None) -> IdempotencyRecord:
    return IdempotencyRecord(tenant, key, f"hash-of-{key}", stream_id, first, last,
                             response or {"command": "assert_memory", "ids": {"k": key}})


def positions(committed: Sequence[Committed] | Sequence[RecordedEvent]) -> list[int]:
    return [c.position for c in committed]


class EventStoreContract:
    """Every test receives ``store``: an empty ``EventStore`` owned by the subclass (one
    partition), or ``two_partitions``: an empty one of its adapter split in two by tenant."""

    @pytest.fixture
    def store(self) -> EventStore:
        raise NotImplementedError("a subclass provides the store under test")

    @pytest.fixture
    def two_partitions(self) -> EventStore:
        raise NotImplementedError("a subclass provides a store of two partitions")

    # --- positions and time ---------------------------------------------------------------

    def test_an_empty_store_is_at_position_zero_and_reads_nothing(self, store: EventStore
                                                                  ) -> None:
        assert store.max_position() == 0
        assert store.read_all(0, 10) == []
        assert store.read_streams([uuid4()]) == {}
        assert store.read_streams([]) == {}
        assert store.find_idempotent("acme", ["k"]) == {}
        assert store.find_idempotent("acme", []) == {}

    def test_append_returns_one_committed_per_event_with_strictly_increasing_positions(
            self, store: EventStore) -> None:
        a, b = uuid4(), uuid4()
        committed = store.append([envelope(a, 1), envelope(b, 1), envelope(a, 2)])

        assert len(committed) == 3
        assert positions(committed) == sorted(set(positions(committed)))
        assert store.max_position() == committed[-1].position
        stored = store.read_all(0, 10)
        assert [(e.stream_id, e.stream_version) for e in stored] == [(a, 1), (b, 1), (a, 2)]
        assert [(e.position, e.recorded_at) for e in stored] == [
            (c.position, c.recorded_at) for c in committed]

    def test_positions_keep_increasing_across_appends_and_after_a_failed_append(
            self, store: EventStore) -> None:
        stream = uuid4()
        first = store.append([envelope(stream, 1)])
        with pytest.raises(StreamConflict):
            store.append([envelope(uuid4(), 1), envelope(stream, 1)])
        second = store.append([envelope(stream, 2), envelope(uuid4(), 1)])

        assert first[0].position < second[0].position < second[1].position
        assert positions(store.read_all(0, 10)) == positions(first) + positions(second)

    def test_recorded_at_is_utc_aware_and_never_decreases_in_position_order(
            self, store: EventStore) -> None:
        for round_ in range(1, 6):
            store.append([envelope(uuid4(), 1) for _ in range(round_)])
        log = store.read_all(0, 100)

        assert len(log) == 15
        for event in log:
            assert event.recorded_at.utcoffset() == timedelta(0)
            assert abs(event.recorded_at - datetime.now(UTC)) < timedelta(minutes=5)
        assert [e.recorded_at for e in log] == sorted(e.recorded_at for e in log)

    def test_many_threads_appending_at_once_each_get_positions_of_their_own(
            self, store: EventStore) -> None:
        results: list[list[Committed]] = []
        lock = threading.Lock()

        def writer() -> None:
            for _ in range(10):
                committed = store.append([envelope(uuid4(), 1), envelope(uuid4(), 1)])
                with lock:
                    results.append(committed)

        threads = [threading.Thread(target=writer) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        taken = sorted(p for committed in results for p in positions(committed))
        assert len(taken) == len(set(taken)) == 120
        assert positions(read_everything(store)) == taken
        for committed in results:
            assert committed[0].position < committed[1].position

    # --- reading ------------------------------------------------------------------------------

    def test_read_all_pages_through_the_log_in_position_order(self, store: EventStore) -> None:
        for _ in range(5):
            store.append([envelope(uuid4(), 1) for _ in range(5)])
        everything = store.read_all(0, 100)
        paged: list[RecordedEvent] = []
        while page := store.read_all(paged[-1].position if paged else 0, 7):
            assert len(page) <= 7
            assert all(e.position > (paged[-1].position if paged else 0) for e in page)
            paged.extend(page)

        assert len(everything) == 25
        assert paged == everything
        assert store.read_all(everything[9].position, 3) == everything[10:13]
        assert store.read_all(store.max_position(), 10) == []

    def test_read_streams_groups_events_per_stream_in_version_order_and_omits_absent_ones(
            self, store: EventStore) -> None:
        a, b, absent = uuid4(), uuid4(), uuid4()
        store.append([envelope(a, 1), envelope(b, 1)])
        store.append([envelope(b, 2)])
        store.append([envelope(a, 2), envelope(uuid4(), 1), envelope(a, 3)])

        found = store.read_streams([a, absent, b])

        assert set(found) == {a, b}
        assert [e.stream_version for e in found[a]] == [1, 2, 3]
        assert [e.stream_version for e in found[b]] == [1, 2]
        assert all(e.stream_id == a for e in found[a])

    def test_read_streams_orders_by_version_even_when_versions_were_committed_out_of_order(
            self, store: EventStore) -> None:
        stream = uuid4()
        store.append([envelope(stream, 2)])
        store.append([envelope(stream, 1)])

        assert [e.stream_version for e in store.read_streams([stream])[stream]] == [1, 2]

    # --- partitions ------------------------------------------------------------------------

    def test_with_one_partition_every_event_is_in_partition_zero(self, store: EventStore
                                                                  ) -> None:
        store.append([envelope(uuid4(), 1), envelope(uuid4(), 1, tenant=OTHER_TENANT)])
        store.append([envelope(uuid4(), 1, tenant=OTHER_TENANT)])

        assert store.read_partition(0, 0, 10) == store.read_all(0, 10)
        assert len(store.read_partition(0, 0, 10)) == 3
        assert store.read_partition(1, 0, 10) == []

    def test_read_partition_pages_through_the_events_of_its_tenants_only(
            self, two_partitions: EventStore) -> None:
        store = two_partitions
        assert partition_of("acme", 2) != partition_of(OTHER_TENANT, 2)  # the test's premise
        for round_ in range(4):
            store.append([envelope(uuid4(), 1, tenant=("acme", OTHER_TENANT)[n % 2])
                          for n in range(round_, round_ + 5)])
        everything = store.read_all(0, 100)

        for tenant in ("acme", OTHER_TENANT):
            partition = partition_of(tenant, 2)
            paged: list[RecordedEvent] = []
            while page := store.read_partition(partition, paged[-1].position if paged else 0,
                                               3):
                assert len(page) <= 3
                paged.extend(page)
            assert paged == [e for e in everything if e.fields()["tenant_id"] == tenant]
            assert len(paged) == 10
            assert store.read_partition(partition, paged[4].position, 2) == paged[5:7]
            assert store.read_partition(partition, paged[-1].position, 10) == []

    # --- optimistic concurrency and atomicity ---------------------------------------------

    def test_a_version_taken_twice_in_one_append_is_a_conflict_and_nothing_is_written(
            self, store: EventStore) -> None:
        stream = uuid4()
        with pytest.raises(StreamConflict):
            store.append([envelope(uuid4(), 1), envelope(stream, 1), envelope(stream, 1)],
                         [key_record("acme", "k1", stream, 1, 1)])

        assert store.max_position() == 0
        assert store.read_all(0, 10) == []
        assert store.find_idempotent("acme", ["k1"]) == {}

    def test_a_version_already_taken_is_a_conflict_and_nothing_of_the_append_is_visible(
            self, store: EventStore) -> None:
        stream, other = uuid4(), uuid4()
        store.append([envelope(stream, 1)])
        before = store.read_all(0, 10)

        with pytest.raises(StreamConflict):
            store.append([envelope(other, 1), envelope(stream, 2), envelope(stream, 1)],
                         [key_record("acme", "k1", other, 1, 1)])

        assert store.read_all(0, 10) == before
        assert store.read_streams([other]) == {}
        assert [e.stream_version for e in store.read_streams([stream])[stream]] == [1]
        assert store.find_idempotent("acme", ["k1"]) == {}
        assert store.max_position() == before[-1].position

    # --- idempotency records --------------------------------------------------------------

    def test_find_idempotent_returns_the_record_with_the_positions_of_its_events(
            self, store: EventStore) -> None:
        stream = uuid4()
        store.append([envelope(stream, 1)])
        record = key_record("acme", "k1", stream, 2, 3, {"command": "x", "ids": {"a": "1"},
                                                          "event_ids": ["e2", "e3"]})
        committed = store.append([envelope(uuid4(), 1), envelope(stream, 2),
                                  envelope(stream, 3)], [record])

        found = store.find_idempotent("acme", ["k1", "never-used"])

        assert set(found) == {"k1"}
        assert found["k1"].record == record
        assert found["k1"].positions == (committed[1].position, committed[2].position)

    def test_a_key_recorded_twice_is_taken_and_nothing_of_the_second_append_is_visible(
            self, store: EventStore) -> None:
        first, second = uuid4(), uuid4()
        store.append([envelope(first, 1)], [key_record("acme", "k1", first, 1, 1)])
        before = store.read_all(0, 10)

        with pytest.raises(IdempotencyKeyTaken):
            store.append([envelope(second, 1)], [key_record("acme", "k2", second, 1, 1),
                                                 key_record("acme", "k1", second, 1, 1)])

        assert store.read_all(0, 10) == before
        assert store.find_idempotent("acme", ["k2"]) == {}
        assert store.find_idempotent("acme", ["k1"])["k1"].record.stream_id == first

    def test_a_key_repeated_within_one_append_is_taken_and_nothing_is_written(
            self, store: EventStore) -> None:
        stream = uuid4()
        with pytest.raises(IdempotencyKeyTaken):
            store.append([envelope(stream, 1), envelope(stream, 2)],
                         [key_record("acme", "k1", stream, 1, 1),
                          key_record("acme", "k1", stream, 2, 2)])

        assert store.read_all(0, 10) == []
        assert store.find_idempotent("acme", ["k1"]) == {}

    def test_idempotency_keys_are_per_tenant(self, store: EventStore) -> None:
        ours, theirs = uuid4(), uuid4()
        store.append([envelope(ours, 1)], [key_record("acme", "same-key", ours, 1, 1)])
        store.append([envelope(theirs, 1, tenant="globex")],
                     [key_record("globex", "same-key", theirs, 1, 1)])

        assert store.find_idempotent("acme", ["same-key"])["same-key"].record.stream_id == ours
        assert store.find_idempotent("globex", ["same-key"])["same-key"].record.stream_id == (
            theirs)
        assert store.find_idempotent("initech", ["same-key"]) == {}

    # --- the stored form --------------------------------------------------------------------

    def test_document_is_the_envelope_json_plus_global_position_and_recorded_at(
            self, store: EventStore) -> None:
        original = envelope(uuid4(), 1, traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
                            payload={"content": "naïve café ☕", "tags": ["a", "b"], "n": 1.5})
        committed = store.append([original])[0]
        recorded = store.read_all(0, 1)[0]

        document = orjson.loads(recorded.document())
        assert datetime.fromisoformat(document.pop("recorded_at")) == committed.recorded_at
        expected = original.model_dump(mode="json")
        expected.pop("recorded_at")
        expected["global_position"] = committed.position
        assert document == expected
        assert recorded.fields() == original.model_dump(
            mode="json", exclude={"global_position", "recorded_at"})
        assert (recorded.event_type, recorded.stream_id, recorded.stream_version) == (
            original.event_type, original.stream_id, original.stream_version)

    def test_envelope_round_trips_through_the_store_with_the_commit_fields_added(
            self, store: EventStore) -> None:
        valid_from = datetime(2025, 1, 1, tzinfo=UTC)
        original = envelope(
            uuid4(), 1, session_id=uuid4(), agent_id="agent-7", valid_from=valid_from,
            valid_to=valid_from + timedelta(days=30), idempotency_key="key-1",
            causation_id="cause", correlation_id="corr", subject_id="subj", key_id="kid",
            traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01")
        committed = store.append([original])[0]

        restored = store.read_all(0, 1)[0].envelope()

        assert restored == original.model_copy(update={
            "global_position": committed.position, "recorded_at": committed.recorded_at})
        assert restored.recorded_at is not None
        assert restored.recorded_at.tzinfo == UTC

    def test_events_appended_in_stored_form_read_back_like_envelopes(self, store: EventStore
                                                                     ) -> None:
        stream = uuid4()
        originals = [envelope(stream, 1), envelope(stream, 2)]
        committed = store.append([NewEvent.of(originals[0]), originals[1]])

        restored = [e.envelope() for e in store.read_streams([stream])[stream]]

        assert restored == [o.model_copy(update={"global_position": c.position,
                                                 "recorded_at": c.recorded_at})
                            for o, c in zip(originals, committed, strict=True)]
