"""The Python client against the real `memledger up` (one process for this module; each test
writes to a space of its own). The MCP server's are in test_mcp."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from memledger_client import AsyncClient, Client, Conflict, InvalidRequest, NotFound
from memledger_client.results import Change
from memledger_schemas.commands import AssertMemory
from memledger_schemas.events import Triple
from tests.e2e.conftest import Running, start
from tests.support import eventually, eventually_sync, probe

JAN_2020 = datetime(2020, 1, 1, tzinfo=UTC)
JAN_2022 = datetime(2022, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start(tmp_path_factory.mktemp("client") / "home")
    eventually_sync(lambda: _healthy(running.url), timeout=30)
    yield running
    if running.proc.poll() is None:
        running.stop()


@pytest.fixture
def space() -> str:
    return f"s{uuid.uuid4().hex[:12]}"


def _healthy(url: str) -> None:
    assert probe().get(f"{url}/health", timeout=2).status_code == 200


def test_a_write_is_read_back_at_once_as_of_and_through_its_history(
        server: Running, space: str) -> None:
    with Client(server.url) as ml:
        ml.create_space(space)
        alice = ml.assert_memory(space, "Alice works at Acme", valid_from=JAN_2020,
                                 triple=Triple(subject="alice", predicate="works_at",
                                               object="acme"))
        ml.revise_memory(space, alice.item_id, content="Alice works at Globex",
                         valid_from=JAN_2022, reason="she told us she moved")
        now = ml.item(space, alice.item_id)
        in_2021 = ml.item(space, alice.item_id, valid_at=datetime(2021, 6, 1, tzinfo=UTC))
        known_then = ml.item(space, alice.item_id, as_of_position=alice.position)
        history = ml.history(space, alice.item_id)
    assert now.item.content == "Alice works at Globex"
    assert now.basis.position >= ml.position
    assert in_2021.item.content == "Alice works at Acme"
    assert known_then.item.content == "Alice works at Acme"
    assert [c.reason for c in history.changes if c.event_type == "memory.revised"] == [
        "she told us she moved"]
    assert len(history.versions) == 3


def test_the_changes_feed_resumes_from_its_cursor(server: Running, space: str) -> None:
    with Client(server.url) as ml:
        ml.create_space(space)
        ml.batch([AssertMemory(space_id=space, kind="fact", content=f"fact {n}")
                  for n in range(3)])
        first = ml.changes(space, limit=2)
        rest = list(ml.iter_changes(space, after=first.next_cursor))
        ml.assert_memory(space, "one more")
        newer = ml.changes(space, after=first.next_cursor, limit=1_000)
    assert [c.event_type for c in first.changes] == ["space.created", "memory.asserted"]
    assert _asserted([*first.changes, *rest]) == ["fact 0", "fact 1", "fact 2"]
    assert _asserted(newer.changes) == ["fact 1", "fact 2", "one more"]


def _asserted(changes: list[Change]) -> list[object]:
    return [c.payload.get("content") for c in changes if c.event_type == "memory.asserted"]


def test_a_retried_write_with_the_same_key_is_written_once(server: Running,
                                                            space: str) -> None:
    with Client(server.url) as ml:
        ml.create_space(space)
        memory = AssertMemory(space_id=space, kind="fact", content="said once",
                              idempotency_key=f"{space}-1")
        first, again = ml.send(memory), ml.send(memory)
        listed = ml.items(space)
    assert (again.duplicate, again.item_id, again.position) == (True, first.item_id,
                                                                first.position)
    assert [i.content for i in listed.items] == ["said once"]


def test_refusals_of_the_real_server_are_typed_errors(server: Running, space: str) -> None:
    with Client(server.url) as ml:
        with pytest.raises(NotFound, match="not found"):
            ml.assert_memory(space, "into a space that does not exist")
        ml.create_space(space)
        with pytest.raises(Conflict):
            ml.create_space(space)
        with pytest.raises(InvalidRequest) as bad_cursor:
            ml.changes(space, after="not-a-cursor")
    assert bad_cursor.value.code == "invalid_cursor"
    assert bad_cursor.value.fields[0].path == "query.after"


async def test_the_async_client_finds_a_write_by_its_words_then_by_meaning(
        server: Running, space: str) -> None:
    async with AsyncClient(server.url) as ml:
        await ml.create_space(space)
        await ml.assert_memory(space, "The quarterly report is due on Friday")
        await ml.assert_memory(space, "Penguins live in the southern hemisphere")
        by_words = await ml.search("quarterly report", spaces=[space],
                                   weights={"dense": 0.0, "keyword": 1.0})
        assert [h.content for h in by_words.results] == [
            "The quarterly report is due on Friday"]

        async def by_meaning() -> None:
            answer = await ml.search("deadline for submitting the financial summary",
                                     spaces=[space], mode="execution", threshold=0.3,
                                     weights={"dense": 1.0, "keyword": 0.0})
            assert [h.content for h in answer.results] == [
                "The quarterly report is due on Friday"]

        await eventually(by_meaning, timeout=60)
