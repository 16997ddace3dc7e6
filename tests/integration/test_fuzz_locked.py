"""Fuzzing with the doors locked: Schemathesis against ingest and query served together on a
real socket, API keys required (acme's admin key on every request), personal data sealed, the
real Qdrant Edge index, and a populated world (spaces, items with versions, sessions,
messages, entities). A stateful walk follows the documents' links (create a space → write →
read → revise → history); every operation is also fuzzed on its own. Never a 5xx, every answer
as documented, and never a byte of the other tenant's."""

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import schemathesis
from schemathesis import Case
from schemathesis.core.transport import Response

from memledger_platform.auth import TENANT_HEADER
from memledger_platform.endpoints import Endpoints
from tests.integration import fuzz_support, stateful_support
from tests.integration.locked_support import GLOBEX_SECRET, SPACES, Locked, locked_world

POSITIVE, NEGATIVE = 4, 2
"""Examples per operation of both documents, each on its own."""
SCENARIOS, STORY_SCENARIOS, STEPS = 60, 40, 10
"""Stateful scenarios (along every link, along the story's) and calls per scenario."""
LONG_SCENARIOS = 1_000
"""Along every link, in the larger run (``make test-faults``)."""
ITEM, HISTORY = "read /v1/spaces/{space_id}/items/{item_id}", \
    "read /v1/spaces/{space_id}/items/{item_id}/history"
MESSAGES = "read /v1/spaces/{space_id}/sessions/{session_id}/messages"
STORY = {
    "create_space": {"assert_memory"},
    "assert_memory": {ITEM, "revise_memory"},
    "revise_memory": {HISTORY, "revise_memory"},
}
"""The links of the story: create a space, write in it, read it, revise it, read history."""
SOME_ID = "00000000-0000-4000-8000-000000000001"
SPACES_, MEMORIES, REVISE = ("POST /v1/spaces", "POST /v1/spaces/{space_id}/memories",
                             "POST /v1/spaces/{space_id}/memories/{item_id}/revise")


@pytest.fixture(scope="module")
async def world(engines: Endpoints, tmp_path_factory: pytest.TempPathFactory
                ) -> AsyncIterator[Locked]:
    async with locked_world(engines, tmp_path_factory.mktemp("vectors")) as found:
        yield found


def _as_a_client() -> Callable[[Case[Any]], None]:
    """What a client with acme's key sends, as drawn, except: its own tenant in the tenant
    header (another's is the isolation matrix's case), no ``expected_version`` (one never
    read is a 409 by design) and a fresh id for each space it creates (a scenario drawn again
    would find its space taken). A walk then goes past its first writes."""
    spaces = itertools.count()

    def adjust(case: Case[Any]) -> None:
        _own_tenant(case)
        body = case.body
        if isinstance(body, dict) and case.operation.method == "post":
            body.pop("expected_version", None)
            space = body.get("space_id")
            if case.operation.path == "/v1/spaces" and isinstance(space, str):
                body["space_id"] = f"{space[:48]}-{next(spaces)}"

    return adjust


def _own_tenant(case: Case[Any]) -> None:
    if case.headers and TENANT_HEADER in case.headers:
        case.headers[TENANT_HEADER] = "acme"


def _nothing_of_globex(case: Case[Any], response: Response) -> None:
    assert GLOBEX_SECRET not in response.text, "another tenant's data in the answer"


async def _documents(world: Locked) -> dict[str, Any]:
    async with world.client() as api:
        ingest = (await api.get("/openapi.json")).json()
        query = (await api.get("/v1/query/openapi.json")).json()
    return stateful_support.merged(ingest, query)


async def _walk(world: Locked, doc: dict[str, Any], scenarios: int
                ) -> stateful_support.Walk:
    walked = await asyncio.to_thread(stateful_support.walk, doc, world.url, world.key,
                                     scenarios, STEPS, _as_a_client(), _nothing_of_globex)
    assert not walked.failures, f"{len(walked.failures)} of {walked.requests} failed:\n\n" \
        + "\n\n".join(walked.failures[:10])
    return walked


