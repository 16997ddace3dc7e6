"""The read-only views of an event store (opened with the subjects' keys; cut at a position)
read one partition as the store underneath does, opened or cut as they read the whole log."""

from uuid import uuid4

import pytest

from memledger_cli.verify_models import LogUpTo
from memledger_platform.crypto import Opener
from memledger_platform.eventstore.memory import InMemoryEventStore
from memledger_platform.eventstore.opened import OpenedEventStore
from memledger_schemas.subjects import partition_of
from tests.integration.events_support import envelope

TENANTS = ("acme", "wayne")  # in two different partitions of two


@pytest.fixture
def store() -> InMemoryEventStore:
    assert partition_of(TENANTS[0], 2) != partition_of(TENANTS[1], 2)
    store = InMemoryEventStore(partitions=2)
    store.append([envelope(uuid4(), 1, tenant=TENANTS[n % 2]) for n in range(8)])
    return store


@pytest.mark.parametrize("tenant", TENANTS)
def test_an_opened_store_reads_a_partition_as_the_store_underneath(
        store: InMemoryEventStore, tenant: str) -> None:
    partition = partition_of(tenant, 2)
    opened = OpenedEventStore(store, Opener(None))

    assert opened.read_partition(partition, 0, 10) == store.read_partition(partition, 0, 10)
    assert [e.fields()["tenant_id"] for e in opened.read_partition(partition, 0, 10)] == [
        tenant] * 4


@pytest.mark.parametrize("tenant", TENANTS)
def test_a_log_up_to_a_position_reads_a_partition_up_to_it_only(
        store: InMemoryEventStore, tenant: str) -> None:
    partition = partition_of(tenant, 2)
    whole = store.read_partition(partition, 0, 10)

    assert LogUpTo(store, 5).read_partition(partition, 0, 10) == [
        e for e in whole if e.position <= 5]
    assert LogUpTo(store, 8).read_partition(partition, whole[0].position, 2) == whole[1:3]
