"""Importing memories with their embeddings (``import_memory``), against a whole memledger
with API keys on (every service, the enricher and the vector projector included): an admin
key's import is recorded as the assertion and the embedding a write and the enricher would
record, with the key as the actor of both; it is found by meaning through the imported
vector, and the enricher does not embed it again; an embedding of another model or size, a
non-finite value or a key without the admin role is refused, and nothing is written; a retry
with the same idempotency key is answered from the first commit; and no key of another tenant,
or without the space's grant, imports into the victim's space."""

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from memledger_platform.auth import issue
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from tests.integration.isolation_system import SPACES, VICTIM, System, running
from tests.support import eventually

MODEL = HashingEmbedder.model_id
SPACE = "library"


@dataclass
class World:
    system: System
    writer_token: str

    def client(self, key: str = "victim", tenant: str | None = None) -> httpx.AsyncClient:
        token = self.writer_token if key == "writer" else self.system.tokens[key]
        return self.system.client(token, tenant)

    def events(self, item_id: str) -> list[dict[str, Any]]:
        """Every event about ``item_id`` in any tenant, in log order."""
        return [{**fields, "global_position": e.position}
                for e in self.system.store.read_all(0, 10_000_000)
                if str((fields := e.fields())["payload"].get("item_id")) == item_id]

    def key_id(self, key: str = "victim") -> str:
        return self.system.tokens[key].split("_")[1]


@pytest.fixture(scope="module")
async def world(engines: Endpoints, tmp_path_factory: pytest.TempPathFactory
                ) -> AsyncIterator[World]:
    home: Path = tmp_path_factory.mktemp("import")
    async with running(engines, home) as system:
        writer = issue(system.keys, VICTIM, "write", None, datetime.now(UTC))[1]
        found = World(system, writer)
        async with found.client() as admin:
            for space in (SPACE, *SPACES):
                created = await admin.post("/v1/spaces", json={"space_id": space})
                assert created.status_code == 201, created.text
        yield found


def _vector_of(text: str) -> list[float]:
    return [round(v, 6) for v in HashingEmbedder().embed_documents([text])[0]]


def _memory(content: str, meaning: str | None = None, **fields: Any) -> dict[str, Any]:
    """An import of ``content`` whose embedding is that of ``meaning`` (default: itself)."""
    vector = _vector_of(meaning or content)
    return {"kind": "fact", "content": content, "model": MODEL, "dims": len(vector),
            "vector": vector, **fields}


async def _import(client: httpx.AsyncClient, body: dict[str, Any], space: str = SPACE
                  ) -> httpx.Response:
    return await client.post(f"/v1/spaces/{space}/import", json=body)


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


async def test_an_admin_keys_import_is_an_assertion_then_its_embedding_both_by_the_key(
        world: World) -> None:
    item = str(uuid.uuid4())
    async with world.client() as admin:
        answer = await _import(admin, _memory("Ada keeps the tide tables", item_id=item))
    assert answer.status_code == 201, answer.text
    asserted, embedded = world.events(item)[:2]
    assert (asserted["event_type"], embedded["event_type"]) == ("memory.asserted",
                                                                "memory.embedded")
    assert embedded["global_position"] == asserted["global_position"] + 1
    assert asserted["actor"] == embedded["actor"] == f"key:{world.key_id()}"
    assert (embedded["payload"]["model"], embedded["payload"]["item_version"]) == (MODEL, 1)
    assert asserted["stream_version"] == 1
    assert embedded["subject_id"] == asserted["subject_id"]
    assert answer.json()["position"] == embedded["global_position"]
    assert answer.json()["ids"] == {"item_id": item}


async def test_an_import_is_found_by_its_vector_and_the_enricher_does_not_embed_it_again(
        world: World) -> None:
    # The content shares no word with the meaning its vector was made of: only the imported
    # vector can bring it up for that query, with keywords weighed at nothing.
    item, meaning = str(uuid.uuid4()), "lighthouse keeper logbook storms"
    async with world.client() as admin:
        answer = await _import(admin, _memory("Grace Hopper notes", meaning, item_id=item))
        assert answer.status_code == 201, answer.text

        async def found() -> None:
            hits = await admin.post("/v1/search", json={
                "query": meaning, "spaces": [SPACE], "k": 3, "threshold": 0,
                "weights": {"dense": 1, "keyword": 0}})
            assert hits.status_code == 200, hits.text
            assert [h["item_id"] for h in hits.json()["results"]][:1] == [item]

        await eventually(found, timeout=30)

    async def enriched() -> None:
        # The enricher read the assertion: it recorded the names it found in it.
        assert "memory.entities_extracted" in [e["event_type"] for e in world.events(item)]

    await eventually(enriched, timeout=30)
    embeddings = [e for e in world.events(item) if e["event_type"] == "memory.embedded"]
    assert [e["actor"] for e in embeddings] == [f"key:{world.key_id()}"]


@pytest.mark.parametrize(("change", "path"), [
    ({"model": "all-MiniLM-L6-v2/int8-dynamic-onnx"}, "model"),
    ({"dims": 3, "vector": [0.6, 0.8, 0.0]}, "dims"),
    ({"dims": 64, "vector": [0.6, 0.8]}, "vector"),
])
async def test_an_embedding_not_of_the_servers_index_is_refused_naming_the_field(
        world: World, change: dict[str, Any], path: str) -> None:
    item = str(uuid.uuid4())
    async with world.client() as admin:
        answer = await _import(admin, {**_memory("refused", item_id=item), **change})
    error = _error(answer, 422)
    assert [d["path"] for d in error["fields"]] == [path], error
    assert world.events(item) == []