async def test_a_walk_along_every_link_with_a_key_never_fails(world: Locked) -> None:
    walked = await _walk(world, await _documents(world), SCENARIOS)

    assert walked.reached(SPACES_, "assert_memory"), walked.followed
    reached = {(source, link) for source, link, _ in walked.followed
               if walked.reached(source, link)}
    assert len(reached) >= 10, walked.followed


async def test_the_story_create_write_read_revise_history_is_walked_and_never_fails(
        world: Locked) -> None:
    walked = await _walk(world, stateful_support.only(await _documents(world), STORY),
                         STORY_SCENARIOS)

    for source, link in ((SPACES_, "assert_memory"), (MEMORIES, ITEM),
                         (MEMORIES, "revise_memory"), (REVISE, HISTORY)):
        assert walked.reached(source, link), (source, link, walked.followed)


def _with_real_ids(world: Locked) -> Callable[[Case[Any]], None]:
    """Two cases in three name what the world has (its spaces, items, sessions, an entity)
    in their paths, and the world's key speaks for them; the third keeps what was drawn."""
    turn = itertools.count()
    real = {"space_id": SPACES, "item_id": world.items, "session_id": world.sessions,
            "entity_id": ["ana", "kofi"]}

    def adjust(case: Case[Any]) -> None:
        _own_tenant(case)
        if case.headers:
            case.headers.pop("authorization", None)  # the key is the client's
        n = next(turn)
        if n % 3 and case.path_parameters:
            case.path_parameters = {
                name: real[name][n % len(real[name])] if name in real else value
                for name, value in case.path_parameters.items()}

    return adjust


async def _fuzz(world: Locked, positive: int, negative: int) -> fuzz_support.FuzzRun:
    schema = schemathesis.openapi.from_dict(await _documents(world))
    async with world.client() as api:
        outcome = await fuzz_support.run(api, fuzz_support.cases(schema, positive, negative),
                                         _with_real_ids(world))
    assert not outcome.failures, f"{len(outcome.failures)} of {outcome.requests} failed " \
        f"(statuses {outcome.statuses}):\n\n" + "\n\n".join(outcome.failures[:10])
    return outcome


async def test_every_operation_fuzzed_with_a_key_and_the_worlds_ids_never_fails(
        world: Locked) -> None:
    outcome = await _fuzz(world, POSITIVE, NEGATIVE)

    assert outcome.requests > 200
    assert sum(n for status, n in outcome.statuses.items() if status < 300) > 50, \
        outcome.statuses


@pytest.mark.faults
@pytest.mark.timeout(1_200)
async def test_every_operation_fuzzed_longer_with_a_key_never_fails(world: Locked) -> None:
    await _fuzz(world, 25, 10)


@pytest.mark.faults
@pytest.mark.timeout(1_200)
async def test_a_long_walk_along_every_link_with_a_key_never_fails(world: Locked) -> None:
    walked = await _walk(world, await _documents(world), LONG_SCENARIOS)

    assert walked.scenarios >= LONG_SCENARIOS


@pytest.mark.parametrize("path", [f"/v1/spaces/a%0Ab/items/{SOME_ID}",
                                  f"/v1/spaces/a%0Ab/sessions/{SOME_ID}/messages",
                                  "/v1/no-such-route%0A"])
async def test_a_path_with_a_newline_is_answered_as_documented(world: Locked, path: str
                                                               ) -> None:
    """Ingest's routes with the query app behind them: a path with a newline (``%0A``) goes
    where any other would (to the query app's route, here an unknown space; not to an
    ingest route of another method: a plain-text 405), and one no route takes is a problem
    like every other refusal (not a plain-text 404)."""
    async with world.client() as api:
        answer = await api.get(path)
    assert answer.status_code == 404, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["error"]["code"] == "not_found"
