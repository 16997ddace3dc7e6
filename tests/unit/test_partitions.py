"""Partitioning the events by tenant (ADR 0016): the partition function, the names of each
partition's stream and subjects, the setting, the NATS grants and streams for every partition,
and which partition's progress a read follows."""

import os
import zlib

import pytest

from memledger_platform import bus, partitions
from memledger_platform.nats_permissions import service_permissions
from memledger_platform.settings import ENV_PREFIX, SettingsError, load_settings
from memledger_query.core.index_progress import IndexProgress, PartitionProgress
from memledger_schemas.subjects import Subjects, partition_of


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith(ENV_PREFIX):
            monkeypatch.delenv(name)


# --- the partition function ----------------------------------------------------------------

def test_a_tenants_partition_is_crc32_of_its_id_modulo_the_partitions() -> None:
    # Pinned: every process and every release must agree, or a tenant's events would move.
    assert [partition_of(t, 8) for t in ("acme", "globex", "default")] == [6, 2, 7]
    assert all(partition_of(t, n) == zlib.crc32(t.encode()) % n
               for t in ("acme", "x", "tenant-42", "é") for n in (2, 3, 16))


def test_with_one_partition_every_tenant_is_in_partition_zero() -> None:
    assert {partition_of(f"tenant{i}", 1) for i in range(100)} == {0}


def test_tenants_spread_over_every_partition() -> None:
    counts = [0] * 4
    for i in range(1_000):
        counts[partition_of(f"tenant-{i}", 4)] += 1

    assert min(counts) > 150  # 250 each if even; none starved


# --- names ---------------------------------------------------------------------------------

def test_one_partition_keeps_the_names_of_the_one_stream() -> None:
    subjects = Subjects("memledger")

    assert (subjects.events_stream, subjects.all_events) == ("MEMLEDGER_EVENTS", "memledger.evt.>")
    assert subjects.event("acme", "main", "memory.asserted") == \
        "memledger.evt.acme.main.memory.asserted"
    assert subjects.every_partition() == [subjects]


def test_each_partition_has_a_stream_and_subjects_of_its_own_that_overlap_no_other() -> None:
    subjects = Subjects("memledger", partitions=3)
    names = [(p.events_stream, p.all_events) for p in subjects.every_partition()]

    assert names == [("MEMLEDGER_EVENTS_P0", "memledger.evt0.>"),
                     ("MEMLEDGER_EVENTS_P1", "memledger.evt1.>"),
                     ("MEMLEDGER_EVENTS_P2", "memledger.evt2.>")]
    acme = subjects.of_tenant("acme")
    subject = acme.event("acme", "main", "memory.asserted")
    assert subject == f"memledger.evt{partition_of('acme', 3)}.acme.main.memory.asserted"
    assert acme.event_tenant(subject) == "acme"
    assert Subjects("memledger").event_tenant(subject) is None  # not the one stream's
    assert acme.events_of_type("memory.asserted") == \
        f"memledger.evt{acme.partition}.*.*.memory.asserted"


def test_a_partition_outside_the_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match=r"partition 2 is not one of 0\.\.1"):
        Subjects("memledger", partitions=2, partition=2)


def test_the_streams_are_one_events_stream_per_partition_beside_intake_and_dead_letters() -> None:
    one = [c.name for c in bus.stream_configs(Subjects("memledger"))]
    two = [c.name for c in bus.stream_configs(Subjects("memledger", partitions=2))]

    assert one == ["MEMLEDGER_EVENTS", "MEMLEDGER_INTAKE", "MEMLEDGER_DLQ"]
    assert two == ["MEMLEDGER_EVENTS_P0", "MEMLEDGER_EVENTS_P1", "MEMLEDGER_INTAKE",
                   "MEMLEDGER_DLQ"]


def test_every_service_is_granted_every_partitions_stream() -> None:
    granted = service_permissions(Subjects("memledger", partitions=2))

    for stream in ("MEMLEDGER_EVENTS_P0", "MEMLEDGER_EVENTS_P1"):
        assert f"$JS.API.CONSUMER.CREATE.{stream}.projector-postgres" in \
            granted["projector"].publish
        assert f"$JS.API.STREAM.MSG.GET.{stream}" in granted["relay"].publish
        assert f"$JS.API.CONSUMER.MSG.NEXT.{stream}.lifecycle" in granted["lifecycle"].publish
    assert {"memledger.evt0.>", "memledger.evt1.>"} <= set(granted["relay"].publish)
    assert "memledger.evt.>" not in granted["relay"].publish


# --- the settings --------------------------------------------------------------------------

def test_the_events_are_not_partitioned_by_default() -> None:
    settings = load_settings()

    assert (settings.event_partitions, settings.served_partitions) == (1, [0])
    assert settings.subjects == Subjects("memledger")


@pytest.mark.parametrize("value", ["0", "-1", "65", "two"])
def test_a_bad_partition_count_is_refused_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MEMLEDGER_EVENT_PARTITIONS", value)

    with pytest.raises(SettingsError, match="MEMLEDGER_EVENT_PARTITIONS"):
        load_settings()


def test_a_process_serves_every_partition_or_the_one_it_is_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_EVENT_PARTITIONS", "3")

    assert load_settings().served_partitions == [0, 1, 2]
    one = load_settings(event_partition=1)
    assert (one.served_partitions, one.subjects.events_stream) == ([1], "MEMLEDGER_EVENTS_P1")
    with pytest.raises(SettingsError, match=r"MEMLEDGER_EVENT_PARTITION \(3\) must be below"):
        load_settings(event_partition=3)


# --- which partition a read follows --------------------------------------------------------

def test_a_read_follows_its_tenants_partition_once_the_tenant_is_known() -> None:
    def in_request(tenant: str | None) -> tuple[int | None, int | None]:
        if tenant is not None:
            partitions.reading_for(tenant)
        return partitions.read_partition(1), partitions.read_partition(8)

    import contextvars

    assert contextvars.copy_context().run(in_request, None) == (None, None)
    assert contextvars.copy_context().run(in_request, "acme") == (None, 6)


async def test_the_index_progress_a_search_follows_is_its_partitions() -> None:
    recorded = [40, 7]
    progress = PartitionProgress([IndexProgress(lambda i=i: recorded[i])  # type: ignore[misc]
                                  for i in range(2)])
    tenant = next(t for t in ("acme", "globex", "default") if partition_of(t, 2) == 1)

    assert await progress.reached() == 7  # no tenant: the least of them
    assert not await progress.wait_for(40, 0)
    partitions.reading_for(tenant)
    assert await progress.reached() == 7
    assert not await progress.wait_for(8, 0)
    recorded[1] = 50
    assert await progress.wait_for(45, 0)