async def test_a_non_finite_value_is_refused(world: World) -> None:
    vector = ", ".join(["0.1"] * 63)
    body = (f'{{"kind": "fact", "content": "odd", "model": "{MODEL}", "dims": 64, '
            f'"vector": [{vector}, 1e999]}}')
    async with world.client() as admin:
        answer = await admin.post(f"/v1/spaces/{SPACE}/import", content=body,
                                  headers={"content-type": "application/json"})
    assert _error(answer, 422)["fields"][0]["path"] == "body"


@pytest.mark.parametrize("key", ["writer", "victim_reader"])
async def test_a_key_without_the_admin_role_may_not_import(world: World, key: str) -> None:
    item = str(uuid.uuid4())
    async with world.client(key) as client:
        answer = await _import(client, _memory("not mine to import", item_id=item))
        batch = await client.post("/v1/batch", json={"commands": [
            {"command": "assert_memory", "space_id": SPACE, "kind": "fact", "content": "ok"},
            {"command": "import_memory", "space_id": SPACE,
             **_memory("not mine either", item_id=item)}]})
    assert _error(answer, 403)
    assert _error(batch, 403)["fields"][0]["path"] in ("commands.1.command",
                                                         "header.Authorization")
    assert world.events(item) == []


async def test_a_batch_with_one_bad_import_writes_nothing(world: World) -> None:
    good, bad = str(uuid.uuid4()), str(uuid.uuid4())
    async with world.client() as admin:
        answer = await admin.post("/v1/batch", json={"commands": [
            {"command": "import_memory", "space_id": SPACE, **_memory("fine", item_id=good)},
            {"command": "import_memory", "space_id": SPACE,
             **_memory("wrong model", item_id=bad, model="another/v1")}]})
    assert [d["path"] for d in _error(answer, 422)["fields"]] == ["commands.1.model"]
    assert world.events(good) == world.events(bad) == []


async def test_a_retry_with_the_same_idempotency_key_is_answered_from_the_first_commit(
        world: World) -> None:
    body = _memory("imported once", idempotency_key=f"import/{uuid.uuid4()}")
    async with world.client() as admin:
        first = await _import(admin, body)
        again = await _import(admin, body)
        changed = await _import(admin, {**body, "content": "imported twice"})
    assert (first.status_code, again.status_code) == (201, 200), again.text
    assert again.json()["duplicate"] is True
    assert again.json()["event_ids"] == first.json()["event_ids"]
    item = first.json()["ids"]["item_id"]
    assert [e["event_type"] for e in world.events(item)][:2] == ["memory.asserted",
                                                                  "memory.embedded"]
    assert [e["event_type"] for e in world.events(item)].count("memory.asserted") == 1
    assert _error(changed, 422)["fields"][0]["path"] == "idempotency_key"


async def test_no_other_tenants_key_and_no_key_without_the_grant_imports_into_the_space(
        world: World) -> None:
    item = str(uuid.uuid4())
    body = _memory("planted", item_id=item)
    async with world.client("attacker", tenant=VICTIM) as attacker:
        named = await _import(attacker, body, SPACES[0])
    async with world.client("victim_main_only") as limited:
        ungranted = await _import(limited, body, SPACES[1])
    async with world.client("attacker") as attacker:
        own = await _import(attacker, body, SPACES[0])  # its own tenant's space of that name
    assert (named.status_code, ungranted.status_code) == (403, 403)
    assert own.status_code in (201, 404), own.text
    assert {e["tenant_id"] for e in world.events(item)} <= {"globex"}


async def test_a_history_imported_in_a_batch_reads_as_of_each_valid_time_and_is_not_embedded_again(
        world: World) -> None:
    item = str(uuid.uuid4())
    revision = {"command": "import_revision", "space_id": SPACE, "item_id": item,
                "valid_from": "2022-01-01T00:00:00+00:00", "reason": "moved",
                **{k: v for k, v in _memory("Ada keeps the tide tables in the attic").items()
                   if k != "kind"}}
    async with world.client() as admin:
        answer = await admin.post("/v1/batch", json={"commands": [
            {"command": "import_memory", "space_id": SPACE, "item_id": item,
             "valid_from": "2020-01-01T00:00:00+00:00",
             **_memory("Ada keeps the tide tables in the hall")}, revision]})
        assert answer.status_code == 201, answer.text
        position = answer.json()["results"][-1]["position"]
        contents = {}
        for valid_at in ("2021-01-01T00:00:00Z", "2023-01-01T00:00:00Z"):
            read = await admin.get(f"/v1/spaces/{SPACE}/items/{item}", params={
                "valid_at": valid_at, "min_position": str(position), "wait_ms": "10000"})
            assert read.status_code == 200, read.text
            contents[valid_at[:4]] = read.json()["item"]["content"]
        refused = await admin.post(f"/v1/spaces/{SPACE}/memories/{item}/import",
                                   json={**revision, "expected_version": 2})
    assert contents == {"2021": "Ada keeps the tide tables in the hall",
                        "2023": "Ada keeps the tide tables in the attic"}
    assert [d["path"] for d in _error(refused, 422)["fields"]] == ["expected_version"]

    async def enriched() -> None:  # the enricher read both versions (for the names in them)
        extracted = [e for e in world.events(item)
                     if e["event_type"] == "memory.entities_extracted"]
        assert {e["payload"]["item_version"] for e in extracted} == {1, 2}

    await eventually(enriched, timeout=60)
    events = world.events(item)
    assert [e["event_type"] for e in events][:4] == [
        "memory.asserted", "memory.embedded", "memory.revised", "memory.embedded"]
    embeddings = [e for e in events if e["event_type"] == "memory.embedded"]
    assert [(e["payload"]["item_version"], e["actor"]) for e in embeddings] == [
        (1, f"key:{world.key_id()}"), (2, f"key:{world.key_id()}")]
